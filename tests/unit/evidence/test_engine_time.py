"""The engine's timing of a request (meta_info) is the only speed evidence the gate judges; the client's stopwatch
is judged only for gross disagreement (engine.client_timing)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkgate.evidence import calibration
from sparkgate.evidence.calibration import CalibrationResult, RequestResult
from sparkgate.evidence.engine_checks import CLIENT_SLACK_WALL_S, CLIENT_SLOWDOWN_FACTOR, client_timing
from sparkgate.sglang import request_timing


def test_decode_time_and_speed_are_sglangs_arithmetic():
    timing = request_timing.from_meta({"first_token_latency": 0.25, "e2e_latency": 2.75}, completion_tokens=101)
    assert timing.decode_s == 2.5 and timing.decode_tok_s() == 40.0  # (101 - 1) / 2.5, SGLang's decode_throughput
    assert request_timing.from_meta({"first_token_latency": 0.2, "e2e_latency": 0.2}, 1).decode_tok_s() is None


@pytest.mark.parametrize(("meta", "says"), [
    ({"e2e_latency": 2.0}, "has no first_token_latency"),
    ({"first_token_latency": 0.2}, "has no e2e_latency"),
    ({"first_token_latency": "0.2", "e2e_latency": 2.0}, "is str, not a number"),
    ({"first_token_latency": True, "e2e_latency": 2.0}, "is bool, not a number"),
    ({"first_token_latency": 0.2, "e2e_latency": float("nan")}, "is not a duration"),
    ({"first_token_latency": -1.0, "e2e_latency": 2.0}, "is not a duration"),
    ({"first_token_latency": 0.2, "e2e_latency": 1e300}, "is not a duration"),
    ({"first_token_latency": 3.0, "e2e_latency": 2.0}, "is shorter than first_token_latency"),
])
def test_missing_or_hostile_timing_is_refused_in_one_line(meta, says):
    with pytest.raises(request_timing.TimingMissing, match=says) as caught:
        request_timing.from_meta(meta, 10)
    assert "\n" not in str(caught.value)


@given(st.dictionaries(st.sampled_from(["first_token_latency", "e2e_latency", "other"]),
                       st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8),
                                 st.lists(st.integers(), max_size=2))),
       st.integers(min_value=0, max_value=10**6))
def test_any_meta_info_reads_as_a_sane_timing_or_a_refusal(meta, tokens):
    try:
        timing = request_timing.from_meta(meta, tokens)
    except request_timing.TimingMissing:
        return
    assert 0 <= timing.ttft_s <= timing.e2e_s <= request_timing.MAX_SECONDS
    speed = timing.decode_tok_s()
    assert speed is None or (math.isfinite(speed) and speed > 0)


def _calibration(client_s: float, engine_s: float, scale: float = 1.0, n: int = 3) -> CalibrationResult:
    requests = [RequestResult(i, completion_tokens=65, ttft_s=0.2, decode_s=engine_s, client_decode_wall_s=client_s,
                              finish_reason="length") for i in range(n)]
    return CalibrationResult(requests, time_scale=scale)


def test_the_client_may_lag_the_engine_but_not_grossly():
    assert client_timing(_calibration(client_s=1.3, engine_s=1.2)).passed  # transport and scheduling
    limit = CLIENT_SLOWDOWN_FACTOR * 1.2 + CLIENT_SLACK_WALL_S
    slow = client_timing(_calibration(client_s=limit + 0.01, engine_s=1.2))
    assert not slow.passed and "host or gateway problem" in slow.hint
    assert slow.observed["engine_decode_wall_s"] == pytest.approx(1.2)


def test_an_engine_that_understates_its_decode_time_is_not_believed():
    # A broken draft really decodes 64 tokens at 24 tok/s (2.7 s) and claims 1.6 s (40 tok/s, above the baseline).
    lying = client_timing(_calibration(client_s=64 / 24, engine_s=64 / 40))
    assert not lying.passed
    # One request claiming almost no time among honest ones is caught on its own, not averaged away.
    cal = _calibration(client_s=1.3, engine_s=1.2)
    cal.requests[1].decode_s, cal.requests[1].client_decode_wall_s = 1e-9, 2.5
    caught = client_timing(cal)
    assert not caught.passed and caught.observed["worst_request"] == 1


def test_on_the_simulator_the_engine_seconds_are_compared_as_wall_seconds():
    # 1.2 engine s at scale 0.1 is 0.12 wall s: a client reading 0.3 wall s (a loaded host) agrees; 4 wall s does not
    assert client_timing(_calibration(client_s=0.3, engine_s=1.2, scale=0.1)).passed
    assert not client_timing(_calibration(client_s=4.0, engine_s=1.2, scale=0.1)).passed


def test_no_comparable_request_fails_closed():
    assert not client_timing(None).passed
    assert not client_timing(CalibrationResult([RequestResult(0, error="unreachable")])).passed


def test_the_speed_checks_read_engine_time_whatever_the_client_saw():
    cal = _calibration(client_s=2.0, engine_s=1.6)  # 64 tokens after the first in 1.6 engine s: 40 tok/s
    assert cal.decode_tok_s() == pytest.approx(40.0)
    assert cal.client_decode_tok_s() == pytest.approx(32.0)


class _Client:
    """An engine whose one /generate stream ends with `meta`."""

    def __init__(self, meta: dict):
        self.meta = meta

    @staticmethod
    def clock() -> float:
        return 0.0

    def stream_generate(self, body, timeout):
        yield 0.0, {"meta_info": {"completion_tokens": 1}}
        yield 0.0, {"meta_info": self.meta}


GOOD = {"finish_reason": {"type": "length", "length": 32}, "completion_tokens": 32,
        "first_token_latency": 0.2, "e2e_latency": 1.0}


@pytest.mark.parametrize(("change", "says"), [
    ({"completion_tokens": 64}, "reported 64 completion tokens"),  # more tokens than asked: a faster-looking lie
    ({"completion_tokens": 31, "finish_reason": {"type": "stop"}}, "finish reason 'stop'"),
    ({"completion_tokens": "32"}, "no completion tokens reported"),
    ({"completion_tokens": True}, "no completion tokens reported"),
    ({"first_token_latency": None}, "has no first_token_latency"),
    ({"e2e_latency": -3}, "is not a duration"),
])
def test_a_request_whose_report_does_not_add_up_is_not_completed(change, says):
    meta = {**GOOD, **change}
    result = calibration.run(_Client({k: v for k, v in meta.items() if v is not None}), 1, 32, 10.0, 1.0)
    (request,) = result.requests
    assert says in request.error and not result.completed
    assert result.decode_tok_s() is None


def test_an_honest_report_is_completed_in_engine_time():
    result = calibration.run(_Client(GOOD), 2, 32, 10.0, 1.0)
    assert len(result.completed) == 2 and result.elapsed_s == pytest.approx(2.0)
    assert result.decode_tok_s() == pytest.approx(31 / 0.8)


def test_the_engine_budget_counts_engine_seconds():
    slow = {**GOOD, "e2e_latency": 6.0}  # 6 engine s a request against a 10 s budget: the third is never sent
    result = calibration.run(_Client(slow), 3, 32, 10.0, 1.0)
    assert len(result.requests) == 2 and result.budget_exhausted
