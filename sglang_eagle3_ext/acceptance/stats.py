"""From per-anchor results (how many draft tokens the target accepted, how many it could judge) to the figures
eval reports: P(draft token k accepted | tokens < k accepted) and the accept length 1 + sum_k prod_{i<=k} p_i,
over two populations of anchors:

- every anchor: each position of the region (the response; every position of a plain prefill dump) as the
  start of a verify round;
- server rounds: the rounds a greedy server runs on these sequences -- the first at the first generated token,
  each next one after the previous round's accepted tokens and bonus.

Two accept lengths come from the server rounds, as SGLang has two:
- SGLang's own figure (`avg_spec_accept_length` of /get_server_info, the log's "accept len", the
  `sglang:spec_accept_length` metric): accepted drafts + 1 per verify round, summed over rounds / rounds. The
  worker accepts past max_new_tokens (the reply is cut later) and an overlap scheduler's round after a request
  finished counts too, so a round's count is never cut at the end of the response. Here a round near the end
  has fewer judged positions; 1 + sum_k prod_{i<=k} p_i with p_k over the rounds that reached position k (a
  product-limit estimate) is that figure's expectation: a perfect draft at 3 steps gives 4.00 whatever the
  lengths.
- per request (meta_info spec_accept_length = completion_tokens / spec_verify_ct): generated tokens / rounds,
  cut at max_new_tokens; the prefill's token counts and no round does, so short responses read low and some
  lengths read above steps + 1 (33 tokens at 3 steps: 33 / 8 = 4.125).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Tally:
    """Counts per draft position k = 1..steps."""

    steps: int
    tried: list = None  # anchors where token k could be judged and tokens < k were accepted
    hit: list = None  # ... and token k was accepted too
    units: int = 0  # anchors (or rounds) counted

    def __post_init__(self):
        self.tried = self.tried or [0] * self.steps
        self.hit = self.hit or [0] * self.steps

    def add(self, accepted: int, known: int) -> None:
        if known <= 0:
            return
        self.units += 1
        for k in range(min(known, accepted + 1)):
            self.tried[k] += 1
            self.hit[k] += k < accepted

    def add_many(self, accepted, known) -> None:
        """Vectorised add over numpy arrays."""
        import numpy as np

        accepted, known = np.asarray(accepted), np.asarray(known)
        sel = known > 0
        accepted, known = accepted[sel], known[sel]
        self.units += int(sel.sum())
        for k in range(self.steps):
            judged = (known > k) & (accepted >= k)
            self.tried[k] += int(judged.sum())
            self.hit[k] += int((judged & (accepted > k)).sum())

    def conditional(self) -> list:
        return [h / t if t else None for h, t in zip(self.hit, self.tried)]

    def accept_length(self) -> float | None:
        """1 + sum_k prod_{i<=k} p_i; a position never judged ends the sum (None when nothing was judged)."""
        if not self.units:
            return None
        total, run = 1.0, 1.0
        for p in self.conditional():
            if p is None:
                break
            run *= p
            total += run
        return total

    def positions(self) -> list[dict]:
        out, run = [], 1.0
        for k, p in enumerate(self.conditional()):
            run = run * p if p is not None and run is not None else None
            out.append({"k": k + 1, "p": p, "cumulative": run, "tried": self.tried[k], "accepted": self.hit[k]})
        return out


def regions(mask: list[int]) -> list[tuple[int, int]]:
    """Maximal runs [s, e] (inclusive) of 1s; a run at position 0 starts at 1 (a prompt is never empty)."""
    out, s = [], None
    for i, m in enumerate(list(mask) + [0]):
        if m and s is None:
            s = i
        elif not m and s is not None:
            if max(s, 1) <= i - 1:
                out.append((max(s, 1), i - 1))
            s = None
    return out


@dataclasses.dataclass
class Walk:
    """The greedy server's rounds over the regions of the sequences."""

    steps: int
    tally: Tally = None
    rounds: int = 0
    tokens: int = 0
    histogram: list = None  # rounds that accepted j draft tokens, j = 0..steps

    def __post_init__(self):
        self.tally = self.tally or Tally(self.steps)
        self.histogram = self.histogram or [0] * (self.steps + 1)

    def add(self, accepted, known, mask) -> None:
        """accepted/known: per anchor row c = a - 1 of one sequence; mask: its region."""
        for s, e in regions(mask):
            self.tokens += e - s + 1  # the first one is the prefill's, no verify round
            a = s
            while a < e:
                r = int(accepted[a - 1])
                self.tally.add(r, int(known[a - 1]))
                self.histogram[r] += 1
                self.rounds += 1
                a += r + 1

    def as_sglang_reports(self) -> float | None:
        """avg_spec_accept_length: accepted drafts + 1 per round, the last rounds uncut (see the module doc)."""
        return self.tally.accept_length() if self.rounds else None

    def per_request(self) -> float | None:
        """meta_info spec_accept_length over these requests: generated tokens / verify rounds."""
        return self.tokens / self.rounds if self.rounds else None


def histogram_accept_length(histogram: list) -> float | None:
    """SGLang's figure from a served histogram (verify rounds that accepted j drafts): 1 + drafts / rounds."""
    rounds = sum(histogram)
    return 1 + sum(j * c for j, c in enumerate(histogram)) / rounds if rounds else None


def served_positions(histogram: list, steps: int) -> list[dict]:
    """Per position from a served histogram (verify rounds that accepted j drafts): conditional and cumulative."""
    total = sum(histogram)
    out, prev = [], 1.0
    for k in range(1, steps + 1):
        cum = sum(histogram[k:]) / total if total else None
        p = (cum / prev if prev else None) if cum is not None else None
        out.append({"k": k, "p": p, "cumulative": cum})
        prev = cum
    return out
