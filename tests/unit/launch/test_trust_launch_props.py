"""Property tests over the launcher's outside inputs (preset YAML, topology JSON, NCCL variables): any input
gives exit 0, 1 or 2 from `sglang-eagle3 launch --dry-run` run in-process, never 3, never a traceback, and
the dry run writes nothing."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from unittest import mock

import pytest
import yaml
from helpers import assert_names_its_input
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_launch_topology import cpu_root_ports

from sglang_eagle3_ext.cli import common as cli_common
from sglang_eagle3_ext.cli import launch as launch_server
from sglang_eagle3_ext.launch import nccl

pytestmark = pytest.mark.sglang
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**12), st.floats(allow_nan=True), _text)
_json = st.recursive(
    _scalar, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(_text, c, max_size=3)), max_leaves=8
)
SERVER_KEYS = [
    "model_path",
    "tp_size",
    "nnodes",
    "base_gpu_id",
    "mem_fraction_static",
    "cuda_graph_bs_decode",
    "disable_radix_cache",
    "attention_backend",
    "json_model_override_args",
    "dtype",
    "revision",
    "enable_two_batch_overlap",
    "speculative_algorithm",
    "no_such_field",
]
EXT_KEYS = [
    "dump_dir",
    "dump_layers",
    "dump_sample_rate",
    "dump_encoding",
    "dump_responses",
    "dump_final",
    "dump_writer",
    "dump_max_accept_len",
    "nccl_profile",
    "loopback_only",
    "bogus",
]


def _run(argv, env_extra=None):
    """(rc, stderr) of the dry run in a scratch folder; asserts the folder holds only the inputs afterwards."""
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        for name, data in (env_extra or {}).pop("__files__", {}).items():
            (work / name).write_bytes(data)
        before = sorted(p.name for p in work.iterdir())
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GLOO_", "SGLANG_EAGLE3_EXT"))}
        env.update({"SGLANG_EAGLE3_EXT_CACHE": str(work / "cache"), **(env_extra or {})})
        err = _Capture()
        cwd = os.getcwd()
        with (
            mock.patch.dict(os.environ, env, clear=True),
            mock.patch("sys.stderr", err),
            mock.patch("sys.stdout", _Capture()),
        ):
            os.chdir(work)
            try:
                rc = cli_common.run_tool("launch", launch_server.main, [*argv, "--dry-run", "--skip-draft-check"])
            finally:
                os.chdir(cwd)
        assert sorted(p.name for p in work.iterdir()) == before, "the dry run wrote something"
    text = err.getvalue()
    assert rc in (0, 1, 2), text
    assert "Traceback" not in text and "a bug" not in text, text
    return rc, text


class _Capture:
    def __init__(self):
        self.parts = []

    def write(self, s):
        self.parts.append(s)
        return len(s)

    def flush(self):
        pass

    def getvalue(self):
        return "".join(self.parts)


@st.composite
def preset_docs(draw):
    doc = draw(st.dictionaries(st.sampled_from(SERVER_KEYS), _json, max_size=5))
    doc.setdefault("model_path", "/m")
    if draw(st.booleans()):
        doc["eagle3_ext"] = draw(st.one_of(_json, st.dictionaries(st.sampled_from(EXT_KEYS), _json, max_size=4)))
    return yaml.safe_dump(doc, allow_unicode=True)


@st.composite
def yaml_lines(draw):
    """Raw lines, duplicates and odd scalars included (what yaml.safe_dump would never write)."""
    keys = st.sampled_from(SERVER_KEYS[:6] + ["eagle3_ext", "1", "yes", "<<", "? x"])
    vals = st.sampled_from(
        [
            "",
            "''",
            "[]",
            "{}",
            "[1, 2]",
            "2024-01-01",
            "!!binary aGk=",
            "&a 1",
            "*a",
            "~",
            "0x10",
            "1e400",
            ".nan",
            "'x'",
            "|\n  a",
            "{dump_dir: ''}",
            "- 1",
            "!!python/name:os.system",
        ]
    )
    lines = draw(st.lists(st.tuples(keys, vals), max_size=6))
    return "\n".join(f"{k}: {v}" for k, v in lines) + "\n"


@SETTINGS
@given(st.one_of(preset_docs(), yaml_lines(), _text))
def test_any_preset_file_exits_0_1_or_2(text):
    rc, err = _run(["--config", "p.yaml"], {"__files__": {"p.yaml": text.encode("utf-8", "surrogatepass")}})
    if rc == 2:
        assert_names_its_input(err, "p.yaml", "--model-path")  # SGLang's parser names the field a preset lacks


_gpu = st.fixed_dictionaries(
    {"index": st.integers(0, 3)},
    optional={
        "name": _json,
        "compute_capability": st.one_of(_text, st.sampled_from(["12.0", "9.0"]), _json),
        "pcie_gen": _json,
        "uuid": _json,
    },
)
_link = st.fixed_dictionaries(
    {
        "a": st.integers(0, 3),
        "b": st.integers(0, 3),
        "pcie_path": st.one_of(st.sampled_from(["PIX", "SYS", "NODE"]), _json),
    },
    optional={"nvlink": _json, "p2p_read": _json, "p2p_write": _json},
)


@st.composite
def topology_docs(draw):
    base = json.loads(cpu_root_ports(draw(st.integers(1, 4))).to_json())
    if draw(st.booleans()):
        base["gpus"] = draw(st.lists(st.one_of(_gpu, _json), max_size=4))
        base["links"] = draw(st.lists(st.one_of(_link, _json), max_size=4))
    for key in draw(st.lists(st.sampled_from(sorted(base) + ["extra"]), max_size=3)):
        base[key] = draw(_json)
    return json.dumps(draw(st.one_of(st.just(base), _json)))


@SETTINGS
@given(topology_docs(), st.sampled_from(["1", "2", "4"]))
def test_any_topology_file_exits_0_1_or_2(text, tp):
    rc, err = _run(
        ["--preset", "tiny", "--tp", tp, "--topology-file", "t.json"], {"__files__": {"t.json": text.encode()}}
    )
    if rc == 2:
        assert_names_its_input(err, "t.json")


_env_text = st.one_of(
    st.lists(
        st.sampled_from(
            list("^,;: LSR") + ["LL", "LL128", "ll128", "Simple", "simple", "AllReduce", "allreduce:", "Broadcast:"]
        ),
        max_size=8,
    ).map("".join),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=10),
)


@SETTINGS
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "NCCL_PROTO",
                "NCCL_ALGO",
                "NCCL_SOCKET_IFNAME",
                "GLOO_SOCKET_IFNAME",
                "NCCL_IB_DISABLE",
                "NCCL_P2P_DISABLE",
                "CUDA_VISIBLE_DEVICES",
                "NCCL_DEBUG",
            ]
        ),
        _env_text,
        max_size=4,
    ),
    st.sampled_from(["auto", "pcie", "off"]),
    st.booleans(),
)
def test_any_nccl_environment_exits_0_1_or_2(env, profile, loopback):
    argv = ["--preset", "tiny", "--tp", "4", "--nccl-profile", profile, "--topology-file", "t.json"]
    rc, err = _run(
        argv + (["--loopback-only"] if loopback else []),
        {**env, "__files__": {"t.json": cpu_root_ports(4).to_json().encode()}},
    )
    if rc == 2:
        assert_names_its_input(err, *env)


@settings(max_examples=300, deadline=None)
@given(_env_text)
def test_proto_parser_follows_nccls_list_rules(value):
    try:
        eff = nccl.nccl_proto_enabled(value)
    except ValueError:
        return
    assert set(eff) == set(nccl.NCCL_FUNCTIONS)
    if ";" not in value and ":" not in value and value.strip(","):
        names = {t.lower() for t in value.lstrip("^").split(",") if t}
        on = "on" if not value.startswith("^") else "off"
        for proto, state in eff["AllReduce"].items():
            assert state == (on if proto.lower() in names else {"on": "off", "off": "on"}[on])
