"""SGLang's settings as the launch reads them: from SGLang's parsed command line when SGLang is importable, else
(a dry run without SGLang) from the arguments as typed, then the preset, then the default. The whole-number
ones (TP size, nodes, first GPU) are checked and named in a refusal as the user gave them."""

from __future__ import annotations

from .errors import LaunchError


def crude_dests(argv: list[str]) -> set[str]:
    """The destinations of the flags in `argv`, without SGLang's parser (its abbreviations unknown)."""
    return {t[2:].split("=", 1)[0].replace("-", "_") for t in argv if t.startswith("--")}


def value(ns, preset_args: dict, rest: list[str], dest: str, default):
    """The setting `dest`: SGLang's namespace `ns`, or without one the last occurrence in `rest`, the preset's."""
    if ns is not None:
        return getattr(ns, dest, default)
    flag, found = "--" + dest.replace("_", "-"), None
    for i, t in enumerate(rest):  # no parser (dry-run without SGLang): last occurrence wins
        if t == flag and i + 1 < len(rest):
            found = rest[i + 1]
        elif t.startswith(flag + "="):
            found = t.split("=", 1)[1]
    return found if found is not None else preset_args.get(dest, default)


class Counts:
    """Whole-number settings (TP size, nodes, first GPU) read once, checked, and named as the user gave them:
    the flag typed (`--tp`, an abbreviation SGLang accepts) or the preset file and key."""

    def __init__(self, ns, preset, rest: list[str], parser, user_dests: set[str]):
        self.ns, self.preset, self.rest, self.parser, self.user = ns, preset, rest, parser, user_dests
        self.preset_args = preset.server_args if preset else {}

    def __call__(self, dest: str, default: int, minimum: int) -> int:
        found = value(self.ns, self.preset_args, self.rest, dest, default)
        found = default if found is None else found
        try:
            n = int(found) if not isinstance(found, (bool, float)) else None
        except (TypeError, ValueError):
            n = None
        if n is None or n < minimum:
            raise LaunchError(f"{self.name(dest)}: expected a whole number >= {minimum}, got {found!r}")
        return n

    def name(self, dest: str) -> str:
        if dest not in self.user and dest in self.preset_args:
            return f"{self.preset.where}: key {dest!r}"
        typed = None
        for tok in self.rest:
            opt = tok.split("=", 1)[0] if tok.startswith("--") else None
            if opt and self._dest_of(opt) == dest:
                typed = opt
        return typed or "--" + dest.replace("_", "-")

    def _dest_of(self, opt: str) -> str | None:
        if self.parser is None:
            return opt[2:].replace("-", "_")
        known = self.parser._option_string_actions
        if opt in known:
            return known[opt].dest
        dests = {a.dest for s, a in known.items() if s.startswith(opt)}  # argparse's abbreviations
        return dests.pop() if len(dests) == 1 else None
