"""Pre-upgrade check: which of our patches a SGLang release can take, without importing SGLang
(`check_source(release_root(...)...)`; its command line is `sglang-eagle3 compat`, cli/compat.py).

Every target of `patch_table.PATCHES` is resolved statically from the release's source (source_locate.py, ast:
the module file exists, the class is defined there or imported there, the method is defined on it
or inherited from a SGLang base), capability flags come from `versions.capabilities_from_source`.
A target that is not where the table says is searched for in the whole tree, so the report says
where it moved.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from .. import envs
from ..patch_table import PATCHES
from ..versions import FORCE_ENV, SUPPORTED_MAX, SUPPORTED_MIN, capabilities_from_source, in_range, parse
from .source_locate import Location, clear_cache, locate

CACHE_ENV = envs.CACHE


def cache_dir() -> Path:
    return Path(envs.get(CACHE_ENV))


class ReleaseUnavailable(RuntimeError):
    pass


# --------------------------------------------------------------------------- obtaining a release's source


def find_wheel(version: str, dirs) -> Path | None:
    for d in dirs:
        d = Path(d)
        if d.is_dir():
            hits = sorted(d.glob(f"sglang-{version}-*.whl"))
            if hits:
                return hits[0]
    return None


def download_wheel(version: str, dest: Path, python: str = sys.executable) -> Path:
    """`pip download --no-deps sglang==VERSION` into dest (reused when already there)."""
    dest.mkdir(parents=True, exist_ok=True)
    hit = find_wheel(version, [dest])
    if hit:
        return hit
    print(
        f"compat: downloading the sglang {version} wheel (no dependencies) into {dest} ...", file=sys.stderr, flush=True
    )
    cmd = [
        python,
        "-m",
        "pip",
        "download",
        "-q",
        "--disable-pip-version-check",
        "--no-deps",
        "--only-binary=:all:",
        f"sglang=={version}",
        "-d",
        str(dest),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True)
    hit = find_wheel(version, [dest])
    if p.returncode != 0 or hit is None:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        raise ReleaseUnavailable(f"could not download sglang {version}: {' | '.join(tail) or 'no wheel'}")
    return hit


class BadWheel(ReleaseUnavailable):
    pass


def unpack_wheel(wheel: Path, dest: Path, flag: str = "wheel") -> Path:
    """Extract the wheel's Python sources (sglang/**/*.py) into dest; returns dest/'sglang'.

    Reused when dest already holds a complete extraction (marker file, written last). A wheel that is not a
    readable zip holding sglang/ is refused naming it (BadWheel); a partial extraction is never marked."""
    marker = dest / ".sge3_unpacked"
    if marker.exists():
        return dest / "sglang"
    fix = (
        f"{flag} {wheel}: not a usable SGLang wheel ({{}}); delete it and download it again "
        f"(`pip download --no-deps sglang==VERSION`, or compat --download)"
    )
    try:
        sources = _read_sources(wheel)  # every member read (CRC checked) before anything is written
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, NotImplementedError, ValueError) as e:
        raise BadWheel(fix.format(f"{type(e).__name__}: {e}")) from None
    except OSError as e:
        raise BadWheel(fix.format(e.strerror or e)) from None
    bad = [n for n in sources if n.startswith("/") or ".." in PurePosixPath(n).parts]
    if bad or not any(n.startswith("sglang/srt/") for n in sources):
        raise BadWheel(fix.format(f"unsafe member path {bad[0]!r}" if bad else "no sglang/srt/ sources inside"))
    for name, data in sources.items():
        out = dest / name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    marker.write_text(wheel.name + "\n")
    return dest / "sglang"


def _read_sources(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n) for n in z.namelist() if n.startswith("sglang/") and n.endswith(".py")}


def source_for(version: str, *, download: bool = False, wheel_dirs=()) -> Path:
    """The `sglang/` source dir of a named release, from a local wheel or (download=True) PyPI."""
    cache = cache_dir()
    wheel = find_wheel(version, wheel_dirs)
    flag = "--wheel-dir wheel"
    if wheel is None:
        wheel, flag = find_wheel(version, [cache / "wheels"]), "cached wheel"
    if wheel is None:
        if not download:
            raise ReleaseUnavailable(
                f"no wheel for sglang {version} in {', '.join(str(d) for d in [*wheel_dirs, cache / 'wheels'])}; "
                f"add --download to fetch it (no dependencies) or --source DIR for an unpacked tree"
            )
        wheel, flag = download_wheel(version, cache / "wheels"), "downloaded wheel"
    return unpack_wheel(wheel, cache / "src" / wheel.stem, flag)


def sglang_dir(path: Path) -> Path:
    """Accept DIR/sglang or the sglang package dir itself."""
    path = Path(path)
    if (path / "sglang" / "__init__.py").exists() or (path / "sglang" / "srt").is_dir():
        return path / "sglang"
    return path


def version_from_source(root: Path) -> str | None:
    """The release of a source tree: its generated _version.py / version.py literal, else the wheel or
    dist-info it came from."""
    for name in ("_version.py", "version.py"):
        p = root / name
        if p.exists():
            m = re.search(
                r"^(?:__version__|version)\s*=\s*(?:(?:__version__|version)\s*=\s*)?['\"]([^'\"]+)['\"]",
                p.read_text(errors="replace"),
                re.M,
            )
            if m:
                return m.group(1)
    marker = root.parent / ".sge3_unpacked"
    names = [marker.read_text().strip()] if marker.exists() else []
    names += [p.name for p in root.parent.glob("sglang-*.dist-info")]
    for n in names:
        m = re.match(r"sglang-([^-]+?)(?:\.dist-info|-)", n)
        if m:
            return m.group(1)
    return None


# --------------------------------------------------------------------------- report


@dataclasses.dataclass
class PatchRow:
    name: str
    target: str
    feature: str
    requires: str | None
    capability_on: bool
    location: Location

    @property
    def ok(self) -> bool:
        return self.location.status in ("found", "reachable")

    @property
    def applies(self) -> str:
        if not self.capability_on:
            return f"skipped ({self.requires} off)"
        return "yes" if self.ok else "NO"


@dataclasses.dataclass
class Report:
    version: str
    root: Path
    rows: list[PatchRow]
    capabilities: dict
    in_range: bool

    @property
    def moved(self) -> list[PatchRow]:
        return [r for r in self.rows if r.capability_on and not r.ok]

    @property
    def supported(self) -> bool:
        return self.in_range and not self.moved

    @property
    def verdict(self) -> str:
        moved = ", ".join(f"{r.target} ({r.location.status}: {r.location.detail})" for r in self.moved)
        if self.supported:
            n = sum(r.capability_on for r in self.rows)
            return f"supported: sglang {self.version}: all {n} patches apply"
        if not self.in_range:
            why = f"sglang {self.version} is outside the supported range {SUPPORTED_MIN}..{SUPPORTED_MAX}"
            if moved:
                return f"unsupported: {moved}; {why}"
            return (
                f"unsupported: {why} (every patch target was found in its source, but the release is "
                f"untested: {FORCE_ENV}=1 to try at your own risk)"
            )
        return f"unsupported: {moved}"

    def as_dict(self) -> dict:
        return {
            "version": self.version,
            "source": str(self.root),
            "supported": self.supported,
            "in_range": self.in_range,
            "verdict": self.verdict,
            "capabilities": self.capabilities,
            "patches": [
                {
                    "name": r.name,
                    "target": r.target,
                    "feature": r.feature,
                    "requires": r.requires,
                    "status": r.location.status,
                    "detail": r.location.detail,
                    "applies": r.applies,
                }
                for r in self.rows
            ],
        }


def check_source(root: Path, version: str | None = None) -> Report:
    root = sglang_dir(Path(root))
    if not (root / "srt").is_dir():
        raise ReleaseUnavailable(f"{root} is not a SGLang source tree (no srt/)")
    version = version or version_from_source(root) or "unknown"
    clear_cache()
    caps = capabilities_from_source(root, version)
    rows = []
    for spec in PATCHES:
        cap_on = True if not spec.requires else bool(getattr(caps, spec.requires))
        rows.append(PatchRow(spec.name, spec.target, spec.feature, spec.requires, cap_on, locate(root, spec)))
    ok_range = bool(parse(version)) and in_range(version)
    return Report(version, root, rows, caps.as_dict(), ok_range)


def format_report(rep: Report) -> str:
    lines = [f"sglang {rep.version}  (source: {rep.root})", ""]
    hdr = ("patch", "target", "where", "needs", "applies")
    data = []
    for r in rep.rows:
        where = r.location.status + (f": {r.location.detail}" if r.location.detail else "")
        need = r.requires or "-"
        if r.requires:
            need += "=" + ("on" if r.capability_on else "off")
        data.append((r.name, r.target.replace("sglang.srt.", ""), where, need, r.applies))
    widths = [max(len(h), *(len(d[i]) for d in data)) for i, h in enumerate(hdr[:-1])]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    lines.append(fmt.format(*hdr))
    lines.append(fmt.format(*("-" * w for w in widths), "-" * 7))
    lines += [fmt.format(*d) for d in data]
    lines += [
        "",
        "capabilities: "
        + ", ".join(f"{k}={'on' if v else 'off'}" for k, v in rep.capabilities.items() if k != "version"),
        f"range: {SUPPORTED_MIN}..{SUPPORTED_MAX} ({'in' if rep.in_range else 'OUT OF'} range)",
        "",
        rep.verdict,
    ]
    return "\n".join(lines)


def release_root(
    *,
    source: str | None = None,
    wheel: str | None = None,
    version: str | None = None,
    download: bool = False,
    wheel_dirs=(),
) -> tuple[Path, str | None]:
    """(the `sglang/` source dir to check, its release number when known) for: an unpacked tree (`source`),
    a wheel file, a named release (`version`: a wheel in `wheel_dirs` or the cache, else PyPI with
    `download`), or else the installed SGLang. ReleaseUnavailable when it cannot be had."""
    if source:
        return Path(source), version
    if wheel:
        wheel = Path(wheel)
        m = re.match(r"sglang-([^-]+)-", wheel.name)
        version = version or (m.group(1) if m else None)
        return unpack_wheel(wheel, cache_dir() / "src" / f"{wheel.stem}-{_digest(wheel)}", "--wheel"), version
    if version:
        return source_for(version, download=download, wheel_dirs=wheel_dirs), version
    from ..versions import installed_version, sglang_root

    root = sglang_root()
    if root is None:
        raise ReleaseUnavailable("sglang is not installed here; name a release with --sglang VERSION [--download]")
    return root, installed_version()


def _digest(path: Path) -> str:
    """Size and mtime: a re-downloaded wheel under the same name is unpacked afresh."""
    st = path.stat()
    return f"{st.st_size:x}{int(st.st_mtime):x}"
