#!/usr/bin/env python3
"""Generate patches/<release>/sglang-eagle3-ext.patch for every supported SGLang release.

For each release: unpack the wheel's Python sources, resolve every target of
`sglang_eagle3_ext.patch_table.PATCHES` statically (`sglang_eagle3_ext.compat.release.locate`), and edit
the defining file: one `import sglang_eagle3_ext.static_patch` line above the module's first
import, and one decorator line `@sglang_eagle3_ext.static_patch.patched("<patch name>")` on top
of each target function (outermost, so it wraps exactly what the runtime route wraps). Then
`diff -u` original vs edited, paths `a/sglang/...` / `b/sglang/...` (apply with `patch -p1` in
site-packages). Output is deterministic; `--check` fails when a committed patch is stale.

    python patches/make_patches.py [--releases 0.5.16,0.5.18] [--wheel-dir DIR] [--download] [--check]
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sglang_eagle3_ext.compat import release as compat  # noqa: E402
from sglang_eagle3_ext.patch_table import PATCHES  # noqa: E402
from sglang_eagle3_ext.versions import TESTED_RELEASES, capabilities_from_source  # noqa: E402

# supported releases and the transformers each pins: declared once, in sglang_eagle3_ext/versions.py
RELEASES: dict[str, str] = TESTED_RELEASES
PATCH_FILE = "sglang-eagle3-ext.patch"
IMPORT_LINE = "import sglang_eagle3_ext.static_patch  # sglang-eagle3-ext: static patches (see its patches/README.md)\n"
DECORATOR = '@sglang_eagle3_ext.static_patch.patched("{name}")\n'


class PatchGenError(RuntimeError):
    pass


def patch_path(version: str, patches_dir: Path = HERE) -> Path:
    return patches_dir / version / PATCH_FILE


def plan(root: Path, version: str) -> dict[Path, list[tuple[str, ast.AST]]]:
    """file -> [(patch name, function node)] for every patch this release's capabilities select."""
    caps = capabilities_from_source(root, version)
    out: dict[Path, list] = {}
    for spec in PATCHES:
        if spec.requires and not getattr(caps, spec.requires):
            continue
        loc = compat.locate(root, spec)
        if loc.status not in ("found", "reachable") or not isinstance(
            loc.node, (ast.FunctionDef, ast.AsyncFunctionDef)
        ):
            raise PatchGenError(
                f"sglang {version}: target {spec.target} of patch {spec.name}: {loc.status}: {loc.detail}"
            )
        if loc.inherited:
            raise PatchGenError(
                f"sglang {version}: target {spec.target} is inherited ({loc.detail}); a static patch "
                f"would change the base class for every subclass — extend make_patches.py first"
            )
        out.setdefault(loc.file, []).append((spec.name, loc.node))
    return out


def edit_source(text: str, targets: list[tuple[str, ast.AST]], path: str = "<src>") -> str:
    """Insert the import line and one decorator per target (line-based: the rest of the file is untouched)."""
    if "sglang_eagle3_ext.static_patch" in text:
        raise PatchGenError(f"{path} already carries sglang-eagle3-ext static patches")
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    inserts: list[tuple[int, str]] = []  # (0-based line index to insert before, text)
    for name, node in targets:
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        line = lines[first - 1]
        indent = line[: len(line) - len(line.lstrip())]
        inserts.append((first - 1, indent + DECORATOR.format(name=name)))
    first_import = next(
        (
            n
            for n in tree.body
            if isinstance(n, (ast.Import, ast.ImportFrom))
            and not (isinstance(n, ast.ImportFrom) and n.module == "__future__")
        ),
        None,
    )
    if first_import is None:
        raise PatchGenError(f"{path}: no top-level import to put the static_patch import next to")
    inserts.append((first_import.lineno - 1, IMPORT_LINE))
    for idx, s in sorted(inserts, key=lambda t: t[0], reverse=True):
        lines.insert(idx, s)
    new = "".join(lines)
    ast.parse(new)  # still Python
    return new


def unified_diff(old: str, new: str, rel: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        a, b = Path(d, "a"), Path(d, "b")
        a.write_text(old)
        b.write_text(new)
        p = subprocess.run(
            ["diff", "-u", "--label", f"a/{rel}", "--label", f"b/{rel}", str(a), str(b)], capture_output=True, text=True
        )
    if p.returncode not in (0, 1):
        raise PatchGenError(f"diff failed on {rel}: {p.stderr.strip()}")
    return p.stdout


def render(root: Path, version: str) -> str:
    """The whole patch text for the `sglang` source dir `root` of `version`."""
    root = compat.sglang_dir(root)
    files = plan(root, version)
    header = [
        f"sglang-eagle3-ext static patches for sglang {version}: generated by patches/make_patches.py, do not edit.",
        f"Apply: cd <site-packages> && patch -p1 < patches/{version}/{PATCH_FILE}   (see patches/README.md)",
    ]
    body = []
    for f in sorted(files, key=lambda p: str(p)):
        rel = str(f.relative_to(root.parent))
        for name, node in files[f]:
            qual = next(s.target for s in PATCHES if s.name == name).partition(":")[2]
            header.append(f"  {name}: {rel}:{node.lineno} {qual}")
        old = f.read_text()
        body.append(unified_diff(old, edit_source(old, files[f], rel), rel))
    return "\n".join(header) + "\n\n" + "".join(body)


def release_source(version: str, wheel_dirs, download: bool) -> Path:
    return compat.source_for(version, download=download, wheel_dirs=wheel_dirs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--releases", default=",".join(RELEASES), help="comma-separated (default: all supported)")
    ap.add_argument("--wheel-dir", action="append", default=[], help="where sglang-X-*.whl may already be")
    ap.add_argument("--download", action="store_true", help="pip download missing wheels (no deps) into the cache")
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if a committed patch differs")
    ap.add_argument("--out", default=str(HERE), help="patches dir (default: this dir)")
    a = ap.parse_args(argv)
    bad = 0
    for v in [r for r in a.releases.split(",") if r]:
        try:
            text = render(release_source(v, a.wheel_dir, a.download), v)
        except (compat.ReleaseUnavailable, PatchGenError) as e:
            print(f"{v}: FAIL: {e}", file=sys.stderr)
            bad += 1
            continue
        dest = patch_path(v, Path(a.out))
        if a.check:
            same = dest.exists() and dest.read_text() == text
            print(f"{v}: {'up to date' if same else 'STALE (run patches/make_patches.py)'}: {dest}")
            bad += not same
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
            print(f"{v}: wrote {dest} ({text.count(chr(10) + '+') - text.count(chr(10) + '+++')} added lines)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
