"""Host memory after admission: the gate closes before unified-memory exhaustion wedges the Spark.

`host.memory_headroom` (a `MemAvailable` floor) and `host.swap_growth` (swap in use grown since admission), read
from the host's own `/proc/meminfo` every period. Why that is the evidence on GB10, the thresholds and the fixes:
docs/checks/host.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from sparkgate.evidence.recheck import RecheckContext
from sparkgate.evidence.results import CheckResult, checked, failed
from sparkgate.evidence.stages import Stage

DOCS = "host.md"
CHECKS = {
    # Judged at the verdict and every period after (a closed gate must not reopen onto a host without headroom).
    "host.memory_headroom": Stage.HEALTH,
    # Growth since admission: the sentinel's re-check only.
    "host.swap_growth": Stage.RECHECK_ONLY,
}
# The SGLang facts each check reads: "section.key" (conformance fixture) or "probe.<field>" (the probe report).
# evidence/catalog.py validates them; tests/unit/test_declared_reads.py proves them on the recorded captures.
READS = {
    'host.memory_headroom': (),
    'host.swap_growth': (),
}
MIN_AVAILABLE_GIB = 4.0
MAX_SWAP_GROWTH_MIB = 256.0
HOST_MEMINFO = "/proc/meminfo"
KIB_PER_GIB, KIB_PER_MIB = 1024 * 1024, 1024


@dataclass(frozen=True)
class MemInfo:
    total_kib: int
    available_kib: int
    swap_total_kib: int
    swap_free_kib: int

    @property
    def swap_used_kib(self) -> int:
        return max(0, self.swap_total_kib - self.swap_free_kib)


class MemInfoUnreadable(Exception):
    pass


@dataclass(frozen=True)
class HostMemory:
    """One reading of the host's memory at verification time: the meminfo figures (or why they could not be read)
    and the processes holding the most, read together so a recorded verification replays the same verdict."""

    meminfo: MemInfo | None
    error: str | None
    holders: tuple[dict, ...] = ()

    def as_dict(self) -> dict:
        return {"meminfo": None if self.meminfo is None else dataclasses.asdict(self.meminfo), "error": self.error,
                "holders": list(self.holders)}

    @classmethod
    def from_dict(cls, value: dict) -> HostMemory:
        meminfo = value.get("meminfo")
        return cls(None if meminfo is None else MemInfo(**meminfo), value.get("error"),
                   tuple(value.get("holders") or ()))


def reading(path: str) -> HostMemory:
    try:
        info = read(path)
    except MemInfoUnreadable as exc:
        return HostMemory(None, str(exc))
    return HostMemory(info, None, tuple(largest_processes()))


def parse(text: str) -> MemInfo:
    """The four fields of a /proc/meminfo text ("MemAvailable:   12345 kB"); missing ones are an error."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[name.strip()] = int(parts[0])
    missing = [k for k in ("MemTotal", "MemAvailable", "SwapTotal", "SwapFree") if k not in values]
    if missing:
        raise MemInfoUnreadable(f"no {', '.join(missing)} in the meminfo text")
    return MemInfo(values["MemTotal"], values["MemAvailable"], values["SwapTotal"], values["SwapFree"])


def read(path: str) -> MemInfo:
    try:
        return parse(Path(path).read_text(encoding="ascii", errors="replace")[:65536])
    except OSError as exc:
        raise MemInfoUnreadable(f"{path}: {exc.strerror or exc}") from None


def largest_processes(proc: Path = Path("/proc"), top: int = 3) -> list[dict]:
    """The processes the sentinel can see with the most resident memory (its PID namespace holds the engine)."""
    found = []
    for entry in proc.iterdir() if proc.is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text(errors="replace")
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        rss = fields.get("VmRSS", "").split()
        if rss and rss[0].isdigit():
            found.append({"pid": int(entry.name), "name": fields.get("Name", "?").strip()[:40],
                          "rss_gib": round(int(rss[0]) / KIB_PER_GIB, 2)})
    return sorted(found, key=lambda p: p["rss_gib"], reverse=True)[:top]


def headroom_check(memory: HostMemory, path: str, expectations: dict) -> CheckResult:
    meminfo, error = memory.meminfo, memory.error
    floor_gib = _limits(expectations)[0]
    expected = f">= {floor_gib} GiB MemAvailable"
    if meminfo is None:
        return failed("host.memory_headroom", error or "not read", expected, path,
                      "the host's memory cannot be read, so exhaustion cannot be seen coming: the gate closes "
                      "(a sentinel container without procfs, or a changed meminfo format)")
    available_gib = meminfo.available_kib / KIB_PER_GIB
    used_gib = (meminfo.total_kib - meminfo.available_kib) / KIB_PER_GIB
    holders = list(memory.holders)
    observed = {"mem_available_gib": round(available_gib, 2), "mem_total_gib": round(meminfo.total_kib / KIB_PER_GIB, 2),
                "in_use_gib": round(used_gib, 2), "largest_processes": holders,
                "rest_of_host_gib": round(max(0.0, used_gib - sum(p["rss_gib"] for p in holders)), 2)}
    return checked(
        "host.memory_headroom", available_gib >= floor_gib, observed, expected, path,
        f"the host has {available_gib:.1f} GiB left, below the {floor_gib} GiB floor: on a unified-memory Spark the "
        "next allocation burst wedges the machine instead of failing a request, so the gate closes first. Look at "
        "largest_processes and rest_of_host_gib: stop other GPU or memory-heavy processes on the host, or lower "
        "the engine's sglang.mem_fraction_static / context length and redeploy",
    )


def _limits(expectations: dict) -> tuple[float, float]:
    host = expectations.get("host") or {}
    floor, growth = host.get("min_mem_available_gib"), host.get("max_swap_growth_mib")
    return (MIN_AVAILABLE_GIB if floor is None else float(floor),
            MAX_SWAP_GROWTH_MIB if growth is None else float(growth))  # 0 is a tightened bound: no swap at all


def start_rechecks(ctx: RecheckContext, meminfo_path: str = HOST_MEMINFO) -> None:
    """At admission: the swap in use now is the baseline that growth is measured from."""
    ctx.state["meminfo_path"] = meminfo_path
    try:
        ctx.state["swap_at_admission_kib"] = read(meminfo_path).swap_used_kib
    except MemInfoUnreadable:
        ctx.state["swap_at_admission_kib"] = None


def rechecks(ctx: RecheckContext) -> list[CheckResult]:
    """Swap growth since admission (the headroom itself is an evidence check, re-checked with its stage)."""
    path = ctx.state.get("meminfo_path") or HOST_MEMINFO
    growth_mib = _limits(ctx.expectations)[1]
    expected = f"<= {growth_mib:g} MiB since admission"
    try:
        info = read(path)
    except MemInfoUnreadable as exc:
        return [failed("host.swap_growth", str(exc), expected, path,
                       "the host's memory cannot be read, so swapping cannot be seen: the gate closes")]
    baseline = ctx.state.get("swap_at_admission_kib")
    grown_mib = None if baseline is None else (info.swap_used_kib - baseline) / KIB_PER_MIB
    return [checked(
        "host.swap_growth", grown_mib is not None and grown_mib <= growth_mib,
        {"swap_used_mib": round(info.swap_used_kib / KIB_PER_MIB, 1),
         "grown_since_admission_mib": None if grown_mib is None else round(grown_mib, 1)},
        expected, path,
        "the host started swapping after admission (or its swap at admission could not be read): with unified "
        "memory, swapping is minutes from a stalled engine. Free memory on the host (largest processes in "
        "host.memory_headroom); the fresh verification that follows records the swap in use anew",
    )]
