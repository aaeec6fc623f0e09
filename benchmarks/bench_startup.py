"""Interpreter start-up cost of the installed .pth with SGLANG_EAGLE3_EXT unset (goal: ratio <= 1.02).

Two throw-away venvs of this interpreter, identical except that one has our .pth in its
site-packages; `python -c pass` is timed alternately in both, and the medians compared.
Usage: python benchmarks/bench_startup.py [--runs 200]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

PTH = Path(__file__).resolve().parents[1] / "sglang_eagle3_ext" / "_startup" / "sglang_eagle3_ext.pth"


def make_venv(root: Path, with_pth: bool) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    py = root / "bin" / "python"
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if with_pth:
        shutil.copy(PTH, Path(site) / PTH.name)
    return py


def time_once(py: Path, env: dict) -> float:
    t = time.perf_counter()
    subprocess.run([py, "-c", "pass"], env=env, check=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_EAGLE3_EXT"}
    with tempfile.TemporaryDirectory() as d:
        base, ours = make_venv(Path(d) / "base", False), make_venv(Path(d) / "ours", True)
        for py in (base, ours):  # warm the page cache
            time_once(py, env)
        tb, to = [], []
        for _ in range(args.runs):
            tb.append(time_once(base, env))
            to.append(time_once(ours, env))
    mb, mo = statistics.median(tb), statistics.median(to)
    print(
        f"python {sysconfig.get_python_version()}: start-up median without package {mb * 1e3:.2f} ms, "
        f"with .pth (variable unset) {mo * 1e3:.2f} ms over {args.runs} runs each"
    )
    print(f"ratio with/without = {mo / mb:.4f} (goal <= 1.02)")


if __name__ == "__main__":
    main()
