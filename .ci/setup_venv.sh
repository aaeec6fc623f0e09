#!/usr/bin/env bash
# Build the CPU test environment: exactly constraints/sglang-RELEASE.txt (real SGLang installed without its
# CUDA-only requirements, CPU torch, speculators, the test tools) plus this package (editable). Nothing is
# resolved here: .ci/lockenv.py installs the lock's lines with uv (itself pinned in the lock).
# Usage: .ci/setup_venv.sh VENV [SGLANG_VERSION]     (default: the recommended release; re-running is a no-op sync)
set -euo pipefail
VENV=${1:?usage: setup_venv.sh VENV [SGLANG_VERSION]}
HERE=$(cd "$(dirname "$0")/.." && pwd)
SGL=${2:-$(python3 -c "import sys; sys.path.insert(0, '$HERE'); from sglang_eagle3_ext.versions import RECOMMENDED; print(RECOMMENDED)")}
python3 "$HERE/.ci/lockenv.py" sync "$VENV" "$SGL"
echo "venv ready: $VENV (exactly constraints/sglang-$SGL.txt; $("$VENV/bin/sglang-eagle3" --version | head -1))"
