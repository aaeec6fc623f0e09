"""NCCL / SGLang communication settings chosen from a topology class (README: "Launch on PCIe or NVLink machines").

Few variables, each with its reason; a value the user set (environment or SGLang argument) is
never overridden: the Decision then records the user's value and what we would have done.
NCCL's guide lists most tuning variables as debugging aids, so everything else stays unset.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable, Mapping

from .. import envs
from .topology import Topology, TopologyClass

PROFILES = ("auto", "pcie", "nvlink", "off")
SM120_MIN_NCCL = (2, 27)  # NCCL 2.26 crashes on SM120 at >=512 KiB (NCCL #2418)
MIN_SHM_BYTES = 1 << 30  # SHM transport needs room (docker --shm-size >= 1g or --ipc=host)


@dataclasses.dataclass(frozen=True)
class Decision:
    name: str  # env var (NCCL_IB_DISABLE) or SGLang flag (--disable-custom-all-reduce)
    value: str | None  # what ends up set; None: left unset
    reason: str
    kind: str = "env"  # env | arg | check
    action: str = "set"  # set | user (user's value kept) | unset (deliberately left unset) | warn | ok (check passed)

    @property
    def applies(self) -> bool:
        return self.action == "set" and self.value is not None


def _v(version: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in (version or "").split(".")[:2]) or None
    except ValueError:
        return None


def effective_class(topo: Topology, profile: str) -> TopologyClass:
    if profile == "pcie":
        return (
            TopologyClass.PCIE_CPU
            if topo.classify() not in (TopologyClass.PCIE_SWITCH, TopologyClass.NO_P2P)
            else topo.classify()
        )
    if profile == "nvlink":
        return TopologyClass.NVLINK
    return topo.classify()


def env_decision(env: Mapping[str, str], name: str, value: str, reason: str) -> Decision:
    """Set `name`=`value` in SGLang's environment, unless the user set it already (theirs is kept)."""
    if name in env:
        return Decision(name, env[name], f"user set it (we would set {value}: {reason})", action="user")
    return Decision(name, value, reason)


class _Builder:
    def __init__(self, env: Mapping[str, str], user_flags: Iterable[str]):
        self.env = env
        self.user_flags = set(user_flags)
        self.out: list[Decision] = []
        self.enabled: set[str] = set(self.user_flags)

    def env_var(self, name: str, value: str, reason: str) -> None:
        self.out.append(env_decision(self.env, name, value, reason))

    def leave(self, name: str, reason: str) -> None:
        if name in self.env:
            self.out.append(Decision(name, self.env[name], f"user set it; {reason}", action="user"))
        else:
            self.out.append(Decision(name, None, reason, action="unset"))

    def flag(self, flag: str, dest: str, reason: str, available: set[str] | None) -> None:
        if available is not None and dest not in available:
            self.out.append(Decision(flag, None, f"not in this SGLang release; {reason}", kind="arg", action="unset"))
        elif dest in self.user_flags:
            self.out.append(
                Decision(flag, "(as passed)", f"user/preset passed it; {reason}", kind="arg", action="user")
            )
        else:
            self.out.append(Decision(flag, "", reason, kind="arg"))

    def warn(self, name: str, msg: str) -> None:
        self.out.append(Decision(name, None, msg, kind="check", action="warn"))


def decide(
    topo: Topology,
    *,
    profile: str = "auto",
    tp_size: int = 1,
    nnodes: int = 1,
    env: Mapping[str, str] | None = None,
    user_flags: Iterable[str] = (),
    available_flags: set[str] | None = None,
    enabled_flags: Iterable[str] | None = None,
    loopback_only: bool = False,
    forced_by: str | None = None,
) -> list[Decision]:
    """Decisions for one SGLang launch. `topo` is the TP group's topology; `user_flags` are the
    ServerArgs dests the user or preset set (never overridden), `enabled_flags` those of them that are
    on (default: all of them); `available_flags` the dests this SGLang knows (None: all);
    `loopback_only`: pin a single-node launch's bootstrap to `lo` and skip IB (asked for, never automatic);
    `forced_by`: who chose a profile other than auto, as the reasons name it (default: `--nccl-profile P`)."""
    if profile not in PROFILES:
        raise ValueError(f"--nccl-profile {profile!r}: choose one of {', '.join(PROFILES)}")
    env = envs.environ() if env is None else env
    b = _Builder(env, user_flags)
    b.enabled = set(b.user_flags if enabled_flags is None else enabled_flags)
    for name, msg in host_warnings(topo):
        b.warn(name, msg)
    if loopback_only and nnodes > 1:
        raise ValueError(f"--loopback-only with --nnodes {nnodes}: loopback cannot reach the other nodes")
    _loopback(b, nnodes, loopback_only)  # an explicit request: honoured under every profile
    by = forced_by or f"--nccl-profile {profile}"
    if profile == "off":
        _proto(b, topo.classify(), "", quiet=True)
        b.out.append(Decision("(nccl profile)", "off", f"{by}: no NCCL settings made", kind="check", action="unset"))
        return b.out
    cls = effective_class(topo, profile)
    forced = f" (forced by {by})" if profile != "auto" else ""

    if cls == TopologyClass.NVLINK and topo.nvswitch:
        b.leave("NCCL_NVLS_ENABLE", "NVSwitch present: NCCL decides about NVLS")
    elif forced and topo.nvswitch:  # the box has one; the forced profile does not use it
        b.env_var("NCCL_NVLS_ENABLE", "0", f"treated as {cls.value}{forced}: NVLS off")
    else:
        b.env_var("NCCL_NVLS_ENABLE", "0", f"no NVSwitch detected ({cls.value}{forced}): NVLS unusable")

    if cls.is_pcie:
        _pcie(b, cls, topo, tp_size, forced, available_flags)
    else:
        _proto(b, cls, forced)
    if cls == TopologyClass.NO_GPU and tp_size > 1:
        b.warn(
            "topology",
            f"unknown ({topo.note or 'no GPUs seen'}): no P2P/custom all-reduce decisions; "
            f"pass --nccl-profile pcie|nvlink or --topology-file to choose",
        )
    b.leave("NCCL_CUMEM_ENABLE", "SGLang sets it itself")
    b.leave("CUDA_DEVICE_MAX_CONNECTIONS", "SGLang overwrites it")
    b.env_var("NCCL_DEBUG", "WARN", "errors visible, logs quiet (INFO + NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV to diagnose)")
    return b.out


def _pcie(
    b: _Builder, cls: TopologyClass, topo: Topology, tp_size: int, forced: str, available: set[str] | None
) -> None:
    where = f"{cls.value}{forced}"
    b.leave("NCCL_P2P_DISABLE", "1 only as fallback after a failed/hung preflight (IOMMU/ACS)")
    b.leave(
        "NCCL_P2P_LEVEL",
        "NCCL's default (P2P below the CPU, SHM through it at 3+ GPUs); SYS only as an opt-in after a preflight",
    )
    _proto(b, cls, forced)
    if tp_size > 2 or (cls == TopologyClass.NO_P2P and tp_size > 1):
        why = (
            "no P2P: custom all-reduce needs it"
            if cls == TopologyClass.NO_P2P
            else f"{tp_size} GPUs over PCIe ({where}): NCCL beats the custom all-reduce"
        )
        b.flag("--disable-custom-all-reduce", "disable_custom_all_reduce", why, available)
    elif tp_size == 2 and cls.is_pcie:
        b.flag(
            "--enable-p2p-check",
            "enable_p2p_check",
            f"TP=2 over PCIe ({where}): let SGLang verify P2P before using the custom all-reduce "
            f"(GeForce boards report P2P they cannot do)",
            available,
        )
    if tp_size > 1 and cls.is_pcie:
        b.flag(
            "--enforce-disable-flashinfer-allreduce-fusion",
            "enforce_disable_flashinfer_allreduce_fusion",
            f"FlashInfer all-reduce fusion is built for NVLink ({where})",
            available,
        )
    for flag, dest in (
        ("--enable-nccl-nvls", "enable_nccl_nvls"),
        ("--enable-symm-mem", "enable_symm_mem"),
        ("--enable-flashinfer-allreduce-fusion", "enable_flashinfer_allreduce_fusion"),
    ):
        if dest in b.enabled and cls.is_pcie:
            b.warn(flag, f"passed on a PCIe machine ({where}): keep it off unless a benchmark says otherwise")


LOOPBACK_WHY = "a single-node server still opens cross-node groups (RLHF weight sync through init_weights_update_group)"


def _loopback(b: _Builder, nnodes: int, asked: bool) -> None:
    if nnodes > 1:
        return
    if not asked:
        b.out.append(
            Decision(
                "(loopback-only)",
                "off",
                "NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, NCCL_IB_DISABLE left "
                f"to NCCL and you: {LOOPBACK_WHY}; --loopback-only (preset loopback_only: true) pins "
                f"them to lo, IB off",
                kind="check",
                action="unset",
            )
        )
        return
    asked_by = "--loopback-only / loopback_only"
    b.env_var("NCCL_IB_DISABLE", "1", f"{asked_by}: single node, skip IB/RoCE probing")
    b.env_var("NCCL_SOCKET_IFNAME", "lo", f"{asked_by}: NCCL bootstrap on loopback, not docker/VPN interfaces")
    b.env_var("GLOO_SOCKET_IFNAME", "lo", f"{asked_by}: gloo (CPU groups) on loopback too")


# NCCL's names (src/init.cc ncclFuncStr / ncclProtoStr), matched case-insensitively as NCCL does
NCCL_PROTOCOLS = ("LL", "LL128", "Simple")
NCCL_FUNCTIONS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")


def _strtok(text: str, delims: str) -> list[tuple[int, str]]:
    """C strtok_r: the non-empty pieces between delimiters, each with its offset."""
    return [(m.start(), m.group()) for m in re.finditer(f"[^{re.escape(delims)}]+", text)]


def nccl_proto_enabled(value: str) -> dict[str, dict[str, str]]:
    """NCCL_PROTO as NCCL >= 2.24 reads it (src/graph/tuning.cc parseList): `[^]P,P;FUNC:[^]P,...`; `^` means
    every protocol except those listed. -> function -> protocol -> on | off | auto (LL128's default: NCCL turns
    it on only where it was tested safe, i.e. NVLink). ValueError where NCCL refuses the value at start-up."""
    state = {f: {p: "auto" if p == "LL128" else "on" for p in NCCL_PROTOCOLS} for f in NCCL_FUNCTIONS}
    for pos, entry in _strtok(value, ";"):
        parts = _strtok(entry, ":")
        if not parts:
            raise ValueError(f"entry {entry!r} names nothing")
        if len(parts) == 1 and pos != 0:
            raise ValueError(f"entry {entry!r}: every entry after the first needs a FUNCTION: prefix")
        prefix, elems = (None, parts[0][1]) if len(parts) == 1 else (parts[0][1], parts[1][1])
        negate = elems.startswith("^")
        funcs = [f for f in NCCL_FUNCTIONS if prefix is None or f.lower() == prefix.lower()]
        if not funcs:
            raise ValueError(f"unknown function {prefix!r} (one of {', '.join(NCCL_FUNCTIONS)})")
        listed = set()
        for _, tok in _strtok(elems[1:] if negate else elems, ","):
            hit = [p for p in NCCL_PROTOCOLS if p.lower() == tok.lower()]
            if not hit:
                raise ValueError(f"unknown protocol {tok!r} (one of {', '.join(NCCL_PROTOCOLS)})")
            listed.add(hit[0])
        for f in funcs:
            state[f] = {p: "on" if (p in listed) != negate else "off" for p in NCCL_PROTOCOLS}
    return state


def _proto(b: _Builder, cls: TopologyClass, forced: str, quiet: bool = False) -> None:
    """The user's NCCL_PROTO judged by the protocols it actually enables (never changed: theirs to keep)."""
    value = b.env.get("NCCL_PROTO")
    try:
        on = [f for f, st in nccl_proto_enabled(value or "").items() if st["LL128"] == "on"]
    except ValueError as e:
        b.out.append(
            Decision(
                "NCCL_PROTO",
                value,
                f"user set NCCL_PROTO={value}: NCCL (>= 2.24) will refuse it at start-up ({e}); fix or unset it",
                kind="check",
                action="warn",
            )
        )
        return
    funcs = "every collective" if len(on) == len(NCCL_FUNCTIONS) else ", ".join(on)
    if on and cls != TopologyClass.NVLINK:
        b.out.append(
            Decision(
                "NCCL_PROTO",
                value,
                f"user set NCCL_PROTO={value}: this turns LL128 on ({funcs}), and "
                f"LL128 off NVLink can corrupt data ({cls.value}{forced}); kept as "
                f"asked, but unset it unless you know why",
                kind="check",
                action="warn",
            )
        )
    elif on:
        b.out.append(
            Decision(
                "NCCL_PROTO",
                value,
                f"user set it: LL128 forced on ({funcs}), past NCCL's own per-GPU LL128 check",
                action="user",
            )
        )
    elif cls.is_pcie and not quiet:
        b.leave("NCCL_PROTO", "never LL128 off NVLink (data corruption); NCCL's default otherwise")


def host_warnings(topo: Topology) -> list[tuple[str, str]]:
    """(what, message) host problems that hold whatever the profile (also printed by the preflight)."""
    out = []
    sm120 = [g for g in topo.gpus if (g.sm or 0) >= 120]
    v = _v(topo.nccl_version)
    if sm120 and v is not None and v < SM120_MIN_NCCL:
        out.append(
            (
                "NCCL version",
                f"NCCL {topo.nccl_version} with SM120 GPUs ({sm120[0].name}): crashes at "
                f">=512 KiB all-reduce (NCCL #2418); install nvidia-nccl-cu12/13>=2.27",
            )
        )
    elif sm120 and v is None:
        out.append(("NCCL version", "unknown NCCL version with SM120 GPUs: make sure it is >= 2.27"))
    if topo.shm_bytes is not None and topo.shm_bytes < MIN_SHM_BYTES and len(topo.gpus) != 1:
        out.append(
            (
                "/dev/shm",
                f"/dev/shm is {topo.shm_bytes / 2**20:.0f} MiB (< 1 GiB): NCCL's SHM transport "
                f"will fail; run the container with --shm-size=16g or --ipc=host",
            )
        )
    p2p_pairs = [lk for lk in topo.links if lk.p2p_ok and not lk.nvlink]
    if topo.iommu == "on" and p2p_pairs:
        out.append(
            (
                "IOMMU",
                f"IOMMU is on ({topo.iommu_evidence}) with PCIe P2P pairs: P2P may hang at the first "
                f"all-reduce; use --preflight; host fix: iommu=pt (or amd_iommu/intel_iommu=off), ACS off",
            )
        )
    return out


def apply_env(decisions: Iterable[Decision], env: dict[str, str]) -> dict[str, str]:
    """Set the env decisions that apply into `env` (in place) and return it."""
    for d in decisions:
        if d.kind == "env" and d.applies:
            env[d.name] = d.value
    return env


def extra_args(decisions: Iterable[Decision]) -> list[str]:
    return [d.name for d in decisions if d.kind == "arg" and d.applies]


def table(decisions: Iterable[Decision]) -> str:
    rows = [("what", "value", "action", "reason")]
    for d in decisions:
        val = "(unset)" if d.value is None else ("(flag)" if d.value == "" else d.value)
        rows.append((d.name, val, d.action, d.reason))
    w0 = max(len(r[0]) for r in rows)
    w1 = min(max(len(r[1]) for r in rows), 24)
    w2 = max(len(r[2]) for r in rows)
    return "\n".join(f"  {r[0]:<{w0}}  {r[1]:<{w1}}  {r[2]:<{w2}}  {r[3]}" for r in rows)
