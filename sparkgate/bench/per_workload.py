"""`invoke compare A,B` with profile names: which of two profiles to run, workload by workload.

For every workload both profiles have a stored run of, the newest run of each is paired item by item (same
prompt fingerprint, same protocol), and the per-item decode rates go through a paired t-test
(`stats.paired_difference`). The recommendation follows from that test alone: the significantly faster
profile, with its measured margin, or "no significant difference". Nothing here knows what engine produced
the runs: the same code reads simulator runs and Spark runs, and says which it read (the runs' `target`).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from sparkgate.bench import runs, stats

NO_DIFFERENCE = "no significant difference"
NOT_TESTED = "not tested"


@dataclass
class Side:
    """One profile's run on one workload, restricted to the items paired with the other run."""
    profile: str
    run: runs.Run
    numbers: dict  # stats.summarize over the paired items
    accept_median: float | None

    def as_dict(self) -> dict:
        n = self.numbers
        return {"run": self.run.id, "target": self.run.summary.get("environment", {}).get("target"),
                "n": n["completed"], "decode_tok_s": n["decode_tok_s"], "tpot_ms": n["tpot_ms"],
                "accept_length": n["accept_length"], "accept_length_median_request": self.accept_median,
                "mean_ttft_s": n["mean_ttft_s"], "completion_tokens": n["completion_tokens"]}


@dataclass
class Recommendation:
    profile: str | None  # the profile to run for this workload; None when the test does not decide
    verdict: str  # "<profile> faster", NO_DIFFERENCE or NOT_TESTED
    speedup_pct: float | None  # the winner's aggregate decode tok/s over the other's, in %
    text: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class WorkloadComparison:
    workload: str
    status: str  # "compared", "missing", "not comparable"
    detail: str = ""
    produce: list[str] = field(default_factory=list)  # commands that make the missing or matching runs
    sides: list[Side] = field(default_factory=list)
    paired: stats.PairedDifference | None = None
    excluded_items: int = 0
    recommendation: Recommendation | None = None

    def as_dict(self) -> dict:
        return {"status": self.status, "detail": self.detail, "produce": self.produce,
                "results": {side.profile: side.as_dict() for side in self.sides},
                "paired": self.paired.as_dict() if self.paired else None,
                "excluded_items": self.excluded_items,
                "recommendation": self.recommendation.as_dict() if self.recommendation else None}


@dataclass
class ProfileComparison:
    profiles: tuple[str, str]  # (reference A, candidate B): differences are B - A
    alpha: float
    workloads: list[WorkloadComparison]
    notes: list[str]

    def as_dict(self) -> dict:
        a, b = self.profiles
        return {"kind": "per-workload", "version": 1, "profiles": list(self.profiles), "difference": f"{b} - {a}",
                "alpha": self.alpha, "confidence": 1 - self.alpha, "test": "paired t-test on per-item decode tok/s",
                "workloads": {w.workload: w.as_dict() for w in self.workloads},
                "recommendations": {w.workload: w.recommendation.profile for w in self.workloads
                                    if w.recommendation and w.status == "compared"},
                "notes": self.notes}


# ------------------------------------------------------------------------------------------- selecting
def _finished(root: Path) -> list[tuple[Path, dict]]:
    """(run dir, summary) of every finished run under root, oldest first (summary written last)."""
    if not root.is_dir():
        return []
    found = []
    for path in sorted(root.glob("*/" + runs.SUMMARY), key=lambda p: p.stat().st_mtime):
        try:
            found.append((path.parent, json.loads(path.read_text())))
        except (OSError, json.JSONDecodeError):
            continue  # not a run compare can read; `--runs` on it says why
    return found


def stored_labels(root: Path) -> set[str]:
    return {runs.Run(path, summary, []).label for path, summary in _finished(root)}


def latest_by_workload(label: str, root: Path) -> dict[str, runs.Run]:
    """The newest finished run labelled `label` (a profile name, unless bench was given --label) per workload."""
    chosen: dict[str, Path] = {}
    for path, summary in _finished(root):
        if runs.Run(path, summary, []).label == label:
            chosen[(summary.get("workload") or {}).get("name") or "?"] = path
    return {workload: runs.load(path) for workload, path in chosen.items()}


def bench_command(profile: str, like: dict) -> str:
    """The `invoke bench` command that measures `profile` on the same prompts and protocol as the run `like`."""
    workload = like.get("workload") or {}
    source = workload.get("source") or {}
    protocol = like.get("protocol") or {}
    argv = ["invoke", "bench", "--profile", profile, "--workload", str(workload.get("name"))]
    if source.get("jsonl"):
        argv += ["--jsonl", str(source["jsonl"])]
    if source.get("shots") and source["shots"] != "sparkgate default":
        argv += ["--shots", str(source["shots"])]
    if source.get("generator"):
        count = source.get("count") or (None if source.get("limit") else workload.get("items"))
        if count:
            argv += ["--count", str(count)]
        if "seed" in source and source["seed"] != 20260:
            argv += ["--seed", str(source["seed"])]
    if source.get("limit"):
        argv += ["--limit", str(source["limit"])]
    sampling = (protocol.get("sampling") or {}).get("name")
    if sampling in ("greedy", "sampled"):
        argv.append(f"--{sampling}")
    if protocol.get("max_tokens"):
        argv += ["--max-tokens", str(protocol["max_tokens"])]
    if protocol.get("api") and protocol["api"] != "chat":
        argv += ["--api", str(protocol["api"])]
    return shlex.join(argv)


def _protocol(run: runs.Run) -> dict:
    protocol = run.summary.get("protocol") or {}
    return {"api": protocol.get("api"), "sampling": (protocol.get("sampling") or {}).get("name"),
            "max_tokens": protocol.get("max_tokens"), "target": (run.summary.get("environment") or {}).get("target")}


# --------------------------------------------------------------------------------------------- pairing
def _side(profile: str, run: runs.Run, item_ids: list[str]) -> Side:
    by_id = {r["item_id"]: r for r in run.records}
    records = [by_id[i] for i in item_ids]
    accepts = [r["accept_length"] for r in records if r.get("accept_length") is not None]
    median = stats.percentile(accepts, 50) if accepts and len(accepts) == len(records) else None
    return Side(profile, run, stats.summarize(records), median)


def _pair(workload: str, a: tuple[str, runs.Run], b: tuple[str, runs.Run], alpha: float) -> WorkloadComparison:
    (name_a, run_a), (name_b, run_b) = a, b
    for name, run, other in ((name_a, run_a, run_b), (name_b, run_b, run_a)):
        if not run.summary.get("complete"):
            why = run.summary.get("stopped_early") or "fewer requests than items"
            return WorkloadComparison(workload, "not comparable", f"{name}'s run {run.id} did not complete ({why})",
                                      [bench_command(name, other.summary)])
    fp_a = (run_a.summary.get("workload") or {}).get("fingerprint")
    fp_b = (run_b.summary.get("workload") or {}).get("fingerprint")
    if fp_a != fp_b:
        return WorkloadComparison(
            workload, "not comparable",
            f"different prompt sets: {name_a} {run_a.id} fingerprint {fp_a}, {name_b} {run_b.id} fingerprint {fp_b} "
            "(different --count, --seed, --limit, --jsonl or --shots); rerun one with the other's options",
            [bench_command(name_b, run_a.summary)])
    proto_a, proto_b = _protocol(run_a), _protocol(run_b)
    differing = [key for key in proto_a if proto_a[key] != proto_b[key]]
    if differing:
        detail = "; ".join(f"{key}: {name_a} {proto_a[key]}, {name_b} {proto_b[key]}" for key in differing)
        return WorkloadComparison(workload, "not comparable", f"protocols differ ({detail}); rerun one to match",
                                  [bench_command(name_b, run_a.summary)])
    rate_a = {r["item_id"]: stats.decode_rate(r) for r in run_a.records}
    rate_b = {r["item_id"]: stats.decode_rate(r) for r in run_b.records}
    paired_ids = [i for i in rate_a if rate_a[i] is not None and rate_b.get(i) is not None]
    excluded = len(set(rate_a) | set(rate_b)) - len(paired_ids)
    comparison = WorkloadComparison(workload, "compared", excluded_items=excluded)
    comparison.sides = [_side(name_a, run_a, paired_ids), _side(name_b, run_b, paired_ids)]
    comparison.paired = stats.paired_difference([rate_a[i] for i in paired_ids], [rate_b[i] for i in paired_ids],
                                                confidence=1 - alpha)
    if excluded:
        comparison.detail = f"{excluded} item(s) failed or were untimed in one run and are left out of the pairs"
    comparison.recommendation = recommend(workload, comparison.sides, comparison.paired, alpha)
    return comparison


def _signed(value: float, pattern: str = "{:+.2f}") -> str:
    return pattern.format(value)


def recommend(workload: str, sides: list[Side], paired: stats.PairedDifference, alpha: float) -> Recommendation:
    """The verdict of the paired test, in words and numbers. B - A is the difference; A is sides[0]."""
    a, b = sides
    speed_a, speed_b = a.numbers["decode_tok_s"], b.numbers["decode_tok_s"]
    level = f"{paired.confidence:.0%}"
    if paired.p_value is None or speed_a is None or speed_b is None:
        return Recommendation(None, NOT_TESTED, None,
                              f"{workload}: not tested: {paired.n} paired item(s) (at least "
                              f"{stats.MIN_PAIRED_ITEMS} needed); rerun both with a larger --count")
    interval = (f"per-item difference {b.profile} - {a.profile} {_signed(paired.mean_difference)} tok/s, "
                f"{level} CI [{_signed(paired.ci_low)}, {_signed(paired.ci_high)}], p = {paired.p_value:.2g}, "
                f"n = {paired.n}")
    if not paired.significant(alpha):
        return Recommendation(None, NO_DIFFERENCE, None,
                              f"{workload}: {NO_DIFFERENCE} between {a.profile} ({speed_a:.2f} tok/s) and "
                              f"{b.profile} ({speed_b:.2f} tok/s): {interval}, not below alpha {alpha:g}; "
                              "either profile, speed does not decide")
    winner, loser = (b, a) if paired.mean_difference > 0 else (a, b)
    fast, slow = winner.numbers, loser.numbers
    gain = 100.0 * (fast["decode_tok_s"] / slow["decode_tok_s"] - 1.0)
    return Recommendation(
        winner.profile, f"{winner.profile} faster", gain,
        f"{workload}: run {winner.profile}: {fast['decode_tok_s']:.2f} vs {slow['decode_tok_s']:.2f} tok/s for "
        f"{loser.profile} ({gain:+.1f} %), TPOT {fast['tpot_ms']:.2f} vs {slow['tpot_ms']:.2f} ms; {interval}")


# ----------------------------------------------------------------------------------------------- entry
class ProfileCompareError(runs.RunError):
    pass


def compare_profiles(profiles: list[str], root: Path | None = None, alpha: float = 0.05) -> ProfileComparison:
    """Pair the newest run of each of two profiles (or run labels) on every workload either has run."""
    root = root or runs.bench_root()
    if len(profiles) != 2 or profiles[0] == profiles[1]:
        raise ProfileCompareError(f"compare by profile takes two different profiles (e.g. all-three,dspark), got "
                                  f"{','.join(profiles) or 'none'}; for more runs use --runs RUN_A,RUN_B,...")
    if not 0 < alpha < 1:
        raise ProfileCompareError(f"--alpha {alpha}: must be between 0 and 1 (e.g. 0.05)")
    name_a, name_b = profiles
    latest = {name: latest_by_workload(name, root) for name in profiles}
    for name in profiles:
        if not latest[name]:
            other = next(p for p in profiles if p != name)
            example = next(iter(latest[other].values()), None)
            command = bench_command(name, example.summary) if example else \
                f"invoke bench --profile {name} --workload all"
            raise ProfileCompareError(f"no finished bench run labelled {name!r} under {root}: deploy it "
                                      f"(invoke deploy --profile {name}) and run {command}")
    workloads = [w for w in dict.fromkeys([*latest[name_a], *latest[name_b]])]
    compared: list[WorkloadComparison] = []
    for workload in workloads:
        run_a, run_b = latest[name_a].get(workload), latest[name_b].get(workload)
        if run_a is None or run_b is None:
            missing, present = (name_a, run_b) if run_a is None else (name_b, run_a)
            compared.append(WorkloadComparison(
                workload, "missing", f"no {workload} run of {missing} (only {present.profile}'s {present.id})",
                [bench_command(missing, present.summary)]))
            continue
        compared.append(_pair(workload, (name_a, run_a), (name_b, run_b), alpha))
    if not any(w.status == "compared" for w in compared):
        first = compared[0]
        raise ProfileCompareError(f"no workload to compare between {name_a} and {name_b}: {first.workload}: "
                                  f"{first.detail}; run: {'; '.join(first.produce)}")
    targets = sorted({str(side.run.summary.get("environment", {}).get("target")) for w in compared for side in w.sides})
    notes = [f"measured on target: {', '.join(targets)} (the runs' own record)"]
    if {"code", "prose"} & set(workloads):
        notes.append("code and prose are not scored: their runs measure decode speed only")
    return ProfileComparison((name_a, name_b), alpha, compared, notes)
