#!/usr/bin/env bash
# Build the CPU test environment: CPU torch from PyTorch's CPU index, real SGLang (no deps: its CUDA
# kernels are not needed on CPU) + its pure-Python deps, the transformers the release pins, speculators,
# and this package (editable). Works with only the public indexes (PyPI + download.pytorch.org/whl/cpu).
# Usage: .ci/setup_venv.sh VENV [SGLANG_VERSION]     (idempotent; marker per release)
# Environment: SGE3_TORCH_ARGS  where CPU torch comes from (default: --index-url https://download.pytorch.org/whl/cpu)
#              SGE3_PIP_ARGS    extra pip arguments for every install (e.g. --isolated to ignore pip.conf)
set -euo pipefail
VENV=${1:?usage: setup_venv.sh VENV [SGLANG_VERSION]}
SGL=${2:-0.5.16}
HERE=$(cd "$(dirname "$0")/.." && pwd)
TORCH_ARGS=${SGE3_TORCH_ARGS:---index-url https://download.pytorch.org/whl/cpu}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
INSTALL="$PIP install -q --disable-pip-version-check ${SGE3_PIP_ARGS:-}"
CONS="$VENV/constraints.txt"
printf 'torch==2.13.0\n' > "$CONS"
if [ ! -e "$VENV/.base_done" ]; then
  # CPU torch first, from PyTorch's CPU index: from PyPI, pip would resolve the multi-GB CUDA build
  $INSTALL $TORCH_ARGS torch==2.13.0
  $INSTALL --no-deps $TORCH_ARGS torchvision==0.28.0
  $INSTALL -c "$CONS" numpy orjson psutil pybase64 requests triton packaging pillow starlette \
    tqdm IPython pydantic aiohttp pyzmq msgspec dill openai==2.6.1 partial-json-parser \
    xgrammar==0.2.1 apache-tvm-ffi==0.1.11 sentencepiece einops compressed-tensors gguf uvicorn \
    setproctitle fastapi uvloop wrapt safetensors pytest hypothesis import-linter pyyaml nvidia-ml-py matplotlib
  # speculators: its torchvision/torchaudio requirements would pull a CUDA torch; deps pinned by hand
  $INSTALL --no-deps speculators==0.9.0
  $INSTALL -c "$CONS" click "datasets>=4,<=5.1.0" httpx huggingface-hub "loguru>=0.7.2,<=0.7.3" rich \
    pydantic-settings typer protobuf hs-connectors==0.9.0
  touch "$VENV/.base_done"
fi
# transformers pinned by each release's metadata
case "$SGL" in
  0.5.10) TF=5.3.0 ;; 0.5.14) TF=5.8.1 ;; 0.5.16|0.5.18|0.5.20) TF=5.12.1 ;; *) TF=5.19.0 ;;
esac
if [ ! -e "$VENV/.sglang_$SGL" ]; then
  $INSTALL --no-deps --force-reinstall "sglang==$SGL"
  $INSTALL -c "$CONS" "transformers==$TF"
  rm -f "$VENV"/.sglang_*; touch "$VENV/.sglang_$SGL"
fi
# torchvision shim, loaded at start-up through a .pth (see tests/cpu_shims)
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp "$HERE/tests/cpu_shims/sge3_torchvision_shim.py" "$SITE/"
echo "import sge3_torchvision_shim" > "$SITE/sge3_torchvision_shim.pth"
# the package itself: its dependencies are all installed above (--no-deps keeps pip from swapping torch);
# the build backend is installed here (no build isolation: the build needs no second download)
$INSTALL -c "$CONS" "hatchling>=1.21" editables matplotlib
$INSTALL --no-deps --no-build-isolation -e "$HERE"
# every dependency the package declares is present (SGLang's own are not: it is installed --no-deps)
if "$VENV/bin/python" -m pip check | grep -iE "^sglang-eagle3-ext "; then exit 1; fi
echo "venv ready: $VENV (sglang $SGL, transformers $TF; $("$VENV/bin/sglang-eagle3" --version))"
