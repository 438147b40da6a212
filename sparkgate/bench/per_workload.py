"""`invoke compare A,B` with profile names: which of two profiles to run, workload by workload.

For every workload both profiles have a stored run of, the newest run of each is paired item by item (same
prompt fingerprint, same protocol, and records showing each run measured its own profile's engine), and the
per-item decode rates go through a paired t-test (`stats.paired_difference`). The p-values of the workloads
tested are Holm–Bonferroni adjusted together (several workloads, several chances of a false "faster").
The recommendation follows from that adjusted test, states the quantity it tested (the per-item mean decode
rates) next to the aggregate speeds, and names no winner when the two disagree in direction. Nothing here
knows what engine produced the runs: the same code reads simulator runs and Spark runs, and says which it
read (the runs' `target`).
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from sparkgate.bench import provenance, runs, stats
from sparkgate.evidence import calibration, context_bands

NO_DIFFERENCE = "no significant difference"
NO_CLEAR_WINNER = "no clear winner"
NOT_TESTED = "not tested"
MULTIPLE_COMPARISONS = "holm-bonferroni"


@dataclass
class Side:
    """One profile's run on one workload, restricted to the items paired with the other run."""
    profile: str
    run: runs.Run
    numbers: dict  # stats.summarize over the paired items
    accept_median: float | None
    item_mean_tok_s: float | None = None  # mean of the per-item decode rates: the quantity the t-test compares

    def as_dict(self) -> dict:
        n = self.numbers
        return {"run": self.run.id, "target": self.run.summary.get("environment", {}).get("target"),
                "n": n["completed"], "item_mean_decode_tok_s": self.item_mean_tok_s,
                "decode_tok_s": n["decode_tok_s"], "tpot_ms": n["tpot_ms"],
                "accept_length": n["accept_length"], "accept_length_median_request": self.accept_median,
                "mean_ttft_s": n["mean_ttft_s"], "completion_tokens": n["completion_tokens"]}


@dataclass
class Recommendation:
    profile: str | None  # the profile to run for this workload; None when the test does not decide
    verdict: str  # "<profile> faster", NO_DIFFERENCE, NO_CLEAR_WINNER or NOT_TESTED
    speedup_pct: float | None  # the winner's per-item mean decode rate over the other's (the tested quantity), %
    text: str
    aggregate_speedup_pct: float | None = None  # the winner's aggregate (token-weighted) decode tok/s over the other's
    # Where a workload's context falls in a band in which a speculative side's acceptance is at or below the
    # break-even accept length (evidence/context_bands.py): a note, next to whatever the test decided.
    speculation: list[str] = field(default_factory=list)

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
    p_adjusted: float | None = None  # Holm–Bonferroni over the workloads tested; the recommendation reads this
    excluded_items: int = 0
    recommendation: Recommendation | None = None

    def as_dict(self) -> dict:
        paired = {**self.paired.as_dict(), "p_value_adjusted": self.p_adjusted} if self.paired else None
        return {"status": self.status, "detail": self.detail, "produce": self.produce,
                "results": {side.profile: side.as_dict() for side in self.sides},
                "paired": paired,
                "excluded_items": self.excluded_items,
                "recommendation": self.recommendation.as_dict() if self.recommendation else None}


@dataclass
class ProfileComparison:
    profiles: tuple[str, str]  # (reference A, candidate B): differences are B - A
    alpha: float
    workloads: list[WorkloadComparison]
    notes: list[str]

    @property
    def family(self) -> list[str]:
        """The workloads whose p-values were adjusted together."""
        return [w.workload for w in self.workloads if w.p_adjusted is not None]

    def as_dict(self) -> dict:
        a, b = self.profiles
        return {"kind": "per-workload", "version": 1, "profiles": list(self.profiles), "difference": f"{b} - {a}",
                "alpha": self.alpha, "confidence": 1 - self.alpha, "test": "paired t-test on per-item decode tok/s",
                "multiple_comparisons": {"method": MULTIPLE_COMPARISONS, "workloads": self.family,
                                         "m": len(self.family), "p_value": "raw, per workload",
                                         "p_value_adjusted": "Holm-Bonferroni; the recommendation reads this"},
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
    rates = [stats.decode_rate(r) for r in records]
    item_mean = sum(rates) / len(rates) if rates and None not in rates else None
    return Side(profile, run, stats.summarize(records), median, item_mean)


def _mislabelled(workload: str, a: tuple[str, runs.Run], b: tuple[str, runs.Run]) -> WorkloadComparison | None:
    """Refuse a pair whose own records show a run measured another profile's engine (see provenance)."""
    for (name, run), (_, other) in ((a, b), (b, a)):
        why = provenance.recorded_mismatch(run.summary)
        if why:
            return WorkloadComparison(workload, "not comparable", f"{name}'s run {run.id} is mislabelled: {why}; "
                                      f"redeploy {name} and rebench it",
                                      [f"invoke deploy --profile {name} && {bench_command(name, other.summary)}"])
    why = provenance.same_engine_different_claims(a[1].summary, b[1].summary)
    if why:
        return WorkloadComparison(workload, "not comparable", f"runs {a[1].id} and {b[1].id}: {why}; redeploy "
                                  "each profile and rebench it",
                                  [f"invoke deploy --profile {name} && {bench_command(name, other.summary)}"
                                   for (name, _), (_, other) in ((a, b), (b, a))])
    return None


def _pair(workload: str, a: tuple[str, runs.Run], b: tuple[str, runs.Run], alpha: float) -> WorkloadComparison:
    """The paired test of one workload; its recommendation waits for the adjusted p (compare_profiles)."""
    (name_a, run_a), (name_b, run_b) = a, b
    for name, run, other in ((name_a, run_a, run_b), (name_b, run_b, run_a)):
        if not run.summary.get("complete"):
            why = run.summary.get("stopped_early") or "fewer requests than items"
            return WorkloadComparison(workload, "not comparable", f"{name}'s run {run.id} did not complete ({why})",
                                      [bench_command(name, other.summary)])
    mislabelled = _mislabelled(workload, a, b)
    if mislabelled:
        return mislabelled
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
    return comparison


def _gain(fast: float, slow: float) -> float:
    return 100.0 * (fast / slow - 1.0)


def recommend(workload: str, sides: list[Side], paired: stats.PairedDifference, alpha: float,
              p_adjusted: float | None = None, family: int = 1) -> Recommendation:
    """The verdict of the paired test, in words and numbers. B - A is the difference; A is sides[0].

    The test compares per-item mean decode rates; the aggregate (token-weighted) speed weights long answers
    more, so the two can point different ways when output lengths vary. The winner is named only when the
    adjusted p is below alpha AND both say the same profile is faster; the text states both numbers."""
    a, b = sides
    speed_a, speed_b = a.numbers["decode_tok_s"], b.numbers["decode_tok_s"]
    level = f"{paired.confidence:.0%}"
    if paired.p_value is None or speed_a is None or speed_b is None:
        return Recommendation(None, NOT_TESTED, None,
                              f"{workload}: not tested: {paired.n} paired item(s) (at least "
                              f"{stats.MIN_PAIRED_ITEMS} needed); rerun both with a larger --count")
    adjusted = paired.p_value if p_adjusted is None else p_adjusted
    holm = f"Holm-adjusted over {family} workloads" if family > 1 else "one workload, no adjustment"
    means = f"per-item mean {b.profile} {paired.mean_b:.2f} vs {a.profile} {paired.mean_a:.2f} tok/s"
    test = (f"per-item difference {b.profile} - {a.profile} {paired.mean_difference:+.2f} tok/s, "
            f"{level} CI [{paired.ci_low:+.2f}, {paired.ci_high:+.2f}], p = {paired.p_value:.2g} "
            f"({holm}: {adjusted:.2g}), n = {paired.n}")
    aggregate = f"aggregate {b.profile} {speed_b:.2f} vs {a.profile} {speed_a:.2f} tok/s"
    if adjusted >= alpha:
        return Recommendation(None, NO_DIFFERENCE, None,
                              f"{workload}: {NO_DIFFERENCE} between {a.profile} and {b.profile}: {means}, {test}, "
                              f"adjusted p not below alpha {alpha:g}; {aggregate}; either profile, speed does not "
                              "decide")
    winner, loser = (b, a) if paired.mean_difference > 0 else (a, b)
    item_fast, item_slow = (paired.mean_b, paired.mean_a) if winner is b else (paired.mean_a, paired.mean_b)
    item_gain = _gain(item_fast, item_slow)
    fast, slow = winner.numbers, loser.numbers
    if fast["decode_tok_s"] <= slow["decode_tok_s"]:
        return Recommendation(
            None, NO_CLEAR_WINNER, None,
            f"{workload}: {NO_CLEAR_WINNER}: per item {winner.profile} is faster ({means}, {test}), but in aggregate "
            f"{loser.profile} is: {slow['decode_tok_s']:.2f} vs {fast['decode_tok_s']:.2f} tok/s (token-weighted; "
            "the long answers favour the other profile); bench more, or your own traffic (--jsonl), to decide")
    aggregate_gain = _gain(fast["decode_tok_s"], slow["decode_tok_s"])
    return Recommendation(
        winner.profile, f"{winner.profile} faster", item_gain,
        f"{workload}: run {winner.profile}: per-item mean {item_fast:.2f} vs {item_slow:.2f} tok/s for "
        f"{loser.profile} ({item_gain:+.1f} %), aggregate "
        f"{fast['decode_tok_s']:.2f} vs {slow['decode_tok_s']:.2f} tok/s ({aggregate_gain:+.1f} %), TPOT "
        f"{fast['tpot_ms']:.2f} vs {slow['tpot_ms']:.2f} ms; {test}",
        aggregate_gain)


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
    workloads = list(dict.fromkeys([*latest[name_a], *latest[name_b]]))
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
    _adjust_and_recommend(compared, alpha)
    if not any(w.status == "compared" for w in compared):
        first = compared[0]
        raise ProfileCompareError(f"no workload to compare between {name_a} and {name_b}: {first.workload}: "
                                  f"{first.detail}; run: {'; '.join(first.produce)}")
    targets = sorted({str(side.run.summary.get("environment", {}).get("target")) for w in compared for side in w.sides})
    notes = [f"measured on target: {', '.join(targets)} (the runs' own record)"]
    family = [w.workload for w in compared if w.p_adjusted is not None]
    if len(family) > 1:
        notes.append(f"p-values are Holm-Bonferroni adjusted over the {len(family)} workloads tested "
                     f"({', '.join(family)}): a profile is recommended only where the adjusted p is below alpha "
                     f"{alpha:g}; the CIs are per workload, unadjusted")
    if {"code", "prose"} & set(workloads):
        notes.append("code and prose are not scored: their runs measure decode speed only")
    return ProfileComparison((name_a, name_b), alpha, compared, notes)


def _adjust_and_recommend(compared: list[WorkloadComparison], alpha: float) -> None:
    """Holm–Bonferroni across the workloads with a p-value, then each workload's recommendation from its
    adjusted p: with three workloads at alpha 0.05 each, a false "faster" somewhere is up to ~14 % likely."""
    tested = [w for w in compared if w.status == "compared" and w.paired.p_value is not None]
    for w, adjusted in zip(tested, stats.holm_adjust([w.paired.p_value for w in tested]), strict=True):
        w.p_adjusted = adjusted
    for w in compared:
        if w.status == "compared":
            w.recommendation = recommend(w.workload, w.sides, w.paired, alpha, w.p_adjusted, len(tested))
            w.recommendation.speculation = [n for n in (speculation_note(w.workload, side) for side in w.sides) if n]


def _finite(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def speculation_note(workload: str, side: Side) -> str | None:
    """A note when the workload's requests sit, by context length, in a band where this side's speculation does
    not pay: the token-weighted accept length of its requests in that band (at least context_bands.MIN_LINES of
    them) at or below the break-even. A request's context is its prompt plus half its completion (the middle
    of its decode); the workload's band is that of its median request. None without speculation or prompt
    token counts."""
    done = [r for r in side.run.records if not r.get("error") and _finite(r.get("accept_length"))
            and r["accept_length"] >= 1 and isinstance(r.get("prompt_tokens"), int) and r["prompt_tokens"] >= 0
            and isinstance(r.get("completion_tokens"), int) and r["completion_tokens"] > 0]
    if len(done) < context_bands.MIN_LINES:
        return None
    context = {id(r): r["prompt_tokens"] + r["completion_tokens"] / 2 for r in done}
    median = stats.percentile(sorted(context.values()), 50)
    band = context_bands.band_of(median)
    in_band = [r for r in done if context_bands.band_of(context[id(r)]) == band]
    if len(in_band) < context_bands.MIN_LINES:
        return None
    accept = (sum(r["completion_tokens"] for r in in_band)
              / sum(r["completion_tokens"] / r["accept_length"] for r in in_band))
    break_even, source = calibration.break_even()
    if accept > break_even:
        return None
    return (f"{workload}: its context (median {median:.0f} tokens) falls in band {band}, where {side.profile}'s "
            f"speculation does not pay: accept length {accept:.2f} <= break-even {break_even} (a verify step costs "
            f"that many plain decode steps; {source}); a profile without speculation may run this workload faster")
