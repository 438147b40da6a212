import json

import pytest

from sparkgate import floor as stored_floor
from sparkgate.bench import record_floor


def summary(profile="baseline", requested=(), speed=37.5, completed=16, errors=0, complete=True, target="sim",
            timing="engine"):
    return {"profile": profile, "requested_optimizations": list(requested), "complete": complete,
            "finished_at": "2026-11-29T00:00:00+00:00", "workload": {"name": "arith"},
            "results": {"decode_tok_s": speed, "completed": completed, "errors": errors, "timing": timing},
            "environment": {"target": target, "images": {"img": "sha256:1"}, "engine": {"version": "0.5.23"},
                            "host": {"hostname": "spark-1"}}}


def test_record_and_read_per_target(tmp_path):
    assert stored_floor.recorded_baseline_tok_s("sim") is None
    path, entry = record_floor.record(summary(speed=37.5), tmp_path / "run")
    assert path == tmp_path / "floor.json"  # the test's SPARKGATE_BENCH_FLOOR_FILE
    assert stored_floor.recorded_baseline_tok_s("sim") == 37.5
    assert stored_floor.recorded_baseline_tok_s("spark") is None  # a simulator floor never guards a Spark
    record_floor.record(summary(speed=36.0, target="spark"), tmp_path / "run2", margin=0.02)
    assert stored_floor.recorded_baseline_tok_s("spark") == pytest.approx(36.0 * 0.98)
    assert stored_floor.recorded_baseline_tok_s("sim") == 37.5
    assert stored_floor.recorded_floor("spark")["measured_decode_tok_s"] == 36.0


@pytest.mark.parametrize(
    ("bad", "message"),
    [(dict(profile="all-three", requested=("humming", "fp8_lm_head", "mtp")), "baseline profile"),
     (dict(errors=2), "failed request"), (dict(completed=3), "at least"), (dict(complete=False), "did not complete"),
     (dict(speed=None), "no decode speed"), (dict(timing="client"), "client's stopwatch"),
     (dict(timing="mixed"), "--api generate")],
)
def test_record_refuses_bad_floors(tmp_path, bad, message):
    with pytest.raises(record_floor.FloorError, match=message):
        record_floor.record(summary(**bad), tmp_path)


def test_empty_env_turns_floors_off(monkeypatch, tmp_path):
    record_floor.record(summary(), tmp_path)
    monkeypatch.setenv(stored_floor.FLOOR_ENV, "")
    assert stored_floor.recorded_baseline_tok_s("sim") is None
    with pytest.raises(record_floor.FloorError, match="turned off"):
        record_floor.record(summary(), tmp_path)


def test_unreadable_floor_is_an_error_not_a_missing_floor(tmp_path):
    (tmp_path / "floor.json").write_text("{")
    with pytest.raises(record_floor.FloorError, match="unreadable"):
        stored_floor.recorded_baseline_tok_s("sim")
    (tmp_path / "floor.json").write_text(json.dumps({"floor_version": 1, "targets": {"sim": {"floor_tok_s": -1}}}))
    with pytest.raises(record_floor.FloorError, match="positive"):
        stored_floor.recorded_baseline_tok_s("sim")


def test_the_baseline_verdicts_right_replies_are_recorded_with_the_floor_and_reach_the_expectations(tmp_path):
    from sparkgate.bundle import expectations
    from sparkgate.profile import loading as profiles
    gate = {"state": "open", "answers": {"set_version": 2, "read_as": {"add-47-38": "85"},
                                         "texts": {"add-47-38": "85"},
                                         "logprobs": {"add-47-38": [["85", -0.01, -6.0, "58"]]}}}
    with_gate = summary()
    with_gate["environment"]["gate"] = gate
    _, entry = record_floor.record(with_gate, tmp_path / "run")
    assert entry["answers"] == {**gate["answers"], "recorded_at": with_gate["finished_at"]}
    assert stored_floor.recorded_baseline_answers("sim")["texts"] == {"add-47-38": "85"}
    stacked = expectations.build(profiles.load("all-three"), "sim", 0.1)
    assert stacked["answers"]["baseline"]["texts"] == {"add-47-38": "85"}
    assert expectations.build(profiles.load("baseline"), "sim", 0.1)["answers"]["baseline"] is None  # its own reference
    assert expectations.build(profiles.load("all-three"), "spark", 1.0)["answers"]["baseline"] is None  # per target
    _, entry = record_floor.record(summary(), tmp_path / "run2")  # a run without the gate's answers records none
    assert "answers" not in entry and stored_floor.recorded_baseline_answers("sim") is None


def test_a_baseline_verdict_without_log_probabilities_is_refused_when_recorded_not_later(tmp_path):
    """Baseline agreement compares log-probabilities: a record without them could never vouch for a stacked
    profile, and re-recording from the same engine would not fix it. The refusal names the cause now."""
    with_gate = summary()
    with_gate["environment"]["gate"] = {"state": "open", "answers": {"set_version": 2, "texts": {"add-47-38": "85"},
                                                                     "logprobs": {"add-47-38": []}}}
    with pytest.raises(record_floor.FloorError, match="carry no log-probabilities \\(add-47-38\\)"):
        record_floor.record(with_gate, tmp_path / "run")
    assert not (tmp_path / "floor.json").exists()  # nothing half-written


@pytest.mark.parametrize("answers", [None, {"set_version": 2, "texts": {}},
                                     {"set_version": 2, "texts": {"add-47-38": "85"}, "logprobs": {"add-47-38": ["x"]}}])
def test_a_gateway_baseline_without_right_answers_or_readable_log_probabilities_is_not_recorded(tmp_path, answers):
    """Through a gateway, a floor without the baseline's answers would switch baseline agreement off for every
    stacked profile (and overwrite a good record): refused, nothing written."""
    with_gate = summary()
    with_gate["environment"]["gate"] = {"state": "open", "answers": answers}
    with pytest.raises(record_floor.FloorError, match="no right answers|no log-probabilities"):
        record_floor.record(with_gate, tmp_path / "run")
    assert not (tmp_path / "floor.json").exists()
