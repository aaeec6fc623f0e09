"""train refuses, before training, what would make its result a lie or its work unbounded (exit 2 naming the
flag or the file)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from train_world import SMALL, cpu_run, train_args, write_samples

from sglang_eagle3_ext.cli import train as train_cli
from sglang_eagle3_ext.tiny.deepseek_v3 import ensure_tiny_target


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return ensure_tiny_target(tmp_path_factory.mktemp("refusals") / "target", **SMALL)


def train(capsys, target, data, out, *extra) -> tuple[int, str]:
    rc = train_cli.main([*train_args(data, target, out), *cpu_run(), "--epochs", "1", *extra])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("samples,extra", [(1, ["--draft-arch", "mla"]), (1, []), (8, ["--train-ratio", "1"])])
def test_select_by_predicted_accept_with_nothing_held_out_is_refused(capsys, target, tmp_path, samples, extra):
    data = write_samples(tmp_path / "data", samples, lambda i: 48 + i % 17)
    rc, err = train(capsys, target, data, tmp_path / "out", "--select-by", "predicted-accept", *extra)
    assert rc == 2, err
    assert "--select-by predicted-accept" in err and "held out" in err, err
    assert ("--train-ratio 1" in err) if "--train-ratio" in extra else (str(data) in err), err
    assert not (tmp_path / "out").exists()
