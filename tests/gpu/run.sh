#!/usr/bin/env bash
# Run the GPU tests on a CUDA host with SGLang installed (SGLang importable, e.g. via PYTHONPATH).
# Usage: tests/gpu/run.sh [pytest args]     Logs: $OUT (or /tmp/sge3_logs)
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# The enable-via-env route as a deployment has it: our .pth in the interpreter's site-packages
# (inert unless SGLANG_EAGLE3_EXT is set), so SGLang's spawned workers patch themselves.
SP=$(python3 -c 'import site; print(site.getsitepackages()[0])')
cp sglang_eagle3_ext/_startup/sglang_eagle3_ext.pth "$SP/" 2>/dev/null \
  || echo "note: $SP not writable; tests fall back to a sitecustomize.py on PYTHONPATH"
exec python3 -m pytest -m gpu -v -p no:cacheprovider -rA "${@:-tests/gpu}"
