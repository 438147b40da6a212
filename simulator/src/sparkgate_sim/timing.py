"""The decode timing model: how long each simulated step takes, in simulated seconds.

Anchors: published Spark runs of Ling-3.0-flash at batch 1 (the Ling notebook's Spark recipe) and peers'
same-harness runs. The model, its derivations and the rates it gives: docs/simulator.md, "Timing model" and "Per
workload, NEXTN and DSpark". (A drafter on its own vocab modules is untrained: its accept length collapses to 1.00.)
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkgate_sim.workload import ARITH, CODE, PROSE

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
# accept-decay past its context length: below the 2.26 a verify step costs (speculation no longer pays).
DECAYED_ACCEPT_LENGTH = 1.5
EAGER_DECODE_FACTOR = 0.45  # no CUDA graphs: 55 % slower
ACCEPT_JITTER = 0.05  # +- per request, seeded by the prompt
TTFT_BASE_S = 0.2
PREFILL_S_PER_TOKEN = 2.0e-6

# Plain-step calibration for MTP configurations, fixed by the all-three anchor (docs/simulator.md, "Timing model").
MTP_PLAIN_CALIBRATION = ALL_THREE_TOK_S * VERIFY_COST_AT_HEALTHY / (HEALTHY_ACCEPT_LENGTH * HUMMING_FP8_TOK_S)
_ALL_THREE_PLAIN_TOK_S = HUMMING_FP8_TOK_S * MTP_PLAIN_CALIBRATION
# cost(A) = VERIFY_FIXED_COST + VERIFY_COST_PER_TOKEN * A, through (2.68, 2.26) and (1.00, plain/24.0).
VERIFY_COST_PER_TOKEN = (VERIFY_COST_AT_HEALTHY - _ALL_THREE_PLAIN_TOK_S / BROKEN_DRAFT_TOK_S) / (
    HEALTHY_ACCEPT_LENGTH - BROKEN_ACCEPT_LENGTH
)
VERIFY_FIXED_COST = VERIFY_COST_AT_HEALTHY - VERIFY_COST_PER_TOKEN * HEALTHY_ACCEPT_LENGTH



def _accept_for_rate(tok_s: float, fixed: float, per_token: float) -> float:
    """The accept length A at which A / (fixed + per_token * A) calibrated plain steps run at `tok_s`."""
    ratio = tok_s / _ALL_THREE_PLAIN_TOK_S
    return ratio * fixed / (1.0 - ratio * per_token)


# NEXTN per workload: arith is the published anchor; code and prose are solved on the same cost line.
NEXTN_TOK_S = {CODE: 55.2, PROSE: 45.0, ARITH: ALL_THREE_TOK_S}
NEXTN_ACCEPT = {
    ARITH: HEALTHY_ACCEPT_LENGTH,
    CODE: _accept_for_rate(NEXTN_TOK_S[CODE], VERIFY_FIXED_COST, VERIFY_COST_PER_TOKEN),
    PROSE: _accept_for_rate(NEXTN_TOK_S[PROSE], VERIFY_FIXED_COST, VERIFY_COST_PER_TOKEN),
}

# DSpark: the peers' rates at the drafter's published accept lengths fix the verify cost line.
DSPARK_TOK_S = {CODE: 68.4, PROSE: 43.4, ARITH: 62.0}
DSPARK_PUBLISHED_ACCEPT = {CODE: 6.57, PROSE: 3.51}  # HumanEval, Alpaca
_COST_CODE = DSPARK_PUBLISHED_ACCEPT[CODE] * _ALL_THREE_PLAIN_TOK_S / DSPARK_TOK_S[CODE]
_COST_PROSE = DSPARK_PUBLISHED_ACCEPT[PROSE] * _ALL_THREE_PLAIN_TOK_S / DSPARK_TOK_S[PROSE]
DSPARK_COST_PER_TOKEN = (_COST_CODE - _COST_PROSE) / (DSPARK_PUBLISHED_ACCEPT[CODE] - DSPARK_PUBLISHED_ACCEPT[PROSE])
DSPARK_FIXED_COST = _COST_CODE - DSPARK_COST_PER_TOKEN * DSPARK_PUBLISHED_ACCEPT[CODE]
DSPARK_ACCEPT = {
    CODE: DSPARK_PUBLISHED_ACCEPT[CODE],
    PROSE: DSPARK_PUBLISHED_ACCEPT[PROSE],
    ARITH: _accept_for_rate(DSPARK_TOK_S[ARITH], DSPARK_FIXED_COST, DSPARK_COST_PER_TOKEN),
}
# The drafting part of the fixed cost, from bytes read per step (docs/simulator.md, "Per workload, NEXTN and DSpark").
SPARK_BANDWIDTH_GB_S = 273.0
DRAFTER_WEIGHTS_GB = 1.36 * 2  # 1.36B parameters, BF16
FP8_LM_HEAD_GB = 157184 * 2560 / 1e9  # vocab x hidden, one byte each
DSPARK_GAMMA = 8
EAGER_MARKOV_STEP_S = 0.25e-3
_PLAIN_STEP_S = 1.0 / _ALL_THREE_PLAIN_TOK_S
DSPARK_DRAFT_FORWARD_COST = DRAFTER_WEIGHTS_GB / SPARK_BANDWIDTH_GB_S / _PLAIN_STEP_S
DSPARK_PROPOSAL_COST = FP8_LM_HEAD_GB / SPARK_BANDWIDTH_GB_S / _PLAIN_STEP_S
_EAGER_EXTRA = 1.0 / EAGER_DECODE_FACTOR - 1.0
DSPARK_GRAPH_DISABLED_EXTRA = (DSPARK_DRAFT_FORWARD_COST + DSPARK_PROPOSAL_COST) * _EAGER_EXTRA
DSPARK_PROPOSAL_EAGER_EXTRA = DSPARK_PROPOSAL_COST * _EAGER_EXTRA + DSPARK_GAMMA * EAGER_MARKOV_STEP_S / _PLAIN_STEP_S


def nominal_accept_length(dspark: bool, workload: str) -> float:
    """The healthy mean accept length of a speculative configuration on one kind of text."""
    return (DSPARK_ACCEPT if dspark else NEXTN_ACCEPT)[workload]


@dataclass(frozen=True)
class SpeedModel:
    humming: bool
    fp8_lm_head: bool
    speculative: bool
    cuda_graph: bool
    dspark: bool = False  # the speculative algorithm is DSpark (else NEXTN/EAGLE)
    dspark_draft_graph: bool = True  # the drafter runs from its CUDA graph
    dspark_proposal_folded: bool = True  # the block proposal is folded into that graph

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
        if not self.dspark:
            return (VERIFY_FIXED_COST + VERIFY_COST_PER_TOKEN * emitted_tokens) * self.plain_step_s()
        fixed = DSPARK_FIXED_COST
        if self.cuda_graph and not self.dspark_draft_graph:
            fixed += DSPARK_GRAPH_DISABLED_EXTRA
        elif self.cuda_graph and not self.dspark_proposal_folded:
            fixed += DSPARK_PROPOSAL_EAGER_EXTRA
        # (without any CUDA graph the eager factor already slows the whole step, drafter included)
        return (fixed + DSPARK_COST_PER_TOKEN * emitted_tokens) * self.plain_step_s()

    def draft_part_s(self) -> float:
        """DSpark: the drafting part (draft forward + proposal) of one verify step, in simulated seconds."""
        if not self.dspark:
            return 0.0
        part = DSPARK_DRAFT_FORWARD_COST + DSPARK_PROPOSAL_COST
        if self.cuda_graph and not self.dspark_draft_graph:
            part += DSPARK_GRAPH_DISABLED_EXTRA
        elif self.cuda_graph and not self.dspark_proposal_folded:
            part += DSPARK_PROPOSAL_EAGER_EXTRA
        return part * self.plain_step_s()

    def decode_tok_s(self, accept_length: float | None = None) -> float:
        """Steady-state decode rate (tokens after the first, per simulated second); the accept length
        defaults to the healthy one on arithmetic (the calibration workload)."""
        if not self.speculative:
            return self.plain_tok_s()
        if accept_length is None:
            accept_length = nominal_accept_length(self.dspark, ARITH)
        return accept_length / self.verify_step_s(accept_length)


def ttft_s(prompt_tokens: int) -> float:
    return TTFT_BASE_S + PREFILL_S_PER_TOKEN * prompt_tokens


def accept_length_for(
    seed: int, *, max_len: int, broken: bool, degraded: bool, nominal: float = HEALTHY_ACCEPT_LENGTH
) -> float:
    """The mean accept length of one request: the nominal one +- a small prompt-seeded jitter, or collapsed."""
    if broken:
        return BROKEN_ACCEPT_LENGTH
    if degraded:
        return min(DEGRADED_ACCEPT_LENGTH, float(max_len))
    jitter = ((seed % 1001) / 1000.0 - 0.5) * 2 * ACCEPT_JITTER
    return max(1.0, min(nominal + jitter, float(max_len)))


def emitted_at_step(accept_length: float, step: int, phase: float = 0.0) -> int:
    """Tokens emitted by verify step `step` so that the running mean tracks `accept_length` exactly
    (a Bresenham-style spread: 2.68 gives a deterministic mix of 2s and 3s; `phase` in [0, 1) shifts
    where a request starts in that pattern, so short requests are not biased low)."""
    return int((step + 1) * accept_length + phase) - int(step * accept_length + phase)


def accepted_per_step(accept_length: float, steps: int, phase: float = 0.0) -> list[int]:
    return [emitted_at_step(accept_length, k, phase) for k in range(steps)]
