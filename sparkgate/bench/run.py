"""What `invoke bench` does: find the deployed stack, check its gate is open, run a workload through the
gateway, write the run directory, and optionally record the baseline floor."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from sparkgate.bench import envfacts, harness, provenance, record_floor, roofline, runs, stats, workloads
from sparkgate.bench.provenance import SPECULATIVE  # their runs ask for, and report, per-request accept lengths
from sparkgate.bench.published import PUBLISHED
from sparkgate.errors import Refusal
from sparkgate.paths import build_dir

SIMULATOR = "simulator"  # why accuracy is not measured on a run (results.accuracy_not_measured)


class BenchError(Refusal, RuntimeError):
    pass


@dataclass(frozen=True)
class BenchOptions:
    profile: str
    workload: str = "arith"
    limit: int | None = None
    count: int | None = None  # size of the generated arith / synthetic sets
    jsonl: Path | None = None
    shots: Path | None = None
    seed: int = 20260  # the generated workloads' seed (not the sampling seed)
    sampling: str | None = None  # "sampled" (published protocol) or "greedy"; None: the workload's default
    api: str = "chat"
    max_tokens: int | None = None
    url: str | None = None
    bundle: Path | None = None
    api_key_file: str | None = None
    time_scale: float | None = None
    target: str | None = None
    label: str | None = None
    out_root: Path | None = None
    record_floor: bool = False
    floor_margin: float = 0.0
    progress: bool = True
    config: Path | None = None  # checkpoint config.json for the roofline
    bandwidth_gb_s: float = roofline.SPARK_BANDWIDTH_GB_S


@dataclass
class BenchResult:
    run_dir: Path
    summary: dict
    floor: tuple[Path, dict] | None = None


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError as exc:
        raise BenchError(f"{path}: not JSON ({exc.msg})") from None


def _bundle_faults(bundle: Path) -> list[str]:
    compose = bundle / "compose.yaml"
    if not compose.is_file():
        return []
    import yaml

    try:
        services = (yaml.safe_load(compose.read_text()) or {}).get("services") or {}
    except yaml.YAMLError:
        return []
    env = (services.get("engine") or {}).get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env if "=" in item)
    return [f for f in str(env.get("SPARKGATE_SIM_FAULTS") or "").split(",") if f]


def roofline_for(profile, *, accept_length: float | None, context_tokens: int = 1024, config: Path | None = None,
                 bandwidth_gb_s: float = roofline.SPARK_BANDWIDTH_GB_S) -> tuple[roofline.Roofline, str]:
    """The roofline of a profile's decode setup, from a config.json (given, on this host, or the reference)."""
    path = config or roofline.checkpoint_config(profile.model.path)
    if path is not None:
        shape, source = roofline.ModelShape.from_file(path), str(path)
    else:
        shape, source = roofline.ModelShape.from_config(roofline.REFERENCE_CONFIG), "reference shape (no checkpoint config.json found)"
    setup = roofline.setup_for_profile(profile, accept_length=accept_length, context_tokens=context_tokens,
                                       bandwidth_gb_s=bandwidth_gb_s)
    return roofline.compute(shape, setup), source


def _context_tokens(records: list[dict]) -> int:
    prompts = [r["prompt_tokens"] for r in records if isinstance(r.get("prompt_tokens"), int)]
    outputs = [r["completion_tokens"] for r in records if r.get("completion_tokens")]
    if not prompts or not outputs:
        return 1024
    return int(sum(prompts) / len(prompts) + sum(outputs) / len(outputs) / 2)


def bench(options: BenchOptions, say: Callable[[str], None] = print) -> BenchResult:
    from sparkgate.profile import loading as profiles
    loaded = profiles.load(options.profile)
    profile = loaded.profile
    requested = profile.requested()
    bundle = options.bundle or build_dir() / profile.name
    from_record = options.url is None or options.bundle is not None
    record = _read_json(bundle / "deploy-record.json") if from_record else {}
    expectations = _read_json(bundle / "expectations.json") if from_record else {}
    url = options.url or record.get("gateway_url")
    if not url:
        raise BenchError(f"no deployed stack for {profile.name}: {bundle / 'deploy-record.json'} not found. "
                         f"Deploy it (invoke deploy --profile {profile.name}) or pass --url")
    if options.url is None and not record.get("admitted"):
        raise BenchError(f"{bundle / 'deploy-record.json'}: the last deploy was not admitted ({record.get('reason')})")
    time_scale = options.time_scale or float(expectations.get("time_scale") or 1.0)
    target = options.target or record.get("target") or expectations.get("target") or ("spark" if time_scale == 1.0 else "sim")
    api_key = Path(options.api_key_file).read_text().strip() if options.api_key_file else None
    if options.api not in harness.APIS:
        raise BenchError(f"--api must be one of {', '.join(harness.APIS)}")
    if options.sampling not in (None, "sampled", "greedy"):
        raise BenchError("sampling must be 'sampled' or 'greedy'")

    gate = envfacts.gate_facts(url, api_key)
    if gate is not None and gate.get("state") != "open":
        raise BenchError(f"the gate at {url} is {gate.get('state')} ({gate.get('reason')}): nothing to measure")
    mislabelled = provenance.gate_profile_mismatch(gate, profile.name, url)
    if mislabelled:
        raise BenchError(mislabelled)
    engine = envfacts.engine_facts(url, api_key)

    try:
        workload = workloads.build(options.workload, jsonl=options.jsonl, shots=options.shots, seed=options.seed,
                                   count=options.count).limited(options.limit)
    except workloads.WorkloadError as exc:
        raise BenchError(str(exc)) from None
    sampling_name = options.sampling or workload.default_sampling
    sampling = harness.PUBLISHED_SAMPLED if sampling_name == "sampled" else harness.GREEDY
    max_tokens = options.max_tokens or workload.default_max_tokens
    target_spec = harness.Target(url=url, model=profile.model.served_name, api=options.api, api_key=api_key,
                                 time_scale=time_scale,
                                 spec_details=any(key in requested for key in SPECULATIVE))
    root = options.out_root or runs.bench_root()
    run_id = runs.new_run_id(profile.name, workload.name, root)
    run_dir = root / run_id
    faults = _bundle_faults(bundle) if from_record else []
    say(f"bench {run_id}: {workload.description}; {sampling.name}, max_tokens {max_tokens}, api {options.api}, "
        f"via {url} (time scale {time_scale:g})")

    log = runs.RequestLog(run_dir)
    started_at = envfacts.now_utc()
    done: list[dict] = []
    with _Progress(len(workload.items), options.progress, scored=target != "sim") as progress:
        def on_record(rec: harness.RequestRecord) -> None:
            row = rec.as_dict()
            log.write(row)
            done.append(row)
            progress.advance(done)

        records, stopped = harness.run(target_spec, workload, sampling, max_tokens, on_record)
    log.close()
    rows = [r.as_dict() for r in records]
    results = stats.summarize(rows)
    if target == "sim":
        # The simulator writes pseudo-words to a word problem: a score would read 0 %, which measures nothing.
        results = {**results, "accuracy": None, "accuracy_not_measured": SIMULATOR}
    accept = results["accept_length"] if "mtp" in requested else None
    try:  # never lose a measured run to a config.json the roofline cannot model
        if "dspark" in requested:
            raise roofline.RooflineError("the roofline models NEXTN/MTP cycles, not DSpark block drafting (a dense "
                                         "drafter proposing a whole block per pass): no bound for this profile")
        line, source = roofline_for(profile, accept_length=accept, context_tokens=_context_tokens(rows),
                                    config=options.config, bandwidth_gb_s=options.bandwidth_gb_s)
        roof = {
            "config": source,
            "bandwidth_gb_s": options.bandwidth_gb_s,
            "accept_length_used": line.setup.accept_length if line.setup.mtp else None,
            "context_tokens": line.setup.context_tokens,
            "bound_tok_s": line.bound_tok_s,
            "estimate_tok_s": line.estimate_tok_s,
            "fraction_of_bound": results["decode_tok_s"] / line.bound_tok_s if results["decode_tok_s"] else None,
            "fraction_of_estimate": results["decode_tok_s"] / line.estimate_tok_s if results["decode_tok_s"] else None,
        }
    except roofline.RooflineError as exc:
        roof = {"error": str(exc)}
        say(f"roofline not computed: {exc}")
    summary = {
        "summary_version": runs.SUMMARY_VERSION,
        "run_id": run_id,
        "profile": profile.name,
        "label": options.label,
        "requested_optimizations": requested,
        "complete": stopped is None and len(records) == len(workload.items),
        "stopped_early": stopped,
        "started_at": started_at,
        "finished_at": envfacts.now_utc(),
        "workload": {
            "name": workload.name, "description": workload.description, "fingerprint": workload.fingerprint(),
            "items": len(workload.items), "scored": workload.scored, "fixed_length": workload.fixed_length,
            "source": workload.source,
        },
        "protocol": {
            "api": options.api,
            "sampling": sampling.__dict__,
            "max_tokens": max_tokens,
            "concurrency": 1,
            "tokens_from": "usage.completion_tokens" if options.api == "chat" else "meta_info.completion_tokens",
            "accept_length_from": ("sglext.spec_tokens_details" if options.api == "chat" else "meta_info.spec_*"),
            "time_scale": time_scale,
        },
        "environment": {
            "target": target,
            "gateway_url": url,
            "deploy_record": str(bundle / "deploy-record.json") if record else None,
            "images": record.get("images"),
            "sim_faults": faults,
            "gate": gate,
            "engine": engine,
            "host": envfacts.host_facts(),
        },
        "results": results,
        "roofline": roof,
        "published": PUBLISHED[profile.name].__dict__ if profile.name in PUBLISHED else None,
    }
    runs.write_json_atomic(run_dir / runs.SUMMARY, summary)
    result = BenchResult(run_dir, summary)
    say(_one_line(summary))
    if stopped:
        say(f"INCOMPLETE: {stopped}")
    if options.record_floor:
        try:
            result.floor = record_floor.record(summary, run_dir, options.floor_margin)
        except record_floor.FloorError as exc:
            raise BenchError(f"floor not recorded: {exc}") from None
        path, entry = result.floor
        say(f"recorded the {target} baseline floor: {entry['floor_tok_s']} tok/s in {path} "
            f"(stacked profiles decoding slower are refused at their next deploy)")
    return result


def bench_each(options: BenchOptions, names: list[str], say: Callable[[str], None] = print) -> list[BenchResult]:
    """One run per workload, in order, each stored on its own (`--workload all` or a comma list)."""
    if len(names) > 1:
        if options.jsonl is not None:
            raise BenchError(f"--jsonl applies to one workload, not to {', '.join(names)}: bench each on its own "
                             f"(e.g. invoke bench --profile {options.profile} --workload {names[0]} --jsonl ...)")
        if options.record_floor:
            raise BenchError("--record-floor takes one workload run, not several: drop it or name one --workload")
    return [bench(replace(options, workload=name), say=say) for name in names]


def _fmt(value, pattern: str) -> str:
    return "n/a" if value is None else pattern.format(value)


def _one_line(summary: dict) -> str:
    r = summary["results"]
    return (f"{summary['profile']}: decode {_fmt(r['decode_tok_s'], '{:.2f}')} tok/s, TPOT {_fmt(r['tpot_ms'], '{:.2f}')} ms, "
            f"e2e mean/P50/P95 {_fmt(r['mean_e2e_s'], '{:.2f}')}/{_fmt(r['p50_e2e_s'], '{:.2f}')}/"
            f"{_fmt(r['p95_e2e_s'], '{:.2f}')} s, accept {_fmt(r['accept_length'], '{:.2f}')}, "
            f"accuracy {stats.accuracy_text(r)}, errors {r['errors']}; "
            f"{_fmt(summary['roofline'].get('fraction_of_estimate'), '{:.0%}')} of the roofline estimate -> "
            f"{summary['run_id']}")


class _Progress:
    """A rich progress bar with ETA and the running decode speed; silent when disabled."""

    def __init__(self, total: int, enabled: bool, scored: bool = True):
        self.total, self.enabled = total, enabled and os.environ.get("SPARKGATE_BENCH_NO_PROGRESS") != "1"
        self.scored = scored  # False on the simulator: its pseudo-word answers are never counted
        self._progress = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(TextColumn("bench"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                      TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[status]}"))
            self._progress.start()
            self._task = self._progress.add_task("bench", total=self.total, status="")
        return self

    def advance(self, done: list[dict]) -> None:
        if self._progress is None:
            return
        numbers = stats.summarize(done)
        status = f"{_fmt(numbers['decode_tok_s'], '{:.1f}')} tok/s"
        if numbers["scored"] and self.scored:
            status += f", {numbers['correct']}/{numbers['scored']} correct"
        if numbers["errors"]:
            status += f", {numbers['errors']} errors"
        self._progress.update(self._task, advance=1, status=status)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
