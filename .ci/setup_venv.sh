#!/usr/bin/env bash
# Build the CPU test environment: real SGLang (no deps) + its pure-Python deps under a
# CPU-torch constraint, the transformers the release pins, speculators, and the package.
# Usage: .ci/setup_venv.sh VENV [SGLANG_VERSION]     (idempotent; marker per release)
set -euo pipefail
VENV=${1:?usage: setup_venv.sh VENV [SGLANG_VERSION]}
SGL=${2:-0.5.16}
HERE=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PIP="$VENV/bin/python -m pip -q --disable-pip-version-check"
CONS="$VENV/constraints.txt"
printf 'torch==2.13.0\n' > "$CONS"
if [ ! -e "$VENV/.base_done" ]; then
  $PIP install -c "$CONS" torch==2.13.0
  $PIP install --no-deps torchvision==0.28.0
  $PIP install -c "$CONS" numpy orjson psutil pybase64 requests triton packaging pillow starlette \
    tqdm IPython pydantic aiohttp pyzmq msgspec dill openai==2.6.1 partial-json-parser \
    xgrammar==0.2.1 apache-tvm-ffi==0.1.11 sentencepiece einops compressed-tensors gguf uvicorn \
    setproctitle fastapi uvloop wrapt safetensors pytest pyyaml nvidia-ml-py
  # speculators: its torchvision/torchaudio requirements would pull a CUDA torch; deps pinned by hand
  $PIP install --no-deps speculators==0.9.0
  $PIP install -c "$CONS" click "datasets>=4,<=5.1.0" httpx huggingface-hub "loguru>=0.7.2,<=0.7.3" rich \
    pydantic-settings typer protobuf hs-connectors==0.9.0
  touch "$VENV/.base_done"
fi
# transformers pinned by each release's metadata
case "$SGL" in
  0.5.10) TF=5.3.0 ;; 0.5.14) TF=5.8.1 ;; 0.5.16|0.5.18|0.5.20) TF=5.12.1 ;; *) TF=5.19.0 ;;
esac
if [ ! -e "$VENV/.sglang_$SGL" ]; then
  $PIP install --no-deps --force-reinstall "sglang==$SGL"
  $PIP install -c "$CONS" "transformers==$TF"
  rm -f "$VENV"/.sglang_*; touch "$VENV/.sglang_$SGL"
fi
# torchvision shim, loaded at start-up through a .pth (see tests/cpu_shims)
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp "$HERE/tests/cpu_shims/sge3_torchvision_shim.py" "$SITE/"
echo "import sge3_torchvision_shim" > "$SITE/sge3_torchvision_shim.pth"
$PIP install --no-deps --no-build-isolation -e "$HERE" 2>/dev/null || $PIP install --no-deps -e "$HERE"
echo "venv ready: $VENV (sglang $SGL, transformers $TF)"
