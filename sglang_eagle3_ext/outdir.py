"""The one rule for every command that writes a directory (`tiny`, `train --out`, `convert DST`,
`dump export --out`): never delete or overwrite a directory we did not make.

Refused before anything is written, naming the path and what to do:
  * a symlink (what the rename would replace is the link; the files would land somewhere unnamed),
  * a directory that is, contains or lies inside one of the command's inputs (the target, the source draft,
    the data): a failure half-way, or a replacement, would take the input with it,
  * something that is not a directory, or a non-empty directory that is not a previous output of the same
    command. Ours carry MARKER, which names the command and the paths it wrote (top-level names, and a
    digest of every path under it): a file added since, anywhere inside, is someone's, and makes the
    directory not ours to replace,
  * a previous output of the same command when the caller did not ask to replace it (`--force`).
`writing` builds the output in a fresh sibling and renames it into place (in an empty directory the user made:
inside it, then moved up, so the directory itself stays); a previous output being replaced is moved aside first
and deleted only once the new one is there. A run that fails leaves everything as it was.

    with outdir.writing(out, tool="convert", flag="DST", inputs=[("source draft", src)], replace=force) as tmp:
        write_everything_into(tmp)
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Callable, Iterable

from .boundary import BadInput, Refused, field, list_of, read_json_file

MARKER = ".sglang-eagle3-output.json"


class OutputDirRefused(Refused, BadInput):
    """An output directory we may not write; the message names it and what to do (exit 2)."""

    def __init__(self, path, problem: str):
        self.where, self.problem, self.code = str(path), problem, 2
        Exception.__init__(self, f"{path}: {problem}")


def _real(out: Path, flag: str) -> Path:
    """`out` absolute with its parent's symlinks resolved; the last component must not be a link itself."""
    p = Path(os.path.abspath(out))
    if p.is_symlink():
        raise OutputDirRefused(
            f"{flag} {out}",
            f"is a symlink (to {os.readlink(p)}); writing through it could "
            f"replace what it points to; give the real directory instead",
        )
    if p.parent == p:
        raise OutputDirRefused(f"{flag} {out}", "is the file-system root; give a directory of its own")
    return p.parent.resolve() / p.name


def read_marker(d: Path) -> dict | None:
    """The marker of a directory we wrote: {"tool", "entries", ...}; None when absent; BadInput when unreadable."""
    m = d / MARKER
    if not os.path.lexists(m):
        return None
    where = str(m)
    data = read_json_file(m, "output marker", max_bytes=1 << 20)
    field(data, "tool", str, where, nonempty=True)
    list_of(field(data, "entries", list, where), str, f"{where}: 'entries'")
    return data


def _ours(d: Path, entries: list[str], tool: str, legacy: Callable[[Path], bool] | None) -> str | None:
    """Why the non-empty directory `d` is not a previous output of `tool` (None: it is)."""
    try:
        marker = read_marker(d)
    except BadInput as e:
        return f"its {MARKER} is unreadable ({e.problem})"
    if marker is None:
        if legacy is not None and legacy(d):
            return None
        shown = ", ".join(sorted(entries)[:5]) + (", ..." if len(entries) > 5 else "")
        return f"it holds {shown} and no {MARKER}"
    if marker["tool"] != tool:
        return f"it holds the output of `{marker['tool']}`"
    extra = sorted(set(entries) - set(marker["entries"]) - {MARKER})
    if extra:
        return f"it holds files {tool} did not write ({', '.join(extra[:5])})"
    if isinstance(marker.get("tree"), dict) and marker["tree"] != tree_digest(d):
        return f"files were added, removed or renamed inside it since {tool} wrote it"
    return None


def tree_digest(d: Path) -> dict:
    """Every path under `d` (not following links), as a count and a digest: a file someone put anywhere
    inside an output of ours makes it no longer ours to delete."""
    import hashlib

    names = []
    for top, dirs, files in os.walk(d):
        rel = os.path.relpath(top, d)
        names += [os.path.normpath(os.path.join(rel, n)) for n in dirs + files]
    names = sorted(n for n in names if n != MARKER)
    h = hashlib.sha256("\n".join(names).encode("utf-8", "surrogateescape")).hexdigest()
    return {"paths": len(names), "sha256": h}


def _check_inputs(real: Path, out, flag: str, inputs: Iterable[tuple[str, object]]) -> None:
    for name, path in inputs:
        if path is None:
            continue
        inp = Path(os.path.abspath(path)).resolve()
        how = (
            "is"
            if inp == real
            else "contains"
            if real in inp.parents
            else "lies inside"
            if inp in real.parents
            else None
        )
        if how:
            raise OutputDirRefused(
                f"{flag} {out}",
                f"{how} the {name} {path}: writing there could overwrite or "
                f"delete it; choose a directory outside the {name} that "
                f"neither is nor contains the {name}",
            )


def check(
    out,
    *,
    tool: str,
    flag: str,
    inputs: Iterable[tuple[str, object]] = (),
    replace: bool = False,
    legacy: Callable[[Path], bool] | None = None,
    force_flag: str = "--force",
) -> Path:
    """Refuse `out` (OutputDirRefused) unless `tool` may write it; returns the real path. `inputs`: (name, path)
    of what the command reads; `legacy(d)`: recognises outputs made before MARKER existed."""
    real = _real(Path(out), flag)
    _check_inputs(real, out, flag, inputs)
    if not os.path.lexists(real):
        return real
    if not real.is_dir():
        raise OutputDirRefused(f"{flag} {out}", "exists and is not a directory; choose a new directory")
    try:
        entries = os.listdir(real)
    except OSError as e:
        raise OutputDirRefused(f"{flag} {out}", f"cannot be listed ({e.strerror or e})") from None
    if not entries:
        return real
    why = _ours(real, entries, tool, legacy)
    if why:
        raise OutputDirRefused(
            f"{flag} {out}",
            f"is not empty and is not a previous output of {tool} ({why}); "
            f"nothing was changed: choose a new or empty directory, or "
            f"remove it yourself",
        )
    if not replace:
        raise OutputDirRefused(
            f"{flag} {out}",
            f"holds an earlier output of {tool}; pass {force_flag} to replace it, or choose another directory",
        )
    return real


def _sibling(real: Path, kind: str) -> Path:
    return real.parent / f".{real.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}"


def _write_marker(tmp: Path, tool: str, record: dict | None) -> None:
    entries = sorted(e for e in os.listdir(tmp) if e != MARKER)
    text = json.dumps(
        {"tool": tool, "entries": entries, "tree": tree_digest(tmp), **(record or {})},
        indent=2,
        sort_keys=True,
        default=str,
    )
    (tmp / MARKER).write_text(text + "\n")


def _swap(tmp: Path, real: Path, recheck: Callable[[], Path]) -> None:
    """tmp -> real. A previous output is checked again (the check ran before the work), moved aside, deleted
    last; an empty directory is replaced by the rename itself (rename(2) refuses a non-empty one)."""
    if os.path.lexists(real):
        recheck()
        if os.listdir(real):
            from ._log import log_once

            log_once(f"outdir-replace-{real}", "replacing the earlier output in %s (the new one is complete)", real)
            old = _sibling(real, "old")
            os.rename(real, old)
            try:
                os.rename(tmp, real)
            except OSError:
                os.rename(old, real)
                raise
            shutil.rmtree(old, ignore_errors=True)
            return
    os.rename(tmp, real)


@contextlib.contextmanager
def writing(
    out,
    *,
    tool: str,
    flag: str,
    inputs: Iterable[tuple[str, object]] = (),
    replace: bool = False,
    legacy: Callable[[Path], bool] | None = None,
    record: dict | None = None,
    force_flag: str = "--force",
):
    """Yield a fresh directory beside `out` to build the output in; on success it gets MARKER (with `record`)
    and replaces `out` atomically. Refuses (see `check`) before yielding."""
    inputs = list(inputs)
    kw = dict(tool=tool, flag=flag, inputs=inputs, replace=replace, legacy=legacy, force_flag=force_flag)
    real = check(out, **kw)
    # an empty directory someone made is kept (its inode: a mount point, a shell's cwd, its permissions);
    # the output is built inside it and moved up. Otherwise it is built beside `out` and renamed.
    keep = real.is_dir() and not os.listdir(real)
    if not keep:
        real.parent.mkdir(parents=True, exist_ok=True)
    tmp = real / f".sglang-eagle3-tmp-{secrets.token_hex(4)}" if keep else _sibling(real, "tmp")
    tmp.mkdir()
    try:
        yield tmp
        _write_marker(tmp, tool, record)
        if keep:
            _fill(tmp, real)
        else:
            _swap(tmp, real, lambda: check(out, **kw))
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _fill(tmp: Path, real: Path) -> None:
    """Move the finished output from `tmp` up into the empty directory `real`, the marker last (a partial
    move leaves no marker: never taken for a complete output of ours)."""
    extra = sorted(set(os.listdir(real)) - {tmp.name})
    if extra:
        raise OutputDirRefused(
            real,
            f"files appeared in it while the output was being written "
            f"({', '.join(extra[:5])}); nothing of theirs was changed",
        )
    for name in sorted(os.listdir(tmp), key=lambda n: n == MARKER):
        os.rename(tmp / name, real / name)
    tmp.rmdir()


def link_or_copy(src, dst) -> None:
    """`dst` as a hard link to `src` where the file system allows (a published checkpoint costs no copy), else a
    copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def link_tree(src: Path, dst: Path) -> None:
    """A copy of the tree `src` at `dst`, its files hard-linked where the file system allows."""
    shutil.copytree(src, dst, copy_function=link_or_copy, symlinks=False)
