"""Property tests over the draft side's outside-input readers: config.json, safetensors headers, .pt pickles.
Whatever the input, `check` exits 0/1/2 and `convert` 0/2 — never 3, never a traceback — and neither writes
outside its output."""

from __future__ import annotations

import json
import shutil
import struct
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
pytest.importorskip("speculators")
torch = pytest.importorskip("torch")
from helpers import assert_names_its_input  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from sglang_eagle3_ext.cli.common import run_tool  # noqa: E402

V = "0.5.16"
SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)

leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**66), 2**66)
    | st.integers(-3, 300)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
json_value = st.recursive(
    leaf, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4), max_leaves=12
)
CONFIG_KEYS = [
    "architectures",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "draft_vocab_size",
    "num_hidden_layers",
    "head_dim",
    "target_hidden_size",
    "tie_word_embeddings",
    "bias",
    "fc_norm",
    "norm_output",
    "torch_dtype",
    "max_position_embeddings",
    "num_aux_hidden_states",
    "eagle_config",
    "speculators_model_type",
    "transformer_layer_config",
    "rope_scaling",
    "norm_before_residual",
]
EAGLE_KEYS = ["eagle_aux_hidden_state_layer_ids", "hf_hidden_state_indices", "use_aux_hidden_state", "norm_before_fc"]


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    from sglang_eagle3_ext.draft.convert import convert
    from sglang_eagle3_ext.tiny.llama_draft import make_speculators_draft

    root = tmp_path_factory.mktemp("props")
    return convert(
        make_speculators_draft(
            root / "spec", hidden=32, vocab=64, draft_vocab=32, heads=2, kv_heads=1, aux_ids=(1, 2, 3)
        ),
        root / "good",
        sglang_version=V,
        log=lambda *_: None,
    )


def _snapshot(root: Path) -> dict:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file() or p.is_dir()
    }


def _run(tool: str, argv: list[str], capsys) -> tuple[int, str]:
    import importlib

    from sglang_eagle3_ext.cli.commands import BY_NAME

    mod, fn = BY_NAME[tool].main.split(":")
    rc = run_tool(tool, getattr(importlib.import_module(f"sglang_eagle3_ext.{mod}"), fn), argv)
    out = capsys.readouterr()
    return rc, out.out + out.err


def _both_tools(src: Path, capsys, *convert_flags):
    """check then convert `src`; the exit codes and what was written are the property."""
    root = src.parent
    before = _snapshot(root)
    rc, out = _run("check", [str(src), "--sglang", V], capsys)
    assert rc in (0, 1, 2) and "Traceback" not in out and "a bug" not in out, out
    if rc == 2:
        assert_names_its_input(out, src)
    assert _snapshot(root) == before, "check wrote something"
    rc, out = _run("convert", [str(src), str(root / "out"), "--sglang", V, "--quiet", *convert_flags], capsys)
    assert rc in (0, 2) and "Traceback" not in out and "a bug" not in out, out
    if rc == 2:
        assert_names_its_input(out, src)
    after = {k: v for k, v in _snapshot(root).items() if k != "out" and not k.startswith("out/")}
    assert after == before, "convert wrote outside its output or changed its source"


def _fresh(good: Path) -> Path:
    root = Path(tempfile.mkdtemp(prefix="draftprop"))
    return Path(shutil.copytree(good, root / "src"))


@SETTINGS
@given(
    overrides=st.dictionaries(st.sampled_from(CONFIG_KEYS), json_value, max_size=4),
    eagle=st.dictionaries(st.sampled_from(EAGLE_KEYS), json_value, max_size=2),
    drop=st.lists(st.sampled_from(CONFIG_KEYS), max_size=3),
    whole=st.none() | json_value,
)
def test_config_json(good, capsys, overrides, eagle, drop, whole):
    src = _fresh(good)
    try:
        cfg = json.loads((src / "config.json").read_text())
        if isinstance(cfg.get("eagle_config"), dict):
            cfg["eagle_config"].update(eagle)
        cfg.update(overrides)
        for k in drop:
            cfg.pop(k, None)
        (src / "config.json").write_text(json.dumps(cfg if whole is None else whole))
        _both_tools(src, capsys)
    finally:
        shutil.rmtree(src.parent, ignore_errors=True)


DTYPES = (
    st.sampled_from(["F32", "F16", "BF16", "I64", "U8", "BOOL", "F8_E4M3", "X9", ""])
    | json_value
    | st.lists(st.sampled_from(["F32", "I64"]), max_size=2)
)
FIELDS = {
    "dtype": DTYPES,
    "shape": st.lists(st.integers(-2, 70), max_size=3) | json_value,
    "data_offsets": st.tuples(st.integers(-2, 64), st.integers(-2, 64)).map(list)
    | st.lists(st.integers(-4, 4200), max_size=3)
    | json_value,
}
entry = st.fixed_dictionaries(FIELDS) | st.fixed_dictionaries({}, optional=FIELDS)
header = st.dictionaries(
    st.sampled_from(["fc.weight", "d2t", "norm.weight", "__metadata__", "x"]), entry | json_value, max_size=4
)


@SETTINGS
@given(
    h=header | header | json_value,
    data=st.binary(max_size=64),
    length_delta=st.sampled_from([0] * 6 + [-3, -1, 1, 3]),
    raw=st.sampled_from([None] * 6 + [b"", b"\x01", b"\xff" * 8]) | st.binary(max_size=40),
)
def test_safetensors_header(good, capsys, h, data, length_delta, raw):
    from sglang_eagle3_ext.draft.safetensors_io import read_header

    src = _fresh(good)
    try:
        f = src / "model.safetensors"
        if raw is not None:
            f.write_bytes(raw)
        else:
            body = json.dumps(h).encode()
            f.write_bytes(struct.pack("<Q", max(len(body) + length_delta, 0)) + body + data)
        tensors, problems = read_header(f)  # the reader itself never raises
        assert isinstance(tensors, dict) and isinstance(problems, list)
        _both_tools(src, capsys)
    finally:
        shutil.rmtree(src.parent, ignore_errors=True)


tensor = st.builds(
    lambda shape, dt: torch.zeros(shape, dtype=dt),
    st.lists(st.integers(0, 3), max_size=2),
    st.sampled_from([torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64]),
)
pickled = st.recursive(
    tensor | leaf,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6) | st.integers(0, 3), c, max_size=3),
    max_leaves=8,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    payload=pickled
    | st.dictionaries(
        st.sampled_from(["fc.weight", "d2t", "norm.weight", "lm_head.weight"]), tensor | leaf, max_size=4
    ),
    cut=st.none() | st.integers(0, 4000),
    flip=st.none() | st.integers(0, 4000),
)
def test_pt_pickle(good, capsys, payload, cut, flip):
    src = _fresh(good)
    try:
        (src / "model.safetensors").unlink()
        f = src / "pytorch_model.bin"
        torch.save(payload, f)
        data = bytearray(f.read_bytes())
        if flip is not None and data:
            data[flip % len(data)] ^= 0xFF
        f.write_bytes(bytes(data[:cut] if cut is not None else data))
        _both_tools(src, capsys, "--allow-pickle")
    finally:
        shutil.rmtree(src.parent, ignore_errors=True)
