"""Shared fixtures.

`sglang_cpu` builds SGLang's distributed/parallel state for one CPU process with the real
release installed in the test environment (see .ci/setup_venv.sh); tests that need it are
marked `sglang` and skipped when SGLang is not installed. `ext` adds the draft patches to it;
`deepseek_dir` is the tiny DeepSeek-V3 config. Functions shared by the tests of every folder: helpers.py.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis' defaults fail an example that takes over 200 ms, or data that is slow to draw: on a busy machine
# that is the machine, not the code. Tests that set their own deadline keep it.
settings.register_profile("busy-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("busy-machine")

HAVE_SGLANG = importlib.util.find_spec("sglang") is not None
LOCKED_ENV = "SGE3_LOCKED_RELEASE"  # set by .ci/run: the environment must be exactly that release's lock
LOCK_FILE_ENV = "SGE3_LOCK_FILE"  # another lock file to hold it to (default: constraints/sglang-RELEASE.txt)


def load_lockenv():
    """.ci/lockenv.py (standard library only), as a module."""
    spec = importlib.util.spec_from_file_location("lockenv", Path(__file__).resolve().parents[1] / ".ci" / "lockenv.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def pytest_configure(config):
    """In a locked environment, stop before collection with one line per mismatch (package, version, lock to
    regenerate) instead of the collection errors a drifted package would cause."""
    release = os.environ.get(LOCKED_ENV)
    if not release:
        return
    lock = os.environ.get(LOCK_FILE_ENV)
    bad = load_lockenv().problems(release, Path(lock) if lock else None)
    if bad:
        pytest.exit("environment does not match its lock:\n" + "\n".join(bad), returncode=4)


# The tests that take most of the suite's time (each over about 5 s on a quiet 2-core machine, or a file of many
# such), marked `slow` so that `.ci/quick` can leave them out; CI runs them all. Node id prefixes.
SLOW = (
    "tests/sglang_cpu/test_acceptance_equiv.py",
    "tests/sglang_cpu/test_activation.py",
    "tests/sglang_cpu/test_draft_swap.py::test_the_compared_keys_come_from_the_release_source",
    "tests/sglang_cpu/test_dump_hook.py::test_hook_feeds_the_writer_process",
    "tests/sglang_cpu/test_dump_ranks.py",
    "tests/sglang_cpu/test_mla_draft_equiv.py::test_same_logits_as_sglang",
    "tests/sglang_cpu/test_trust_dump_runtime.py",
    "tests/unit/acceptance/test_acceptance.py::test_any_damaged_input_exits_0_or_2_and_writes_nothing",
    "tests/unit/acceptance/test_acceptance.py::test_batched_rounds_equal_an_explicit_unroll",
    "tests/unit/bench/test_bench_flows.py",
    "tests/unit/bench/test_bench_serve.py::test_random_draft_is_made_once_beside_the_target",
    "tests/unit/recipe/test_build.py::test_a_real_interrupt_during_train_exits_130_naming_the_stage_and_a_rerun_resumes",
    "tests/unit/recipe/test_build.py::test_build_from_a_dump_through_every_stage_then_resumes_and_redoes_from_train",
    "tests/unit/recipe/test_build.py::test_select_by_predicted_accept_keeps_the_epoch_its_scores_rank_best",
    "tests/unit/recipe/test_build_inputs.py::test_a_bad_config_file_is_one_line_exit_2_for_a_run_and_a_plan",
    "tests/unit/cli/test_cli.py::test_entry_points_as_processes",
    "tests/unit/cli/test_cli_contract.py::test_ctrl_c_in_train_stops_quietly_within_seconds_with_a_true_sentence",
    "tests/unit/cli/test_cli_contract.py::test_train_counts_epochs_from_one_in_its_lines_and_bars",
    "tests/unit/compat/test_compat.py",
    "tests/unit/test_docs.py::test_tutorial_runs_on_cpu",
    "tests/unit/draft/test_draft_check.py::test_convert_cli",
    "tests/unit/dump/test_dump_compact.py::test_cli_export_on_fp8_dump",
    "tests/unit/in_server/test_dump_writer_process.py",
    "tests/unit/test_env_locks.py",
    "tests/unit/cli/test_environment_faults.py",
    "tests/unit/test_envs.py::test_launcher_refuses_an_illegal_value_in_one_line",
    "tests/unit/test_envs.py::test_start_up_route_with_an_illegal_value_logs_one_line_and_stays_off",
    "tests/unit/acceptance/test_eval_dflash.py::test_the_tiny_target_and_a_tiny_dflash_draft_end_to_end",
    "tests/unit/acceptance/test_eval_figures.py::test_any_server_reply_exits_0_or_2_and_0_only_when_plausible",
    "tests/unit/launch/test_launch_draft_precheck.py",
    "tests/unit/launch/test_launch_dryrun.py",
    "tests/unit/launch/test_launch_dump_dir.py::test_any_dump_dir_text_exits_0_or_2_and_a_dry_run_writes_nothing",
    "tests/unit/launch/test_launch_no_gpu.py::test_the_first_run_command_stops_in_one_line_before_writing_anything",
    "tests/unit/launch/test_launch_preflight.py",
    "tests/unit/draft/test_layout_seam.py",
    "tests/unit/refresh/test_refresh.py::test_any_recorded_accept_length_or_time_selects_or_skips",
    "tests/unit/refresh/test_refresh.py::test_refresh_end_to_end_and_the_cursor_resumes",
    "tests/unit/refresh/test_refresh_journal.py",
    "tests/unit/in_server/test_swap_agree.py",
    "tests/unit/draft/test_swap_client.py::test_any_draft_report_is_read_or_refused",
    "tests/unit/draft/test_swap_client.py::test_any_server_info_is_read_or_refused",
    "tests/unit/tiny/test_tiny_kimi_width.py",
    "tests/unit/tiny/test_tiny_sample_dump.py",
    "tests/unit/tiny/test_tiny_target.py",
    "tests/unit/training/test_train_dflash.py::test_a_dflash_run_resumed_after_its_first_epoch_ends_at_the_uninterrupted_weights",
    "tests/unit/training/test_train_dflash.py::test_build_dflash_from_a_dump_of_its_layers_through_every_stage",
    "tests/unit/training/test_train_dflash.py::test_dflash_draft_learns_and_converts_to_sglangs_layout",
    "tests/unit/training/test_train_dflash.py::test_two_ranks_under_torchrun_train_the_one_process_draft",
    "tests/unit/training/test_train_distributed.py",
    "tests/unit/training/test_train_draft.py",
    "tests/unit/training/test_train_init_from.py",
    "tests/unit/training/test_train_interrupts.py",
    "tests/unit/training/test_train_mla_draft.py",
    "tests/unit/training/test_train_mla_kimi_walk.py",
    "tests/unit/training/test_train_plan.py",
    "tests/unit/training/test_train_resume_refusals.py::test_any_corruption_of_state_json_resumes_or_is_refused_by_name",
    "tests/unit/training/test_train_select.py",
    "tests/unit/launch/test_trust_launch_props.py::test_any_nccl_environment_exits_0_1_or_2",
    "tests/unit/launch/test_trust_launch_props.py::test_any_topology_file_exits_0_1_or_2",
    "tests/unit/test_trust_outputs.py::test_train_replaces_its_own_output_only_with_force",
    "tests/unit/training/test_trust_training.py::test_a_diverged_draft_is_not_saved",
    "tests/unit/training/test_trust_training.py::test_a_python_caller_trains_without_the_command_line",
    "tests/unit/tune/test_tune.py",
)


def pytest_collection_modifyitems(config, items):
    import torch

    have_cuda = torch.cuda.is_available()
    for item in items:
        if item.nodeid.startswith(SLOW):
            item.add_marker(pytest.mark.slow)
        if "gpu" in item.keywords and not have_cuda:
            item.add_marker(
                pytest.mark.skip(reason="GPU test: no CUDA device here (run tests/gpu/run.sh on the GPU host)")
            )
        if "sglang" in item.keywords and not HAVE_SGLANG:
            item.add_marker(pytest.mark.skip(reason="sglang not installed (run .ci/setup_venv.sh)"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SGLangCPU:
    """Handle on the real SGLang release set up for one CPU process."""

    def __init__(self, version: str, caps):
        self.version = version
        self.caps = caps

    def server_args(self, model_path: str, **kw):
        from sglang.srt.server_args import ServerArgs

        return ServerArgs(model_path=model_path, device="cpu", skip_tokenizer_init=True, **kw)

    def publish(self, sa) -> None:
        """Make `sa` the process's server args (0.5.22+: runtime context; before: a global)."""
        if self.caps.HAS_RUNTIME_CONTEXT:
            from sglang.srt.runtime_context import SpawnRanks, publish

            publish(sa, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
        else:
            from sglang.srt.server_args import set_global_server_args_for_scheduler

            set_global_server_args_for_scheduler(sa)


@pytest.fixture(scope="session")
def sglang_cpu(tmp_path_factory):
    """Real SGLang (installed release) with a 1-process gloo world: TP=1, PP=1, CPU."""
    if not HAVE_SGLANG:
        pytest.skip("sglang not installed")
    from sglang_eagle3_ext.versions import capabilities

    caps = capabilities()
    h = SGLangCPU(caps.version, caps)
    from sglang.srt.distributed import parallel_state as ps
    from transformers import LlamaConfig

    d = tmp_path_factory.mktemp("bootstrap_cfg")
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    cfg.architectures = ["LlamaForCausalLMEagle3"]
    cfg.save_pretrained(d)
    h.publish(h.server_args(str(d)))
    if not ps.model_parallel_is_initialized():
        ps.init_distributed_environment(
            backend="gloo",
            world_size=1,
            rank=0,
            local_rank=0,
            distributed_init_method=f"tcp://127.0.0.1:{_free_port()}",
        )
        kw = {} if caps.HAS_RUNTIME_CONTEXT else {"tensor_model_parallel_size": 1}
        ps.initialize_model_parallel(**kw)
    import sglang.srt.layers.rotary_embedding.base as rb

    rb._is_cpu = True  # else rotary embedding imports vllm's CUDA ops
    return h


@pytest.fixture(scope="module")
def ext(sglang_cpu):
    """`sglang_cpu` with the draft patches applied; left applied for later modules (revert tests re-apply)."""
    import sglang_eagle3_ext

    sglang_eagle3_ext.apply(["draft"])
    yield sglang_cpu
    sglang_eagle3_ext.apply(["draft"])


@pytest.fixture(scope="module")
def deepseek_dir(tmp_path_factory):
    """The tiny DeepSeek-V3 target's config as SGLang reads it (no weights: ServerArgs reads only the config)."""
    import json

    from transformers import DeepseekV3Config

    from sglang_eagle3_ext.tiny.deepseek_v3 import SGLANG_EXTRA_KEYS, TINY_CONFIG

    d = tmp_path_factory.mktemp("ds")
    cfg = DeepseekV3Config(**TINY_CONFIG)
    cfg.architectures = ["DeepseekV3ForCausalLM"]
    cfg.save_pretrained(d)
    c = json.loads((d / "config.json").read_text())
    c.update(SGLANG_EXTRA_KEYS)
    (d / "config.json").write_text(json.dumps(c))
    return str(d)
