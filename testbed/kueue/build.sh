#!/usr/bin/env bash
# Build (or reuse) Kueue's controller manager for the test bed's MultiKueue peer, from this
# Go module (sigs.k8s.io/kueue/cmd/kueue at the version go.mod pins), plus its CRDs as shipped
# in that module (config/components/crd/bases) and its webhook manifest (webhook.yaml).
# Output dir: ${CPN_TESTBED_CACHE:-$HOME/.cache/cpn-testbed}/kueue-<key>/ where <key> is the
# first 12 hex digits of sha256(go.mod + go.sum + this script): bin/kueue, crd/*.yaml, webhook.yaml.
# Prints that dir on the last line of stdout. Never writes into the work tree.
set -euo pipefail
cd "$(dirname "$0")"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
command -v go >/dev/null || PATH=/usr/local/go/bin:$PATH   # the image installs Go there

KEY=$(cat go.mod go.sum build.sh | sha256sum | cut -c1-12)
ROOT=${CPN_TESTBED_CACHE:-$HOME/.cache/cpn-testbed}/kueue-$KEY

if [ -x "$ROOT/bin/kueue" ] && [ -f "$ROOT/build.ok" ]; then
  echo "kueue: reusing $ROOT" >&2
  echo "$ROOT"
  exit 0
fi

command -v go >/dev/null || { echo "kueue build.sh: go is not installed" >&2; exit 1; }
TMP=$ROOT.tmp.$$
rm -rf "$TMP"; mkdir -p "$TMP/bin" "$TMP/crd"
trap 'rm -rf "$TMP"' EXIT
t0=$(date +%s)
echo "kueue: building into $ROOT ($(go version))" >&2
go mod download
KVER=$(go list -m -f '{{.Version}}' sigs.k8s.io/kueue)
KDIR=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
t1=$(date +%s)
echo "kueue: modules downloaded in $((t1 - t0)) s" >&2
go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${KVER}" \
  -o "$TMP/bin/kueue" sigs.k8s.io/kueue/cmd/kueue
t2=$(date +%s)
cp "$KDIR"/config/components/crd/bases/*.yaml "$TMP/crd/"
cp "$KDIR"/config/components/webhook/manifests.yaml "$TMP/webhook.yaml"
chmod -R u+w "$TMP/crd" "$TMP/webhook.yaml"
rm -rf "$ROOT"; mv "$TMP" "$ROOT"; trap - EXIT
echo "key=$KEY kueue=$KVER $(go version) built_s=$((t2 - t1))" > "$ROOT/build.ok"
echo "kueue: built in $((t2 - t1)) s" >&2
echo "$ROOT"
