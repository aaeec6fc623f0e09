"""`build`: prompts in, a checked, predicted, servable draft out, by the libraries the single commands use.

    dump -> export -> train -> convert -> check -> eval -> report

Each stage writes one folder (or file) under --out that the single commands also take (dump/: `dump status`,
export/: `train --data`, train/: `train --resume`, draft/: `launch --speculative-draft-model-path`), and, last
and atomically, its completeness marker in `--out/.build/` (state.py) with the inputs it was made from. A re-run
skips a stage that finished from today's inputs and settings, and refuses, naming `--from STAGE`, when they
changed; `--from STAGE` redoes that stage and the ones after it. One build at a time per --out (lock.py). Map:
options.py (what a run is asked), config.py (the YAML file of flags), plan.py (`--dry-run`), server.py (the
dumping server build starts), stages.py (one function per stage), fingerprint.py (what each stage is made
from), digest.py (files by content), run.py (the order, the markers, the log lines), report.py (HTML + JSON).
"""

from __future__ import annotations

STAGES = ("dump", "export", "train", "convert", "check", "eval", "report")
