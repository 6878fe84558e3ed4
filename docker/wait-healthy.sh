#!/usr/bin/env bash
# Waits until every service of docker-compose.yml reports healthy, for Compose versions
# without `up --wait` (docker-compose 1.x):
#
#   docker-compose up -d && docker/wait-healthy.sh [timeout-seconds]   # default 60
#
# Prints a line per node when its state changes and one summary line; exits 0 when all
# are healthy, 1 on timeout or as soon as a node has exited for good (printing the last
# log lines of the nodes that are not healthy).
# COMPOSE overrides the compose command (default: docker-compose, else docker compose).
set -euo pipefail

cd "$(dirname "$0")/.."

timeout=${1:-60}
case "$timeout" in
  '' | *[!0-9]*)
    echo "usage: $0 [timeout-seconds]" >&2
    exit 2
    ;;
esac

if [ -n "${COMPOSE:-}" ]; then
  read -r -a compose <<<"$COMPOSE"
elif command -v docker-compose >/dev/null 2>&1; then
  compose=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
else
  echo "wait-healthy: neither docker-compose nor 'docker compose' is available" >&2
  exit 2
fi

# The nodes of the standalone fleet by default; with WAIT_FOR=clusters, the members of the
# `clusters` profile's five clusters (not their one-shot `-create` jobs) and the stock
# database.
case "${WAIT_FOR:-standalone}" in
  clusters) mapfile -t services < <("${compose[@]}" config --services | grep -E '^(cluster[0-9]+-[0-9]+|stock)$') ;;
  *) mapfile -t services < <("${compose[@]}" config --services | grep -v '^cluster') ;;
esac
if [ "${#services[@]}" -eq 0 ]; then
  echo "wait-healthy: the compose file defines no services" >&2
  exit 2
fi

# One line "service state" per container of the project, where state is "healthy",
# "starting", "unhealthy", "no health check", or the container's own state when it is not
# running (marked "not restarting" when it has exited and no restart policy will bring it
# back). One compose call per round: docker-compose 1.x takes most of a second to start.
states() {
  local ids
  mapfile -t ids < <("${compose[@]}" ps -a -q 2>/dev/null)
  [ "${#ids[@]}" -gt 0 ] || return 0
  docker inspect --format \
    '{{if ne (index .Config.Labels "com.docker.compose.oneoff") "True"}}{{index .Config.Labels "com.docker.compose.service"}} {{if ne .State.Status "running"}}{{.State.Status}} (exit code {{.State.ExitCode}}{{if and (eq .State.Status "exited" "dead") (eq .HostConfig.RestartPolicy.Name "" "no")}}, not restarting{{end}}){{else if .State.Health}}{{.State.Health.Status}}{{else}}no health check{{end}}{{end}}' \
    "${ids[@]}" 2>/dev/null || true
}

start=$SECONDS
declare -A last
while :; do
  declare -A now=()
  while read -r service state; do
    if [ -n "$service" ]; then now[$service]=$state; fi
  done < <(states)
  healthy=0
  for service in "${services[@]}"; do
    state=${now[$service]:-not created}
    if [ "${last[$service]:-}" != "$state" ]; then
      printf 'wait-healthy: %-8s %s (after %ds)\n' "$service" "$state" $((SECONDS - start))
      last[$service]=$state
    fi
    if [ "$state" = "healthy" ]; then healthy=$((healthy + 1)); fi
  done
  if [ "$healthy" -eq "${#services[@]}" ]; then
    echo "wait-healthy: all ${#services[@]} nodes healthy after $((SECONDS - start))s"
    exit 0
  fi
  given_up=""
  for service in "${services[@]}"; do
    case "${last[$service]}" in *"not restarting"*) given_up+=" $service" ;; esac
  done
  if [ -n "$given_up" ] || [ $((SECONDS - start)) -ge "$timeout" ]; then
    if [ -n "$given_up" ]; then
      echo "wait-healthy: stopped for good:$given_up (start it again: ${compose[*]} up -d)" >&2
    else
      echo "wait-healthy: timed out after ${timeout}s: $healthy of ${#services[@]} nodes healthy" >&2
    fi
    for service in "${services[@]}"; do
      case "${last[$service]}" in
        healthy) ;;
        "not created") echo "--- $service: not created (run: ${compose[*]} up -d)" >&2 ;;
        *)
          echo "--- $service: ${last[$service]}; last log lines:" >&2
          "${compose[@]}" logs --no-color --tail 20 "$service" >&2 || true
          ;;
      esac
    done
    exit 1
  fi
  sleep 0.5
done
