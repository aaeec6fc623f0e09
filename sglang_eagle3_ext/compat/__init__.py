"""Does a SGLang release still have every target of the patch table? Found statically in its source, without
importing SGLang:

- `release` — a release's source (`release_root`: an unpacked tree, a wheel, a named release from the cache or
  PyPI, or the installed one), `check_source` -> `Report` (per patch: found, moved, skipped; the verdict),
  `format_report`;
- `source_locate` — where one patch target is defined in a source tree (`locate`);
- `server_flags` — SGLang's server flags read from its `server_args.py` (`launch` checks flags without importing
  SGLang);
- `static_patches` — the static patch shipped per release (`sglang-eagle3 patches`); `options` — the flags of
  `compat` and `patches`.

`sglang-eagle3 compat` (cli/compat.py) is its command line; patches/make_patches.py and
patches/compat_matrix.py use `release` too.
"""
