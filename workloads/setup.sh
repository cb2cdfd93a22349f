#!/usr/bin/env bash
# Make (or reuse) the benchmark workload's virtual environment, outside the work tree:
#   ${CPN_WORKLOADS_CACHE:-$HOME/.cache/cpn-workloads}/<key>/venv
# where <key> is the first 12 hex digits of sha256(requirements.txt + this script).
# Prints the venv's python on the last line of stdout. The operator's .venv never gets torch.
set -euo pipefail
cd "$(dirname "$0")"
BASEPY=${BASEPY:-python3}
KEY=$(cat requirements.txt setup.sh | sha256sum | cut -c1-12)
ROOT=${CPN_WORKLOADS_CACHE:-$HOME/.cache/cpn-workloads}/$KEY
VENV=$ROOT/venv
if [ -f "$ROOT/install.ok" ] && [ -x "$VENV/bin/python" ]; then
  echo "workloads venv: reusing $VENV" >&2
  echo "$VENV/bin/python"
  exit 0
fi
t0=$(date +%s)
echo "workloads venv: installing requirements.txt into $VENV (cold: several minutes, GBs of CUDA wheels)" >&2
rm -rf "$ROOT"
mkdir -p "$ROOT"
"$BASEPY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --no-cache-dir -r requirements.txt >&2
"$VENV/bin/python" -c 'import torch, torchvision, transformers' >&2
touch "$ROOT/install.ok"
echo "workloads venv: ready in $(( $(date +%s) - t0 )) s, $(du -sh "$VENV" | cut -f1)" >&2
echo "$VENV/bin/python"
