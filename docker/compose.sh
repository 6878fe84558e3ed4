#!/usr/bin/env bash
# Runs docker-compose.yml with whichever Compose this machine has (the `docker compose`
# plugin, v2, or the `docker-compose` program, v1), on movable ports, and says what to do
# when the Redis image is missing:
#
#   eval "$(docker/compose.sh up)"        # up -d, wait until every node is healthy, and
#                                         # set QUORUM_LOCK_NODES and QUORUM_LOCK_STOCK_DB
#   eval "$(docker/compose.sh clusters)"  # the five nodes as five Redis Clusters (profile
#                                         # `clusters`, host network, Linux), formed and
#                                         # ok, and the demo's stock database
#   docker/compose.sh down                # stop, and forget the data (down -v)
#   docker/compose.sh ps | logs | start redis3 ...   # anything else goes to Compose
#
# `up` and `clusters` print only the `export` lines on stdout (their progress goes to
# stderr), so that `eval` sets them.
#
# QUORUM_LOCK_PORT_BASE (default 7000): the nodes listen on 127.0.0.1 at BASE+1..BASE+5,
# the demo's stock database at BASE+6 (the variables QUORUM_LOCK_PORT_1..6, which
# docker-compose.yml reads, can also be set one by one); the clusters' members at
# BASE+100+10c+m for cluster c = 1..5, member m = 1..3 (QUORUM_LOCK_CLUSTER_PORT_cm), their
# bus ports 10000 above, so BASE is at most 55000.
#
# Why a script: `docker compose down -v` on a machine with Compose v1 only prints
# docker's own help (it has no `compose` command), exits 0 and removes nothing; and
# without a local image, `up` fails on a registry lookup with only a DNS error.
set -euo pipefail

cd "$(dirname "$0")/.."

if docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
  compose=(docker-compose)
else
  echo "compose.sh: neither 'docker compose' (Compose v2) nor docker-compose (v1) is installed" >&2
  exit 2
fi

base=${QUORUM_LOCK_PORT_BASE:-7000}
case "$base" in
  '' | *[!0-9]*)
    echo "compose.sh: QUORUM_LOCK_PORT_BASE must be a port number, got '$base'" >&2
    exit 2
    ;;
esac
if [ "$base" -gt 55000 ]; then
  echo "compose.sh: QUORUM_LOCK_PORT_BASE must be at most 55000 (the clusters' bus ports are 10000 above their ports), got $base" >&2
  exit 2
fi
for i in 1 2 3 4 5 6; do
  var=QUORUM_LOCK_PORT_$i
  export "$var=${!var:-$((base + i))}"
done
for c in 1 2 3 4 5; do
  for m in 1 2 3; do
    var=QUORUM_LOCK_CLUSTER_PORT_$c$m
    export "$var=${!var:-$((base + 100 + 10 * c + m))}"
  done
done

# What the demo needs besides the nodes: the stock database.
print_stock_db() {
  echo "export QUORUM_LOCK_STOCK_DB=redis://127.0.0.1:$QUORUM_LOCK_PORT_6"
}

# The image: as docker-compose.yml resolves it (environment, then .env, then redis:7.2).
image=${QUORUM_LOCK_REDIS_IMAGE:-}
if [ -z "$image" ] && [ -f .env ]; then
  image=$(sed -n 's/^QUORUM_LOCK_REDIS_IMAGE=//p' .env | tail -n 1)
fi
image=${image:-redis:7.2}

case "${1:-}" in
  up)
    shift
    if ! docker image inspect "$image" >/dev/null 2>&1 && ! docker pull -q "$image" >/dev/null 2>&1; then
      echo "compose.sh: the image '$image' is not on this machine and cannot be pulled (no registry reachable?)." >&2
      echo "  Build one from this machine's redis-server first:  docker/build-image.sh" >&2
      exit 1
    fi
    "${compose[@]}" up -d "$@" >&2
    COMPOSE="${compose[*]}" docker/wait-healthy.sh "${QUORUM_LOCK_HEALTHY_TIMEOUT:-120}" >&2
    nodes=""
    for i in 1 2 3 4 5; do
      var=QUORUM_LOCK_PORT_$i
      nodes="$nodes${nodes:+,}redis://127.0.0.1:${!var}"
    done
    echo "export QUORUM_LOCK_NODES=$nodes"
    print_stock_db
    ;;
  clusters)
    shift
    if ! docker image inspect "$image" >/dev/null 2>&1 && ! docker pull -q "$image" >/dev/null 2>&1; then
      echo "compose.sh: the image '$image' is not on this machine and cannot be pulled (no registry reachable?)." >&2
      echo "  Build one from this machine's redis-server first:  docker/build-image.sh" >&2
      exit 1
    fi
    # With the demo's stock database (not a lock node), as `up` starts it.
    "${compose[@]}" --profile clusters up -d "$@" stock $("${compose[@]}" --profile clusters config --services | grep '^cluster') >&2
    WAIT_FOR=clusters COMPOSE="${compose[*]}" docker/wait-healthy.sh "${QUORUM_LOCK_HEALTHY_TIMEOUT:-120}" >&2
    # Each cluster is ok once its `create` job ran (or found it formed before).
    nodes=""
    for c in 1 2 3 4 5; do
      var=QUORUM_LOCK_CLUSTER_PORT_${c}1
      port=${!var}
      for _ in $(seq 1 120); do
        state=$("${compose[@]}" exec -T "cluster$c-1" redis-cli -p "$port" cluster info 2>/dev/null | tr -d '\r' | sed -n 's/^cluster_state://p')
        [ "$state" = "ok" ] && break
        sleep 1
      done
      if [ "$state" != "ok" ]; then
        echo "compose.sh: cluster $c is not ok (cluster_state: ${state:-no answer}); its create job says:" >&2
        "${compose[@]}" logs --no-color --tail 20 "cluster$c-create" >&2 || true
        exit 1
      fi
      nodes="$nodes${nodes:+,}redis://127.0.0.1:$port"
    done
    echo "export QUORUM_LOCK_NODES=$nodes"
    print_stock_db
    ;;
  down)
    shift
    # Docker 20.10 can refuse to remove the network after removing its containers ("has
    # active endpoints", though none is attached; seen in a CI rehearsal after every test had
    # passed): `down` is idempotent, so it is asked again, and a network left alone is not
    # a failure (below).
    for attempt in 1 2 3; do
      if "${compose[@]}" --profile clusters down -v "$@"; then
        exit 0
      fi
      echo "compose.sh: down failed (attempt $attempt of 3); again in 2 s" >&2
      sleep 2
    done
    # Every container and volume gone, only the network left (an endpoint the engine never
    # released, which no container holds): harmless, the next `up` reuses the network.
    if [ -z "$("${compose[@]}" --profile clusters ps -q 2>/dev/null)" ]; then
      echo "compose.sh: every container is gone; the project's network stays (the engine keeps a stale endpoint on it)" >&2
      exit 0
    fi
    exit 1
    ;;
  *)
    exec "${compose[@]}" "$@"
    ;;
esac
