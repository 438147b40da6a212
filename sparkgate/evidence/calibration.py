"""A bounded functional probe: fixed prompts at temperature 0 through /generate (streamed), measuring
TTFT, decode speed and SGLang's per-request speculative fields. Bounded by a token and a time budget.

Every judged duration is the engine's own (sparkgate/sglang/request_timing.py): TTFT and decode time come from
the final chunk's meta_info, so the figures do not depend on how busy the machine running the gate is.

Valid for a thinking model: /generate takes raw text (no chat template, no reasoning parser), and
`ignore_eos` makes every request decode its whole budget whether the model is inside `<think>` or not;
tokens come from meta_info.completion_tokens, never from the text."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from sparkgate.bench import published
from sparkgate.evidence.client import EngineClient, EngineUnreachable
from sparkgate.evidence.results import CheckResult, checked
from sparkgate.sglang import conformance as C
from sparkgate.sglang import request_timing

# SGLang's /generate meta_info keys (tokenizer_manager.py); the spec_* ones only when speculation ran.
COMPLETION_TOKENS = C.string_("meta_completion_tokens")
FINISH_REASON = C.string_("meta_finish_reason")
SPEC_ACCEPT_LENGTH = C.string_("meta_spec_accept_length")
SPEC_VERIFY_CT = C.string_("meta_spec_verify_ct")

# Fixed, varied prompts: arithmetic word problems like the GSM8K protocol the published figures use.
PROMPTS = (
    "Question: A baker makes 24 rolls per tray and bakes 7 trays. She sells 150 rolls. How many are left? "
    "Answer step by step.",
    "Question: A train travels 180 km in 2.5 hours. At the same speed, how far does it go in 4 hours? "
    "Answer step by step.",
    "Question: Tom has three times as many marbles as Ann. Together they have 48. How many does Tom have? "
    "Answer step by step.",
    "Question: A tank holds 1200 litres and drains 35 litres per minute. How long until it holds 500 litres? "
    "Answer step by step.",
)


@dataclass
class RequestResult:
    prompt_index: int
    completion_tokens: int = 0
    # The engine's own timing (meta_info first_token_latency / e2e_latency): what the speed checks judge.
    ttft_s: float | None = None
    decode_s: float | None = None
    decode_tok_s: float | None = None
    e2e_s: float | None = None
    # The client's stopwatch, wall seconds (sending to the first streamed chunk, first to last chunk): shown, and
    # judged only by engine.client_timing for gross disagreement with the engine's figures.
    client_ttft_wall_s: float | None = None
    client_decode_wall_s: float | None = None
    spec_accept_length: float | None = None
    spec_verify_ct: int | None = None
    finish_reason: str | None = None
    error: str | None = None


@dataclass
class CalibrationResult:
    requests: list[RequestResult] = field(default_factory=list)
    elapsed_s: float = 0.0  # engine time: the sum of the requests' e2e_latency
    budget_exhausted: bool = False
    time_scale: float = 1.0  # wall seconds per engine second (1.0 on a Spark; the simulator's scale)

    @property
    def completed(self) -> list[RequestResult]:
        return [r for r in self.requests if r.error is None and r.completion_tokens > 0]

    def decode_tok_s(self) -> float | None:
        """Aggregate decode speed in engine time: all decode tokens over all decode seconds the engine reported."""
        done = [r for r in self.completed if r.decode_s and r.decode_s > 0 and r.completion_tokens > 1]
        if not done:
            return None
        return sum(r.completion_tokens - 1 for r in done) / sum(r.decode_s for r in done)

    def ttft_s(self) -> float | None:
        """Mean time to first token, engine time."""
        done = [r.ttft_s for r in self.completed if r.ttft_s is not None]
        return sum(done) / len(done) if done else None

    def client_decode_tok_s(self) -> float | None:
        """The same aggregate from the client's stopwatch, in engine seconds (wall / time_scale): for display."""
        done = [r for r in self.completed
                if r.client_decode_wall_s and r.client_decode_wall_s > 0 and r.completion_tokens > 1]
        if not done:
            return None
        return sum(r.completion_tokens - 1 for r in done) / (sum(r.client_decode_wall_s for r in done) / self.time_scale)

    def accept_length(self) -> float | None:
        """Token-weighted: total completion tokens over total verify steps, as SGLang computes it."""
        done = [r for r in self.completed if r.spec_verify_ct]
        if len(done) != len(self.completed) or not done:
            return None
        return sum(r.completion_tokens for r in done) / sum(r.spec_verify_ct for r in done)

    def as_dict(self) -> dict:
        return {
            "elapsed_s": round(self.elapsed_s, 3),
            "budget_exhausted": self.budget_exhausted,
            "decode_tok_s": self.decode_tok_s(),
            "ttft_s": self.ttft_s(),
            "client_decode_tok_s": self.client_decode_tok_s(),
            "time_scale": self.time_scale,
            "accept_length": self.accept_length(),
            # A step's cost on the engine's own clock: a verify step (speculation) or a plain decode step.
            "verify_step_s": verify_step_s(self),
            "plain_step_s": plain_step_s(self),
            "requests": [asdict(r) for r in self.requests],
        }


def run(client: EngineClient, prompts: int, max_new_tokens: int, time_budget_s: float, time_scale: float) -> CalibrationResult:
    """Send up to `prompts` fixed prompts, one at a time (batch 1), stopping when the budget is spent.

    The budget is engine time: the requests' own e2e_latency, summed (a request without one counts its client
    time). The client's clock bounds only what no engine figure can: how long one read may hang, and the whole
    calibration's wall time (generously, so a busy host never exhausts it; a hung engine does)."""
    result = CalibrationResult(time_scale=time_scale)
    wall_cap = wall_cap_s(time_budget_s, time_scale)
    started = client.clock()  # the client's clock: a replay answers with the recorded durations
    for index in range(prompts):
        if result.elapsed_s > time_budget_s or client.clock() - started > wall_cap:
            result.budget_exhausted = True
            break
        outcome, client_wall = _one(client, index, max_new_tokens, time_budget_s, time_scale)
        result.requests.append(outcome)
        result.elapsed_s += outcome.e2e_s if outcome.e2e_s is not None else client_wall / time_scale
    return result


def wall_cap_s(time_budget_s: float, time_scale: float) -> float:
    """The calibration's whole wall-clock allowance: four times its engine budget in wall seconds, at least 60 s."""
    return max(60.0, time_budget_s * time_scale * 4)


def _one(client: EngineClient, index: int, max_new_tokens: int, budget_s: float,
         scale: float) -> tuple[RequestResult, float]:
    """One calibration request and the client's wall seconds it took."""
    outcome = RequestResult(prompt_index=index)
    body = {
        "text": PROMPTS[index % len(PROMPTS)],
        "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True},
    }
    sent = client.clock()
    first = last = None
    final: dict | None = None
    try:
        for arrived, chunk in client.stream_generate(body, timeout=max(30.0, budget_s * scale * 4)):
            if first is None:
                first = arrived
            last, final = arrived, chunk
    except EngineUnreachable as exc:
        outcome.error = str(exc)
        return outcome, client.clock() - sent
    spent = client.clock() - sent
    meta = (final or {}).get("meta_info") if isinstance(final, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    reason = meta.get(FINISH_REASON)
    outcome.finish_reason = reason.get("type") if isinstance(reason, dict) else reason
    if outcome.finish_reason is None:
        # Only the final chunk carries a finish reason: without it the request did not complete.
        outcome.error = "stream ended without a final chunk (no finish_reason)"
        return outcome, spent
    tokens = request_timing.count(meta, COMPLETION_TOKENS)
    outcome.completion_tokens = tokens or 0
    if first is not None and last is not None:
        outcome.client_ttft_wall_s = round(first, 4)  # the stream's offsets: seconds since it was sent
        outcome.client_decode_wall_s = round(last - first, 4)
    outcome.spec_verify_ct = request_timing.count(meta, SPEC_VERIFY_CT)
    accept = meta.get(SPEC_ACCEPT_LENGTH)
    if isinstance(accept, int | float) and not isinstance(accept, bool):
        outcome.spec_accept_length = float(accept)
    if not tokens:
        outcome.error = f"no completion tokens reported in meta_info ({COMPLETION_TOKENS}={meta.get(COMPLETION_TOKENS)!r})"
        return outcome, spent
    if tokens != max_new_tokens or outcome.finish_reason != "length":
        # ignore_eos: the engine must decode exactly the budget; another count is a broken or untruthful report.
        outcome.error = (f"the engine reported {tokens} completion tokens, finish reason {outcome.finish_reason!r}, "
                         f"for max_new_tokens {max_new_tokens} with ignore_eos (expected exactly that, 'length')")
        return outcome, spent
    try:
        timing = request_timing.from_meta(meta, tokens)
    except request_timing.TimingMissing as exc:
        outcome.error = str(exc)  # missing evidence: the request does not count as completed
        return outcome, spent
    outcome.ttft_s, outcome.e2e_s = timing.ttft_s, timing.e2e_s
    outcome.decode_s, outcome.decode_tok_s = timing.decode_s, timing.decode_tok_s()
    return outcome, spent


def plain_step_s(calibration: CalibrationResult) -> float | None:
    """A plain decode step in engine seconds: decode seconds over the tokens after the first (no speculation)."""
    done = [r for r in calibration.completed if r.decode_s and r.completion_tokens > 1 and not r.spec_verify_ct]
    if not done or len(done) != len(calibration.completed):
        return None
    return sum(r.decode_s for r in done) / sum(r.completion_tokens - 1 for r in done)


def verify_step_s(calibration: CalibrationResult) -> float | None:
    """A speculative verify step (drafting included) in engine seconds: decode seconds over verify steps."""
    done = [r for r in calibration.completed if r.decode_s and r.spec_verify_ct]
    if not done or len(done) != len(calibration.completed):
        return None
    return sum(r.decode_s for r in done) / sum(r.spec_verify_ct for r in done)


def verify_cost_ratio(plain: CalibrationResult | None, speculative: CalibrationResult | None) -> float | None:
    """How many plain decode steps one verify step costs, both on the engine's own clock: a plain calibration and
    a speculative one of the same model on the same machine. None when either is missing. Speculation pays while
    the accept length stays above this ratio (its break-even accept length)."""
    plain_s = plain_step_s(plain) if plain else None
    verify_s = verify_step_s(speculative) if speculative else None
    if not plain_s or not verify_s:
        return None
    return verify_s / plain_s


def break_even(plain: CalibrationResult | None = None,
               speculative: CalibrationResult | None = None) -> tuple[float, str]:
    """The break-even accept length and where it comes from: the measured verify/plain step ratio where both
    calibrations exist, else the published one (sparkgate/bench/published.py)."""
    ratio = verify_cost_ratio(plain, speculative)
    if ratio is not None:
        return round(ratio, 3), "measured: verify step / plain decode step, engine time (calibration)"
    return published.VERIFY_STEP_COST, published.VERIFY_STEP_COST_SOURCE


def accept_length_check(name: str, calibration: CalibrationResult | None, floor: float | None,
                        hint: str) -> CheckResult:
    """A speculative optimization's calibration accept length against its floor; missing evidence fails.
    The hint (likely causes) gets the per-request accept lengths appended."""
    accept = calibration.accept_length() if calibration else None
    per_request = [r.spec_accept_length for r in calibration.completed] if calibration else []
    return checked(
        name, accept is not None and floor is not None and accept >= floor,
        None if accept is None else round(accept, 3), f">= {floor}",
        "calibration POST /generate meta_info completion_tokens / spec_verify_ct",
        f"{hint} (per-request: {per_request})",
    )
