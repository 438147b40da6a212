"""The comparison PNG: decode tok/s and TPOT per run, with the published Spark figures and the roofline
estimate drawn for reference. Runs flagged as regressions are drawn in red."""

from __future__ import annotations

from pathlib import Path

from sparkgate import atomic
from sparkgate.bench.comparison import REGRESSION, Comparison
from sparkgate.bench.published import BROKEN_DRAFT, PUBLISHED


def render_png(comparison: Comparison, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [row.label for row in comparison.rows]
    speeds = [row.numbers.get("decode_tok_s") or 0.0 for row in comparison.rows]
    tpots = [row.numbers.get("tpot_ms") or 0.0 for row in comparison.rows]
    bad = [any(f.startswith(REGRESSION) for f in row.flags) for row in comparison.rows]
    colors = ["#c0392b" if flag else "#2e86c1" for flag in bad]
    published = [PUBLISHED.get(row.run.profile) for row in comparison.rows]
    roof = [(row.run.summary.get("roofline") or {}).get("estimate_tok_s") for row in comparison.rows]
    xs = range(len(labels))

    fig, (ax_speed, ax_tpot) = plt.subplots(1, 2, figsize=(max(8.0, 2.2 * len(labels) + 4), 4.8), dpi=110)
    for axis, values in ((ax_speed, speeds), (ax_tpot, tpots)):
        axis.bar(xs, values, color=colors)
        for x, value in zip(xs, values, strict=True):  # inside the bar: the published marks sit on its top
            axis.annotate(f"{value:.1f}", (x, value / 2), ha="center", va="center", fontsize=9, color="white")
    pub_x = [x for x, ref in zip(xs, published, strict=True) if ref]
    ax_speed.scatter(pub_x, [ref.decode_tok_s for ref in published if ref], marker="_", s=900, color="black",
                     linewidths=2.5, label="published (Spark, GSM8K)", zorder=3)
    roof_x = [x for x, value in zip(xs, roof, strict=True) if value]
    ax_speed.scatter(roof_x, [value for value in roof if value], marker="v", color="grey",
                     label="roofline estimate", zorder=3)
    ax_speed.axhline(BROKEN_DRAFT.decode_tok_s, color="#c0392b", linestyle=":", linewidth=1,
                     label=f"published broken draft ({BROKEN_DRAFT.decode_tok_s:g})")
    ax_speed.set_ylabel("decode tok/s (batch 1)")
    ax_speed.set_title("decode speed")

    ax_tpot.scatter(pub_x, [ref.tpot_ms for ref in published if ref], marker="_", s=900, color="black",
                    linewidths=2.5, label="published", zorder=3)
    ax_tpot.set_ylabel("TPOT ms (1000 / decode tok/s)")
    ax_tpot.set_title("time per output token")

    for axis in (ax_speed, ax_tpot):
        axis.set_xticks(list(xs))
        axis.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
        axis.grid(axis="y", alpha=0.3)
    ax_speed.legend(fontsize=7, loc="upper left", framealpha=0.9)
    ax_speed.set_ylim(0, max([*speeds, *(v for v in roof if v)], default=1) * 1.25)
    base = comparison.baseline.run
    fig.suptitle(f"sparkgate bench: {base.summary.get('workload', {}).get('description', '')} "
                 f"[{base.summary.get('environment', {}).get('target')}]", fontsize=9)
    fig.tight_layout()
    try:
        with atomic.replacing(path) as temp:  # a unique temp name: concurrent compares cannot collide
            fig.savefig(temp, format="png")
    finally:
        plt.close(fig)
    return path
