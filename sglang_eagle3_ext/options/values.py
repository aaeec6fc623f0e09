"""argparse types for what a command reads or writes on this machine, checked while its command line is parsed:
before anything heavy is imported, any server is asked or anything is made. A wrong one is argparse's usage
error: exit 2, one line naming the flag as typed, the path as typed and what to give instead.

    p.add_argument("--data", type=file_in("give the JSONL prompts file"))
    p.add_argument("--out", type=folder_out("give a new or empty folder"))
    p.add_argument("--port", type=port)
    add_sglang_release(p, "check against this release")   # --sglang VERSION, the flag every tool spells alike

Each returns the text unchanged (a path stays the string the user typed); a path type has `local_path` set (a
documentation test parses commands whose example paths exist on the user's machine only); imports nothing heavy.
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import sys
from urllib.parse import urlsplit

from .. import versions
from ..boundary import at_least


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "neither a file nor a folder"


def _refuse(text: str, problem: str, fix: str):
    raise argparse.ArgumentTypeError(f"{text}: {problem}; {fix}")


def _path(text: str, fix: str) -> str:
    if not text.strip() or "\x00" in text:
        _refuse(repr(text), "not a path", fix)
    return os.path.expanduser(text)


def _stat(text: str, fix: str) -> os.stat_result | None:
    """The path's stat (symlinks followed); None when nothing is there."""
    try:
        return os.stat(_path(text, fix))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        _refuse(text, f"cannot be read ({e.strerror or e})", fix)


def file_in(fix: str, if_folder: str | None = None):
    """A regular file this user can read. `fix`: what to give instead; `if_folder`: what to say instead when a
    folder was given (the likely mix-up of two inputs, e.g. a dump folder where the prompts file goes)."""

    def parse(text: str) -> str:
        st = _stat(text, fix)
        if st is None:
            _refuse(text, "no such file", fix)
        if stat.S_ISDIR(st.st_mode):
            _refuse(text, "is a folder, not a file", if_folder or fix)
        if not stat.S_ISREG(st.st_mode):  # a FIFO or a device would block or mislead the reader
            _refuse(text, f"is {_kind(st.st_mode)}, not a regular file", fix)
        if not os.access(_path(text, fix), os.R_OK):
            _refuse(text, "is not readable by this user", fix)
        return text

    parse.__name__, parse.local_path = "file", True
    return parse


def folder_in(fix: str, if_file: str | None = None):
    """An existing folder this user can list and read. `if_file`: what to say instead when a file was given."""

    def parse(text: str) -> str:
        st = _stat(text, fix)
        if st is None:
            _refuse(text, "no such folder", fix)
        if not stat.S_ISDIR(st.st_mode):
            _refuse(
                text, f"is {_kind(st.st_mode)}, not a folder", if_file if stat.S_ISREG(st.st_mode) and if_file else fix
            )
        if not os.access(_path(text, fix), os.R_OK | os.X_OK):
            _refuse(text, "is not readable by this user", fix)
        return text

    parse.__name__, parse.local_path = "folder", True
    return parse


def folder_out(fix: str, access: bool = True):
    """A folder to write: absent (made later, by the command, once everything else is checked) or a folder, on
    a path this user can write (access=False: the kind only; the command weighs permissions itself, as launch's
    dry run does for a plan meant for another machine). Nothing is made here."""

    def parse(text: str) -> str:
        p = os.path.abspath(_path(text, fix))
        probe = p
        while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
            probe = os.path.dirname(probe)  # the nearest part of the path that exists
        st = _stat(probe, fix)
        if st is None:
            _refuse(text, f"{probe} is a broken symlink", fix)
        if not stat.S_ISDIR(st.st_mode):
            _refuse(
                text,
                f"is {_kind(st.st_mode)}, not a folder"
                if probe == p
                else f"lies under {probe}, which is {_kind(st.st_mode)}",
                fix,
            )
        if access and not os.access(probe, os.W_OK | os.X_OK):
            _refuse(
                text,
                "is not writable by this user"
                if probe == p
                else f"cannot be made: {probe} is not writable by this user",
                fix,
            )
        return text

    parse.__name__, parse.local_path = "folder", True
    return parse


def file_out(fix: str, new_folder: bool = False):
    """A file to write: absent or a regular file, in an existing folder this user can write (new_folder: or in a
    folder the command makes, which this user can make)."""

    def parse(text: str) -> str:
        st = _stat(text, fix)
        if st is not None and not stat.S_ISREG(st.st_mode):
            _refuse(text, f"is {_kind(st.st_mode)}", fix)
        parent = os.path.dirname(os.path.abspath(_path(text, fix)))
        if new_folder:
            try:
                _FOLDER(parent)
            except argparse.ArgumentTypeError as e:
                _refuse(text, f"its folder {str(e).split('; ')[0]}", fix)
            return text
        if not os.path.isdir(parent):
            _refuse(text, f"no folder {parent}", fix)
        if not os.access(parent, os.W_OK | os.X_OK):
            _refuse(text, f"its folder {parent} is not writable by this user", fix)
        return text

    parse.__name__, parse.local_path = "file", True
    return parse


_FOLDER = folder_out("")
# a report may go into a folder the command makes (its own --out): the folder only has to be one it can make
_JSON_FILE = file_out("give a file path, or '-' for stdout", new_folder=True)


def json_dest(text: str) -> str:
    """`--json PATH`: '-' (stdout) or a file to write, its folder made when the report is written."""
    return text if text == "-" else _JSON_FILE(text)


json_dest.local_path = True


PORT_MAX = 65535


def port(text: str) -> int:
    """A TCP port number, 1..65535."""
    try:
        v = int(text)
    except ValueError:
        v = 0
    if not 1 <= v <= PORT_MAX:
        raise argparse.ArgumentTypeError(f"expected a port number in 1..{PORT_MAX}, got {text!r}")
    return v


def server_url(text: str) -> str:
    """An http(s) URL with a host (and, if given, a port in range): a server to ask."""
    try:
        u = urlsplit(text)
        ok, p = u.scheme in ("http", "https") and bool(u.hostname), u.port
    except ValueError:  # a port out of range or not a number
        ok, p = False, None
    if not ok or (p is not None and not 1 <= p <= PORT_MAX):
        raise argparse.ArgumentTypeError(
            f"{text!r}: not an http(s) URL; give one such as http://127.0.0.1:30000 (a host, a port in 1..{PORT_MAX})"
        )
    return text


_DEVICE = re.compile(r"(cpu|cuda|mps|xpu|npu|hpu|mtia|meta)(:\d+)?")


def torch_device(text: str) -> str:
    """A torch device as torch spells it (cpu, cuda, cuda:1): a typo is said now, not once torch is loaded."""
    if not _DEVICE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected a torch device such as cuda, cuda:1 or cpu, got {text!r}")
    return text


def number_in(low: float, high: float, include_high: bool = True, include_low: bool = False):
    """An argparse `type`: a finite number in (low, high] (or (low, high) without include_high; [low, ...
    with include_low); argparse names the flag."""
    import math

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = float("nan")
        above = low <= v if include_low else low < v
        inside = above and (v <= high if include_high else v < high)
        if not (inside and math.isfinite(v)):
            close, open_ = "]" if include_high else ")", "[" if include_low else "("
            what = f"in {open_}{low:g}, {high:g}{close}" if math.isfinite(high) else f"> {low:g}"
            raise argparse.ArgumentTypeError(f"expected a finite number {what}, got {text!r}")
        return v

    return parse


# shared argparse types: a count of 0 or -1 must not silently mean "all" or slice from the end
positive_int = at_least(int, 1, "a positive integer")
non_negative_int = at_least(int, 0, "an integer >= 0")
positive_float = at_least(float, 1e-9, "a positive number of seconds")
non_negative_float = at_least(float, 0.0, "a number >= 0")


def new_tokens(s: str) -> tuple[int, int]:
    """'N' -> (N, N); 'LO:HI' -> (LO, HI): each request's length drawn from LO..HI."""
    try:
        lo, hi = (int(x) for x in s.split(":")) if ":" in s else (int(s),) * 2
    except ValueError:
        lo = hi = 0
    if not 1 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"{s!r}: a positive integer N or a range LO:HI (1 <= LO <= HI), e.g. 128:896")
    return lo, hi


def int_between(low: int, high: int):
    """An argparse `type`: an integer in [low, high]; argparse names the flag."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = None
        if v is None or not low <= v <= high:
            raise argparse.ArgumentTypeError(f"expected an integer in [{low}, {high}], got {text!r}")
        return v

    parse.__name__ = f"integer in [{low}, {high}]"
    return parse


class _SglangRelease(argparse.Action):
    """`--sglang VERSION`: a PEP 440 release number (else a usage error naming the flag); one outside the
    supported range is taken with a warning naming the range (the tools judge it with the nearest rules)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from packaging.version import InvalidVersion, Version

        text = str(values)
        try:
            ok = bool(Version(text).release) and text == text.strip() and "/" not in text
        except InvalidVersion:
            ok = False
        if not ok:
            raise argparse.ArgumentError(
                self, f"expected a SGLang release number such as {versions.SUPPORTED_MAX}, got {text!r}"
            )
        if not versions.in_range(text):
            print(
                f"{parser.prog}: warning: {option_string} {text} is outside the supported range "
                f"{versions.SUPPORTED_MIN}..{versions.SUPPORTED_MAX}: judged with the rules of the nearest "
                f"supported release",
                file=sys.stderr,
            )
        setattr(namespace, self.dest, text)


def add_sglang_release(parser, what: str, dest: str = "sglang_version") -> None:
    """`--sglang VERSION` (older spelling --sglang-version) -> args.<dest>: the release `what` is for."""
    parser.add_argument(
        "--sglang", dest=dest, metavar="VERSION", action=_SglangRelease, help=f"{what} (default: the installed one)"
    )
    parser.add_argument("--sglang-version", dest=dest, action=_SglangRelease, help=argparse.SUPPRESS)
