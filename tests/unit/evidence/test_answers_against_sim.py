"""The answers stage against the simulator: every question of the set, the long and multi-turn ones included,
answered right by a healthy engine of each profile, and baseline agreement read from log-probabilities: a stacked
engine agrees with the baseline engine, one whose FP8 head is mis-scaled (every answer still right, every text the
same) does not."""

from __future__ import annotations

from sparkgate.evidence import answers
from sparkgate.evidence.client import EngineClient

MODEL = "ling-v3-flash-fp4"
SCALE = 0.05


def verify_answers(start_profile, profile: str, baseline: dict | None = None, faults: str = ""):
    sim = start_profile(profile, scale=SCALE, extra_env={"SPARKGATE_SIM_FAULTS": faults} if faults else None)
    want = {"engine": {"served_model_name": MODEL}, "time_scale": SCALE, "requested": [] if profile == "baseline"
            else ["humming", "fp8_lm_head", "mtp"], "answers": {"set_version": answers.answer_set_mod.SET_VERSION,
                                                               "baseline": baseline}}
    result = answers.run(EngineClient(sim.base_url), want, SCALE)
    return result, {c.name: c for c in answers.checks(result, want)}




def test_the_baseline_answers_every_question_and_stacked_profiles_agree_with_it(start_profile):
    result, checks = verify_answers(start_profile, "baseline")
    assert all(c.passed for c in checks.values()), [c.observed for c in checks.values() if not c.passed]
    record = result.as_dict()
    assert record["right"] == record["of"] and set(record["logprobs"]) == set(record["texts"])
    long_ones = [r for r in result.replies if r.prompt_tokens and r.prompt_tokens > 10 * 64]
    assert len(long_ones) == 2, [(r.id, r.prompt_tokens) for r in result.replies]  # 10+ KV pages of 64 tokens each (the simulator counts words; a real tokenizer more)
    # The stage's cost is a benchmark (benchmarks/bench_gate.py prints it), not a test: its elapsed_s is the client's clock
    # over the time scale, which a busy host stretches.

    stacked, checks = verify_answers(start_profile, "all-three", baseline=record)
    agreement = checks["answers.baseline_agreement"]
    assert agreement.passed and agreement.observed["agree"] == agreement.observed["of"] == len(record["texts"])
    assert 0 < agreement.observed["max_delta_nats"] <= answers.TOKEN_TOLERANCE_NATS  # FP8 rounding moved some

    _, checks = verify_answers(start_profile, "all-three", baseline=record, faults="fp8-head-scale-off")
    failing = {name for name, c in checks.items() if not c.passed}
    assert failing == {"answers.baseline_agreement"}, failing
    assert checks["answers.baseline_agreement"].observed["agree"] == 0


def test_a_thinking_engine_is_read_not_cut_and_a_thinking_but_wrong_one_is_refused(start_profile):
    """thinks-anyway (a chat template that ignores enable_thinking): each reply reasons 48 words, past a short
    question's 32 tokens, so the stage asks again with room and admits; with answers-garbled too, the answer after
    the reasoning is wrong and refused as any wrong answer; reasoning that outlasts the retry is 'thinking not
    disabled'."""
    result, checks = verify_answers(start_profile, "all-three", faults="thinks-anyway")
    assert all(c.passed for c in checks.values()), [c.observed for c in checks.values() if not c.passed]
    thinking = result.as_dict()["thinking"]
    assert thinking["thought"] == thinking["of"] and thinking["retried"] >= len(result.replies) - 2
    assert thinking["cut_after_retry"] == 0 and result.cold.text.lstrip().startswith("<think>")

    _, checks = verify_answers(start_profile, "all-three", faults="thinks-anyway,answers-garbled")
    failing = {name for name, c in checks.items() if not c.passed}
    assert failing == {"answers.cold_prefill", "answers.correct"}, failing
    assert checks["answers.correct"].hint == answers.LIKELY_GARBLE

    result, checks = verify_answers(start_profile, "baseline", faults="thinks-anyway:1000")
    assert not checks["answers.correct"].passed
    assert checks["answers.correct"].hint.startswith("thinking not disabled")
    assert result.as_dict()["thinking"]["cut_after_retry"] == result.as_dict()["thinking"]["of"]


def test_a_cold_garble_is_refused_although_the_model_thinks_past_the_counting_questions_max_tokens(start_profile):
    """thinks-anyway:200 reasons past the counting question's 160 tokens. Its cold request is still the one judged
    (asked with the retry's room from the start: a retry would be warm), so a garbled cold prefill is refused as
    it is without thinking, and a healthy engine that thinks as long is admitted."""
    _, plain = verify_answers(start_profile, "all-three", faults="cold-prefill-garble")
    result, checks = verify_answers(start_profile, "all-three", faults="thinks-anyway:200,cold-prefill-garble")
    failing = {name for name, c in checks.items() if not c.passed}
    assert failing == {name for name, c in plain.items() if not c.passed}
    assert failing == {"answers.cold_prefill", "answers.greedy_repeatable"}, failing
    assert not result.cold.retried and result.cold.thought and result.cold.finish_reason == "stop"

    result, checks = verify_answers(start_profile, "all-three", faults="thinks-anyway:200")
    assert all(c.passed for c in checks.values()), [c.observed for c in checks.values() if not c.passed]
    assert not result.cold.retried and result.cold.thought and result.cold.text == result.warm.text
