"""The text and JSON of `invoke compare A,B`: a per-workload table (the per-item mean decode rate the test
compares next to the aggregate speed; raw and Holm-adjusted p), a recommendation section, and the commands
that produce any missing run. Both files are written atomically."""

from __future__ import annotations

import io
from pathlib import Path

from sparkgate.bench import runs
from sparkgate.bench.per_workload import ProfileComparison
from sparkgate.bench.stats import cell

HEADERS = ["workload", "profile", "run", "n", "item mean tok/s", "agg tok/s", "TPOT ms", "accept (agg / median)",
           "diff tok/s vs {a} [CI]", "p raw / Holm", "verdict"]


def table_rows(comparison: ProfileComparison) -> list[list[str]]:
    rows = []
    for w in comparison.workloads:
        if w.status != "compared":
            rows.append([w.workload, *[""] * (len(HEADERS) - 2), w.status])
            continue
        for index, side in enumerate(w.sides):
            n = side.numbers
            diff = p = verdict = ""
            if index == 1 and w.paired is not None:
                d = w.paired
                diff = "-" if d.mean_difference is None else \
                    f"{d.mean_difference:+.2f} [{d.ci_low:+.2f}, {d.ci_high:+.2f}]"
                p = f"{cell(d.p_value, '{:.2g}')} / {cell(w.p_adjusted, '{:.2g}')}"
                verdict = w.recommendation.verdict if w.recommendation else ""
            accept = f"{cell(n['accept_length'], '{:.2f}')} / {cell(side.accept_median, '{:.2f}')}"
            rows.append([w.workload if index == 0 else "", side.profile, side.run.id, str(n["completed"]),
                         cell(side.item_mean_tok_s, "{:.2f}"), cell(n["decode_tok_s"], "{:.2f}"),
                         cell(n["tpot_ms"], "{:.2f}"), accept, diff, p, verdict])
    return rows


def render(comparison: ProfileComparison, width: int = 200) -> str:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    a, b = comparison.profiles
    level = f"{1 - comparison.alpha:.0%}"
    family = len(comparison.family)
    holm = f"p Holm-Bonferroni adjusted over {family} workloads" if family > 1 else "one workload, p unadjusted"
    table = Table(title=f"sparkgate compare {a},{b}: per workload (paired t-test on per-item decode tok/s, "
                        f"{b} - {a}, {level} CI, {holm}, alpha {comparison.alpha:g})")
    for header in HEADERS:
        table.add_column(header.format(a=a), overflow="fold")
    for cells in table_rows(comparison):
        table.add_row(*(escape(cell) for cell in cells))
    console = Console(file=io.StringIO(), record=True, width=width, force_terminal=False, color_system=None)
    console.print(table)
    say = lambda text: console.print(text, markup=False, highlight=False)  # noqa: E731
    say("Recommendation (from the measured runs above only):")
    for w in comparison.workloads:
        if w.status == "compared" and w.recommendation:
            say(f"  {w.recommendation.text}")
            for note in w.recommendation.speculation:
                say(f"    note: {note}")
            if w.detail:
                say(f"    ({w.detail})")
        else:
            say(f"  {w.workload}: {w.status}: {w.detail}")
            for command in w.produce:
                say(f"    produce it: {command}")
    for note in comparison.notes:
        say(f"  note: {note}")
    return console.export_text()


def write(comparison: ProfileComparison, out_dir: Path | None = None) -> tuple[Path, str]:
    out_dir = out_dir or runs.compare_dir()
    text = render(comparison)
    runs.write_compare(out_dir, comparison.as_dict(), text)
    return out_dir, text
