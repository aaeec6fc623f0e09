"""One logger for the package and a `log_once` for automatic decisions (each said once, with its reason)."""

from __future__ import annotations

import logging

logger = logging.getLogger("sglang_eagle3_ext")
_said: set[str] = set()


def log_once(key: str, msg: str, *args, level: int = logging.INFO) -> None:
    if key in _said:
        return
    _said.add(key)
    if not logger.handlers and not logging.getLogger().handlers:
        # SGLang configures logging late (or not at all in a bare child): make sure it is seen.
        h = logging.StreamHandler()
        h.setFormatter(logging.Formatter("[sglang_eagle3_ext] %(levelname)s %(message)s"))
        logger.addHandler(h)
        logger.setLevel(logging.INFO)
    logger.log(level, msg, *args)
