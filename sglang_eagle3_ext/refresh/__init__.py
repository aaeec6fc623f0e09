"""`sglang-eagle3 refresh`: a better draft from the traffic it serves, checked and judged before it replaces the
served one (and, with --swap, swapped into the running server).

- `run` — `refresh(RefreshOptions(...))`: select, export, predict, train from the current draft, convert, check,
  predict again, gate, record, swap;
- `options` — `RefreshOptions`: what a refresh takes, each flag declared once;
- `traffic` — which dump samples a refresh uses (new since the last one, optionally weakly-served requests
  only) and the train / held-out split;
- `cursor` — `refresh_cursor.json` in the dump dir: the samples accepted refreshes used, one refresh at a time.
- `settle` — the cursor's journal entries; an earlier refresh that stopped before settling its samples,
  settled first.

Nothing heavy is imported here.
"""
