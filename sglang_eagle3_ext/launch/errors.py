"""The launcher's refusal: the launch cannot go ahead as asked; the message names the input and the fix."""

from __future__ import annotations

from ..boundary import Refused


class LaunchError(Refused):
    """A refusal before anything starts (or before SGLang does); exit code 2 under every command line."""
