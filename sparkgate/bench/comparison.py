"""The comparison's data types, shared by the text report and the plot (neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkgate.bench import runs, stats
from sparkgate.bench.published import PUBLISHED

REGRESSION = "REGRESSION"
DEFAULT_MIN_ACCEPT = 2.0


@dataclass
class Row:
    run: runs.Run
    numbers: dict
    delta_pct: dict[str, float | None] = field(default_factory=dict)
    mcnemar: stats.McNemar | None = None
    flags: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.run.label

    def as_dict(self) -> dict:
        return {
            "run": self.run.id,
            "label": self.label,
            "profile": self.run.profile,
            "results": self.numbers,
            "delta_vs_baseline_pct": self.delta_pct,
            "roofline": self.run.summary.get("roofline"),
            "mcnemar_vs_baseline": self.mcnemar.as_dict() if self.mcnemar else None,
            "flags": self.flags,
        }


@dataclass
class Comparison:
    baseline: Row
    rows: list[Row]
    alpha: float
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[str]:
        return [f"{row.label}: {flag}" for row in self.rows for flag in row.flags if flag.startswith(REGRESSION)]

    def as_dict(self) -> dict:
        return {
            "baseline": self.baseline.run.id,
            "alpha": self.alpha,
            "rows": [row.as_dict() for row in self.rows],
            "notes": self.notes,
            "regressions": self.regressions,
            "published": {key: value.__dict__ for key, value in PUBLISHED.items()},
        }
