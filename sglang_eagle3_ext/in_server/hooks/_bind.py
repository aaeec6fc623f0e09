"""Arguments of a wrapped SGLang call by parameter name, for the wrappers of this package (the reader lives in
../patching.py, where the features that receive a wrapped call read them too)."""

from __future__ import annotations

from ...patching import arg, bind

__all__ = ["arg", "bind"]
