"""What one server did at one concurrency level (`RunStats`): tokens, time, and how often its draft tokens were
accepted, from SGLang's per-request `meta_info`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunStats:
    """One server at one concurrency level."""

    label: str
    concurrency: int
    requests: int = 0
    output_tokens: int = 0
    wall_s: float = 0.0
    verify_ct: int = 0
    accepted_drafts: int = 0
    proposed_drafts: int = 0
    histogram: list = field(default_factory=list)  # [steps that accepted 0 drafts, 1 draft, 2 drafts, ...]
    latency_s: list = field(default_factory=list)
    outputs: list = field(default_factory=list, repr=False)
    server_avg_accept_length: float | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.wall_s if self.wall_s else 0.0

    @property
    def accept_length(self) -> float | None:  # tokens per verify step: accepted drafts + the bonus token
        return self.output_tokens / self.verify_ct if self.verify_ct else None

    @property
    def accept_rate(self) -> float | None:
        return self.accepted_drafts / self.proposed_drafts if self.proposed_drafts else None

    def position_acceptance(self, n_draft: int | None = None) -> list[float]:
        """[P(draft token 1 accepted), P(token 2 accepted), ...] over verify steps: a step that accepted j
        drafts accepted tokens 1..j, so P(k) = steps with j >= k / all steps."""
        steps = sum(self.histogram)
        if not steps:
            return []
        n = max(len(self.histogram) - 1, n_draft or 0)
        tail, out = steps, []
        for k in range(1, n + 1):  # steps with j >= k, one subtraction per position
            tail -= self.histogram[k - 1] if k - 1 < len(self.histogram) else 0
            out.append(tail / steps)
        return out

    def add(self, out: dict, latency: float) -> None:
        """out: a reply checked by server/replies.generate_reply."""
        meta = out["meta"]
        n = meta.get("completion_tokens", len(out["output_ids"] or []))
        self.requests += 1
        self.output_tokens += n
        self.latency_s.append(latency)
        self.verify_ct += meta.get("spec_verify_ct", 0)
        self.accepted_drafts += meta.get("spec_num_correct_drafts", meta.get("spec_accepted_drafts", 0))
        self.proposed_drafts += meta.get("spec_num_proposed_drafts", meta.get("spec_proposed_drafts", 0))
        hist = out["histogram"]
        if len(hist) > len(self.histogram):
            self.histogram += [0] * (len(hist) - len(self.histogram))
        for j, c in enumerate(hist):
            self.histogram[j] += c
        self.outputs.append(out["output_ids"] if out["output_ids"] is not None else out["text"])

    def as_dict(self, n_draft: int | None = None) -> dict:
        lat = sorted(self.latency_s)
        return {
            "label": self.label,
            "concurrency": self.concurrency,
            "requests": self.requests,
            "output_tokens": self.output_tokens,
            "wall_s": round(self.wall_s, 4),
            "tokens_per_s": self.tokens_per_s,
            "verify_ct": self.verify_ct,
            "accept_length": self.accept_length,
            "accept_rate": self.accept_rate,
            "accept_histogram": self.histogram,
            "position_acceptance": self.position_acceptance(n_draft),
            "server_avg_accept_length": self.server_avg_accept_length,
            "latency_p50_s": lat[len(lat) // 2] if lat else None,
            "latency_max_s": lat[-1] if lat else None,
        }
