"""`compare`: the published table's columns for several runs, the change against the baseline run, a paired
exact McNemar test on per-question correctness, the roofline fraction, and flags for what must not ship."""

from __future__ import annotations

import io
from pathlib import Path

from sparkgate.bench import plot, runs, stats
from sparkgate.bench.comparison import DEFAULT_MIN_ACCEPT, REGRESSION, Comparison, Row
from sparkgate.bench.published import BROKEN_DRAFT, PUBLISHED
from sparkgate.bench.stats import cell


def _pct(value: float | None, reference: float | None) -> float | None:
    if value is None or not reference:
        return None
    return 100.0 * (value - reference) / reference


def _min_accept(profile: str, key: str = "mtp") -> float:
    try:
        from sparkgate.profile import loading as profiles
        return getattr(profiles.load(profile).profile.optimizations, key).min_accept_length
    except Exception:  # a profile renamed or removed since the run: the shipped default
        return DEFAULT_MIN_ACCEPT


def _protocol_key(run: runs.Run) -> tuple:
    protocol = run.summary.get("protocol", {})
    return (protocol.get("api"), (protocol.get("sampling") or {}).get("name"), protocol.get("max_tokens"),
            run.summary.get("environment", {}).get("target"))


def pick_baseline(loaded: list[runs.Run], ref: str | None) -> runs.Run:
    if ref:
        path = runs.resolve(ref)
        for run in loaded:
            if run.path.resolve() == path.resolve():
                return run
        raise runs.RunError(f"--baseline {ref} is not one of the compared runs")
    for run in loaded:
        if not run.summary.get("requested_optimizations") and not run.summary.get("environment", {}).get("sim_faults"):
            return run
    return loaded[0]


def compare(loaded: list[runs.Run], baseline_ref: str | None = None, alpha: float = 0.05) -> Comparison:
    if not loaded:
        raise runs.RunError("nothing to compare: give run ids (or run `invoke bench` first)")
    base_run = pick_baseline(loaded, baseline_ref)
    base = base_run.summary["results"]
    base_correct = base_run.correctness()
    fingerprint = base_run.summary.get("workload", {}).get("fingerprint")
    rows, notes = [], []
    for run in loaded:
        numbers = run.summary["results"]
        row = Row(run, numbers)
        row.delta_pct = {key: _pct(numbers.get(key), base.get(key))
                         for key in ("decode_tok_s", "mean_e2e_s", "tpot_ms", "p50_e2e_s", "p95_e2e_s")}
        same_items = run.summary.get("workload", {}).get("fingerprint") == fingerprint
        if run is not base_run:
            if not same_items:
                notes.append(f"{run.label} ({run.id}) ran a different prompt set than the baseline: no paired test")
            elif run.summary.get("workload", {}).get("scored") and not numbers.get("accuracy_not_measured"):
                row.mcnemar = stats.mcnemar(base_correct, run.correctness(), alpha)
            if _protocol_key(run) != _protocol_key(base_run):
                notes.append(f"{run.label}: protocol (api, sampling, max_tokens, target) differs from the baseline's")
        row.flags = _flags(run, numbers, base, run is base_run)
        if row.mcnemar and row.mcnemar.verdict == "significant: worse":
            row.flags.append(f"{REGRESSION}: accuracy significantly worse than baseline ({row.mcnemar.detail})")
        rows.append(row)
    if any(run.summary.get("workload", {}).get("name") == "synthetic" for run in loaded):
        notes.append("synthetic workload: decode speed only; its gains do not extrapolate to real prompts "
                     "(docs/bench.md)")
    if any(run.summary.get("environment", {}).get("target") == "sim" for run in loaded):
        notes.append("simulator runs: the speeds are the simulator's timing model fed back, not hardware; they "
                     "prove the measurement, not the stack; accuracy on the simulator is meaningless (it writes "
                     "pseudo-words)")
    base_row = next(row for row in rows if row.run is base_run)
    return Comparison(base_row, rows, alpha, list(dict.fromkeys(notes)))


def _flags(run: runs.Run, numbers: dict, base: dict, is_base: bool) -> list[str]:
    flags = []
    summary = run.summary
    requested = summary.get("requested_optimizations") or []
    if not summary.get("complete"):
        flags.append(f"incomplete run: {summary.get('stopped_early') or 'fewer requests than items'}")
    if numbers.get("errors"):
        flags.append(f"{numbers['errors']} failed request(s)")
    speed, base_speed = numbers.get("decode_tok_s"), base.get("decode_tok_s")
    if not is_base and requested and speed is not None and base_speed and speed < base_speed:
        flags.append(f"{REGRESSION}: decodes slower than the baseline ({speed:.2f} vs {base_speed:.2f} tok/s, "
                     f"{_pct(speed, base_speed):+.1f} %): a stacked profile must never be slower")
    speculative = next((key for key in ("mtp", "dspark") if key in requested), None)
    if speculative:
        accept = numbers.get("accept_length")
        floor = _min_accept(run.profile, speculative)
        if accept is None:
            flags.append("accept length not reported: the engine returned no per-request spec fields on this api "
                         "(use --api generate, or an SGLang that returns sglext.spec_tokens_details)")
        elif accept < floor:
            flags.append(f"{REGRESSION}: accept length {accept:.2f} < {floor}: the draft is rejected (a draft LM "
                         f"head that does not share the FP8 head reads 1.00; published {BROKEN_DRAFT.decode_tok_s} "
                         "tok/s in that state)")
    timing, base_timing = numbers.get("timing"), base.get("timing")
    if not is_base and timing != base_timing:
        flags.append(f"timing differs from the baseline's ({timing or 'unknown'} vs {base_timing or 'unknown'}): one "
                     "is the engine's own accounting, the other a client's stopwatch; compare runs of the same --api")
    truncated = numbers.get("truncated") or 0
    if truncated and summary.get("workload", {}).get("scored"):
        flags.append(f"{truncated} answer(s) hit max_tokens: accuracy and latency are biased")
    return flags


# ---------------------------------------------------------------------------------------------- rendering
def _with_delta(value, delta, pattern: str) -> str:
    text = cell(value, pattern)
    return text if delta is None or abs(delta) < 0.05 else f"{text} ({delta:+.1f}%)"


def table_rows(comparison: Comparison) -> list[list[str]]:
    out = []
    for row in comparison.rows:
        n = row.numbers
        roof = row.run.summary.get("roofline") or {}
        mark = " *" if row is comparison.baseline else ""
        mc = row.mcnemar
        out.append([
            row.label + mark,
            str(n.get("completed")),
            _with_delta(n.get("decode_tok_s"), row.delta_pct.get("decode_tok_s"), "{:.2f}"),
            _with_delta(n.get("mean_e2e_s"), row.delta_pct.get("mean_e2e_s"), "{:.2f}"),
            cell(n.get("tpot_ms"), "{:.2f}"),
            cell(n.get("p50_e2e_s"), "{:.2f}"),
            cell(n.get("p95_e2e_s"), "{:.2f}"),
            cell(n.get("mean_ttft_s"), "{:.3f}"),
            cell(n.get("accept_length"), "{:.2f}"),
            stats.accuracy_text(n, "{:.2%}") if n.get("scored") or n.get("accuracy_not_measured") else "-",
            "baseline" if row is comparison.baseline else (f"{mc.verdict} (p={mc.p_value:.3g})" if mc else "-"),
            f"{cell(roof.get('fraction_of_estimate'), '{:.0%}')} / {cell(roof.get('fraction_of_bound'), '{:.0%}')}",
        ])
    return out


HEADERS = ["run", "n", "decode tok/s (vs base)", "mean e2e s (vs base)", "TPOT ms", "P50 s", "P95 s", "TTFT s",
           "accept", "accuracy", "McNemar vs baseline", "roofline est / bound"]


def render(comparison: Comparison, width: int = 200) -> str:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"sparkgate bench compare (baseline *: {comparison.baseline.run.id})", show_lines=False)
    for header in HEADERS:
        table.add_column(header, overflow="fold")
    for cells, row in zip(table_rows(comparison), comparison.rows, strict=True):
        style = "red" if any(f.startswith(REGRESSION) for f in row.flags) else None
        table.add_row(*(escape(cell) for cell in cells), style=style)
    published = Table(title="published, DGX Spark (GSM8K 1,319 q, 5-shot, thinking, sampled)")
    for header in ("configuration", "decode tok/s", "TPOT ms", "mean/P50/P95 e2e s", "accept", "accuracy"):
        published.add_column(header)
    for ref in (*PUBLISHED.values(), BROKEN_DRAFT):
        latency = "/".join(cell(v, "{:.2f}") for v in (ref.mean_e2e_s, ref.p50_e2e_s, ref.p95_e2e_s)) \
            if ref.mean_e2e_s else "-"
        published.add_row(ref.label, f"{ref.decode_tok_s:.2f}", f"{ref.tpot_ms:.2f}", latency,
                          cell(ref.accept_length, "{:.2f}"), cell(ref.accuracy, "{:.2%}"))
    console = Console(file=io.StringIO(), record=True, width=width, force_terminal=False, color_system=None)
    console.print(table)
    say = lambda text: console.print(text, markup=False, highlight=False)  # noqa: E731
    for row in comparison.rows:
        for flag in row.flags:
            say(f"  {row.label}: {flag}")
        if row.mcnemar and row is not comparison.baseline:
            m = row.mcnemar
            say(f"  {row.label} McNemar vs baseline: {m.verdict}: {m.detail} "
                f"[both right {m.both_correct}, baseline only {m.a_only}, this only {m.b_only}, "
                f"both wrong {m.both_wrong}]")
    for note in comparison.notes:
        say(f"  note: {note}")
    say("  roofline: measured decode speed as a fraction of bandwidth / bytes per token (estimate: "
        "independent expert routing in the verify window; bound: full overlap). See `invoke roofline`.")
    console.print(published)
    return console.export_text()


def write(comparison: Comparison, out_dir: Path | None = None, png: bool = True) -> tuple[Path, str]:
    out_dir = out_dir or runs.compare_dir()
    text = render(comparison)
    runs.write_compare(out_dir, comparison.as_dict(), text)
    if png:
        try:
            plot.render_png(comparison, out_dir / "compare.png")
        except ModuleNotFoundError as exc:  # a deploy-only venv: the table is the result, the PNG an extra
            if exc.name != "matplotlib":
                raise
            text += ("compare.png not drawn: matplotlib is not installed here (install the bench extra: "
                     "`python -m pip install -e '.[bench]'` in the checkout)\n")
    return out_dir, text
