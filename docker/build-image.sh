#!/usr/bin/env bash
# Builds a small Redis image from this machine's redis-server and redis-cli, for machines
# where no image registry is reachable, and points docker-compose.yml at it through .env.
#
#   docker/build-image.sh                       # tags quorum-lock-redis:local
#   QUORUM_LOCK_REDIS_IMAGE=name:tag docker/build-image.sh
#
# The image is FROM scratch: the two binaries, the shared libraries ldd lists for them, the
# dynamic loader, /data and /tmp. No shell, so health checks must use exec form
# (["CMD", "redis-cli", "-e", "ping"]), which works on the official image as well.
# The entrypoint is redis-server and the default arguments make a durable lock node;
# arguments given to `docker run` or in a compose `command` replace them and must start
# with an option (`--port 6379 ...`), which the official image's entrypoint accepts too.
set -euo pipefail

cd "$(dirname "$0")/.."
repo_root=$(pwd)

image=${QUORUM_LOCK_REDIS_IMAGE:-quorum-lock-redis:local}

die() {
  echo "build-image: error: $*" >&2
  exit 1
}

case "$image" in
  redis | redis:* | library/redis* | docker.io/library/redis* | valkey/valkey*)
    die "refusing to tag '$image': it would hide the official image of that name." \
      "Unset QUORUM_LOCK_REDIS_IMAGE, or choose a local name such as quorum-lock-redis:local."
    ;;
esac

for tool in redis-server redis-cli; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    die "$tool is not on PATH; this script packs the machine's own Redis binaries.
  Debian/Ubuntu: apt-get install -y redis-server   (redis-cli comes with it, from redis-tools)
  Fedora/RHEL:   dnf install -y redis
  Or use an image from a registry instead: QUORUM_LOCK_REDIS_IMAGE=redis:7.2 docker-compose up -d"
  fi
done
command -v docker >/dev/null 2>&1 || die "docker is not on PATH."
command -v ldd >/dev/null 2>&1 || die "ldd is not on PATH (it comes with the C library's tools)."
docker info >/dev/null 2>&1 || die "the Docker daemon does not answer ('docker info' failed)."

# /usr/bin/redis-server is a symlink on Debian; the binary picks its mode from the name it
# is started under, so it must be installed under the name redis-server.
server_path=$(command -v redis-server)
cli_path=$(command -v redis-cli)
server_bin=$(readlink -f "$server_path")
cli_bin=$(readlink -f "$cli_path")
version=$(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')
[ -n "$version" ] || die "could not read the version of $server_bin."

context=$(mktemp -d "${TMPDIR:-/tmp}/quorum-lock-redis-image.XXXXXX")
probe=""
cleanup() {
  if [ -n "$probe" ]; then docker rm -f "$probe" >/dev/null 2>&1 || true; fi
  rm -rf "$context"
}
trap cleanup EXIT

rootfs=$context/rootfs
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc" "$rootfs/data" "$rootfs/tmp"
chmod 1777 "$rootfs/data" "$rootfs/tmp" # any --user can write its AOF and temp files
cp "$server_bin" "$rootfs/usr/local/bin/redis-server"
cp "$cli_bin" "$rootfs/usr/local/bin/redis-cli"
ln -s redis-server "$rootfs/usr/local/bin/redis-check-aof"
ln -s redis-server "$rootfs/usr/local/bin/redis-check-rdb"

# Every library and the loader go to the path ldd reports, which the loader searches by
# default; cp -L copies the files behind versioned symlinks under the names asked for.
libs_file=$context/libs
for bin in "$server_bin" "$cli_bin"; do
  if ! out=$(ldd "$bin" 2>&1); then
    case "$out" in
      *"not a dynamic executable"* | *"statically linked"*) continue ;;
      *) die "ldd $bin failed: $out" ;;
    esac
  fi
  if missing=$(grep 'not found' <<<"$out"); then
    die "$bin needs libraries this machine lacks:
$missing"
  fi
  awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$out" >>"$libs_file"
done
lib_count=0
if [ -s "$libs_file" ]; then
  while read -r lib; do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
    lib_count=$((lib_count + 1))
  done < <(sort -u "$libs_file")
fi

cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
EOF
cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF

cat >"$context/Dockerfile" <<EOF
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin
WORKDIR /data
EXPOSE 6379
LABEL org.opencontainers.image.title="quorum-lock-redis" \\
      org.opencontainers.image.description="redis-server $version packed from the build machine's binaries by quorum-lock's docker/build-image.sh"
ENTRYPOINT ["/usr/local/bin/redis-server"]
CMD ["--port", "6379", "--appendonly", "yes", "--appendfsync", "always", \\
     "--maxmemory-policy", "noeviction", "--save", "", "--protected-mode", "no", "--dir", "/data"]
EOF

# Without the buildx plugin a current docker CLI still builds with the classic builder,
# which is all a FROM scratch image needs; asking for it explicitly avoids a BuildKit error.
builder="BuildKit"
if ! docker buildx version >/dev/null 2>&1; then
  export DOCKER_BUILDKIT=0
  builder="the classic builder (no buildx plugin)"
fi

echo "build-image: packing redis-server $version ($server_path) and redis-cli ($cli_path)" \
  "with $lib_count shared libraries"
build_log=$context/build.log
if ! docker build --tag "$image" "$context" >"$build_log" 2>&1; then
  cat "$build_log" >&2
  die "docker build failed (output above)."
fi
echo "build-image: built $image with $builder"

# The image must start and answer on its own: a library missed here would only show up
# as a fleet that never becomes healthy.
probe=$(docker run --detach "$image")
answer=""
for _ in $(seq 1 50); do
  answer=$(docker exec "$probe" redis-cli -e ping 2>/dev/null || true)
  [ "$answer" = "PONG" ] && break
  sleep 0.2
done
if [ "$answer" != "PONG" ]; then
  docker logs "$probe" >&2 || true
  die "a container from $image did not answer PING within 10 s (its log is above)."
fi
fsync=$(docker exec "$probe" redis-cli config get appendfsync | sed -n 2p)
[ "$fsync" = "always" ] || die "the probe container reports appendfsync '$fsync', expected 'always'."
docker rm -f "$probe" >/dev/null
probe=""
echo "build-image: a probe container answered PONG (appendfsync $fsync) and was removed"

# docker-compose reads .env from the project directory; keep any other settings in it.
env_file=$repo_root/.env
line="QUORUM_LOCK_REDIS_IMAGE=$image"
if [ -f "$env_file" ] && grep -q '^QUORUM_LOCK_REDIS_IMAGE=' "$env_file"; then
  sed -i "s|^QUORUM_LOCK_REDIS_IMAGE=.*|$line|" "$env_file"
else
  echo "$line" >>"$env_file"
fi
echo "build-image: wrote $line to $env_file"

size=$(docker image inspect --format '{{.Size}}' "$image")
echo "build-image: done: $image, $((size / 1024 / 1024)) MiB. Start the fleet with:"
echo "  docker/compose.sh up"
