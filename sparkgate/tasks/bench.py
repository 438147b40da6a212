"""Benchmark tasks: bench (measure a deployed stack through its gateway, one run per workload), compare (runs
side by side, with the change against the baseline, McNemar and the roofline fraction, plus a PNG; or, given
two profile names, which of them to run per workload) and roofline (bytes per decode step and the bandwidth
bound). See docs/bench.md."""

from __future__ import annotations

from pathlib import Path

from invoke import Collection, Exit

from sparkgate.bench.published import PUBLISHED
from sparkgate.profile.problems import ProfileError
from sparkgate.tasks.common import require, sparkgate_task


@sparkgate_task(
    "bench",
    help={
        "profile": "profile name (its deploy record gives the gateway URL and the time scale)",
        "workload": "arith (generated, default), code / prose (fixed, speed only), synthetic (seeded, speed only), "
                    "gsm8k (needs --jsonl); a comma list, or all (= arith,code,prose): one run stored per workload",
        "limit": "run only the first N items",
        "count": "size of the arith / synthetic set (default 16 / 32), or the first N code / prose prompts (of 20)",
        "jsonl": "gsm8k: one {\"question\", \"answer\"} object per line; code / prose: your own prompts, one "
                 "{\"prompt\"} (optional \"id\") per line",
        "shots": "JSONL of the 5 worked examples (default: sparkgate's own five)",
        "greedy": "temperature 0 (default for code and prose)",
        "sampled": "the published sampling: temperature 0.6, top_p 0.95, top_k 29, seed 42 (default for arith, "
                   "gsm8k, synthetic)",
        "api": "chat (OpenAI chat completions, default) or generate (SGLang /generate, raw prompt)",
        "max_tokens": "per request (default: gsm8k 32768, arith 1024, code / prose 512, synthetic 256)",
        "url": "base URL instead of the deploy record's gateway",
        "out": "bundle directory of the deployment (default build/<profile>)",
        "api_key_file": "gateway API key file",
        "time_scale": "engine seconds per wall second (default: the deployment's expectations.json, else 1)",
        "label": "name for this run in compare's table",
        "record_floor": "store this baseline run's decode speed as the gate's floor for stacked profiles",
        "floor_margin": "record the floor this fraction below the measured speed (default 0)",
        "config": "checkpoint config.json for the roofline (default: the checkpoint on this host, else the published shape)",
        "bandwidth": "memory bandwidth in GB/s for the roofline (default 273, DGX Spark)",
        "seed": "seed of the generated workloads (not the sampling seed)",
        "quiet": "no progress bar",
    }
)
def bench(c, profile=None, workload="arith", limit=None, count=None, jsonl=None, shots=None, greedy=False, sampled=False,
          api="chat", max_tokens=None, url=None, out=None, api_key_file=None, time_scale=None, label=None,
          record_floor=False, floor_margin=0.0, config=None, bandwidth=273.0, seed=20260, quiet=False):
    """Run a workload through a deployed stack's gateway, one request at a time; write build/bench/<run-id>/."""
    require(profile, "profile", "invoke bench --profile all-three")
    from sparkgate.bench import run as run_mod
    from sparkgate.bench import workloads

    if greedy and sampled:
        raise Exit("sparkgate bench: --greedy and --sampled exclude each other", code=2)
    try:
        names = workloads.expand(workload)
    except workloads.WorkloadError as exc:
        raise Exit(f"sparkgate bench: {exc}", code=2) from None
    options = run_mod.BenchOptions(
        profile=profile, workload=names[0], limit=int(limit) if limit else None, count=int(count) if count else None,
        jsonl=Path(jsonl) if jsonl else None, shots=Path(shots) if shots else None, seed=int(seed),
        sampling="greedy" if greedy else "sampled" if sampled else None, api=api,
        max_tokens=int(max_tokens) if max_tokens else None,
        url=url, bundle=Path(out) if out else None, api_key_file=api_key_file,
        time_scale=float(time_scale) if time_scale else None, label=label, record_floor=record_floor,
        floor_margin=float(floor_margin), progress=not quiet, config=Path(config) if config else None,
        bandwidth_gb_s=float(bandwidth),
    )
    results = run_mod.bench_each(options, names, say=lambda line: print(line, flush=True))
    for result in results:
        print(f"run: {result.run_dir}")
    incomplete = [result.run_dir.name for result in results if not result.summary["complete"]]
    if incomplete:
        raise Exit(f"sparkgate bench: did not complete: {', '.join(incomplete)}", code=1)


def _print_own_help(task_name: str) -> None:
    """`invoke compare --help`: the positional `runs` takes the token first, so hand it to invoke's help."""
    from invoke import Program

    Program(namespace=Collection(compare), name="invoke", binary="invoke").run(
        ["invoke", "--help", task_name], exit=False)


def _names_profiles(refs: list[str], root: Path) -> bool:
    """True when every entry is a profile name (or a stored run label), not a run id or directory."""
    from sparkgate.bench import per_workload
    from sparkgate.profile import loading as profiles

    if refs == ["latest"] or any(Path(ref).is_dir() or (root / ref).is_dir() for ref in refs):
        return False
    known = set(profiles.available_profiles()) | per_workload.stored_labels(root)
    return all(ref in known for ref in refs)


@sparkgate_task(
    "compare",
    positional=["runs"],
    help={
        "runs": "two profile names (e.g. all-three,dspark; also positional): the newest run of each, paired "
                "workload by workload, with a recommendation; or comma-separated run ids or directories, or "
                "`latest`: the newest run of each profile on the newest run's prompt set",
        "baseline": "the run the others are compared with (default: the first run without optimizations)",
        "alpha": "significance level of the McNemar test and of the per-workload paired t-test, whose p-values are "
                 "Holm-Bonferroni adjusted across the workloads compared (default 0.05)",
        "out": "output directory (default build/bench/compare-<time>)",
        "root": "where the bench runs are stored (default build/bench)",
        "no_png": "skip the PNG",
        "fail_on_regression": "exit 1 when a stacked run is slower than the baseline, its draft is rejected, or "
                              "its accuracy is significantly worse",
    },
)
def compare(c, runs=None, baseline=None, alpha=0.05, out=None, root=None, no_png=False, fail_on_regression=False):
    """Compare bench runs (the published table's columns, % change vs the baseline, McNemar, roofline fraction),
    or two profiles per workload: `invoke compare all-three,dspark` says which to run for which traffic."""
    if runs in ("--help", "-h"):
        _print_own_help("compare")
        return
    require(runs, "runs", "invoke compare all-three,dspark")
    from sparkgate.bench import compare_runs, per_workload, per_workload_report
    from sparkgate.bench import runs as runs_mod

    refs = [ref for ref in runs.replace(" ", ",").split(",") if ref]
    root_dir = Path(root) if root else runs_mod.bench_root()
    try:
        if _names_profiles(refs, root_dir):
            by_workload = per_workload.compare_profiles(refs, root_dir, float(alpha))
            out_dir, text = per_workload_report.write(by_workload,
                                                      Path(out) if out else runs_mod.compare_dir(root_dir))
            print(text)
            print(f"written: {out_dir}/compare.txt, compare.json")
            return
        paths = runs_mod.latest_per_profile(root_dir) if refs == ["latest"] else refs
        loaded = [runs_mod.load(ref, root_dir) for ref in paths]
        comparison = compare_runs.compare(loaded, baseline, float(alpha))
        out_dir, text = compare_runs.write(comparison, Path(out) if out else runs_mod.compare_dir(root_dir),
                                           png=not no_png)
    except runs_mod.RunError as exc:
        raise Exit(f"sparkgate compare: {exc}", code=1) from None
    print(text)
    print(f"written: {out_dir}/compare.txt, compare.json" + ("" if no_png else ", compare.png"))
    if fail_on_regression and comparison.regressions:
        raise Exit("sparkgate compare: regressions: " + "; ".join(comparison.regressions), code=1)


@sparkgate_task(
    "roofline",
    help={
        "profile": "profile name: decides the LM head precision and the MTP window",
        "config": "checkpoint config.json (default: the checkpoint on this host, else the published shape)",
        "bandwidth": "memory bandwidth in GB/s (default 273, DGX Spark)",
        "accept_length": f"MTP tokens per verify cycle (default {PUBLISHED['all-three'].accept_length}, published)",
        "context": "tokens in context for the attention cache (default 1024)",
        "measured": "a measured decode tok/s to show as a fraction of the bound",
        "json_out": "also write the numbers as JSON here",
    }
)
def roofline(c, profile=None, config=None, bandwidth=273.0, accept_length=None, context=1024, measured=None,
             json_out=None):
    """Bytes read per decode step (experts, attention, LM head BF16/FP8, MTP draft and verify window) and the
    resulting upper bound on batch-1 decode speed."""
    require(profile, "profile", "invoke roofline --profile all-three")
    import json

    from sparkgate.atomic import write_text_atomically
    from sparkgate.bench import roofline as roof
    from sparkgate.bench.run import roofline_for
    from sparkgate.profile import loading as profiles

    try:
        loaded = profiles.load(profile)
        line, source = roofline_for(loaded.profile, accept_length=float(accept_length) if accept_length else None,
                                    context_tokens=int(context), config=Path(config) if config else None,
                                    bandwidth_gb_s=float(bandwidth))
    except (ProfileError, roof.RooflineError) as exc:
        raise Exit(f"sparkgate roofline: {exc}", code=1) from None
    setup = line.setup
    print(f"roofline for {loaded.profile.name}: {source}")
    print(f"  {line.shape.architecture}: {line.shape.layers} layers ({line.shape.mla_layers} MLA, "
          f"{line.shape.kda_layers} KDA), {line.shape.experts} experts top-{line.shape.top_k}, "
          f"{line.shape.active_params() / 1e9:.2f} B active parameters per token")
    mode = (f"MTP: {setup.num_steps} draft steps + verify of {setup.num_draft_tokens} positions, "
            f"{setup.accept_length:.2f} tokens per cycle" if setup.mtp else "plain decode, 1 token per step")
    print(f"  {mode}; LM head {'FP8' if setup.fp8_lm_head else 'BF16'}; {setup.bandwidth_gb_s:g} GB/s; "
          f"context {setup.context_tokens} tokens")
    print(f"  {'part':24s} {'component':52s} {'bound GB':>9s} {'estimate GB':>11s}")
    for comp in line.components:
        print(f"  {comp.part:24s} {comp.name:52s} {comp.bound_bytes / roof.GB:9.4f} {comp.estimate_bytes / roof.GB:11.4f}")
    print(f"  {'per cycle':77s} {line.bytes_per_cycle_bound / roof.GB:9.4f} {line.bytes_per_cycle_estimate / roof.GB:11.4f}")
    print(f"  upper bound {line.bound_tok_s:.2f} tok/s (experts fully shared across the verify window); "
          f"estimate {line.estimate_tok_s:.2f} tok/s (independent routing)")
    reference = PUBLISHED.get(loaded.profile.name)
    for what, value in (("measured", float(measured) if measured else None),
                        ("published", reference.decode_tok_s if reference else None)):
        if value:
            print(f"  {what} {value:.2f} tok/s = {value / line.bound_tok_s:.0%} of the bound, "
                  f"{value / line.estimate_tok_s:.0%} of the estimate")
    from sparkgate.bench import measured as measured_h200

    for text in measured_h200.lines(loaded.profile, line.shape, line.setup):
        print(text)
    if json_out:
        write_text_atomically(Path(json_out), json.dumps({"profile": loaded.profile.name, "config": source,
                                                          **line.as_dict()}, indent=1) + "\n")


@sparkgate_task(
    "sizing",
    help={
        "profile": "profile name: its weights (draft included), Mamba slots, context and mem_fraction_static",
        "free": "free memory in GiB before the weights load, comma-separated (default 102,110: a DGX Spark's range)",
        "config": "checkpoint config.json (default: the checkpoint on this host, else the published shape)",
    }
)
def sizing(c, profile=None, free=None, config=None):
    """What the profile needs in memory, as SGLang sizes it: weights, the Mamba state pool, the KV cache for the
    context, the pool budget at each free-memory figure, and the free memory the profile needs (docs/sizing.md)."""
    require(profile, "profile", "invoke sizing --profile all-three")
    from sparkgate.bench import roofline as roof
    from sparkgate.bench import sizing as size
    from sparkgate.deploy import preflight
    from sparkgate.profile import loading as profiles

    try:
        frees = [float(x) for x in (free or ",".join(map(str, size.SPARK_FREE_GIB))).split(",")]
    except ValueError:
        frees = []
    if not frees or not all(0 < f < 1e6 for f in frees):  # also refuses nan and inf
        raise Exit(f"sparkgate sizing: --free {free!r}: expected GiB numbers separated by commas", code=1)
    try:
        loaded = profiles.load(profile)
        path = Path(config) if config else roof.checkpoint_config(loaded.profile.model.path)
        shape = roof.ModelShape.from_file(path) if path else roof.ModelShape.from_config(roof.REFERENCE_CONFIG)
    except (ProfileError, roof.RooflineError) as exc:
        raise Exit(f"sparkgate sizing: {exc}", code=1) from None
    plans = [size.plan(loaded.profile, shape, f) for f in frees]
    first = plans[0]
    print(f"sizing for {loaded.profile.name}: {path or 'reference shape (no checkpoint config.json found)'}")
    print(f"  weights {first.weights_gib:.2f} GiB (target{' + NEXTN draft' if loaded.profile.optimizations.mtp.enabled else ''}"
          f", as SGLang allocates them), Mamba state {first.mamba_gib:.2f} GiB ({first.mamba_slots} slots + 1)"
          + (f" + {first.spec_state_gib:.2f} GiB for the MTP steps" if first.spec_state_gib else "") + ", "
          f"KV {first.kv_bytes_per_token:,} B/token = {first.kv_gib_for_context:.2f} GiB for "
          f"{first.context_tokens:,} tokens; --mem-fraction-static {first.mem_fraction_static:g}")
    if first.drafter_unmodelled:
        print("  the DSpark drafter's weights and pools are not modelled: add them before trusting the headroom")
    for plan in plans:
        print(f"  {plan.summary()}")
    print(f"  needs {first.min_free_gib:.1f} GiB free for the whole context (preflight refuses below "
          f"{preflight.memory_floor(loaded.profile)[0]:.1f} GiB MemAvailable)")
    # (the floor is the checkpoint on this host's, as `invoke deploy` computes it; --config changes the lines above)


ns = Collection(bench, compare, roofline, sizing)
