#!/usr/bin/env python3
"""The locked test environments: one lock per SGLang release the suite installs, installed exactly.

    python3 .ci/lockenv.py lock [--release X ...]     regenerate constraints/sglang-X.txt (uv pip compile)
    python3 .ci/lockenv.py sync VENV RELEASE          make VENV exactly that lock + CPU torch + this package
    VENV/bin/python .ci/lockenv.py check RELEASE      this environment is the lock and the suite's imports import
    python3 .ci/lockenv.py outdated [--release X] [--try]   pins with newer releases upstream (--try: run the
                                                      suite against a refreshed lock in a scratch venv)

A lock is generated from the release's own Requires-Dist (its wheel's METADATA), plus this package's dependencies
and extras and CI_ONLY, resolved whole by uv for CPython 3.11 on x86_64 Linux (as a GPU install resolves), less
EXCLUDED (CUDA-only packages the CPU tests never import), torch and what only they bring; constraints/cpu/ adds
the CPU build of torch (TORCH) and what is bound to it. CI never resolves: `sync` installs exactly
the lock's lines. The locks are also constraints for users (`pip install -c constraints/sglang-0.5.16.txt
'.[sglang]'`): they leave torch and the CUDA-only packages to the release's own pins.

Standard library only (runs before any venv exists); `uv` comes from the lock itself.
"""

from __future__ import annotations

import argparse
import email.parser
import json
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent
LOCKS = REPO / "constraints"
PYTHON = "3.11"
PLATFORM = "x86_64-manylinux_2_28"
# The CPU build of torch every CPU environment uses; a release's own torch pin is a CUDA build for its kernels.
TORCH = "2.13.0"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_LOCAL = Path("/opt/wheels")  # a machine may keep the CPU wheel here (searched first when present)
# Bound to the CPU torch, not to the release: kept out of the user-facing lock (a user's SGLang pins its own torch
# and these with it) and written to constraints/cpu/sglang-X.txt, which the CPU environment adds.
# (triton: SGLang imports it at module level and torch's CPU build does not bring it.)
CPU_STACK = ("torchvision", "triton")
# Left out of every lock, each with why. The CPU tests never import these; most are CUDA builds of many GB.
EXCLUDED = {
    "cuda-python": "CUDA driver bindings",
    "cuda-tile": "CUDA kernels",
    "flash-attn-4": "CUDA kernels",
    "flashinfer-python": "CUDA kernels",
    "flashinfer-cubin": "CUDA kernels",
    "humming-kernels": "CUDA kernels",
    "nvidia-cutlass-dsl": "CUDA kernels",
    "nvidia-mathdx": "CUDA kernels",
    "nvshmem4py-cu13": "CUDA multi-GPU",
    "quack-kernels": "CUDA kernels",
    "sgl-deep-ep": "CUDA multi-GPU",
    "sgl-deep-gemm": "CUDA kernels",
    "sgl-flash-mla": "CUDA kernels",
    "sglang-kernel": "CUDA kernels (0.5.10 gets a CPU stand-in: tests/cpu_shims)",
    "tilelang": "CUDA kernel compiler",
    "tokenspeed-mla": "CUDA kernels",
    "helion": "CUDA kernel compiler",
    "torch-memory-saver": "CUDA memory hooks",
    "torchao": "GPU quantization, bound to a CUDA torch",
    "torchaudio": "a torch-version-bound native build; audio models only",
    "torchcodec": "a torch-version-bound native build; video only",
    "av": "video decoding only",
    "decord2": "video decoding only",
}
# Not in any release's Requires-Dist, needed by the CPU environment.
CI_ONLY = {
    "hatchling>=1.21": "this package's build backend (editable install without build isolation)",
    "editables": "hatchling's editable installs",
    "uv": "the installer (sync) and resolver (lock)",
    "ruff": "lint and import order (.ci/run; rules in pyproject.toml)",
}
# What the suite imports while collecting: checked before the tests run (check).
COLLECTION_IMPORTS = (
    "torch",
    "transformers",
    "speculators",
    "sglang.srt.server_args",
    "sglang.srt.utils",
    "safetensors",
    "hypothesis",
    "wrapt",
    "yaml",
    "datasets",
    "sglang_eagle3_ext",
)
# CPU stand-ins for CUDA-only modules SGLang imports at module level, loaded at start-up through a .pth:
# module file in tests/cpu_shims -> the releases that need it (None: every release).
# (torchvision: PyPI's build beside the CPU torch needs two op schemas defined before it registers fakes)
SHIMS = {"sge3_torchvision_shim": None, "sgl_kernel_stub": {"0.5.10"}}
# Installed without being a lock line: the venv's own tools and this package (editable).
UNLOCKED = {"pip", "setuptools", "wheel", "sglang-eagle3-ext"}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def req_name(req: str) -> str:
    """The normalized project name of a requirement or lock line (`name[extra]==1.0  # via ...` -> `name`)."""
    return norm(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req).group(1))


def lock_path(release: str) -> Path:
    return LOCKS / f"sglang-{release}.txt"


def cpu_lock_path(lock: Path) -> Path:
    return lock.parent / "cpu" / lock.name


def versions():
    """sglang_eagle3_ext/versions.py, where the tested and the recommended releases are declared."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from sglang_eagle3_ext import versions as v  # stdlib-only module at import

    return v


def releases() -> list[str]:
    return list(versions().TESTED_RELEASES)


def base_release() -> str:
    return versions().RECOMMENDED


def die(msg: str) -> None:
    print(f"lockenv: {msg}", file=sys.stderr)
    raise SystemExit(2)


def run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], text=True, **kw)


# ---------------------------------------------------------------- lock
def release_requires(release: str, wheel_dir: Path) -> list[str]:
    """The release's Requires-Dist (no extras), read from its wheel's METADATA."""
    wheels = sorted(wheel_dir.glob(f"sglang-{release}-*.whl"))
    if not wheels:
        r = run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary",
                ":all:",
                "--python-version",
                PYTHON.replace(".", ""),
                "--platform",
                "manylinux_2_34_x86_64",
                "-d",
                wheel_dir,
                f"sglang=={release}",
            ],
            capture_output=True,
        )
        wheels = sorted(wheel_dir.glob(f"sglang-{release}-*.whl"))
        if not wheels:
            die(f"cannot download sglang=={release}: {r.stderr.strip().splitlines()[-1:]}")
    with zipfile.ZipFile(wheels[0]) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        msg = email.parser.Parser().parsestr(z.read(meta).decode())
    return [r for r in msg.get_all("Requires-Dist") or [] if "extra ==" not in r]


def our_requires() -> list[str]:
    proj = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = proj["optional-dependencies"]
    return [*proj["dependencies"], *(r for g, rs in extras.items() if g != "sglang" for r in rs)]


def torch_source() -> list[str]:
    if any(TORCH_LOCAL.glob(f"torch-{TORCH}+cpu-*.whl")):
        return ["--find-links", str(TORCH_LOCAL)]
    return ["--extra-index-url", TORCH_INDEX, "--index-strategy", "unsafe-best-match"]


def uv_compile(
    d: Path, inp: list[str], out: Path, extra: list[str], exclude_newer: str | None, upgrade: bool
) -> list[str]:
    """`uv pip compile` of the lines `inp` (written to d/<out.stem>.in: the "via" notes name it) for CPython
    PYTHON on x86_64 Linux; the lock's lines."""
    src = d / f"{out.stem}.in"
    src.write_text("\n".join(inp) + "\n")
    cmd = [
        "uv",
        "pip",
        "compile",
        src.name,
        "--python-version",
        PYTHON,
        "--python-platform",
        PLATFORM,
        "--index-url",
        "https://pypi.org/simple",
        *extra,
        "--no-header",
        "--annotation-style",
        "line",
        "-q",
        "-o",
        d / f"{out.stem}.out",
    ]
    cmd += ["--exclude-newer", exclude_newer] if exclude_newer else []
    cmd += ["--upgrade"] if upgrade else []
    r = run(cmd, capture_output=True, cwd=d)
    if r.returncode:
        die(f"uv pip compile ({out.name}) failed:\n{r.stderr.strip()}")
    return [ln for ln in (d / f"{out.stem}.out").read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def left_out(lines: list[str]) -> set[str]:
    """EXCLUDED, torch and what is bound to it (CPU_STACK), and what only they bring (CUDA runtime wheels, ...)."""
    via = {
        req_name(ln): {v.strip() for v in ln.split("# via", 1)[1].split(",")} if "# via" in ln else set()
        for ln in lines
    }
    drop = {"torch", *CPU_STACK, *EXCLUDED}
    while True:
        more = {n for n, v in via.items() if n not in drop and v and all(norm(x) in drop for x in v)}
        if not more:
            return drop
        drop |= more


def compile_lock(release: str, out: Path, wheel_dir: Path, exclude_newer: str | None, upgrade: bool) -> None:
    """The lock: the release resolved whole, as a GPU install gets it, less what the CPU environment never
    installs (left_out). Its CPU addition: CPU torch, CPU_STACK and their dependencies, resolved inside the lock."""
    reqs = release_requires(release, wheel_dir)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        lines = uv_compile(d, [*reqs, *our_requires(), *CI_ONLY], out, [], exclude_newer, upgrade)
        drop = left_out(lines)
        kept = [ln for ln in lines if req_name(ln) not in drop]
        (d / "lock.txt").write_text("\n".join(kept) + "\n")
        cpu = uv_compile(
            d,
            [f"torch=={TORCH}+cpu", *CPU_STACK],
            cpu_lock_path(out),
            ["-c", "lock.txt", *torch_source()],
            exclude_newer,
            upgrade,
        )
    pinned = {req_name(ln) for ln in kept}
    cpu = [ln for ln in cpu if req_name(ln) not in pinned]
    cpu_out = cpu_lock_path(out)
    cpu_out.parent.mkdir(exist_ok=True)
    cpu_out.write_text(
        f"# What the CPU test environment for SGLang {release} adds to ../sglang-{release}.txt: the CPU build\n"
        f"# of torch and what is bound to it. Generated by `python3 .ci/lockenv.py lock`; do not edit.\n"
        + "\n".join(cpu)
        + "\n"
    )
    header = (
        f"# SGLang {release}'s environment (CPython {PYTHON}, x86_64 Linux): every package `name==version`.\n"
        f"# Generated by `python3 .ci/lockenv.py lock --release {release}` from the release's Requires-Dist,\n"
        "# this package's dependencies and extras, and .ci/lockenv.py's CI_ONLY; do not edit by hand.\n"
        "# Left out (CUDA-only; see EXCLUDED in .ci/lockenv.py): " + ", ".join(sorted(EXCLUDED)) + ".\n"
        f"# torch and what is bound to it ({', '.join(CPU_STACK)}) are the release's own pins for a user\n"
        f"# (`pip install -c` this file); the CPU test environment adds cpu/sglang-{release}.txt.\n"
    )
    out.write_text(
        header + "\n".join(kept) + f"\nsglang=={release}    # installed without dependencies: the lines above\n"
    )


def cmd_lock(a) -> int:
    if not shutil.which("uv"):
        die("uv is not on PATH: `pip install $(grep '^uv==' constraints/sglang-*.txt | head -1 | cut -d: -f2)`")
    LOCKS.mkdir(exist_ok=True)
    wheel_dir = Path(a.wheel_dir or tempfile.mkdtemp(prefix="sglang-wheels-"))
    for rel in a.release or releases():
        compile_lock(rel, lock_path(rel), wheel_dir, a.exclude_newer, upgrade=False)
        n = sum(1 for ln in lock_path(rel).read_text().splitlines() if "==" in ln and not ln.startswith("#"))
        print(f"{lock_path(rel).relative_to(REPO)}: {n} packages")
    return 0


# ---------------------------------------------------------------- sync / check
def shown(path: Path) -> Path:
    return path.relative_to(REPO) if path.is_absolute() and path.is_relative_to(REPO) else path


def lock_pins(path: Path) -> dict[str, str]:
    pins = {}
    for ln in path.read_text().splitlines():
        ln = ln.split("#", 1)[0].strip()
        if ln:
            m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;]+)", ln)
            if not m:
                die(f"{shown(path)}: not a `name==version` line: {ln!r}")
            pins[norm(m.group(1))] = m.group(3)
    return pins


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def uv(venv: Path) -> Path:
    exe = venv / "bin" / "uv"
    if not exe.exists():
        pin = lock_pins(lock_path(base_release())).get("uv")
        r = run([venv_python(venv), "-m", "pip", "install", "-q", "--no-deps", f"uv=={pin}"], capture_output=True)
        if r.returncode:
            die(f"cannot install uv=={pin} into {venv}: {r.stderr.strip().splitlines()[-1:]}")
    return exe


def release_of(lock: Path) -> str:
    return next(v for n, v in lock_pins(lock).items() if n == "sglang")


def install_shims(venv: Path, release: str) -> None:
    site = Path(
        run(
            [venv_python(venv), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            check=True,
        ).stdout.strip()
    )
    for mod, only in SHIMS.items():
        pth, dst = site / f"{mod}.pth", site / f"{mod}.py"
        if only is None or release in only:
            shutil.copy(REPO / "tests" / "cpu_shims" / f"{mod}.py", dst)
            pth.write_text(f"import {mod}\n")
        else:
            pth.unlink(missing_ok=True)
            dst.unlink(missing_ok=True)


def cmd_sync(a) -> int:
    lock = lock_path(a.release)
    if not lock.exists():
        die(f"no lock for sglang {a.release}: python3 .ci/lockenv.py lock --release {a.release}")
    return sync(Path(a.venv).absolute(), lock)


def sync(venv: Path, lock: Path) -> int:
    if not venv_python(venv).exists():
        run([sys.executable, "-m", "venv", venv], check=True)
    exe = uv(venv)
    py = ["--python", venv_python(venv)]
    r = run(
        [
            exe,
            "pip",
            "sync",
            "-q",
            *py,
            "--index-url",
            "https://pypi.org/simple",
            *torch_source(),
            lock,
            cpu_lock_path(lock),
        ]
    )
    if r.returncode == 0:  # the package itself, built by the lock's hatchling (no second download)
        r = run([exe, "pip", "install", "-q", *py, "--no-deps", "--no-build-isolation", "-e", REPO])
    if r.returncode == 0:
        install_shims(venv, release_of(lock))
    if r.returncode:
        die(f"installing {lock} into {venv} failed (above)")
    return 0


def problems(release: str, lock: Path | None = None, imports: bool = True) -> list[str]:
    """In the running interpreter, one line per problem: a lock line not installed as pinned, a package installed
    that no lock line names, a module the suite imports at collection that does not import."""
    import importlib.metadata as md

    lock = lock or lock_path(release)
    rel = shown(lock)
    fix = f"regenerate with `python3 .ci/lockenv.py lock --release {release}` and sync"
    pins = {**lock_pins(lock), **lock_pins(cpu_lock_path(lock))}
    have = {norm(d.metadata["Name"]): d.version for d in md.distributions() if d.metadata["Name"]}
    bad = []
    for name, want in sorted(pins.items()):
        got = have.get(name)
        if got is None:
            bad.append(f"{name}=={want} ({rel}) is not installed; {fix}")
        elif got != want:
            bad.append(f"{name} is {got}, {rel} says {want}; {fix}")
    for name in sorted(set(have) - set(pins) - UNLOCKED):
        bad.append(f"{name} {have[name]} is installed but {rel} has no line for it; {fix}")
    for mod, err, dist in failed_imports() if imports else []:
        ver = have.get(norm(dist), "not installed")
        bad.append(f"import {mod} fails in {dist} {ver} ({err}); {fix} (lock {rel})")
    return bad


def failed_imports(mods=COLLECTION_IMPORTS) -> list[tuple[str, str, str]]:
    """(module, error, the distribution where it failed) for each import that fails: the deepest frame in
    site-packages names it (or the missing module)."""
    import importlib
    import importlib.metadata as md
    import traceback

    dists, out = md.packages_distributions(), []
    for mod in mods:
        try:
            importlib.import_module(mod)
        except BaseException as e:  # noqa: BLE001 - every failing import is reported, whatever it raises
            where = [f.filename for f in traceback.extract_tb(e.__traceback__) if "site-packages/" in f.filename]
            top = where[-1].split("site-packages/", 1)[1].split("/")[0].removesuffix(".py") if where else mod
            if isinstance(e, ModuleNotFoundError) and e.name:
                top = e.name.split(".")[0]
            first = str(e).splitlines()[0] if str(e) else ""
            out.append((mod, f"{type(e).__name__}: {first}"[:200], (dists.get(top) or [top])[0]))
    return out


def cmd_check(a) -> int:
    bad = problems(a.release, Path(a.lock).absolute() if a.lock else None, imports=not a.no_imports)
    for b in bad:
        print(f"environment: {b}", file=sys.stderr)
    if not bad:
        print(
            f"environment: exactly {lock_path(a.release).relative_to(REPO)}"
            + ("" if a.no_imports else "; the suite's imports import")
        )
    return 1 if bad else 0


# ---------------------------------------------------------------- outdated
def newest_on_pypi(name: str) -> str | None:
    try:
        with urllib.request.urlopen(f"https://pypi.org/pypi/{name}/json", timeout=20) as f:
            return json.load(f)["info"]["version"]
    except Exception:  # noqa: BLE001 - reported as unknown
        return None


def cmd_outdated(a) -> int:
    release = a.release or base_release()
    pins = lock_pins(lock_path(release))
    newer = {n: (v, newest_on_pypi(n)) for n, v in pins.items()}
    for n, (v, up) in sorted(newer.items()):
        if up and up != v:
            print(f"{n}: {v} -> {up}")
    if not a.try_:
        return 0
    with tempfile.TemporaryDirectory() as d:
        scratch = Path(d) / "lock.txt"
        compile_lock(release, scratch, Path(d), None, upgrade=True)
        venv = Path(d) / "venv"
        sync(venv, scratch)
        run([venv_python(venv), __file__, "check", release, "--lock", scratch])
        r = run([venv_python(venv), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "--no-header"], cwd=REPO)
        print(f"suite against the refreshed lock: pytest exit {r.returncode}")
        return r.returncode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("lock", help="regenerate constraints/sglang-X.txt")
    p.add_argument("--release", action="append", help="one release (repeatable; default: every tested release)")
    p.add_argument("--wheel-dir", help="where sglang-X-*.whl may already be")
    p.add_argument("--exclude-newer", help="resolve as of this date (YYYY-MM-DD), for a reproducible lock")
    p = sub.add_parser("sync", help="make VENV exactly the lock of RELEASE (+ CPU torch, this package, shims)")
    p.add_argument("venv")
    p.add_argument("release")
    p = sub.add_parser("check", help="the running interpreter's environment is exactly the lock; imports import")
    p.add_argument("release")
    p.add_argument("--lock", help="another lock file (default: constraints/sglang-RELEASE.txt)")
    p.add_argument("--no-imports", action="store_true", help="versions only (the suite's conftest imports)")
    p = sub.add_parser("outdated", help="pins with newer releases upstream")
    p.add_argument("--release")
    p.add_argument("--try", dest="try_", action="store_true", help="run the suite against a refreshed lock")
    a = ap.parse_args(argv)
    return {"lock": cmd_lock, "sync": cmd_sync, "check": cmd_check, "outdated": cmd_outdated}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
