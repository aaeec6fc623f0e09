"""Imported by the installed .pth only when SGLANG_EAGLE3_EXT is in the environment (any value).

The .pth line stays minimal (one membership test) so interpreters without the variable pay nothing;
the value is judged here by the package's one boolean rule (envs.parse_bool): a false value means
disabled; a value outside the legal ones is one log line and the package stays off in this process
(the plugin route then says nothing more: same log key).
"""

try:
    from sglang_eagle3_ext import envs

    try:
        on, bad = envs.get(envs.ENABLE), None
    except envs.EnvError as e:
        on, bad = False, e
    if on or bad:
        from sglang_eagle3_ext import _activate

        _activate.startup() if on else _activate._disable(".pth start-up", bad)
except Exception as e:  # noqa: BLE001 - never raise at interpreter start-up
    import sys

    try:  # an installed package that fails to import: named with its fix
        from sglang_eagle3_ext.diagnosis import environment_fault

        why = environment_fault(e)
    except Exception:  # noqa: BLE001
        why = None
    print(f"[sglang_eagle3_ext] disabled at start-up: {why or f'{type(e).__name__}: {e}'}", file=sys.stderr)
