"""What every export of a native dump shares: the dump dir checked, each sample read and checked, the loss
masks, the samples converted in parallel, the output folder replaced whole. The formats are the modules of
`exporters/` (speculators, SpecForge), chosen by name there. Sample i is the i-th id in `order` (e.g. the
dataset's line order), else sorted ids.

Safety: --dump-dir must be a dump dir (it has dump_meta.json); every file read from it must resolve inside
it (a manifest line naming /etc/passwd or ../x is refused). Every sample is checked against dump_meta.json
before it is exported (sample_file.sample_problem: tensors present, rows == its token ids, state widths,
dtype, finite values; ids inside the target's vocab, which dump_meta.json or the target's config.json gives,
and never multimodal pad values), and so are the manifest fields export reads; a bad one stops the export
naming the file. --out follows outdir.py's rule: built beside it and renamed into place; an earlier export of
ours is replaced as a whole (no stale hs_N files of a larger older export survive); a symlink, the dump dir or
anything around it, and any other non-empty directory are refused.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from .. import outdir
from .._log import log_once
from ..boundary import BadInput, check_type, field, list_of, read_json_file
from ..server.runtime import language_config
from .config import FINAL_MODES, META_FILE, NORM_FILE
from .loss_mask import default_loss_mask
from .manifest import read_manifest
from .sample_file import T_IDS, T_POST, T_PRE, atomic_write, read_sample, sample_problem

EXPORT_MARKER = "sge3_export.json"  # what marked an export before outdir.MARKER (still recognised)


def rms_norm(x, weight, eps: float):
    """The model's final RMSNorm in fp32 (as SGLang's kernels compute it), cast back to x's dtype."""
    import torch

    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.float()).to(x.dtype)


class ExportError(RuntimeError):
    pass


def inside(dump_dir, rel) -> Path:
    """dump_dir/rel, resolved (symlinks too); ExportError when that is not inside dump_dir."""
    if not isinstance(rel, str) or not rel or "\x00" in rel:
        raise ExportError(f"{dump_dir}: manifest entry file={rel!r} is not a relative path")
    root = Path(dump_dir).resolve()
    p = (root / rel).resolve()
    if root not in p.parents:
        raise ExportError(
            f"{dump_dir}: file {rel!r} resolves to {p}, outside the dump dir: refusing to read it "
            f"(a manifest or file that did not come from the dump writer)"
        )
    return p


def require_dump_dir(path) -> Path:
    """`path` when it is a dump dir (made by the dump writer: it has dump_meta.json), else ExportError."""
    d = Path(path)
    if not d.is_dir():
        raise ExportError(f"--dump-dir {path}: no such directory")
    if not (d / META_FILE).is_file():
        raise ExportError(
            f"--dump-dir {path}: not a dump dir (no {META_FILE}); give the directory the server "
            f"dumped into (its SGLANG_EAGLE3_EXT_DUMP_DIR)"
        )
    inside(d, META_FILE)
    return d


# what an export writes at its top level (speculators: + the Arrow dataset's files; SpecForge: rows_G-G+2000/)
_EXPORT_ENTRY = re.compile(
    r"hidden_states|index\.jsonl|sge3_dump_meta\.json|sge3_export\.json|dataset_info\.json|"
    r"state\.json|_arrow_tmp|data-\d+-of-\d+\.arrow|rows_\d+-\d+"
)


def _is_our_export(out: Path) -> bool:
    """An export made before outdir.MARKER: its old marker (or an index plus the dump's metadata), and nothing
    at the top level an export does not write (anything else is someone's file: not ours to replace)."""
    if not (
        (out / EXPORT_MARKER).is_file() or ((out / "index.jsonl").is_file() and (out / "sge3_dump_meta.json").is_file())
    ):
        return False
    return all(_EXPORT_ENTRY.fullmatch(p.name) for p in out.iterdir())


@dataclasses.dataclass(frozen=True)
class DumpSpec:
    """What dump_meta.json says every sample of the dump holds."""

    n_aux: int
    hidden: int
    final: str
    dtype: str | None
    vocab: int | None


def dump_spec(dump_dir: Path) -> DumpSpec:
    """dump_meta.json, checked; the vocab size from it or from the target's config.json (model_path)."""
    p = inside(dump_dir, META_FILE)
    try:
        meta = read_json_file(p, "dump metadata")
        where = str(p)
        layers = list_of(
            field(meta, "layer_indices_hf", list, where, nonempty=True), int, f"{where}: 'layer_indices_hf'", minimum=0
        )
        spec = DumpSpec(
            len(layers),
            field(meta, "hidden_size", int, where, minimum=1),
            field(meta, "final", str, where, choices=FINAL_MODES),
            field(meta, "dtype", str, where, optional=True),
            field(meta, "vocab_size", int, where, optional=True, minimum=1),
        )
    except BadInput as e:
        raise ExportError(f"{e}; this is not a dump_meta.json the dump writer wrote") from None
    if spec.vocab is None:
        spec = dataclasses.replace(spec, vocab=_target_vocab(meta.get("model_path")))
    return spec


def _target_vocab(model_path) -> int | None:
    """The vocab size in the served model's config.json when that is a local directory (reading JSON only)."""
    cfg = Path(model_path) / "config.json" if isinstance(model_path, str) and model_path else None
    if cfg is None or not cfg.is_file():
        log_once(
            "export-vocab",
            "token ids are checked against no vocab size (%s has no vocab_size and the model "
            "path %r is not a local directory): only negative ids and multimodal pad values are refused",
            META_FILE,
            model_path,
        )
        return None

    try:
        text = language_config(read_json_file(cfg, "target config"))
        vocab = field(dict(text), "vocab_size", int, str(cfg), minimum=1)
    except (BadInput, TypeError, ValueError) as e:
        raise ExportError(
            f"{cfg}: the served model's config gives no vocab size to check token ids against "
            f'({e}); add "vocab_size" to {META_FILE}'
        ) from None
    log_once("export-vocab", "token ids are checked against vocab size %d (%s)", vocab, cfg)
    return vocab


def export_into(build, to: str, dump_dir, out, **kw) -> int:
    """Run one format's `build(dump_dir, tmp, spec=DumpSpec, **kw) -> samples written` into a folder beside
    `out` that replaces it when complete (outdir.py's rule; `out` is checked before anything is read)."""

    dump_dir, out = require_dump_dir(dump_dir), Path(out)
    rule = dict(tool="dump export", flag="--out", inputs=[("dump dir", dump_dir)], replace=True, legacy=_is_our_export)
    record = {"to": to, "dump_dir": str(dump_dir.resolve())}
    try:
        outdir.check(out, **rule)  # before anything is read
        spec = dump_spec(dump_dir)
        with outdir.writing(out, **rule, record=record) as tmp:
            record["samples"] = build(dump_dir, tmp, spec=spec, **kw)
    except outdir.OutputDirRefused as e:
        raise ExportError(str(e)) from None
    return record["samples"]


def load_norm(dump_dir, hidden: int):
    """(weight, eps) of the model's final norm the dump writer stored beside the samples, or None."""
    if not (Path(dump_dir) / NORM_FILE).exists():
        return None
    p = inside(dump_dir, NORM_FILE)
    from safetensors import safe_open

    try:
        with safe_open(str(p), framework="pt") as f:
            eps = float(json.loads((f.metadata() or {}).get("sge3_norm", "{}"))["eps"])
            weight = f.get_tensor("weight")
    except Exception as e:  # noqa: BLE001 - safetensors, JSON, key and number errors alike: a bad side file
        raise ExportError(f"{p}: not the final norm the dump writer stores ({type(e).__name__}: {e})") from None
    if list(weight.shape) != [hidden] or not weight.is_floating_point() or not eps > 0:
        raise ExportError(f"{p}: weight {list(weight.shape)} eps {eps}, expected [{hidden}] and eps > 0")
    return weight, eps


def read_checked(dump_dir: Path, rec: dict, spec: DumpSpec):
    """A sample as captured, checked against dump_meta.json: compact encodings (SGLANG_EAGLE3_EXT_DUMP_ENCODING=fp8)
    are decoded here, so exports are always in the captured dtype (bf16) whatever the dump's encoding."""
    rel = rec["file"]
    p = inside(dump_dir, rel)
    try:
        t, meta = read_sample(p)
    except Exception as e:  # noqa: BLE001 - safetensors/JSON/encoding errors say what, not which file
        raise ExportError(f"{rel}: not a readable sample file ({type(e).__name__}: {e})".replace("\n", " ")) from None
    problem = sample_problem(
        t, n_aux=spec.n_aux, hidden=spec.hidden, final=spec.final, dtype=spec.dtype, vocab=spec.vocab
    )
    if problem:
        raise ExportError(
            f"{rel} (sample {rec['id']!r}): {problem}; nothing was exported: remove its line from "
            f"{dump_dir}/manifests/ to export the rest"
        )
    _check_record(dump_dir, rec, int(t[T_IDS].shape[0]))
    return t, meta


RECORD_INTS = ("num_tokens", "prompt_len", "prefill_tokens", "verify_tokens")


def _check_record(dump_dir: Path, rec: dict, L: int) -> None:
    """The manifest fields export reads: integers >= 0 when present; num_tokens == the sample's rows."""
    where = f"the manifest line of sample {rec['id']!r} (in {dump_dir}/manifests/)"
    try:
        for k in RECORD_INTS:
            if k in rec and check_type(rec[k], int, f"{where}: {k!r}") < 0:
                raise BadInput(f"{where}: {k!r}", f"must be >= 0, got {rec[k]}")
    except BadInput as e:
        raise ExportError(str(e)) from None
    if "num_tokens" in rec and rec["num_tokens"] != L:
        raise ExportError(f"{where}: 'num_tokens' is {rec['num_tokens']} but {rec['file']} holds {L} tokens")


def loss_mask(rec: dict, L: int, loss_masks: dict | None) -> list[int]:
    """The sample's 0/1 mask: the given one, else its default (serving samples: the response only)."""
    lm = (loss_masks or {}).get(rec["id"]) or default_loss_mask(rec, L)  # serving samples: the response
    if not isinstance(lm, list) or len(lm) != L or any(type(x) is not int or x not in (0, 1) for x in lm):
        n = len(lm) if isinstance(lm, list) else type(lm).__name__
        raise ExportError(
            f"loss_mask of {rec['id']} ({n} entries) is not {L} values of 0/1 (one per token of the sample)"
        )
    return lm


def ordered_records(dump_dir, order: list[str] | None = None) -> list[dict]:
    """The manifest's records in `order` (every id must be there), else sorted by id."""
    man = read_manifest(dump_dir)
    if order is None:
        return [man[k] for k in sorted(man)]
    missing = [k for k in order if k not in man]
    if missing:
        raise ExportError(
            f"{len(missing)} ids of the given order are not in the manifest (e.g. {missing[:3]}); "
            f"re-run the dump client to complete them, or export without --data"
        )
    return [man[k] for k in order]


def final_states(t: dict, norm, path) -> tuple:
    """(before the last norm, after it) of a sample; the latter derived with the stored norm when not dumped."""
    pre = t.get(T_PRE)
    post = t.get(T_POST)
    if post is None and pre is not None:
        if norm is None:
            raise ExportError(f"{path}: no post-norm state and no {NORM_FILE} to derive it")
        post = rms_norm(pre, norm[0], norm[1])
    return pre, post


def map_samples(recs: list, fn, workers: int = 1, progress: bool = False, desc: str = "export") -> list:
    """[fn(i, rec) for each record] in record order, `workers` at a time (threads: the file reads and writes
    and the tensor copies release the GIL); a tqdm bar on stderr with `progress`. The first error stops it."""
    bar = None
    if progress:
        try:
            from tqdm import tqdm

            bar = tqdm(total=len(recs), unit="sample", desc=desc, dynamic_ncols=True)
        except ImportError:  # the export runs without a bar
            bar = None

    def one(i):
        r = fn(i, recs[i])
        if bar is not None:
            bar.update(1)
        return r

    try:
        if workers <= 1:
            return [one(i) for i in range(len(recs))]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as ex:
            futs = [ex.submit(one, i) for i in range(len(recs))]
            try:
                return [f.result() for f in futs]
            except BaseException:
                for f in futs:
                    f.cancel()
                raise
    finally:
        if bar is not None:
            bar.close()


def write_index(out: Path, index: list, dump_dir: Path) -> None:
    """index.jsonl (one line per exported sample) and a copy of the dump's metadata, written atomically."""
    data = "".join(json.dumps(r) + "\n" for r in index).encode()

    def w(p):
        with open(p, "wb") as fh:
            fh.write(data)

    atomic_write(out / "index.jsonl", w)
    if (dump_dir / META_FILE).exists():
        src = inside(dump_dir, META_FILE).read_bytes()

        def wm(p):
            with open(p, "wb") as fh:
                fh.write(src)

        atomic_write(out / "sge3_dump_meta.json", wm)
