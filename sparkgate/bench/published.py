"""The published DGX Spark figures for Ling-3.0-flash at batch 1 (GSM8K, 1,319 questions, 5-shot, thinking on,
temperature 0.6 / top_p 0.95 / top_k 29, seed 42). Sources: the ly01325 result JSONs (baseline, optimized) and
the Ling notebook (Humming + FP8 head, the broken draft): github.com/ly01325/Ling3-Flash-DGX-Spark results/ and
github.com/inclusionAI/ling-cookbook guide/local-deploy/ling-3.0-flash.

TPOT is published only as 1000 / decode tok/s, so it is derived here the same way.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Published:
    label: str
    decode_tok_s: float
    mean_e2e_s: float | None = None
    p50_e2e_s: float | None = None
    p95_e2e_s: float | None = None
    mean_ttft_s: float | None = None
    accuracy: float | None = None
    accept_length: float | None = None
    completion_tokens: int | None = None
    source: str = ""

    @property
    def tpot_ms(self) -> float:
        return 1000.0 / self.decode_tok_s


# Keyed by the sparkgate profile that launches the same configuration.
PUBLISHED: dict[str, Published] = {
    "baseline": Published(
        "baseline (published)", 37.81, 15.21, 8.36, 50.20, 0.207, 1278 / 1319, None, 748_286,
        "ly01325 gsm8k-1319-baseline-summary.json",
    ),
    "humming-fp8": Published("Humming + FP8 head (published, ~41)", 41.0, source="Ling notebook (zh), GSM8K"),
    "all-three": Published(
        "all three (published)", 53.89, 11.49, 6.11, 38.60, 0.214, 1277 / 1319, 2.68, 801_260,
        "ly01325 gsm8k-1319-optimized-summary.json",
    ),
}

# All three with the FP8 head but without the draft-sharing fix: every draft is rejected.
BROKEN_DRAFT = Published("all three, draft head unshared (published)", 24.0, accept_length=1.0,
                         source="Ling notebook FAQ")

# One MTP verify step of all three costs about this many plain decode steps of the same engine: the published
# all-three run at accept length 2.68 and 53.89 tok/s against its plain step (the Ling notebook's recipe, above).
# Speculation pays only while the accept length stays above it (the break-even accept length); the gate uses
# this where the engine's own clock cannot measure the ratio (sparkgate/evidence/calibration.py verify_cost_ratio).
VERIFY_STEP_COST = 2.26
VERIFY_STEP_COST_SOURCE = "published: Ling-3.0-flash all three on a DGX Spark (ling-cookbook; ly01325 optimized summary)"
