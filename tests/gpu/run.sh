#!/usr/bin/env bash
# Run the GPU tests on a CUDA host with SGLang installed (e.g. after .gpu/install.sh bundles).
# Usage: tests/gpu/run.sh [pytest args]     Logs: $OUT (or /tmp/sge3_logs)
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m pytest -m gpu tests/gpu -x -v -p no:cacheprovider "$@"
