"""The tokenizer of a model the user named with a flag (`--target`), loaded with transformers."""

from __future__ import annotations

import importlib

from ..boundary import Refused


def load_tokenizer(name: str, trust_remote_code: bool = False, flag: str = "--target"):
    """The tokenizer of `name`, a model the user named with `flag`. Code shipped with it runs only with
    trust_remote_code (the user's explicit --trust-remote-code); never load one from a path a server or a
    file named: that would run code nobody chose to run."""
    try:
        tf = importlib.import_module("transformers")
    except ImportError as e:
        raise Refused(
            f"tokenizing with the tokenizer of {flag} {name} needs transformers: pip install transformers "
            f"({type(e).__name__}: {e})"
        ) from None
    try:
        return tf.AutoTokenizer.from_pretrained(name, trust_remote_code=bool(trust_remote_code))
    except Exception as e:  # noqa: BLE001 - any loader failure: say which model and why
        text = str(e)
        if not trust_remote_code and "trust_remote_code" in text:
            raise Refused(
                f"{flag} {name}: its tokenizer ships its own code, which runs only with "
                f"--trust-remote-code: add that flag if you trust the code in {name}"
            ) from None
        raise Refused(
            f"{flag} {name}: cannot load its tokenizer ({type(e).__name__}: "
            f"{text.splitlines()[0][:200] if text else ''})"
        ) from None
