"""The gate against the real SGLang 0.5.23: each check a CPU engine can exercise reports what the engine is.

One real engine per launch variation, each judged by the product's own `verify` with a shipped profile's
expectations (tests/real/gate.py). A variation differs from its reference in launch settings that disjoint checks
read and must flip exactly those checks, each showing the real observed value; checks that need a GPU refuse the
CPU engine by name, with what it really runs. And the three silent failures sparkgate exists for, live: Humming
asked for and Triton running, the fork's FP8 variable ignored by stock SGLang, and the all-three profile (FP8 head +
NEXTN) against stock NEXTN is refused by the module-sharing check with `module_shared: false` observed.

A tiny CPU model's tok/s says nothing about a Spark, and a real CPU engine's speed is the host's (its engine time
is real time, so a loaded host really makes it slow and can spend the calibration's time budget): the speed floors
and the calibration are left out of the exact flip sets (the simulator e2e tests prove them). The calibration is
judged on the engine's own timing, which SGLang reports only with --enable-metrics: metrics off leaves it with
none, whatever the load, and flips engine.client_timing for want of that evidence.
"""

from __future__ import annotations

import dataclasses
import json
from importlib.metadata import version

import pytest

from sparkgate.evidence import answers
from sparkgate.evidence.results import Verdict
from tests.real import gate
from tests.real.engine import Launch, RealEngine

pytestmark = pytest.mark.real

# The installed SGLang's version, read from its metadata (importing sglang at collection costs ~13 s per worker).
SGLANG_VERSION = version("sglang")
TIMING = {"engine.speed_floor", "engine.speed_vs_baseline", "engine.calibration"}
DENSE_PROFILE = "fp8-lm-head"  # the baseline's checks plus the FP8 head's: fp32 on/off has a check to flip
MTP_PROFILE = "mtp"


def identity(launch: Launch, architecture: str) -> dict:
    """What the engine must be (the reference launch's identity, the installed SGLang's version)."""
    return {"model_path": str(launch.model_path), "served_model_name": launch.served_model_name,
            "sglang_version": SGLANG_VERSION, "architecture": architecture}


def judged(engine: RealEngine, profile: str, expected_identity: dict) -> Verdict:
    result = gate.verdict(engine, profile, **expected_identity)
    json.dumps(result.as_dict())  # the verdict is what the sentinel publishes: it must serialize, whatever it saw
    return result


def exact_flips(reference: Verdict, variation: Verdict) -> dict[str, tuple[bool, bool]]:
    return {name: flip for name, flip in gate.flipped(reference, variation).items() if name not in TIMING}


# --- the dense tiny llama: launch settings read by disjoint checks ---------------------------------------

# The variation changes settings that no two checks read alike, so it must flip exactly the union of their checks,
# each showing its own setting's value (one variation instead of six launches: each start is 12-25 s).
ELSEWHERE = "batch 8, fp32 lm head, another served name, metrics off, probe absent, another model path"


@pytest.fixture(scope="session")
def dense_verdicts(real_engines, dense_launch, tmp_path_factory) -> dict[str, Verdict]:
    """variation -> verdict; the reference is batch 1 with the probe and metrics on."""
    reference = dataclasses.replace(dense_launch, max_running_requests=1)
    alias = tmp_path_factory.mktemp("alias") / "tiny-llama-elsewhere"
    alias.symlink_to(dense_launch.model_path, target_is_directory=True)  # same weights, another model path
    variations = {
        "reference": reference,
        ELSEWHERE: dataclasses.replace(reference, max_running_requests=8, extra_args=("--enable-fp32-lm-head",),
                                       served_model_name="not-the-expected-model", metrics=False, probe=False,
                                       model_path=alias),
    }
    expected = identity(reference, "LlamaForCausalLM")
    return {name: judged(real_engines.get(launch), DENSE_PROFILE, expected) for name, launch in variations.items()}


def test_the_reference_passes_every_configuration_and_probe_check(dense_verdicts):
    checks = gate.by_name(dense_verdicts["reference"])
    for name in ("engine.health", "engine.identity", "engine.architecture", "engine.batch1", "engine.probe_report",
                 "fp8_lm_head.config_echo", "engine.log"):
        assert checks[name].passed, (name, checks[name].observed)
    assert checks["engine.batch1"].observed == 1 and checks["fp8_lm_head.config_echo"].observed is False


def test_launch_settings_flip_exactly_their_checks(dense_verdicts):
    flips = exact_flips(dense_verdicts["reference"], dense_verdicts[ELSEWHERE])
    flipped = {"engine.batch1", "fp8_lm_head.config_echo", "engine.identity", "engine.probe_report",
               "engine.client_timing"}  # metrics off: no engine timing for the calibration
    assert flips == {check: (True, False) for check in flipped}, flips


@pytest.mark.parametrize(("check", "observed"), [
    ("engine.batch1", 8),
    ("fp8_lm_head.config_echo", True),
    ("engine.probe_report", "absent"),
])
def test_each_flipped_check_shows_its_settings_value(dense_verdicts, check, observed):
    assert gate.by_name(dense_verdicts[ELSEWHERE])[check].observed == observed


def test_the_wrong_model_is_refused_by_identity_with_what_it_serves(dense_verdicts):
    observed = gate.by_name(dense_verdicts[ELSEWHERE])["engine.identity"].observed
    assert observed["served_model_name"] == "not-the-expected-model" and observed["version"] == SGLANG_VERSION
    assert str(observed["model_path"]).endswith("tiny-llama-elsewhere")


def test_metrics_off_leaves_the_calibration_without_the_engines_timing(dense_verdicts):
    calibration = gate.by_name(dense_verdicts[ELSEWHERE])["engine.calibration"]
    assert not calibration.passed and calibration.observed["completed"] == 0
    assert all("first_token_latency" in error for error in calibration.observed["errors"]), calibration.observed
    assert gate.by_name(dense_verdicts["reference"])["engine.client_timing"].passed


def test_metrics_off_changes_what_the_metrics_check_saw_not_the_outcome(dense_verdicts):
    """On CPU the CUDA-graph pass counter fails either way; with metrics on it shows the real eager passes, with
    metrics off the missing endpoint: the check reports what the engine is, in both directions."""
    on = gate.by_name(dense_verdicts["reference"])["engine.cuda_graph_passes"]
    off = gate.by_name(dense_verdicts[ELSEWHERE])["engine.cuda_graph_passes"]
    assert not on.passed and on.observed["decode_cuda_graph_delta"] is None and on.observed["decode_none_delta"] > 0
    assert not off.passed and "/metrics" in str(off.observed) and "404" in str(off.observed)


# --- the tiny BailingMoeV2: NEXTN off and on, Humming asked for -------------------------------------------
# One session fixture per launch: the lane runs the tests of each launch together (conftest.py).


SHIPPED = "all-three as shipped"  # the profile as shipped: only the tiny checkpoint's served name and path rewritten


def _speculation_verdicts(engine: RealEngine, expected: dict, name: str, *profiles: str) -> dict[str, Verdict]:
    """`name / profile` -> the verdict, for the profiles the tests below read on this engine (each live verification
    30-40 s on CPU with its answers)."""
    # The first speculative request on CPU builds torch inductor's C++ (seconds): not the gate's to time.
    engine.generate("warm up", max_new_tokens=8)
    # The shipped profile is verified live on a server that has answered a verification already (as the sentinel's
    # re-verification does); the others after the first are judged on the first one's evidence (gate.verdict).
    return {f"{name} / {profile}": gate.verdict(engine, "all-three", live=True) if profile == SHIPPED
            else judged(engine, profile, expected) for profile in profiles}


@pytest.fixture(scope="session")
def bailing_identity(bailing_launch) -> dict:
    return identity(bailing_launch, "BailingMoeV2ForCausalLM")


@pytest.fixture(scope="session")
def nextn_off_verdicts(real_engines, bailing_launch, bailing_identity) -> dict[str, Verdict]:
    return _speculation_verdicts(real_engines.get(bailing_launch), bailing_identity, "nextn off", MTP_PROFILE,
                                 "humming-fp8")


@pytest.fixture(scope="session")
def nextn_on_verdicts(real_engines, nextn_launch, bailing_identity) -> dict[str, Verdict]:
    return _speculation_verdicts(real_engines.get(nextn_launch), bailing_identity, "nextn on", MTP_PROFILE,
                                 "all-three", SHIPPED)


@pytest.fixture(scope="session")
def humming_verdicts(real_engines, bailing_launch, bailing_identity) -> dict[str, Verdict]:
    """Humming asked for on an engine that cannot run it (no humming-kernels, no GPU): SGLang takes the flag."""
    humming = dataclasses.replace(bailing_launch, extra_args=(*bailing_launch.extra_args, "--moe-runner-backend",
                                                               "humming"), spawn_children=False)
    return {"humming requested / humming-fp8": judged(real_engines.get(humming), "humming-fp8", bailing_identity)}


def test_nextn_on_flips_exactly_the_draft_checks(nextn_off_verdicts, nextn_on_verdicts):
    off, on = nextn_off_verdicts[f"nextn off / {MTP_PROFILE}"], nextn_on_verdicts[f"nextn on / {MTP_PROFILE}"]
    assert exact_flips(off, on) == {name: (False, True) for name in (
        "mtp.config_echo", "mtp.draft_loaded", "mtp.log_draft_loaded", "engine.probe_report")}
    checks = gate.by_name(on)
    assert checks["mtp.config_echo"].observed == {"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1,
                                                  "num_draft_tokens": 4}
    assert checks["mtp.draft_loaded"].observed == "BailingMoeForCausalLMNextN"
    assert gate.by_name(off)["mtp.config_echo"].observed["algorithm"] is None


def test_a_random_mtp_layer_is_refused_by_accept_length_with_the_real_value(nextn_off_verdicts, nextn_on_verdicts):
    off = gate.by_name(nextn_off_verdicts[f"nextn off / {MTP_PROFILE}"])["mtp.accept_length"]
    on = gate.by_name(nextn_on_verdicts[f"nextn on / {MTP_PROFILE}"])["mtp.accept_length"]
    assert not off.passed and off.observed is None  # no speculation: nothing was accepted or measured
    # The tiny model's MTP layer is random: every draft is rejected, each verify yields one token.
    assert not on.passed and 1.0 <= on.observed < 2.0 and on.expected == ">= 2.0"


def test_fp8_head_with_stock_nextn_is_refused_by_module_sharing_observed_live(nextn_on_verdicts):
    """Stock 0.5.23's BailingMoeForCausalLMNextN takes the target's head tensor, not its module: with an FP8
    head the draft would project through its own unquantized head (the accept-length-1.00 trap)."""
    sharing = gate.by_name(nextn_on_verdicts["nextn on / all-three"])["mtp.lm_head_module_shared"]
    assert not sharing.passed
    assert sharing.observed == {"module_shared": False, "weight_shared": True}
    # Without the FP8 head, sharing the tensor is enough and the check is not asked for: the refusal is the
    # FP8 + NEXTN combination, not NEXTN.
    assert "mtp.lm_head_module_shared" not in gate.by_name(nextn_on_verdicts[f"nextn on / {MTP_PROFILE}"])


def test_humming_asked_for_runs_triton_and_is_refused_by_the_census_not_the_flag(humming_verdicts,
                                                                                 nextn_off_verdicts):
    """'The flag is on' is not evidence: SGLang echoes humming, the MoE layers run the unquantized Triton method."""
    asked = humming_verdicts["humming requested / humming-fp8"]
    flips = exact_flips(nextn_off_verdicts["nextn off / humming-fp8"], asked)
    assert flips == {"humming.config_echo": (False, True)}, flips
    checks = gate.by_name(asked)
    assert checks["humming.config_echo"].observed == "humming"
    census = checks["humming.moe_layers_target"]
    assert not census.passed and census.observed == {"UnquantizedFusedMoEMethod/triton": 1}
    assert not checks["humming.log_signature"].passed and checks["humming.log_signature"].observed == "0x"
    assert not asked.passed


def test_stock_sglang_ignores_the_fp8_head_variable_and_the_gate_sees_it(nextn_off_verdicts):
    """Launched with SGLANG_ENABLE_FP8_LM_HEAD=1 and SGLANG_EXPOSE_OWN_ENV_VARS=1 as a bundle does: stock 0.5.23
    lists the variables it declares, and this one is not among them."""
    check = gate.by_name(nextn_off_verdicts["nextn off / humming-fp8"])["fp8_lm_head.env_declared"]
    assert not check.passed and check.observed is None and check.expected == "1"
    head = gate.by_name(nextn_off_verdicts["nextn off / humming-fp8"])["fp8_lm_head.target_head"]
    assert not head.passed and head.observed["weight_dtype"] == "torch.bfloat16"  # the head stayed BF16


GPU_ONLY = {
    "humming.moe_layers_target": {"UnquantizedFusedMoEMethod/triton": 1},
    "humming.moe_layers_draft": {"UnquantizedFusedMoEMethod/triton": 1},
    "humming.log_signature": "0x",
    "fp8_lm_head.log_signature": "0x",
    "engine.cuda_graph_capture_log": "0 capture line(s)",
}


def test_checks_that_need_a_gpu_refuse_the_cpu_engine_by_name_with_what_it_runs(nextn_on_verdicts):
    checks = gate.by_name(nextn_on_verdicts["nextn on / all-three"])
    for name, observed in GPU_ONLY.items():
        assert not checks[name].passed and checks[name].observed == observed, (name, checks[name].observed)
        assert checks[name].hint, name  # every refusal says why and what to do
    head = checks["fp8_lm_head.target_head"]
    assert not head.passed and head.observed["weight_dtype"] == "torch.bfloat16"
    assert head.observed["has_weight_scale"] is False
    passes = checks["engine.cuda_graph_passes"]
    assert not passes.passed and passes.observed["decode_none_delta"] > 0  # eager decode, counted by the engine


def test_the_shipped_profile_refuses_the_tiny_model_as_not_ling_3(nextn_on_verdicts):
    checks = gate.by_name(nextn_on_verdicts[f"nextn on / {SHIPPED}"])
    assert not checks["engine.architecture"].passed
    assert checks["engine.architecture"].observed == ["BailingMoeV2ForCausalLM"]
    assert not checks["engine.identity"].passed  # 0.5.23, not the fork's version
    assert checks["engine.identity"].observed["version"] == SGLANG_VERSION
    assert not nextn_on_verdicts[f"nextn on / {SHIPPED}"].passed


# --- answers: a random-weight engine is engaged and wrong ---------------------------------------------------


def test_a_random_weight_engine_is_engaged_and_refused_by_the_answers_checks(dense_verdicts):
    """The tiny checkpoint has random weights: it serves, its configuration and probe checks pass, and what it
    says is nonsense. The answers checks are the only ones that can see that."""
    checks = gate.by_name(dense_verdicts["reference"])
    assert checks["engine.probe_report"].passed and checks["engine.identity"].passed
    correct, cold = checks["answers.correct"], checks["answers.cold_prefill"]
    assert not correct.passed and not cold.passed
    assert correct.observed["right"] <= 1 and len(correct.observed["wrong"]) >= correct.observed["of"] - 1
    for wrong in correct.observed["wrong"]:  # each question shown with its expected and the real received text
        assert wrong["question"] and wrong["expected"] and isinstance(wrong["received"], str)
        assert not wrong["received"].startswith("POST ")  # answered, not an error
    assert dense_verdicts["reference"].as_dict()["answers"]["set_version"] == 2


def test_greedy_replies_repeat_on_the_real_engine_with_and_without_speculation(dense_verdicts, nextn_on_verdicts):
    """The repeatability check does not refuse a healthy real engine: greedy decoding gives the same text cold and
    warm, with SGLang's NEXTN speculation on too (test_engine_starts.py proves it equals the non-speculative text)."""
    for verdict in (dense_verdicts["reference"], *nextn_on_verdicts.values()):
        check = gate.by_name(verdict)["answers.greedy_repeatable"]
        assert check.passed, check.observed


def _replies(verdict: Verdict) -> dict[str, dict]:
    shown = verdict.as_dict()["answers"]
    return {r["id"]: r for r in [shown["cold"], *shown["replies"], shown["warm"]]}


def test_the_long_and_multi_turn_questions_run_on_the_real_engine_with_log_probabilities(dense_verdicts,
                                                                                          nextn_on_verdicts):
    """The register (about 2,700 tokens with this tokenizer: chunked prefill at 1,024, then the prefix cache for the
    second question over it) and the multi-turn exchange reach the real SGLang and are answered; every reply comes
    with one log-probability per completion token and a runner-up no likelier than the greedy choice."""
    answer_set = answers.answer_set_mod.load()
    for verdict in (dense_verdicts["reference"], nextn_on_verdicts[f"nextn on / {MTP_PROFILE}"]):
        replies = _replies(verdict)
        for question in answer_set.questions:
            reply = replies[question.id]
            assert reply["error"] is None and isinstance(reply["text"], str), reply
            tokens = reply["tokens"]
            assert tokens is not None and len(tokens) == reply["completion_tokens"], reply
            assert all(t[2] is None or t[2] <= t[1] + 1e-4 for t in tokens)  # greedy: the chosen token is the argmax
            if question.document:
                assert reply["prompt_tokens"] > 2000  # over two prefill chunks of 1,024, many 64-token pages
            if question.history:
                assert reply["prompt_tokens"] > 100


def test_speculation_keeps_the_log_probabilities_within_the_tolerance_of_the_same_model_without_it(
        nextn_off_verdicts, nextn_on_verdicts):
    """The same tiny checkpoint with and without NEXTN: greedy verification is lossless, so every reply (right or
    not: the weights are random) agrees with the non-speculative one by the baseline-agreement rule, with the real
    engines' log-probabilities. The tolerance refuses no healthy pair."""
    off, on = (_replies(v[f"nextn {s} / {MTP_PROFILE}"]) for v, s in ((nextn_off_verdicts, "off"),
                                                                       (nextn_on_verdicts, "on")))
    verdicts = {qid: answers.agreement(on[qid]["tokens"], off[qid]["tokens"], right=True) for qid in off}
    assert all(v["agrees"] for v in verdicts.values()), verdicts
    worst = max(v.get("max_delta_nats", 0.0) for v in verdicts.values())
    print(f"\nNEXTN vs none, {len(verdicts)} replies: max |delta logprob| {worst} nats")


# --- a model that thinks anyway: read, not cut (issue 35) ---------------------------------------------------------


@pytest.fixture(scope="session")
def thinker_answers(real_engines, thinker_launches) -> dict[str, tuple[answers.AnswersResult, dict, dict]]:
    """kind -> (the answers stage, its checks by name, one chat reply with thinking on split by SGLang's parser)."""
    from sparkgate.evidence.client import EngineClient

    out = {}
    for kind, launch in thinker_launches.items():
        engine = real_engines.get(launch)
        want = {"engine": {"served_model_name": launch.served_model_name}, "time_scale": 1.0, "requested": [],
                "answers": {"set_version": answers.answer_set_mod.SET_VERSION, "baseline": None}}
        with gate.cpu_answer_bound():
            result = answers.run(EngineClient(engine.url), want, 1.0)
        question = answers.answer_set_mod.load().questions[0]
        body = {"model": launch.served_model_name, "messages": answers.answer_set_mod.load().messages(question),
                "temperature": 0, "max_tokens": 128, "chat_template_kwargs": {"enable_thinking": True}}
        split = engine.post("/v1/chat/completions", body).json()["choices"][0]["message"]
        out[kind] = (result, {c.name: c for c in answers.checks(result, want)}, split)
    return out


def test_a_real_engine_that_thinks_anyway_is_read_and_admitted_when_its_answers_are_right(thinker_answers):
    """The real SGLang serving a model whose template ignores enable_thinking=false: every reply reasons 48 tokens
    before its answer, past a short question's 32; the stage asks each once more with room, reads the final answer
    after `</think>`, and every answers check passes."""
    result, checks, _ = thinker_answers["right"]
    assert all(c.passed for c in checks.values()), {n: c.observed for n, c in checks.items() if not c.passed}
    thinking = result.thinking()
    cut = [q for q in answers.answer_set_mod.load().questions if q.max_tokens < 51]  # 48 + two tags + the answer
    assert thinking["thought"] == thinking["of"] and thinking["cut_after_retry"] == 0
    assert thinking["retried"] == len(cut) > 0
    assert result.cold.text.startswith("<think>") and all(r.finish_reason == "stop" for r in result.every_reply())


def test_a_real_engine_that_thinks_then_answers_wrong_is_refused_as_any_wrong_answer(thinker_answers):
    result, checks, _ = thinker_answers["wrong"]
    correct = checks["answers.correct"]
    assert not correct.passed and not checks["answers.cold_prefill"].passed
    assert correct.hint == answers.LIKELY_GARBLE  # not "thinking not disabled": the answer came, and is wrong
    assert {w["received"].strip() for w in correct.observed["wrong"]} == {"7777"}
    assert result.thinking()["cut_after_retry"] == 0


def test_sglangs_reasoning_parser_splits_a_real_reply_where_the_judge_does(thinker_answers):
    """Thinking on, with the deepseek-r1 parser: SGLang's own split (reasoning_content, content) is the judge's."""
    for kind in ("right", "wrong"):
        result, _, split = thinker_answers[kind]
        reply = next(r for r in result.replies if r.id == answers.answer_set_mod.load().questions[0].id)
        ours = answers.judge_mod.reasoning(reply.text)
        assert split["content"] == ours.answer and split["reasoning_content"].strip() == ours.reasoning.strip()


# --- captures of real verdicts (docs/field-reports.md) ----------------------------------------------------------

def test_a_fresh_capture_of_each_real_verdict_replays_to_it(dense_verdicts, nextn_off_verdicts, nextn_on_verdicts,
                                                             humming_verdicts, tmp_path):
    """Each verdict above, captured as the sentinel captures one and read back, is judged the same without the
    engine. With SPARKGATE_CAPTURE_CORPUS set (`invoke test.captures`) the captures become the corpus."""
    from sparkgate.evidence import capture
    from sparkgate.evidence.recording import replay
    from tests import capture_corpus

    corpus = capture_corpus.corpus_dir()
    verdicts = {**dense_verdicts, **nextn_off_verdicts, **nextn_on_verdicts, **humming_verdicts}
    # These two were judged on their server's first verification's evidence (gate.verdict): for them this is a round
    # trip of a replay; for the six live ones it is live against replay.
    replayed = sorted(name for name, result in verdicts.items() if id(result) in gate.REPLAYED)
    assert replayed == ["nextn off / humming-fp8", "nextn on / all-three"], replayed
    for name, result in verdicts.items():
        profile, recording, argv, env = gate.RECORDINGS[id(result)]
        made = capture_corpus.lane_capture(recording, profile, argv, env)
        again = capture.read(capture.write(made, tmp_path / capture_corpus.file_name("real", profile, name)))
        replayed = replay(again.recording).as_dict()
        assert capture.changes(result.as_dict(), replayed) == [], name
        if corpus is not None:
            capture.write(made, corpus / capture_corpus.file_name("real", profile, name))
