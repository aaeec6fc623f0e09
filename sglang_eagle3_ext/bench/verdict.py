"""bench's verdict: FAIL when the draft is evidently unused or greedy outputs changed, WARNING (or FAIL with
--fail-on-slower) when speculation is slower than the baseline, with what to try from the EAGLE-3 server's
own arguments and, where given, its log (bench_steps)."""

from __future__ import annotations

NOT_USED_THRESHOLD = 1.05
CAUSES = (
    "usual causes: the target sends 1x hidden instead of K x hidden (aux capture off: the fc is skipped); "
    "the draft's trained layer was dropped at load (layers.0.* vs midlayer.*); aux layer indices differ "
    "between the dump used for training and serving; wrong --speculative-algorithm; an untrained draft. "
    "Run `sglang-eagle3 check DRAFT --target TARGET` and start the server with SGLANG_EAGLE3_EXT=1."
)


def target_is_mla(model_path: str | None) -> bool | None:
    """Whether the served target uses MLA (kv_lora_rank in its config, or a wrapper's text_config); None when
    its config is not at hand (nothing is fetched)."""
    from ..server.runtime import language_config, read_config

    c = read_config(model_path)
    return None if c is None else bool(language_config(c).get("kv_lora_rank"))


def slower_fix(args: dict, c: int, levels: list[dict]) -> str:
    """What to try when speculation loses at concurrency c, from the EAGLE-3 server's own arguments and, where
    the servers' logs were given (--spec-log / --baseline-log), from what their iterations and admissions cost."""
    tips = []
    if args.get("disable_cuda_graph") or args.get("disable_decode_cuda_graph"):
        tips.append(
            "CUDA graphs are off on the EAGLE-3 server (--disable-cuda-graph): speculation's many small "
            "launches pay for that most; serve with CUDA graphs on"
        )
    mla = target_is_mla(args.get("model_path")) if args.get("attention_backend") == "triton" else False
    if mla is not False:
        # measured (README): Triton's extend kernel was 4.7 ms of an 11.4 ms iteration at batch 16
        tips.append(
            ("" if mla else "if the target uses MLA (DeepSeek-V3, Kimi-K2.5): ")
            + "Triton verifies MLA with its extend kernel, which reads the latent KV once per head; on "
            "Hopper serve with --attention-backend fa3 or flashmla (a Kimi-width target at batch 16: "
            "10.1 -> 6.9 ms per iteration, 1.24x -> 1.58x)"
        )
    steps, ndt = args.get("speculative_num_steps"), args.get("speculative_num_draft_tokens")
    fewer = "fewer " + (
        f"--speculative-num-steps (now {steps}) / --speculative-num-draft-tokens (now {ndt})"
        if steps and ndt
        else "--speculative-num-steps"
    )
    paid = [lv for lv in levels if lv["concurrency"] < c and (lv.get("speedup") or 0) >= 1]
    if paid:
        best = max(paid, key=lambda lv: lv["speedup"])
        tips.append(f"it pays at concurrency {best['concurrency']} ({best['speedup']:.2f}x)")
    lv = next((x for x in levels if x["concurrency"] == c), {})
    st = lv.get("steps") or {}
    sp, base = st.get("spec") or {}, st.get("baseline") or {}
    al = (lv.get("spec") or {}).get("accept_length")
    if "iteration_ms" not in sp:
        tips.append(f"a cheaper draft or {fewer}")
        if c > 1:
            tips.append(
                "to see whether the iterations (draft + verify of the whole batch) or the admissions (each "
                "new request's prefill and draft extend stall the batch) cost it, serve both with "
                "--decode-log-interval 1 and pass their logs: --spec-log / --baseline-log"
            )
        return "; ".join(tips)
    between = f"{al * base['iteration_ms'] / sp['iteration_ms']:.2f}x" if al and base.get("iteration_ms") else "n/a"
    iters = (
        f"one iteration at batch {c} costs {sp['iteration_ms']:.1f} ms"
        + (f" vs {base['iteration_ms']:.1f} ms a target-only step" if base.get("iteration_ms") else "")
        + (f" ({between} between admissions at accept length {al:.2f})" if al else "")
    )
    if (sp.get("admission_share") or 0) >= 0.25:
        # how often each server admits: EAGLE-3's requests finish out of step, so it admits more, smaller batches
        base_adm = (
            f" (target-only: {base.get('prefill_batches')} at {base['admission_ms']:.1f} ms)"
            if base.get("admission_ms") is not None
            else ""
        )
        tips.append(
            f"admissions: each of {sp.get('prefill_batches')} prefill batches stalls the running batch "
            f"{sp['admission_ms']:.1f} ms{base_adm}, "
            f"{sp['admission_share']:.0%} of the time, while {iters}; longer outputs amortize them, and "
            "a server at --max-running-requests admits in groups with --min-free-slots-delay N "
            "(SGLang 0.5.16+)"
        )
    else:
        tips.append(f"the iterations: {iters}; a cheaper draft or {fewer}")
    return "; ".join(tips)


def verdict(
    levels: list[dict], has_spec_stats: bool, fail_on_slower: bool, server_args: dict | None = None
) -> tuple[str, list[str]]:
    """('OK' | 'WARNING' | 'FAIL', lines); lines[0] is the summary. server_args: the EAGLE-3 server's, for the
    advice on a slower run."""
    fails, warns = [], []
    for lv in levels:
        spec, c = lv["spec"], lv["concurrency"]
        al = spec["accept_length"] if spec["accept_length"] is not None else spec["server_avg_accept_length"]
        if al is not None and al <= NOT_USED_THRESHOLD:
            fails.append(
                f"the draft is not being used: accept length {al:.2f} <= {NOT_USED_THRESHOLD} at "
                f"concurrency {c}; " + CAUSES
            )
        if lv.get("greedy_mismatches"):
            fails.append(
                f"{lv['greedy_mismatches']}/{spec['requests']} greedy outputs differ from the baseline at "
                f"concurrency {c}: speculation changed results"
            )
        if lv.get("speedup") is not None and lv["speedup"] < 1:
            warns.append(
                f"speculation is slower than the baseline at concurrency {c}: speedup {lv['speedup']:.2f}x "
                f"({spec['tokens_per_s']:.1f} vs {lv['baseline']['tokens_per_s']:.1f} tokens/s); the draft "
                f"costs more than it saves here. Try: {slower_fix(server_args or {}, c, levels)}"
            )
    if not has_spec_stats:
        fails.insert(0, "the server reported no speculative statistics: is --speculative-algorithm set? " + CAUSES)
    ok_bits = []
    lv0 = levels[0]["spec"]
    al0 = lv0["accept_length"] or lv0["server_avg_accept_length"]
    if al0:
        ok_bits.append(f"accept length {al0:.2f}")
    sp = [f"{lv['speedup']:.2f}x@{lv['concurrency']}" for lv in levels if lv.get("speedup") is not None]
    if sp:
        ok_bits += [f"speedup {' '.join(sp)}", "greedy outputs identical"]
    if fails:
        return "FAIL", [f"FAIL: {fails[0]}"] + [f"FAIL: {f}" for f in fails[1:]] + [f"WARNING: {w}" for w in warns]
    if warns:
        status = "FAIL" if fail_on_slower else "WARNING"
        return status, [f"{status}: {warns[0]}"] + [f"WARNING: {w}" for w in warns[1:]] + [f"({', '.join(ok_bits)})"]
    return "OK", ["OK: " + ", ".join(ok_bits)]
