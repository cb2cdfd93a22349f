#!/usr/bin/env bash
# Print the replace(...) block go.mod needs for k8s.io/kubernetes at version $1:
# k8s.io/kubernetes requires every staging module at v0.0.0 and replaces it with
# ./staging/src/...; a consumer maps each of them to its real tag v0.<minor>.<patch>.
#   ./gen-replace.sh v1.36.3 > /tmp/replace.txt   # then paste into go.mod and `go mod tidy`
set -euo pipefail
KVER=${1:?usage: gen-replace.sh v1.36.3}
SVER="v0.${KVER#v1.}"
GOMOD=$(GOTOOLCHAIN=local go mod download -json "k8s.io/kubernetes@${KVER}" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
awk '$2 == "=>" && $3 ~ /^\.\/staging\/src\// {print $1}' "$GOMOD" | sort -u |
  { echo "replace ("; while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$SVER"; done; echo ")"; }
