#!/usr/bin/env bash
# npm run test:image — proves the Dockerfile builds and `pullwatch --version` runs in the image, with
# a real dockerd (Debian docker.io) started here and a base image made locally (no image registry is
# reachable from CI):
#   1. base: `debootstrap --variant=minbase bookworm` from this machine's own apt mirror, plus this
#      machine's node binary, npm and node headers in /usr/local (the layout of node:20-bookworm-slim),
#      imported with `docker import`. The rootfs tarball is cached under $PULLWATCH_IMAGE_CACHE.
#   2. dockerd: own data root / exec root / socket / pidfile under a temp dir, --iptables=false
#      --bridge=none; stopped by its pid at the end.
#   3. docker build --build-arg BASE_IMAGE=<local base> --network host (npm packages come from the
#      npm registry, Debian packages from the mirror), then checks: `pullwatch --version` equals
#      package.json's version in both roles' entrypoints, the default user is non-root, the bundle's
#      host tools are on PATH, and the agent role runs as root when asked (runAsUser 0).
# Needs root (dockerd, debootstrap). Debian packages: docker.io, debootstrap.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${PULLWATCH_IMAGE_CACHE:-/var/cache/pullwatch-test}
DOCKERD=${PULLWATCH_DOCKERD_BIN:-/usr/sbin/dockerd}
# The CLI that ships with docker.io (matches its daemon's API and legacy builder).
DOCKER_CLI=${PULLWATCH_DOCKER_CLI:-/usr/bin/docker}
SUITE=bookworm
IMAGE=pullwatch-test/pullwatch:test
started=$(date +%s)

log() { printf 'test-image: %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (dockerd, debootstrap)"
[ -x "$DOCKERD" ] || fail "dockerd not found at $DOCKERD (Debian package docker.io)"
[ -x "$DOCKER_CLI" ] || fail "docker CLI not found at $DOCKER_CLI (Debian package docker.io)"
command -v debootstrap >/dev/null || fail "debootstrap not found (Debian package debootstrap)"
NODE_BIN=$(command -v node) || fail "node not found"
NODE_VERSION=$(node --version)
NODE_PREFIX=$(cd "$(dirname "$(readlink -f "$NODE_BIN")")/.." && pwd)
NPM_DIR=$(cd "$(dirname "$(readlink -f "$(command -v npm)")")/.." && pwd)
NODE_HEADERS="$NODE_PREFIX/include/node"
[ -f "$NPM_DIR/package.json" ] || fail "cannot find npm's package dir (got $NPM_DIR)"
[ -f "$NODE_HEADERS/node_api.h" ] || fail "node headers not found at $NODE_HEADERS (needed to compile better-sqlite3)"

# This machine's Debian mirror, read from its apt sources (never written into the repository).
mirror=""
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
fi
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1=="deb" && $0 !~ /security/ { for (i=2;i<=NF;i++) if ($i ~ /^(https?|file|ftp):/) { print $i; exit } }' /etc/apt/sources.list)
fi
[ -n "$mirror" ] || fail "cannot find this machine's Debian mirror in its apt sources"

WORK=$(mktemp -d /tmp/pw-test-image.XXXXXX)
DOCKERD_PID=""
cleanup() {
  local rc=$?
  set +e
  if [ -n "$DOCKERD_PID" ] && kill -0 "$DOCKERD_PID" 2>/dev/null; then
    kill "$DOCKERD_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$DOCKERD_PID" 2>/dev/null || true
  fi
  # dockerd's own containerd and shims carry our exec root on their command line.
  for p in $(pgrep -f -- "$WORK/exec" || true); do kill -9 "$p" 2>/dev/null || true; done
  for root in "$WORK" "${DATA_ROOT:-$WORK}"; do
    grep -o " $root[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  done
  if [ $rc -ne 0 ] && [ -f "$WORK/dockerd.log" ]; then
    log "dockerd log (tail):"; tail -n 30 "$WORK/dockerd.log" >&2 || true
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# ---- 1. the base rootfs (cached) ----------------------------------------------------------------
mkdir -p "$CACHE"
ROOTFS_TAR="$CACHE/debian-${SUITE}-minbase.tar"
if [ ! -s "$ROOTFS_TAR" ]; then
  log "debootstrap --variant=minbase $SUITE (first run; cached at $ROOTFS_TAR)"
  rootfs="$WORK/rootfs"
  debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -n 30 "$WORK/debootstrap.log" >&2; fail "debootstrap failed"; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" --numeric-owner -cf "$ROOTFS_TAR.tmp" .
  mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
  rm -rf "$rootfs"
fi

# Node layer: this machine's node, npm and headers where node:20-bookworm-slim keeps them.
nodelayer="$WORK/nodelayer"
mkdir -p "$nodelayer/usr/local/bin" "$nodelayer/usr/local/lib/node_modules" "$nodelayer/usr/local/include" \
  "$nodelayer/usr/local/share/ca-certificates"
cp "$NODE_BIN" "$nodelayer/usr/local/bin/node"
cp -a "$NPM_DIR" "$nodelayer/usr/local/lib/node_modules/npm"
cp -a "$NODE_HEADERS" "$nodelayer/usr/local/include/node"
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$nodelayer/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$nodelayer/usr/local/bin/npx"
# Outbound TLS from this machine may pass an egress proxy with its own CA: trust what the host trusts.
cp /etc/ssl/certs/ca-certificates.crt "$nodelayer/usr/local/share/ca-certificates/host-bundle.crt"
cat >"$nodelayer/Dockerfile" <<'DOCKERFILE'
FROM pullwatch-test/debian:bookworm-minbase
COPY usr/local /usr/local
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    NODE_EXTRA_CA_CERTS=/usr/local/share/ca-certificates/host-bundle.crt \
    npm_config_cafile=/usr/local/share/ca-certificates/host-bundle.crt
CMD ["node"]
DOCKERFILE

# ---- 2. our own dockerd -------------------------------------------------------------------------
# Its data root lives in the cache (layer cache: a rerun with an unchanged package-lock.json skips
# npm ci); exec root, socket and pidfile are per run. One run at a time uses that data root.
DATA_ROOT="$CACHE/dockerd-data"
mkdir -p "$DATA_ROOT" "$WORK/exec"
exec 9>"$CACHE/dockerd-data.lock"
flock -w 900 9 || fail "another test-image run holds $CACHE/dockerd-data.lock"
echo '{}' >"$WORK/daemon.json"
SOCK="$WORK/docker.sock"
storage=overlay2
if ! grep -qw overlay /proc/filesystems && ! modprobe overlay 2>/dev/null; then storage=vfs; fi
"$DOCKERD" --config-file "$WORK/daemon.json" --data-root "$DATA_ROOT" --exec-root "$WORK/exec" \
  --pidfile "$WORK/dockerd.pid" --host "unix://$SOCK" --iptables=false --ip6tables=false --ip-forward=false \
  --ip-masq=false --bridge=none --userland-proxy=false --storage-driver "$storage" \
  >"$WORK/dockerd.log" 2>&1 &
DOCKERD_PID=$!
docker() { DOCKER_BUILDKIT=0 "$DOCKER_CLI" -H "unix://$SOCK" "$@"; }
for _ in $(seq 1 300); do
  if docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then break; fi
  kill -0 "$DOCKERD_PID" 2>/dev/null || fail "dockerd exited"
  sleep 0.2
done
log "dockerd $(docker version --format '{{.Server.Version}}') up (pid $DOCKERD_PID, storage $storage)"

# The base is made once per (rootfs, node, CA bundle) and kept in the cached data root, so that the
# build's layer cache (apt, npm ci) stays valid across runs.
base_key=$( { sha256sum "$ROOTFS_TAR" | cut -c1-16; echo "$NODE_VERSION"; sha256sum /etc/ssl/certs/ca-certificates.crt | cut -c1-16; } | sha256sum | cut -c1-12)
BASE="pullwatch-test/node-base:${SUITE}-${NODE_VERSION}-${base_key}"
if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  log "making base image $BASE"
  docker import "$ROOTFS_TAR" pullwatch-test/debian:bookworm-minbase >/dev/null
  docker build -q -t "$BASE" "$nodelayer" >/dev/null || fail "could not build the node base image"
fi
docker run --rm --network none "$BASE" node --version | grep -qx "$NODE_VERSION" || fail "base image: node does not run"

# ---- 3. build and check ---------------------------------------------------------------------------
log "docker build (base $BASE, node $NODE_VERSION)"
if ! docker build --network host --build-arg "BASE_IMAGE=$BASE" -t "$IMAGE" "$ROOT" >"$WORK/build.log" 2>&1; then
  tail -n 60 "$WORK/build.log" >&2
  fail "docker build failed"
fi

want=$(node -p "require('$ROOT/package.json').version")
got=$(docker run --rm --network none "$IMAGE" --version)
[ "$got" = "$want" ] || fail "pullwatch --version in the image printed '$got', want '$want'"
log "pullwatch --version → $got"

user=$(docker run --rm --network none --entrypoint id "$IMAGE" -u)
[ "$user" != 0 ] || fail "the image's default user is root; the collector must run as non-root"
log "default user uid $user (collector role)"

docker run --rm --network none "$IMAGE" collector --help >/dev/null || fail "pullwatch collector --help failed in the image"
docker run --rm --network none --user 0 "$IMAGE" agent --help >/dev/null || fail "pullwatch agent --help failed as root"

missing=$(docker run --rm --network none --entrypoint sh "$IMAGE" -c \
  'for t in journalctl nsenter ip ss iptables ps sysctl conntrack ipset ethtool lsmod modinfo; do command -v $t >/dev/null || printf "%s " $t; done')
[ -z "$missing" ] || fail "host tools missing in the image: $missing"
log "host tools present: journalctl nsenter ip ss iptables ps sysctl conntrack ipset ethtool lsmod modinfo"

docker run --rm --network none --entrypoint node "$IMAGE" -e "require('better-sqlite3')(':memory:').prepare('select 1 as x').get().x === 1 || process.exit(1)" \
  || fail "better-sqlite3 does not load in the image"
if docker run --rm --network none --entrypoint sh "$IMAGE" -c 'test -e /app/node_modules/vitest || test -e /app/node_modules/typescript'; then
  fail "dev dependencies ended up in the runtime image"
fi

size=$(docker image inspect "$IMAGE" --format '{{.Size}}')
# Keep the cache bounded: drop images no tag points at any more (older builds' layers).
docker image prune -f >/dev/null 2>&1 || true
log "image size $((size / 1024 / 1024)) MiB; took $(( $(date +%s) - started )) s"
echo "1 passed, 0 failed"
