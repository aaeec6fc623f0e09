"""Imported by the installed .pth only when SGLANG_EAGLE3_EXT is in the environment (any value).

The .pth line stays minimal (one membership test) so interpreters without the variable pay nothing;
the value is judged here: "", "0", "false", "off" mean disabled.
"""
import os

if os.environ.get("SGLANG_EAGLE3_EXT", "").strip().lower() not in ("", "0", "false", "off", "no"):
    try:
        from sglang_eagle3_ext._activate import startup

        startup()
    except Exception as e:  # noqa: BLE001 - never raise at interpreter start-up
        import sys

        print(f"[sglang_eagle3_ext] disabled at start-up: {type(e).__name__}: {e}", file=sys.stderr)
