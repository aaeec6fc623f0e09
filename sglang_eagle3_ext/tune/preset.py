"""The tuned settings as launch presets (`sglang-eagle3 launch --preset FILE`; the shipped ones are
`--preset NAME`): SGLang ServerArgs fields, the measured figures and the command that produced them in the
header comment."""

from __future__ import annotations

from pathlib import Path


def server_fields(
    target: str,
    draft: str,
    backend: str,
    steps: int,
    max_running: int | None = None,
    adaptive_config: str | None = None,
) -> dict:
    f = {"model_path": target, "attention_backend": backend}
    if steps:
        f.update(
            {
                "speculative_algorithm": "EAGLE3",
                "speculative_draft_model_path": draft,
                "speculative_num_steps": steps,
                "speculative_eagle_topk": 1,
                "speculative_num_draft_tokens": steps + 1,
            }
        )
    if max_running:
        f["max_running_requests"] = max_running
    if adaptive_config:
        f.update({"speculative_adaptive": True, "speculative_adaptive_config": adaptive_config})
    return f


def render(fields: dict, header: list[str]) -> str:
    import yaml

    head = "".join(f"# {line}\n" if line else "#\n" for line in header)
    return head + yaml.safe_dump(fields, sort_keys=False, default_flow_style=False)


def write(path, fields: dict, header: list[str]) -> Path:
    """The preset at `path`, once launch's own reader (`launch.presets.load`, what `launch --preset FILE` reads)
    takes it back as these fields: a preset launch would refuse is never left behind."""
    from ..launch.presets import PresetError, load

    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(render(fields, header))
    try:
        back = load(path=tmp).server_args
    except PresetError as e:
        tmp.unlink()
        raise RuntimeError(f"tune made a preset launch refuses ({e}): a bug") from None
    if back != fields:
        tmp.unlink()
        raise RuntimeError(f"tune's preset {p.name} reads back otherwise in launch: {back} for {fields}: a bug")
    tmp.replace(p)
    return p


def header(title: str, command: str, figures: list[str], notes: list[str]) -> list[str]:
    return [
        title,
        "  sglang-eagle3 launch --preset {this file}",
        "produced by:",
        f"  {command}",
        "",
        "figures (output tokens/s; measured: by bench, greedy outputs identical to the target alone; "
        "predicted: the cost model):",
        *[f"  {x}" for x in figures],
        *([""] + notes if notes else []),
    ]
