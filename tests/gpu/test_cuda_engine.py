"""Healthy engines pass: the gate against the real SGLang 0.5.23 on CUDA with CUDA graphs (tests/gpu/conftest.py).

The tiny checkpoints have random weights, so the answers stage refuses every launch (it must: the replies are not
the answers) and a tiny model's tok/s says nothing about a Spark, so the speed checks are only reported. Every
other check the launch can exercise is asserted in the direction the engine really is: the graph checks pass where
decode graphs were captured and used and flip where they are disabled; speculative acceptance passes where the
target drafts for itself and refuses where the draft has other weights.
"""

from __future__ import annotations

import pytest

from sparkgate.evidence import answers
from tests.real import gate

ENGINE_CHECKS = ("engine.health", "engine.identity", "engine.architecture", "engine.batch1", "engine.probe_report",
                 "engine.log", "engine.cuda_graph_capture_log", "engine.cuda_graph_passes", "engine.calibration",
                 "engine.client_timing")
GRAPH_CHECKS = {"engine.cuda_graph_capture_log", "engine.cuda_graph_passes"}
TIMING = {"engine.speed_floor", "engine.speed_vs_baseline", "engine.calibration", "engine.client_timing"}
ANSWERS = {"answers.cold_prefill", "answers.correct", "answers.greedy_repeatable"}


def failures_of(checks: dict, names) -> dict:
    return {name: checks[name].observed for name in names if not checks[name].passed}


# --- dense, decode graphs on (the default) and off -------------------------------------------------------------

def test_dense_with_graphs_passes_every_engine_check(launch_result):
    checks = launch_result("dense-graphs").checks("baseline")
    assert failures_of(checks, ENGINE_CHECKS) == {}
    passes = checks["engine.cuda_graph_passes"].observed
    assert passes["decode_cuda_graph_delta"] > 0, passes


def test_random_weights_are_refused_by_the_answers_not_by_an_error(launch_result):
    checks = launch_result("dense-graphs").checks("baseline")
    correct = checks["answers.correct"]
    assert not correct.passed
    replies = launch_result("dense-graphs").verdicts["baseline"].answers["replies"]
    assert replies and all(reply.get("error") is None for reply in replies), replies


def test_disabling_decode_graphs_flips_exactly_the_graph_checks(launch_result):
    graphs, eager = launch_result("dense-graphs"), launch_result("dense-eager")
    flips = gate.flipped(graphs.verdicts["baseline"], eager.verdicts["baseline"])
    assert {name: flip for name, flip in flips.items() if name not in TIMING | ANSWERS} == {
        name: (True, False) for name in GRAPH_CHECKS}
    passes = eager.checks("baseline")["engine.cuda_graph_passes"].observed
    assert passes["decode_cuda_graph_delta"] in (None, 0) and passes["decode_none_delta"] > 0, passes


# --- speculative decoding with draft graphs --------------------------------------------------------------------

def rechecked(result) -> dict:
    return {c["name"]: c for c in result.rechecks}


# STANDALONE is not NEXTN: the mtp profile's NEXTN checks refuse it, each with what it is (the algorithm, the draft's
# class, no NEXTN load line), and the probe's LM-head sharing facts come from the NEXTN draft's init_lm_head hook,
# which a STANDALONE draft never calls (seen on the H200).
NOT_NEXTN = {"mtp.config_echo", "mtp.draft_loaded", "mtp.log_draft_loaded", "engine.probe_report"}


def test_a_target_drafting_for_itself_passes_acceptance_on_real_counts(launch_result):
    result = launch_result("standalone-self")
    checks = result.checks("mtp")
    assert checks["mtp.accept_length"].passed, checks["mtp.accept_length"].observed
    assert set(failures_of(checks, ENGINE_CHECKS)) <= NOT_NEXTN
    assert {name for name, check in checks.items() if not check.passed} - ANSWERS == NOT_NEXTN
    after = rechecked(result)
    assert after["sentinel.accept_counters"]["passed"], after
    assert after["sentinel.accept_counters"]["observed"]["verify_calls"] > 0
    assert after["sentinel.accept_probe"]["passed"], after["sentinel.accept_probe"]


def test_a_draft_with_other_weights_is_refused_by_acceptance(launch_result):
    result = launch_result("standalone-other-seed")
    checks = result.checks("mtp")
    assert not checks["mtp.accept_length"].passed, checks["mtp.accept_length"].observed
    after = rechecked(result)
    assert after["sentinel.accept_counters"]["passed"], after
    assert not after["sentinel.accept_probe"]["passed"], after["sentinel.accept_probe"]


@pytest.mark.parametrize("name", ["standalone-self", "moe-nextn"])
def test_draft_graphs_were_captured_and_used(launch_result, name):
    checks = launch_result(name).checks("mtp")
    assert failures_of(checks, GRAPH_CHECKS) == {}


def test_moe_nextn_census_and_draft_checks_read_real_values(launch_result):
    result = launch_result("moe-nextn")
    checks = result.checks("mtp")
    for name in ("engine.probe_report", "mtp.draft_loaded", "mtp.log_draft_loaded"):
        assert checks[name].passed, (name, checks[name].observed)
    engagement = result.after["server_info"]["internal_states"][0]["engagement"]
    # Stock SGLang's NEXTN draft shares the target's head tensor, not its module: the FP8-head hazard is real here
    # (the `mtp` profile alone does not require module sharing, so no check judges it; the probe still reports it).
    assert engagement["lm_head_sharing"] == {"module_shared": False, "weight_shared": True}, engagement
    census = list(censuses(engagement))
    assert census, engagement
    assert any(key.endswith("/triton") for layers in census for key in layers), census


def censuses(report):
    """Every `moe_layers` census in the probe report (one per role: target, draft)."""
    if isinstance(report, dict):
        for key, value in report.items():
            if key == "moe_layers" and isinstance(value, dict):
                yield value
            else:
                yield from censuses(value)
    elif isinstance(report, list):
        for value in report:
            yield from censuses(value)


# --- FP8 linear layers on SM90 ---------------------------------------------------------------------------------

def test_fp8_linear_layers_serve_and_say_so(launch_result):
    result = launch_result("dense-fp8")
    checks = result.checks("baseline")
    assert checks["engine.health"].passed
    assert result.after["server_info"]["quantization"] == "fp8"


# --- baseline agreement by log-probability on CUDA (docs/checks/answers.md) --------------------------------------

def replies_tokens(result, profile: str) -> dict[str, list]:
    shown = result.verdicts[profile].answers
    return {reply["id"]: reply["tokens"] for reply in [shown["cold"], *shown["replies"], shown["warm"]]}


def agreement_with(ours: dict[str, list], baseline: dict[str, list]) -> tuple[dict, float]:
    verdicts = {qid: answers.agreement(ours[qid], baseline[qid], right=True) for qid in baseline}
    return verdicts, max((v.get("max_delta_nats", 0.0) for v in verdicts.values()), default=0.0)


@pytest.mark.parametrize(("name", "profile"), [("dense-eager", "baseline"), ("standalone-self", "mtp")])
def test_a_healthy_variation_agrees_with_the_graph_baseline_by_log_probability(launch_result, name, profile):
    """Eager decode and self-drafting speculation compute the same model: every reply agrees with the decode-graph
    engine's under the tolerance, with the real engines' log-probabilities (right or not: the weights are random)."""
    verdicts, worst = agreement_with(replies_tokens(launch_result(name), profile),
                                     replies_tokens(launch_result("dense-graphs"), "baseline"))
    print(f"\n{name} vs dense-graphs: max |delta logprob| {worst} nats over {len(verdicts)} replies")
    assert all(v["agrees"] for v in verdicts.values()), verdicts


def test_fp8_linear_layers_move_log_probabilities_by_a_measured_amount(launch_result):
    """A measurement, printed: how far FP8 weights (every linear layer, not only the head) move a tiny random model's
    log-probabilities from the BF16 engine's."""
    verdicts, worst = agreement_with(replies_tokens(launch_result("dense-fp8"), "baseline"),
                                     replies_tokens(launch_result("dense-graphs"), "baseline"))
    agree = sum(v["agrees"] for v in verdicts.values())
    print(f"\ndense-fp8 vs dense-graphs: {agree}/{len(verdicts)} replies agree, max |delta logprob| {worst} nats")
    assert all(tokens for tokens in replies_tokens(launch_result("dense-fp8"), "baseline").values())
