"""The decode timing model: how long each simulated step takes, in simulated seconds.

Anchors (published Spark runs of Ling-3.0-flash at batch 1, recipe facts 1.4) that the model hits
exactly at the nominal accept length:

  baseline (flashinfer_mxfp4 MoE, BF16/FP32 head, no MTP) ........ 37.81 tok/s
  Humming + FP8 head, no MTP ..................................... 41.0  tok/s
  all three (Humming + FP8 head + MTP, accept length 2.68) ....... 53.89 tok/s
  all three with the draft reading the FP8 head without scales ... 24.0  tok/s at accept 1.00

Plain (non-speculative) decode: one token per step; the step rate is the baseline times a gain per
engaged optimization. The published data give only the product of the Humming and FP8-head gains
(41.0 / 37.81 = 1.0844), so we split it: Humming x1.03, FP8 head x1.0528 (= 41.0 / 37.81 / 1.03).

Speculative (MTP) decode: one verify step emits A tokens on average (A = accept length, bonus token
included). A verify step costs `a + b * A` plain steps of the same configuration: a fixed part (the
draft steps plus the 4-position target forward) and a per-emitted-token part (sampling and KV commit).
Two anchors fix a and b: the cost is 2.26 plain steps at A = 2.68 (healthy) and, in the broken-draft
case (A = 1.00), the rate is 24.0 tok/s. The plain step of an MTP configuration runs at the non-MTP
rate times a calibration factor (1.1084) chosen so that all three lands on 53.89 tok/s: the published
41.0 and 53.89 come from different runs, and the factor absorbs that difference. The same factor and
cost line apply to every MTP combination (e.g. MTP alone: 37.81 x 1.1084 x 2.68 / 2.26 = 49.70 tok/s).

Without CUDA graphs every decode step is launched eagerly: decode runs at 0.45 of the graph rate
(55 % slower). Prefill (time to first token) is 0.2 s plus a small per-prompt-token cost, matching
the published mean TTFT of 0.207-0.214 s.
"""

from __future__ import annotations

from dataclasses import dataclass

BASELINE_TOK_S = 37.81
HUMMING_GAIN = 1.03
HUMMING_FP8_TOK_S = 41.0
FP8_HEAD_GAIN = HUMMING_FP8_TOK_S / BASELINE_TOK_S / HUMMING_GAIN  # 1.0528
ALL_THREE_TOK_S = 53.89
HEALTHY_ACCEPT_LENGTH = 2.68
VERIFY_COST_AT_HEALTHY = 2.26  # verify step / plain step, at the healthy accept length
BROKEN_DRAFT_TOK_S = 24.0
BROKEN_ACCEPT_LENGTH = 1.0
DEGRADED_ACCEPT_LENGTH = 1.2
EAGER_DECODE_FACTOR = 0.45  # no CUDA graphs: 55 % slower
ACCEPT_JITTER = 0.05  # +- per request, seeded by the prompt
TTFT_BASE_S = 0.2
PREFILL_S_PER_TOKEN = 2.0e-6

# Plain-step calibration for MTP configurations, fixed by the all-three anchor (see module doc).
MTP_PLAIN_CALIBRATION = ALL_THREE_TOK_S * VERIFY_COST_AT_HEALTHY / (HEALTHY_ACCEPT_LENGTH * HUMMING_FP8_TOK_S)
_ALL_THREE_PLAIN_TOK_S = HUMMING_FP8_TOK_S * MTP_PLAIN_CALIBRATION
# cost(A) = VERIFY_FIXED_COST + VERIFY_COST_PER_TOKEN * A, through (2.68, 2.26) and (1.00, plain/24.0).
VERIFY_COST_PER_TOKEN = (VERIFY_COST_AT_HEALTHY - _ALL_THREE_PLAIN_TOK_S / BROKEN_DRAFT_TOK_S) / (
    HEALTHY_ACCEPT_LENGTH - BROKEN_ACCEPT_LENGTH
)
VERIFY_FIXED_COST = VERIFY_COST_AT_HEALTHY - VERIFY_COST_PER_TOKEN * HEALTHY_ACCEPT_LENGTH


@dataclass(frozen=True)
class SpeedModel:
    humming: bool
    fp8_lm_head: bool
    speculative: bool
    cuda_graph: bool

    def plain_tok_s(self) -> float:
        """Rate of plain one-token decode steps of this configuration (for MTP: the calibrated step)."""
        rate = BASELINE_TOK_S
        if self.humming:
            rate *= HUMMING_GAIN
        if self.fp8_lm_head:
            rate *= FP8_HEAD_GAIN
        if self.speculative:
            rate *= MTP_PLAIN_CALIBRATION
        if not self.cuda_graph:
            rate *= EAGER_DECODE_FACTOR
        return rate

    def plain_step_s(self) -> float:
        return 1.0 / self.plain_tok_s()

    def verify_step_s(self, emitted_tokens: float) -> float:
        """One speculative verify step that emits `emitted_tokens` (accepted drafts + bonus)."""
        return (VERIFY_FIXED_COST + VERIFY_COST_PER_TOKEN * emitted_tokens) * self.plain_step_s()

    def decode_tok_s(self, accept_length: float = HEALTHY_ACCEPT_LENGTH) -> float:
        """Steady-state decode rate (tokens after the first, per simulated second)."""
        if not self.speculative:
            return self.plain_tok_s()
        return accept_length / self.verify_step_s(accept_length)


def ttft_s(prompt_tokens: int) -> float:
    return TTFT_BASE_S + PREFILL_S_PER_TOKEN * prompt_tokens


def accept_length_for(seed: int, *, max_len: int, broken: bool, degraded: bool) -> float:
    """The mean accept length of one request: healthy +- a small prompt-seeded jitter, or collapsed."""
    if broken:
        return BROKEN_ACCEPT_LENGTH
    if degraded:
        return min(DEGRADED_ACCEPT_LENGTH, float(max_len))
    jitter = ((seed % 1001) / 1000.0 - 0.5) * 2 * ACCEPT_JITTER
    return max(1.0, min(HEALTHY_ACCEPT_LENGTH + jitter, float(max_len)))


def emitted_at_step(accept_length: float, step: int, phase: float = 0.0) -> int:
    """Tokens emitted by verify step `step` so that the running mean tracks `accept_length` exactly
    (a Bresenham-style spread: 2.68 gives a deterministic mix of 2s and 3s; `phase` in [0, 1) shifts
    where a request starts in that pattern, so short requests are not biased low)."""
    return int((step + 1) * accept_length + phase) - int(step * accept_length + phase)


def accepted_per_step(accept_length: float, steps: int, phase: float = 0.0) -> list[int]:
    return [emitted_at_step(accept_length, k, phase) for k in range(steps)]
