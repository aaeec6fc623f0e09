"""One module per SGLang module we patch, named after it; wrappers use wrapt's (wrapped, instance, args, kwargs)."""
