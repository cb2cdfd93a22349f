#!/usr/bin/env bash
# Build (or reuse) the test bed's binaries from this Go module.
#   kube-apiserver kube-controller-manager kube-scheduler kubectl (k8s.io/kubernetes)
#   kwok (sigs.k8s.io/kwok)  etcd (go.etcd.io/etcd/server/v3, the version k8s requires)
# Output dir: ${CPN_TESTBED_CACHE:-$HOME/.cache/cpn-testbed}/<key>/bin where <key> is the first
# 12 hex digits of sha256(go.sum + this script); prints that dir on the last line of stdout.
# Never writes into the work tree. Static (CGO_ENABLED=0), trimmed, versioned like upstream.
set -euo pipefail
cd "$(dirname "$0")"
# -mod=readonly: go.mod/go.sum are never rewritten; a mismatch is an error, not a silent fetch
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
command -v go >/dev/null || PATH=/usr/local/go/bin:$PATH   # the image installs Go there

KVER=v1.36.3
KWOKVER=0.8.0
KEY=$(cat go.sum build.sh | sha256sum | cut -c1-12)
ROOT=${CPN_TESTBED_CACHE:-$HOME/.cache/cpn-testbed}/$KEY
BIN=$ROOT/bin
NAMES=(kube-apiserver kube-controller-manager kube-scheduler kubectl kwok etcd)

have_all() {
  local n
  for n in "${NAMES[@]}"; do [ -x "$BIN/$n" ] || return 1; done
  [ -f "$ROOT/build.ok" ]
}

if have_all; then
  echo "testbed binaries: reusing $BIN" >&2
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 1; }
KMIN=${KVER#v1.}; KMIN=${KMIN%%.*}
LDF="-s -w
 -X k8s.io/component-base/version.gitVersion=${KVER}
 -X k8s.io/component-base/version.gitMajor=1
 -X k8s.io/component-base/version.gitMinor=${KMIN}
 -X k8s.io/component-base/version.gitTreeState=clean
 -X k8s.io/client-go/pkg/version.gitVersion=${KVER}
 -X k8s.io/client-go/pkg/version.gitMajor=1
 -X k8s.io/client-go/pkg/version.gitMinor=${KMIN}
 -X k8s.io/client-go/pkg/version.gitTreeState=clean
 -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOKVER}
 -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${KVER#v}"
LDF=$(echo $LDF)   # one line

TMP=$ROOT/bin.tmp.$$
rm -rf "$TMP"; mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
t0=$(date +%s)
echo "testbed binaries: building into $BIN ($(go version))" >&2
go mod download
t1=$(date +%s)
echo "testbed binaries: modules downloaded in $((t1 - t0)) s" >&2
go build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$LDF" -o "$TMP/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl \
  sigs.k8s.io/kwok/cmd/kwok
t2=$(date +%s)
echo "testbed binaries: kubernetes + kwok built in $((t2 - t1)) s" >&2
ETCDVER=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
go build -trimpath -tags grpcnotrace \
  -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${ETCDVER}-module" \
  -o "$TMP/etcd" go.etcd.io/etcd/server/v3
t3=$(date +%s)
echo "testbed binaries: etcd built in $((t3 - t2)) s" >&2

"$TMP/kube-apiserver" --version | grep -qx "Kubernetes ${KVER}" \
  || { echo "build.sh: kube-apiserver reports the wrong version" >&2; exit 1; }
rm -rf "$BIN"; mv "$TMP" "$BIN"; trap - EXIT
echo "key=$KEY k8s=$KVER kwok=$KWOKVER etcd=$ETCDVER $(go version) built_s=$((t3 - t0))" > "$ROOT/build.ok"
echo "testbed binaries: done in $((t3 - t0)) s" >&2
echo "$BIN"
