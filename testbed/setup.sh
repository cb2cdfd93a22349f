#!/usr/bin/env bash
# Install what the local test bed needs, on a possibly fresh machine; idempotent.
#   - Debian packages: prometheus (the real server each member cluster scrapes with)
#   - Go-built binaries (kube-apiserver, kube-controller-manager, kube-scheduler,
#     kubectl, kwok, etcd), built once from testbed/go and cached outside the work
#     tree under ${CPN_TESTBED_CACHE:-$HOME/.cache/cpn-testbed}/<key>/bin
# Python packages come from pyproject.toml (pip install -e '.[dev]'), not from here.
# Exits non-zero, saying what is missing, if anything cannot be installed.
set -euo pipefail
cd "$(dirname "$0")"
t0=$(date +%s)
say() { echo "testbed setup: $*"; }
die() { echo "testbed setup: ERROR: $*" >&2; exit 1; }

# --- Debian packages -------------------------------------------------------------
APT_PKGS=(prometheus)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || die "apt-get not found; install: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  say "apt-get install ${missing[*]}"
  $SUDO apt-get update -qq >/dev/null || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
fi
command -v prometheus >/dev/null || die "prometheus is not on PATH after installing it"
t1=$(date +%s)
say "packages ready in $((t1 - t0)) s ($(prometheus --version 2>&1 | head -1 | cut -d' ' -f1-3))"

# --- Go binaries ---------------------------------------------------------------
command -v go >/dev/null || PATH=/usr/local/go/bin:$PATH   # the image installs Go there
command -v go >/dev/null || die "go (>= 1.26) is not installed; the machine image provides it"
BIN=$(bash go/build.sh | tail -1) || die "building the Go binaries failed (see above)"
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok; do
  [ -x "$BIN/$b" ] || die "$BIN/$b is missing after the build"
done
"$BIN/kube-apiserver" --version | grep -q "^Kubernetes v1\.36\." || die "kube-apiserver has the wrong version"
t2=$(date +%s)
say "binaries ready in $((t2 - t1)) s: $BIN"
# --- Kueue (the MultiKueue peer: testbed/kueue.py, bench/bench_peer.py) ---------
KUEUE=$(bash kueue/build.sh | tail -1) || die "building Kueue failed (see above)"
[ -x "$KUEUE/bin/kueue" ] || die "$KUEUE/bin/kueue is missing after the build"
t3=$(date +%s)
say "kueue ready in $((t3 - t2)) s: $KUEUE"
say "done in $((t3 - t0)) s"
