#!/usr/bin/env bash
# Installs what the test suite runs against, idempotently (quick when everything is present):
#   containerd 1.6 + runc, docker-registry, dockerd, systemd-journal-remote, PostgreSQL, Chromium
#   (Debian bookworm), and containerd 1.7 from Debian trixie unpacked into $PULLWATCH_CONTAINERD17_DIR.
# The trixie source reuses the mirror URI of this machine's own apt sources (no host is written here).
set -euo pipefail

CTRD17_DIR="${PULLWATCH_CONTAINERD17_DIR:-/opt/pullwatch-test/containerd-1.7}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v dockerd >/dev/null || need+=(docker.io)
[ -x /lib/systemd/systemd-journal-remote ] || need+=(systemd-journal-remote)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null || need+=(chromium)
command -v nsenter >/dev/null || need+=(util-linux)
command -v ip >/dev/null || need+=(iproute2)
command -v ps >/dev/null || need+=(procps)
command -v tar >/dev/null || need+=(tar)
command -v openssl >/dev/null || need+=(openssl)
command -v setpriv >/dev/null || need+=(util-linux)

command -v debootstrap >/dev/null || need+=(debootstrap)

# Only in Debian trixie (reached through a low-priority source, below): kustomize (manifest tests on
# machines without kubectl), kubectl (kubectl plugin tests) when the machine has none.
trixie_need=()
command -v kustomize >/dev/null || command -v kubectl >/dev/null || trixie_need+=(kustomize)
command -v kubectl >/dev/null || trixie_need+=(kubectl)

updated=0
apt_update() { if [ "$updated" = 0 ]; then $SUDO apt-get update -qq; updated=1; fi; }

add_trixie_source() {
  local list=/etc/apt/sources.list.d/pullwatch-trixie.list
  [ -f "$list" ] && return 0
  local mirror=""
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
    mirror=$(awk '$1=="deb" && $0 !~ /security/ { for (i=2;i<=NF;i++) if ($i ~ /^(https?|file|ftp):/) { print $i; exit } }' /etc/apt/sources.list)
  fi
  if [ -z "$mirror" ]; then echo "ensure-test-deps: cannot find this machine's Debian mirror in its apt sources" >&2; exit 1; fi
  echo "deb $mirror trixie main" | $SUDO tee "$list" >/dev/null
  # Low priority: nothing from trixie is installed unless asked for by name and bookworm lacks it.
  printf 'Package: *\nPin: release n=trixie\nPin-Priority: 100\n' | $SUDO tee /etc/apt/preferences.d/pullwatch-trixie >/dev/null
  updated=0
}

if [ ! -x "$CTRD17_DIR/usr/bin/containerd" ] || [ ${#trixie_need[@]} -gt 0 ]; then add_trixie_source; fi

if [ ${#need[@]} -gt 0 ] || [ ${#trixie_need[@]} -gt 0 ]; then
  echo "ensure-test-deps: installing ${need[*]} ${trixie_need[*]}" >&2
  apt_update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" "${trixie_need[@]}" >&2
fi

if [ ! -x "$CTRD17_DIR/usr/bin/containerd" ]; then
  echo "ensure-test-deps: fetching containerd 1.7 from Debian trixie into $CTRD17_DIR" >&2
  apt_update
  tmp=$(mktemp -d)
  chmod 755 "$tmp"
  (cd "$tmp" && apt-get download -qq containerd/trixie >&2)
  $SUDO mkdir -p "$CTRD17_DIR"
  $SUDO dpkg -x "$tmp"/containerd_*.deb "$CTRD17_DIR"
  rm -rf "$tmp"
fi
"$CTRD17_DIR/usr/bin/containerd" --version >&2
