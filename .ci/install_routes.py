#!/usr/bin/env python3
"""The install routes of README.md and docs/tutorial.md, run as the documents write them, from empty venvs.

    python3 .ci/install_routes.py run [--keep]     in the foreground
    python3 .ci/install_routes.py start            in the background (.ci/run: beside pytest), its log in a scratch
    python3 .ci/install_routes.py wait             folder; `wait` prints the log and exits with the run's status

- The CPU route: the ```bash block under a `<!-- cpu-route` marker in README.md, which docs/tutorial.md holds word
  for word, runs line by line with plain pip in an empty venv, from the checkout's root (torch must stay the CPU
  build); then the tutorial's other marked blocks (its folder, step 1, the CPU section) run in one bash with that
  venv active and HOME in a scratch folder, as a reader types them.
- Every other `pip install` of both documents (bash blocks and inline code) brings SGLang's CUDA builds, many GB:
  resolved, not installed, with the same arguments (`uv pip install --dry-run`, uv from .venv) in an empty venv.

Standard library only. pip's cache is the machine's (PIP_CACHE_DIR), and an index it cannot reach (PyTorch's CPU
index, where only PyPI is reachable) is given up after one retry; torch runs on one thread, beside pytest.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = (REPO / "README.md", REPO / "docs" / "tutorial.md")
MARK = "<!-- cpu-route"
SCRATCH = Path(tempfile.gettempdir()) / f"sge3-install-routes-{hashlib.sha1(str(REPO).encode()).hexdigest()[:10]}"
LINE_TIMEOUT_S = 1800


class Block:
    def __init__(self, where: str, lines: list[str], marked: bool):
        self.where, self.lines, self.marked = where, lines, marked

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def commands(self) -> list[str]:
        """The block's commands: comments dropped, `\\` continuations joined."""
        out, pending = [], ""
        for ln in self.lines:
            s = ln.strip()
            if not pending and (not s or s.startswith("#")):
                continue
            pending = f"{pending} {s.removesuffix(chr(92)).strip()}".strip()
            if not s.endswith("\\"):
                out.append(re.split(r"\s+#\s", pending)[0].strip())
                pending = ""
        return out


def bash_blocks(path: Path) -> tuple[list[Block], list[tuple[str, str]]]:
    """The document's ```bash blocks (marked: the last text line before the fence is a cpu-route marker) and the
    inline code spans of its prose, each with where it is."""
    name = str(path.relative_to(REPO))
    blocks, lines, prose = [], path.read_text(encoding="utf-8").splitlines(), []
    i, prev = 0, ""
    while i < len(lines):
        s = lines[i].strip()
        if not s.startswith("```"):
            prose.append(lines[i])
            prev = s or prev
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith("```"):
            j += 1
        if s == "```bash":
            blocks.append(Block(f"{name}:{i + 1}", lines[i + 1 : j], prev.startswith(MARK)))
        prose += [""] * (j + 1 - i)  # keeps line numbers
        i, prev = j + 1, ""
    text = "\n".join(prose)
    spans = [
        (f"{name}:{text.count(chr(10), 0, m.start()) + 1}", " ".join(m.group(1).split()))
        for m in re.finditer(r"`([^`]+)`", text)
    ]
    return blocks, spans


def routes() -> tuple[Block, list[Block], list[tuple[str, str]]]:
    """(the CPU install block, the tutorial's marked step blocks, every other `pip install` with where it is)."""
    (readme, readme_spans), (tutorial, tutorial_spans) = (bash_blocks(p) for p in DOCS)
    marked = [b for b in readme if b.marked]
    steps = [b for b in tutorial if b.marked]
    if len(marked) != 1 or not steps or steps[0].text != marked[0].text:
        sys.exit(
            f"install routes: README.md needs one `{MARK}` bash block and docs/tutorial.md the same block first "
            f"(README: {len(marked)} marked; tutorial's first: {steps[0].where if steps else 'none'})"
        )
    others = [
        (b.where, part.strip())
        for b in readme + tutorial
        if not b.marked
        for c in b.commands()
        for part in c.split("&&")
    ]
    seen, gpu = set(), []
    for where, cmd in others + readme_spans + tutorial_spans:
        if cmd.startswith("pip install ") and "…" not in cmd and cmd not in seen:
            seen.add(cmd)
            gpu.append((where, cmd))
    return marked[0], steps[1:], gpu


def clean_env(venv: Path, home: Path) -> dict:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_EAGLE3_EXT", "SGE3_", "PYTHON"))}
    keep.pop("VIRTUAL_ENV", None)
    return {
        **keep,
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": str(venv),
        "HOME": str(home),
        "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip"),
        "PIP_RETRIES": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "OMP_NUM_THREADS": "1",
    }


def step(what: str, cmd: list[str], **kw) -> None:
    t0 = time.monotonic()
    print(f"install routes: {what} ...", flush=True)
    p = subprocess.run(cmd, stdout=sys.stdout, stderr=subprocess.STDOUT, timeout=LINE_TIMEOUT_S, **kw)
    print(f"install routes: {what}: exit {p.returncode}, {time.monotonic() - t0:.0f} s", flush=True)
    if p.returncode:
        sys.exit(f"install routes: FAILED: {what}")


def cpu_route(block: Block, steps: list[Block], work: Path) -> None:
    venv, home = work / "cpu-venv", work / "home"
    home.mkdir(parents=True)
    step("empty venv", [sys.executable, "-m", "venv", str(venv)])
    env = clean_env(venv, home)
    for n, cmd in enumerate(block.commands(), 1):
        step(f"{block.where} line {n}: {cmd}", ["bash", "-c", cmd], cwd=REPO, env=env)
    probe = "import importlib.metadata as m; v = m.version('torch'); print('torch', v); assert v.endswith('+cpu'), v"
    step("torch is the CPU build", [str(venv / "bin" / "python"), "-c", probe], cwd=REPO, env=env)
    script = "set -euxo pipefail\n" + "".join(f"# {b.where}\n{b.text}" for b in steps)
    step(f"the tutorial's CPU steps ({', '.join(b.where for b in steps)})", ["bash", "-c", script], cwd=REPO, env=env)
    du = subprocess.run(["du", "-sh", str(venv)], capture_output=True, text=True).stdout.split()
    print(f"install routes: the CPU venv holds {du[0] if du else '?'}", flush=True)


def gpu_lines(lines: list[tuple[str, str]], work: Path) -> None:
    uv = REPO / ".venv" / "bin" / "uv"
    uv = str(uv) if uv.exists() else shutil.which("uv")
    if not uv:
        sys.exit("install routes: uv not found (bash .ci/setup_venv.sh .venv installs the lock's)")
    venv = work / "resolve-venv"
    step("empty venv (resolving)", [uv, "venv", "-q", "-p", sys.executable, str(venv)])
    for where, cmd in lines:
        args = shlex.split(cmd)[2:]
        step(
            f"{where}: {cmd} (resolved)",
            [uv, "pip", "install", "--dry-run", "-q", "--python", venv / "bin" / "python", *args],
            cwd=REPO,
        )


def run(keep: bool) -> int:
    t0 = time.monotonic()
    block, steps, gpu = routes()
    work = Path(tempfile.mkdtemp(prefix="routes-", dir=SCRATCH if SCRATCH.is_dir() else None))
    try:
        gpu_lines(gpu, work)
        cpu_route(block, steps, work)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    print(
        f"install routes: OK, {len(gpu)} GPU lines resolved, the CPU route and its steps ran: {time.monotonic() - t0:.0f} s"
    )
    return 0


def start() -> int:
    shutil.rmtree(SCRATCH, ignore_errors=True)
    SCRATCH.mkdir(parents=True)
    log = open(SCRATCH / "log", "w")  # the child writes it
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(__file__)} run; echo $? > {shlex.quote(str(SCRATCH / 'rc'))}"
    p = subprocess.Popen(
        ["nice", "-n", "10", "bash", "-c", cmd], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    )
    (SCRATCH / "pid").write_text(str(p.pid))
    print(f"install routes: started in the background (pid {p.pid}, log {SCRATCH / 'log'})")
    return 0


def wait() -> int:
    if not (SCRATCH / "pid").is_file():
        print(f"install routes: FAILED: not started ({SCRATCH / 'pid'} missing: python3 {__file__} start)")
        return 1
    rc_file, pid = SCRATCH / "rc", int((SCRATCH / "pid").read_text())
    while not (rc_file.exists() and rc_file.read_text().strip()):
        if not Path(f"/proc/{pid}").exists():  # ended; a status it wrote is read below
            time.sleep(1)
            break
        time.sleep(2)
    status = rc_file.read_text().strip() if rc_file.exists() else ""
    print((SCRATCH / "log").read_text(errors="replace"), end="")
    if not status:
        print("install routes: FAILED: the run ended without a status")
    return int(status) if status else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cmd", choices=["run", "start", "wait"])
    ap.add_argument("--keep", action="store_true", help="keep the venvs and the tutorial's folder (run)")
    a = ap.parse_args()
    return {"run": lambda: run(a.keep), "start": start, "wait": wait}[a.cmd]()


if __name__ == "__main__":
    sys.exit(main())
