"""`dump export` trusts no sample: each one is checked against dump_meta.json (state width, number of aux
layers, rows == len(input_ids), dtype), its token ids against the target's vocab (multimodal pad values are
not tokens), its values for NaN/Inf, its manifest line for the types export reads; a bad one is refused with
exit 2 naming the file. Count flags are refused by the argument parser, naming the flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from helpers import assert_names_its_input  # noqa: E402
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from trust_tree import snapshot  # noqa: E402

from sglang_eagle3_ext.cli.common import run_tool  # noqa: E402
from sglang_eagle3_ext.cli.dump import main as dump_main  # noqa: E402
from sglang_eagle3_ext.dump.manifest import sample_relpath  # noqa: E402
from sglang_eagle3_ext.dump.sample_file import META_KEY, T_AUX, T_IDS, T_POST, T_PRE, write_sample  # noqa: E402

H, K, VOCAB = 8, 3, 100


def meta_of(**kw) -> dict:
    return {
        "format": "sge3_dump",
        "layer_indices_hf": [1, 2, 3],
        "hidden_size": H,
        "num_hidden_layers": 4,
        "final": "both",
        "architecture": "DeepseekV3ForCausalLM",
        "dtype": "bfloat16",
        **kw,
    }


def good_tensors(L: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        T_IDS: torch.randint(0, VOCAB, (L,), generator=g),
        T_AUX: torch.randn(L, K * H, generator=g).bfloat16(),
        T_PRE: torch.randn(L, H, generator=g).bfloat16(),
        T_POST: torch.randn(L, H, generator=g).bfloat16(),
    }


def make_dump(root: Path, n: int = 3, meta: dict | None = None, edit=None, record=None) -> Path:
    """A dump dir as the writer leaves it; edit(i, tensors) / record(i, manifest line) may break sample i."""
    d = root / "dump"
    d.mkdir(parents=True)
    meta = meta_of() if meta is None else meta
    (d / "dump_meta.json").write_text(json.dumps(meta))
    lines = []
    for i in range(n):
        sid, L = f"s{i}", 5 + i
        t = good_tensors(L, i)
        if edit is not None:
            edit(i, t)
        rel = sample_relpath(sid)
        size = write_sample(d / rel, {k: v for k, v in t.items() if v is not None}, {**meta, "num_tokens": L})
        rec = {"id": sid, "file": rel, "num_tokens": L, "bytes": size}
        if record is not None:
            record(i, rec)
        lines.append(json.dumps(rec))
    (d / "manifests").mkdir()
    (d / "manifests" / "dp0.jsonl").write_text("\n".join(lines) + "\n")
    return d


def export(d, out, to="specforge", *extra):
    return run_tool(
        "dump",
        dump_main,
        ["export", "--dump-dir", str(d), "--to", to, "--out", str(out), "--quiet", "--workers", "1", *extra],
    )


def _set(key, fn):
    def edit(i, t):
        if i == 1:
            t[key] = fn(t)

    return edit


BAD = {
    "aux_width": _set(T_AUX, lambda t: torch.randn(6, K * (H + 1)).bfloat16()),
    "aux_layers": _set(T_AUX, lambda t: torch.randn(6, (K - 1) * H).bfloat16()),
    "aux_rows": _set(T_AUX, lambda t: torch.randn(5, K * H).bfloat16()),
    "aux_3d": _set(T_AUX, lambda t: torch.randn(6, K, H).bfloat16()),
    "pre_rows": _set(T_PRE, lambda t: torch.randn(7, H).bfloat16()),
    "post_width": _set(T_POST, lambda t: torch.randn(6, H + 2).bfloat16()),
    "dtype": _set(T_AUX, lambda t: t[T_AUX].float()),
    "nan": _set(T_PRE, lambda t: torch.full((6, H), float("nan")).bfloat16()),
    "inf_aux": _set(T_AUX, lambda t: torch.full((6, K * H), float("inf")).bfloat16()),
    "ids_2d": _set(T_IDS, lambda t: t[T_IDS].view(6, 1)),
    "float_ids": _set(T_IDS, lambda t: t[T_IDS].float()),
    "id_past_vocab": _set(T_IDS, lambda t: torch.full((6,), VOCAB)),
    "negative_id": _set(T_IDS, lambda t: torch.full((6,), -3)),
    "no_aux": _set(T_AUX, lambda t: None),
    "no_ids": _set(T_IDS, lambda t: None),
    "no_prenorm": _set(T_PRE, lambda t: None),
    "empty": lambda i, t: t.update({k: v[:0] for k, v in t.items()}) if i == 1 else None,
}


@pytest.mark.parametrize("to", ["specforge", "speculators"])
@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_sample_is_refused_by_name(tmp_path, capsys, case, to):
    d = make_dump(tmp_path, meta=meta_of(vocab_size=VOCAB), edit=BAD[case])
    out = tmp_path / "out"
    rc = export(d, out, to)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert sample_relpath("s1") in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_multimodal_pad_ids_are_refused_without_a_known_vocab(tmp_path, capsys):
    d = make_dump(tmp_path, edit=_set(T_IDS, lambda t: torch.full((6,), 1_000_000 + 4242)))
    assert export(d, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "multimodal" in err and sample_relpath("s1") in err, err


def test_the_vocab_comes_from_the_target_config_when_the_meta_lacks_it(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 50}, "model_type": "kimi_k25"}))
    d = make_dump(tmp_path, meta=meta_of(model_path=str(model)), edit=_set(T_IDS, lambda t: torch.full((6,), 60)))
    assert export(d, tmp_path / "out") == 2
    assert "vocab" in capsys.readouterr().err


@pytest.mark.parametrize(
    "field, value",
    [
        ("num_tokens", "6"),
        ("num_tokens", None),
        ("num_tokens", 9),
        ("num_tokens", [6]),
        ("prompt_len", "x"),
        ("verify_tokens", {"a": 1}),
    ],
)
def test_a_manifest_line_of_the_wrong_type_is_refused(tmp_path, capsys, field, value):
    def rec(i, r):
        if i == 1:
            r[field] = value

    d = make_dump(tmp_path, record=rec)
    rc = export(d, tmp_path / "out")
    err = capsys.readouterr().err
    assert rc == 2 and ("s1" in err or "dp0.jsonl:2" in err) and field in err and "manifest" in err, err


@pytest.mark.parametrize(
    "meta",
    [
        meta_of(hidden_size="8"),
        meta_of(layer_indices_hf=3),
        meta_of(final="x"),
        meta_of(layer_indices_hf=[]),
        [1, 2],
        meta_of(vocab_size=0),
    ],
)
def test_a_bad_dump_meta_is_refused_by_name(tmp_path, capsys, meta):
    d = make_dump(tmp_path, meta=meta if isinstance(meta, dict) else meta_of())
    if not isinstance(meta, dict):
        (d / "dump_meta.json").write_text(json.dumps(meta))
    assert export(d, tmp_path / "out") == 2
    assert "dump_meta.json" in capsys.readouterr().err


def test_a_sample_header_that_is_not_json_is_refused(tmp_path, capsys):
    from safetensors.torch import save_file

    d = make_dump(tmp_path)
    p = d / sample_relpath("s1")
    save_file({k: v.contiguous() for k, v in good_tensors(6).items()}, str(p), metadata={META_KEY: "{not json"})
    assert export(d, tmp_path / "out") == 2
    assert sample_relpath("s1") in capsys.readouterr().err


def test_good_dump_still_exports(tmp_path):
    d = make_dump(tmp_path, meta=meta_of(vocab_size=VOCAB))
    assert export(d, tmp_path / "sf") == 0
    assert export(d, tmp_path / "spec", "speculators") == 0
    assert len((tmp_path / "spec" / "index.jsonl").read_text().splitlines()) == 3


@pytest.mark.parametrize("value", ["-1", "0", "x"])
def test_a_bad_worker_count_is_refused_naming_the_flag(tmp_path, capsys, value):
    d = make_dump(tmp_path)
    rc = run_tool(
        "dump",
        dump_main,
        ["export", "--dump-dir", str(d), "--to", "specforge", "--out", str(tmp_path / "out"), "--workers", value],
    )
    assert rc == 2 and "--workers" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ---- property: any sample file, header or manifest line -> exported, or exit 2; nothing written elsewhere -----

_DT = [torch.bfloat16, torch.float16, torch.float32, torch.int64, torch.int32, torch.uint8, torch.bool]


@st.composite
def samples(draw):
    L = draw(st.integers(0, 4))
    t = {}
    for key, shape in ((T_IDS, (L,)), (T_AUX, (L, K * H)), (T_PRE, (L, H)), (T_POST, (L, H))):
        if draw(st.integers(0, 5)) == 0:
            continue
        shape = draw(st.sampled_from([shape, shape + (1,), (L + 1,) + shape[1:], shape[:1]]))
        dt = draw(st.sampled_from(_DT if key != T_IDS else [torch.int64, torch.int64, torch.int32, torch.float32]))
        if key == T_IDS:
            t[key] = torch.randint(-1, draw(st.sampled_from([VOCAB, VOCAB + 1, 1_000_100])), shape).to(dt)
        else:
            t[key] = (torch.randn(shape) * draw(st.sampled_from([1.0, 1.0, float("nan")]))).to(dt)
    header = draw(
        st.sampled_from(
            [
                None,
                "{}",
                "[]",
                "{bad",
                json.dumps({"encoding": "fp8_e4m3_rowwise"}),
                json.dumps({"encoding": 5}),
                json.dumps({"encoding": "fp8_e4m3_rowwise", "encoded": {T_AUX: {"scale": 3}}}),
            ]
        )
    )
    rec = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "num_tokens": st.sampled_from([L, L + 1, None, "x", -1]),
                "prompt_len": st.sampled_from([1, None, "2", [1]]),
                "verify_tokens": st.sampled_from([0, 2, None, "v"]),
            },
        )
    )
    return t, header, rec


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sample=samples(), to=st.sampled_from(["specforge", "speculators"]))
def test_any_sample_exports_or_is_refused(tmp_path_factory, capsys, sample, to):
    from safetensors.torch import save_file

    t, header, rec = sample
    root = tmp_path_factory.mktemp("x")
    d = make_dump(root, n=2, meta=meta_of(vocab_size=VOCAB), record=lambda i, r: r.update(rec) if i == 1 else None)
    p = d / sample_relpath("s1")
    save_file(
        {k: v.contiguous() for k, v in t.items()}, str(p), metadata=None if header is None else {META_KEY: header}
    )
    before = snapshot(root)
    out = root / "out"
    capsys.readouterr()
    rc = export(d, out, to)
    event(f"exit {rc}")
    assert rc in (0, 2)
    if rc == 2:
        assert_names_its_input(capsys.readouterr().err, d, sample_relpath("s1"))
    after = snapshot(root)
    assert {k: v for k, v in after.items() if not k.startswith("out")} == before
    if rc == 0:
        idx = [json.loads(x) for x in (out / "index.jsonl").read_text().splitlines()]
        assert [r["num_tokens"] for r in idx][1] == t[T_IDS].shape[0] >= 1


def test_an_export_made_before_the_marker_is_replaced_only_when_it_holds_nothing_else(tmp_path, capsys):
    d = make_dump(tmp_path)
    old = tmp_path / "old"
    (old / "rows_0-2000").mkdir(parents=True)
    (old / "rows_0-2000" / "data_0.ckpt").write_bytes(b"x")
    (old / "index.jsonl").write_text("")
    (old / "sge3_export.json").write_text("{}")
    (old / "my_notes.txt").write_text("keep")
    before = snapshot(tmp_path)
    assert export(d, old) == 2
    assert "my_notes.txt" in capsys.readouterr().err and snapshot(tmp_path) == before
    (old / "my_notes.txt").unlink()
    assert export(d, old) == 0 and len((old / "index.jsonl").read_text().splitlines()) == 3
