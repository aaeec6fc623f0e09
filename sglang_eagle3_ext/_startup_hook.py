"""Imported by the installed .pth only when SGLANG_EAGLE3_EXT is in the environment (any value).

The .pth line stays minimal (one membership test) so interpreters without the variable pay nothing;
the value is judged here by the package's one boolean rule (envs.parse_bool): a false value means
disabled; a value outside the legal ones is one log line and the package stays off in this process
(the plugin route then says nothing more: same log key).
"""
try:
    from sglang_eagle3_ext import _activate, envs

    try:
        on = envs.get(envs.ENABLE)
    except envs.EnvError as e:
        _activate._disable(".pth start-up", e)
        on = False
    if on:
        _activate.startup()
except Exception as e:  # noqa: BLE001 - never raise at interpreter start-up
    import sys

    print(f"[sglang_eagle3_ext] disabled at start-up: {type(e).__name__}: {e}", file=sys.stderr)
