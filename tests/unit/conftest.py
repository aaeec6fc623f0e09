"""The unit tests mirror the package: `tests/unit/<package>/` holds the tests of `sglang_eagle3_ext/<package>/`;
this folder holds the tests of the package's root modules, of rules over the whole package or repository, and the
modules the folders share (`cli_fixtures`, `trust_client_servers`, ...).

Test modules import fixtures and fakes from one another by module name (`from test_launch_topology import FAKES`),
across folders too. pytest's default import mode puts a test file's folder on sys.path only once it collects that
file, so every folder goes on it here: one folder run alone imports what the whole suite would. Module names stay
unique across the folders (that import mode names a test module by its file name)."""

from __future__ import annotations

import sys
from pathlib import Path

for _folder in sorted(Path(__file__).resolve().parent.iterdir()):
    if _folder.is_dir() and not _folder.name.startswith(("_", ".")) and str(_folder) not in sys.path:
        sys.path.append(str(_folder))
