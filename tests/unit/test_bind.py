"""patching.arg() (positions read once) gives what Signature.bind gives, for methods and functions."""

import pytest

from sglang_eagle3_ext.patching import arg, bind


class _C:
    def f(self, a, b, c=3, *rest, d=4):
        return a


def _g(x, y=2):
    return x


@pytest.mark.parametrize(
    "call",
    [
        ("f", (1, 2), {}),
        ("f", (1,), {"b": 5, "c": 6}),
        ("f", (1, 2, 7, 8), {"d": 9}),
        ("g", (1,), {}),
        ("g", (), {"x": 1, "y": 3}),
    ],
)
def test_arg_matches_bind(call):
    which, args, kwargs = call
    w = _C().f if which == "f" else _g
    b = bind(w, args, kwargs)
    for name in ("a", "b", "c", "d", "x", "y", "nope"):
        assert arg(w, args, kwargs, name) == b.get(name), name
