#!/usr/bin/env bash
# The GPU acceptance runs, as detached jobs on one H200 (see bg.sh):
#   tests/gpu/full_plan.sh s16      with SGLang 0.5.16 on PYTHONPATH=/tmp/site
#   tests/gpu/full_plan.sh s14      with SGLang 0.5.14 on PYTHONPATH=/tmp/site14, when its runs are wanted
#   tests/gpu/full_plan.sh life     the draft's life after training (0.5.16): eval beside serving, swap, refresh --swap,
#                                   and the EAGLE-3 serve smoke
#   tests/gpu/full_plan.sh wrapper  the Kimi-K2.5 wrapper's round trip, then eval's prediction for its MLA draft
#   tests/gpu/full_plan.sh fa3      dump, drafts, fc guard, dump while serving, Kimi wrapper on FA3 (FA3 kernels installed)
#   tests/gpu/full_plan.sh kimi_fa3 the Kimi-width round trip timed on FA3, then eval's prediction at Kimi width
#   tests/gpu/full_plan.sh kimi_life the draft's life at Kimi width from ONE preparation (0.5.16, ~22 min), below
#   tests/gpu/full_plan.sh build    `build` from the tiny prompts to a served draft, interrupted once mid-training
#                                   and resumed (0.5.16, ~5 min)
#   tests/gpu/full_plan.sh tune     Kimi-width preparation (~13 min), then the FA3 / FlashMLA / Triton speedup table at 3
#                                   steps (~8 min) and `tune --budget-min 8` (~9 min), below
#   tests/gpu/full_plan.sh session  one lease (0.5.16, FA3 kernels installed, ~25 min): the GPU smoke (dump vs
#                                   transformers, EAGLE-3 serve, swap), `build` on the tiny target, then at Kimi
#                                   width the speedup table (fa3, flashmla, triton) and `tune` (below)
#   tests/gpu/full_plan.sh tune_tiny  the tiny target's round trip prepared, then `tune --budget-min 5` on it
#                                   (0.5.16, <= 10 min): tune's whole path to its presets; recorded in the ledger
#   tests/gpu/full_plan.sh dflash   the tiny round trip prepared, a DFlash draft trained on the same export, both
#                                   drafts benched against the target alone (0.5.16, <= 12 min); recorded in the ledger
#   tests/gpu/ledger.py pending     which stages have not yet passed on the current code (run those first)
#   tests/gpu/bg.sh poll SECONDS    in every later call, back to back (an idle host may be released after ~30 s
#                                   without a call): states, figures, $OUT/results.tgz
# The Kimi-width round trip (0.5.16, timed on FlashMLA, docs/results.md: bs1 2.00x, bs16 x 128:896
# 1.58x, accept 3.63 / 3.84, greedy outputs identical; Triton 1.24x there: its extend kernel verifies MLA re-reading
# the latent KV per head). Job "kimi", with the GPU to itself: prepare the draft once on Triton (dump 1000
# generations, train, convert, check; ~10 min), serve and time it on the test's default (FlashMLA on Hopper:
# FlashMLA decodes and verifies, FlashInfer prefills - its JIT adds ~3 min to the first start; the draft on
# Triton; ~7 min), then on FlashInfer (~5 min, not yet timed at 128:896). Figures under out/<stage>/.
# Memory: tests/gpu/gpu_helpers.sglang_server starts one server at a time on the host (SGLang sizes its KV
# cache from the memory free at its start); Kimi-width servers get a KV cap and a fraction that only has to
# clear weights / free memory.
set -u
cd "$(dirname "$0")/../.."
BG=tests/gpu/bg.sh
C="TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache} SGE3_MEM_FRACTION=0.08"
R=tests/gpu/run.sh
# the tiny round trips only feed the retrained-on-serving-dump comparison (a ratio of two drafts trained alike)
RT="SGE3_RT_SAMPLES=${SGE3_RT_SAMPLES:-600}"
case ${1:?stage} in
s16)
  K="PYTHONPATH=/tmp/site TRITON_CACHE_DIR=/tmp/triton_cache SGE3_MEM_FRACTION=0.5 SGE3_MAX_TOTAL_TOKENS=65536"
  KRT="$K SGE3_RT_TARGET=kimi SGE3_RT_DIR=/tmp/rtk"
  T=tests/gpu/test_roundtrip_gpu.py::test_roundtrip
  $BG start kimi "$KRT SGE3_RT_PREPARE_ONLY=1 $R $T; \
    mkdir -p \$OUT/default \$OUT/flashinfer; \
    OUT=\$OUT/default $KRT $R $T; \
    OUT=\$OUT/flashinfer $KRT SGE3_RT_SERVE_BACKEND=flashinfer $R $T" ;;
s14)
  S="PYTHONPATH=/tmp/site14 $C"
  $BG start rt14 "$S $RT SGE3_TINY_DIR=/tmp/t14r SGE3_RT_DIR=/tmp/rt14 $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    $S $RT SGE3_TINY_DIR=/tmp/t14r SGE3_RT_DIR=/tmp/rt14 SGE3_SRV_DIR=/tmp/srv14 $R tests/gpu/test_dump_serving_gpu.py -k retrained" ;;
life)
  L="PYTHONPATH=/tmp/site $C SGE3_BACKENDS=triton SGE3_RT_DIR=/tmp/rt $RT"
  $BG start smoke "$L $R tests/gpu/test_draft_gpu.py -k serves"
  $BG start life "$L SGE3_RT_PREPARE_ONLY=1 $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    $L $R tests/gpu/test_swap_gpu.py::test_swap_without_restart; $L $R tests/gpu/test_refresh_gpu.py; \
    $L $R tests/gpu/test_eval_gpu.py::test_predicted_accept_length_matches_served" ;;
wrapper)
  W="PYTHONPATH=/tmp/site $C SGE3_BACKENDS=triton SGE3_KIMI_RT_DIR=/tmp/krt"
  $BG start wrapper "$W $R tests/gpu/test_kimi_gpu.py::test_kimi_roundtrip; \
    $W $R tests/gpu/test_eval_gpu.py::test_kimi_wrapper_mla_draft_predicted" ;;
fa3)
  F="PYTHONPATH=/tmp/site $C SGE3_BACKENDS=fa3 SGE3_SERVE_BACKEND=fa3 SGE3_RT_BACKEND=fa3"
  $BG start fa3 "$F $R tests/gpu/test_dump_gpu.py -k 'matches_transformers and fa3'; \
    $F $R tests/gpu/test_draft_gpu.py tests/gpu/test_draft_mla_gpu.py; \
    $F $R tests/gpu/test_dump_serving_gpu.py -k fed; $F $R tests/gpu/test_kimi_gpu.py -k dump" ;;
kimi_life)
  # Started at once, side by side:
  #   firstrun  the README's first-run command as written (`sglang-eagle3 launch --preset tiny-dump`: its preset's
  #             memory fraction, port 30000), one request, its prefill in ./dumps (~3 min, Triton JIT cold)
  #   wrapper   the Kimi-K2.5 wrapper's round trip up to its checked drafts, then eval beside SGLang for its MLA
  #             draft at --speculative-num-steps 3 and 5 (~8 min)
  #   kimi      the Kimi-width preparation (dump 1000 generations, train, convert, check; ~10 min); then frees the
  #             disk the rest does not read (the raw dump, the training checkpoint) and starts, side by side:
  #     eval3, eval5  eval's prediction beside SGLang's avg_spec_accept_length at steps 3 / 5 for the round trip's
  #                   draft, two middling ones (blind to 20 % / 50 % of the vocabulary), the weak one (10 steps) and
  #                   an early checkpoint (epoch 3 of 8), one server each, the round trip's draft first (~8 min)
  #     swap      weak -> trained draft under a c16 client, outputs vs the target alone, bad drafts refused (a
  #               rotary key first; ~5 min)
  #     refresh   refresh --swap from the weak draft on 800 served requests (~7 min); its dump and output on
  #               /dev/shm when that has 40 GB free (the disk holds the target, hs/ and the drafts)
  #   swap and refresh run from the checkout LIVE_REPO names when set (e.g. one kept in step with a working tree
  #   while the preparation runs: they then test the code as it is when they start), else from this one.
  # Memory: every test server gets a 32K-token KV cap and fraction 0.9 (SGLang leaves 10 % of the memory free at
  # its start unallocated, and allocates the capped KV: a Kimi-width server ~21 GB, at most 4 at once, plus two
  # trainings of ~20 GB that do not overlap); the four jobs after the preparation start their servers side by side
  # (a start lock each: 14 Kimi-width starts one at a time would take ~12 minutes). Poll with `bg.sh poll SECONDS`.
  S="PYTHONPATH=/tmp/site TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache}"
  $BG start firstrun "$S $R -s tests/gpu/test_launch_gpu.py::test_readme_first_run_command_serves"
  M="SGE3_MEM_FRACTION=0.9 SGE3_MAX_TOTAL_TOKENS=32768"
  W="$S $M SGE3_BACKENDS=triton SGE3_KIMI_RT_DIR=/tmp/krt"
  $BG start wrapper "$W SGE3_RT_PREPARE_ONLY=1 $R tests/gpu/test_kimi_gpu.py::test_kimi_roundtrip; \
    for s in 3 5; do $W SGE3_RT_SPEC_STEPS=\$s $R -s tests/gpu/test_eval_gpu.py::test_kimi_wrapper_mla_draft_predicted; done"
  D=${SGE3_RT_DIR:-/tmp/rtk}
  K="$S $M SGE3_RT_TARGET=kimi SGE3_RT_DIR=$D"
  L=SGE3_START_LOCK=/tmp/sge3_start
  shm=$(df -k --output=avail /dev/shm 2>/dev/null | tail -1)
  RD=$([ "${shm:-0}" -gt 41943040 ] && echo "SGE3_REFRESH_DIR=/dev/shm/sge3_refresh")
  E=tests/gpu/test_eval_gpu.py::test_predicted_accept_length_matches_served
  LR_="${LIVE_REPO:-$PWD}/$R"
  $BG start kimi "$K SGE3_RT_PREPARE_ONLY=1 $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    [ -e $D/kimi/draft_sglang/config.json ] || exit 1; \
    rm -rf $D/kimi/draft_speculators; find $D/kimi/dump -mindepth 1 ! -name .rt_stage_done -delete; df -h $D; \
    $BG start eval3 '$K ${L}_eval3 SGE3_RT_SPEC_STEPS=3 SGE3_EVAL_EPOCHS=3 $R -s $E'; \
    $BG start eval5 '$K ${L}_eval5 SGE3_RT_SPEC_STEPS=5 SGE3_EVAL_EPOCHS=3 $R -s $E'; \
    $BG start swap '$K ${L}_swap $LR_ -s tests/gpu/test_swap_gpu.py::test_swap_without_restart'; \
    $BG start refresh '$K ${L}_refresh $RD SGE3_REFRESH_REQUESTS=800 SGE3_REFRESH_EPOCHS=16 $LR_ -s \
      tests/gpu/test_refresh_gpu.py'" ;;
build)
  $BG start build "PYTHONPATH=/tmp/site $C SGE3_MEM_FRACTION=0.3 $R -s tests/gpu/test_build_gpu.py" ;;
kimi_fa3)
  K="PYTHONPATH=/tmp/site TRITON_CACHE_DIR=/tmp/triton_cache SGE3_MEM_FRACTION=0.5 SGE3_MAX_TOTAL_TOKENS=65536"
  KRT="$K SGE3_RT_TARGET=kimi SGE3_RT_DIR=/tmp/rtk"
  T=tests/gpu/test_roundtrip_gpu.py::test_roundtrip
  $BG start kimi "$KRT SGE3_RT_PREPARE_ONLY=1 $R $T; $KRT SGE3_RT_SERVE_BACKEND=fa3 $R $T; \
    $KRT $R tests/gpu/test_eval_gpu.py::test_predicted_accept_length_matches_served" ;;
tune)
  # One preparation (reused when $SGE3_RT_DIR already holds it), then with the GPU to itself:
  #   table  fa3, flashmla, triton at 3 steps, c1/c4/c16/c32, 64:1024-token outputs, 3/4/16/32 requests per point;
  #          per backend its target-only and EAGLE-3 servers start once, side by side (0.45 of the memory each, a
  #          KV cap); figures printed per point; $OUT/tune_speedup_table.{json,md}
  #   tune   `sglang-eagle3 tune --budget-min 8` on the same target, draft and export; $OUT/tune/
  S="PYTHONPATH=/tmp/site TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache}"
  D=${SGE3_RT_DIR:-/tmp/rtk}
  K="$S SGE3_RT_TARGET=kimi SGE3_RT_DIR=$D"
  $BG start tune "$K SGE3_MEM_FRACTION=0.9 SGE3_MAX_TOTAL_TOKENS=32768 SGE3_RT_PREPARE_ONLY=1 $R \
      tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    [ -e $D/kimi/draft_sglang/config.json ] || exit 1; \
    $K SGE3_MAX_TOTAL_TOKENS=32768 $R -s tests/gpu/test_tune_gpu.py::test_speedup_table; \
    $K SGE3_MAX_TOTAL_TOKENS=32768 $R -s tests/gpu/test_tune_gpu.py::test_tune_within_budget" ;;
tune_tiny)
  # SGE3_LEDGER_COMMIT: the commit under test (the host has no git history), for tests/gpu/ledger.py
  S="PYTHONPATH=/tmp/site TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache}"
  D=${SGE3_RT_DIR:-/tmp/rt}
  T="$S SGE3_RT_DIR=$D SGE3_MAX_TOTAL_TOKENS=32768"
  $BG start tune_tiny "$T SGE3_MEM_FRACTION=0.3 SGE3_RT_SAMPLES=${SGE3_RT_SAMPLES:-600} SGE3_RT_PREPARE_ONLY=1 $R \
      tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    [ -e $D/draft_sglang/config.json ] || exit 1; \
    $T SGE3_TUNE_BUDGET_MIN=${SGE3_TUNE_BUDGET_MIN:-5} SGE3_TUNE_BACKENDS=${SGE3_TUNE_BACKENDS:-triton} $R -s \
      tests/gpu/test_tune_gpu.py::test_tune_within_budget; rc=\$?; \
    python3 tests/gpu/ledger.py record tune_tiny \$rc \$OUT/tune/report.json \$OUT/tune/timings.json; exit \$rc" ;;
dflash_serve)
  # the random-draft serve and the renamed-tensor refusal alone (~5 min)
  S="PYTHONPATH=/tmp/site TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache}"
  $BG start dflash_serve "$S SGE3_MEM_FRACTION=0.3 $R -s tests/gpu/test_dflash_gpu.py -k 'greedy_equal or renamed'; \
    rc=\$?; python3 tests/gpu/ledger.py record dflash_serve \$rc \$OUT/dflash_serve.json; exit \$rc" ;;
dflash)
  # the tiny round trip prepared (dump of HF states [1, 2, 3], EAGLE-3 draft), then DFlash trained on the same
  # export and both benched against the target alone (<= 12 min); the random-draft serve and the renamed-tensor
  # refusal run while the preparation trains
  S="PYTHONPATH=/tmp/site TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache}"
  D=${SGE3_RT_DIR:-/tmp/rt}
  T="$S SGE3_RT_DIR=$D SGE3_MAX_TOTAL_TOKENS=32768 SGE3_MEM_FRACTION=0.15"
  $BG start dflash_serve "$T $R -s tests/gpu/test_dflash_gpu.py -k 'greedy_equal or renamed'; rc=\$?; \
    python3 tests/gpu/ledger.py record dflash_serve \$rc \$OUT/dflash_serve.json; exit \$rc"
  $BG start dflash_rt "$T SGE3_RT_SAMPLES=${SGE3_RT_SAMPLES:-600} SGE3_RT_PREPARE_ONLY=1 $R \
      tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    [ -e $D/draft_sglang/config.json ] || exit 1; \
    $T $R -s tests/gpu/test_dflash_gpu.py::test_dflash_roundtrip; rc=\$?; \
    python3 tests/gpu/ledger.py record dflash \$rc \$OUT/dflash_roundtrip.json; exit \$rc" ;;
session)
  # Started at once: smoke and build are tiny-target jobs (~6 min) that end while the Kimi-width preparation
  # (600 generations, ~9 min) runs; the table and tune then have the GPU to themselves.
  S="PYTHONPATH=/tmp/site TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache}"
  L="$S SGE3_MEM_FRACTION=0.08 SGE3_BACKENDS=triton SGE3_RT_DIR=/tmp/rt SGE3_RT_SAMPLES=600"
  $BG start smoke "$L $R -s tests/gpu/test_dump_gpu.py -k 'matches_transformers and triton'; \
    $L $R -s tests/gpu/test_draft_gpu.py -k serves; \
    $L SGE3_RT_PREPARE_ONLY=1 $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    $L $R -s tests/gpu/test_swap_gpu.py::test_swap_without_restart"
  $BG start build "$S SGE3_MEM_FRACTION=0.1 $R -s tests/gpu/test_build_gpu.py"
  D=${SGE3_RT_DIR:-/tmp/rtk}
  K="$S SGE3_RT_TARGET=kimi SGE3_RT_DIR=$D SGE3_MAX_TOTAL_TOKENS=32768"
  $BG start kimi "$K SGE3_MEM_FRACTION=0.9 SGE3_RT_SAMPLES=600 SGE3_RT_PREPARE_ONLY=1 $R \
      tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    [ -e $D/kimi/draft_sglang/config.json ] || exit 1; \
    $K $R -s tests/gpu/test_tune_gpu.py::test_speedup_table; \
    $K SGE3_TUNE_BUDGET_MIN=6 $R -s tests/gpu/test_tune_gpu.py::test_tune_within_budget" ;;
esac
