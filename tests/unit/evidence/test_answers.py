"""The answers stage judged against a scripted engine: the order it asks in, what it sends, each check in both
directions, the baseline agreement, and the sentinel's rotating question after admission."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkgate.evidence import answer_set, answers
from sparkgate.evidence.client import EngineClient, EngineUnreachable
from sparkgate.evidence.recheck import RecheckContext

SET = answer_set.load()
MODEL = "ling-v3-flash-fp4"


def expectations(requested=(), baseline=None) -> dict:
    return {"engine": {"served_model_name": MODEL}, "time_scale": 1.0, "requested": list(requested),
            "answers": {"set_version": answer_set.SET_VERSION, "baseline": baseline}}


def question_of(body: dict) -> answer_set.Question:
    return next(q for q in SET.every_question() if SET.messages(q) == body["messages"])


def word_logprobs(text: str, shift: float = 0.0, margin: float = 6.0) -> list[dict]:
    """An OpenAI ChoiceLogprobs.content for `text`, one token per word: sure of each (-0.01), the runner-up
    `margin` nats below; `shift` moves every chosen token's log-probability."""
    return [{"token": word, "bytes": list(word.encode()), "logprob": -0.01 + shift,
             "top_logprobs": [{"token": word, "bytes": [], "logprob": -0.01 + shift},
                              {"token": "~", "bytes": [], "logprob": -0.01 + shift - margin}]}
            for word in text.split()]


class ScriptedEngine:
    """Answers each question from `replies` (question id -> text, or a callable of the request number), with
    per-word log-probabilities (`logprobs`: question id -> ChoiceLogprobs.content, default word_logprobs)."""

    def __init__(self, replies: dict | None = None, status: int = 200, finishes: dict | None = None,
                 logprobs: dict | None = None):
        self.replies = replies or {}
        self.logprobs = logprobs or {}
        self.finishes = finishes or {}  # question id -> finish_reason (default "stop")
        self.status = status
        self.requests: list[dict] = []
        self.generated = 0.0
        self.running = 0  # what the sglang:num_running_reqs gauge publishes
        self.streamed = 0.0  # tokens of a client stream still running (not yet in generation_tokens_total)
        self.lock = threading.Lock()

    def reply_for(self, body: dict) -> str:
        question = question_of(body)
        scripted = self.replies.get(question.id, question.answer)
        return scripted(len(self.requests)) if callable(scripted) else scripted

    def finish_for(self, body: dict, text: str) -> str:
        return self.finishes.get(question_of(body).id, "stop")

    def serve(self) -> tuple[ThreadingHTTPServer, str]:
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                return

            def _send(self, code: int, payload: bytes, kind: str = "application/json"):
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):  # noqa: N802
                if self.path == "/metrics":
                    # SGLang's names: the finish-time counter, the per-forward-pass one, the request gauges.
                    text = (f"sglang:generation_tokens_total {engine.generated}\n"
                            f'sglang:realtime_tokens_total{{mode="decode"}} {engine.generated + engine.streamed}\n'
                            f"sglang:num_running_reqs {engine.running}\nsglang:num_queue_reqs 0\n")
                    self._send(200, text.encode(), "text/plain")
                else:
                    self._send(404, b"{}")

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with engine.lock:
                    if engine.status != 200:
                        self._send(engine.status, b'{"error": "boom"}')
                        return
                    text = engine.reply_for(body)
                    question = question_of(body)
                    finish = engine.finish_for(body, text)
                    logprobs = engine.logprobs.get(question.id, word_logprobs(text))
                    engine.requests.append({"path": self.path, **body})
                    engine.generated += len(text.split())
                response = {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": finish,
                                         "logprobs": {"content": logprobs}}],
                            "usage": {"completion_tokens": len(text.split()),
                                      "prompt_tokens": sum(len(m["content"].split()) for m in body["messages"])}}
                self._send(200, json.dumps(response).encode())

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def engine_at():
    servers = []

    def start(engine: ScriptedEngine) -> EngineClient:
        server, url = engine.serve()
        servers.append(server)
        return EngineClient(url)

    yield start
    for server in servers:
        server.shutdown()


def judged(engine: ScriptedEngine, engine_at, want: dict | None = None):
    result = answers.run(engine_at(engine), want or expectations(), 1.0)
    return result, {c.name: c for c in answers.checks(result, want or expectations())}


def test_a_healthy_engine_passes_every_answers_check_and_the_verdict_carries_the_set(engine_at):
    engine = ScriptedEngine()
    result, checks = judged(engine, engine_at)
    assert {name: c.passed for name, c in checks.items()} == {
        "answers.cold_prefill": True, "answers.correct": True, "answers.greedy_repeatable": True}
    shown = result.as_dict()
    assert shown["set_version"] == 2 and shown["right"] == shown["of"] == len(SET.questions)
    assert set(shown["read_as"]) == {q.id for q in SET.every_question()}
    assert {qid: len(tokens) for qid, tokens in shown["logprobs"].items()} == {
        q.id: len(q.answer.split()) for q in SET.every_question()}
    assert checks["answers.greedy_repeatable"].observed.startswith("identical")


def test_the_cold_question_goes_first_and_every_request_is_a_greedy_thinking_off_chat(engine_at):
    engine = ScriptedEngine()
    judged(engine, engine_at)
    asked = [question_of(r).id for r in engine.requests]
    assert asked == [SET.repeat.id, *(q.id for q in SET.questions), SET.repeat.id]
    for request in engine.requests:
        assert request["path"] == "/v1/chat/completions" and request["model"] == MODEL
        assert request["temperature"] == 0 and request["stream"] is False
        assert request["chat_template_kwargs"] == {"enable_thinking": False}
        assert request["separate_reasoning"] is False
        assert request["logprobs"] is True and request["top_logprobs"] == 2
        assert request["messages"][-1]["content"].endswith(f"{question_of(request).prompt} {SET.instruction}")


def test_the_long_questions_reach_many_kv_pages_and_the_multi_turn_one_sends_its_earlier_turns(engine_at):
    engine = ScriptedEngine()
    result, _ = judged(engine, engine_at)
    by_id = {r.id: r for r in result.every_reply()}
    documented = [q for q in SET.questions if q.document]
    assert len(documented) >= 2 and len({q.document for q in documented}) == 1  # the second reuses the first's pages
    for question in documented:
        sent = [r for r in engine.requests if question_of(r) == question][0]["messages"]
        assert len(sent) == 1 and sent[0]["content"].startswith("\n".join(SET.documents[question.document]))
        assert len(sent[0]["content"]) > 4000
        assert by_id[question.id].prompt_tokens > 600  # words here; about 1,200 tokens of a real tokenizer
    [multi] = [q for q in SET.questions if q.history]
    sent = [r for r in engine.requests if question_of(r) == multi][0]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert by_id[multi.id].correct


def test_a_garbled_cold_prefill_is_refused_by_cold_prefill_and_repeatability_only(engine_at):
    garbled = SET.repeat.answer.replace("13, 14", "13, 31, 14")
    engine = ScriptedEngine({SET.repeat.id: lambda n: garbled if n == 0 else SET.repeat.answer})
    _, checks = judged(engine, engine_at)
    assert not checks["answers.cold_prefill"].passed and checks["answers.correct"].passed
    cold = checks["answers.cold_prefill"].observed
    assert cold["expected"] == SET.repeat.answer and cold["received"] == garbled
    split = checks["answers.greedy_repeatable"]
    assert not split.passed
    assert split.observed["diverge_at_char"] == garbled.index("31")


@pytest.mark.parametrize("wrong", [1, 2, 5])
def test_correct_allows_max_wrong_and_names_each_wrong_question(engine_at, wrong):
    bad = {q.id: "I do not know" for q in SET.questions[:wrong]}
    _, checks = judged(ScriptedEngine(bad), engine_at)
    check = checks["answers.correct"]
    assert check.passed is (wrong <= SET.max_wrong)
    assert check.observed["right"] == len(SET.questions) - wrong
    assert [w["question"] for w in check.observed["wrong"]] == [q.prompt for q in SET.questions[:wrong]]
    assert all(w["received"] == "I do not know" and w["read_as"] is None for w in check.observed["wrong"])


def test_a_warm_reply_that_splices_one_token_is_not_repeatable(engine_at):
    spliced = SET.repeat.answer.replace("20, 21", "20, 20, 21")
    engine = ScriptedEngine({SET.repeat.id: lambda n: SET.repeat.answer if n == 0 else spliced})
    _, checks = judged(engine, engine_at)
    assert checks["answers.cold_prefill"].passed
    check = checks["answers.greedy_repeatable"]
    assert not check.passed and check.observed["diverge_at_char"] == SET.repeat.answer.index("20, 21") + len("20, 2")
    assert "20, 20, 21" in check.observed["warm"] and "20, 20" not in check.observed["cold"]


def test_an_engine_that_errors_fails_closed_with_the_error_shown(engine_at):
    _, checks = judged(ScriptedEngine(status=500), engine_at)
    assert not any(c.passed for c in checks.values())
    assert "HTTP 500" in checks["answers.correct"].hint
    assert "HTTP 500" in checks["answers.cold_prefill"].observed["received"]


def test_no_answers_asked_is_missing_evidence():
    checks = answers.checks(None, expectations())
    assert [c.name for c in checks] == ["answers.cold_prefill", "answers.correct", "answers.greedy_repeatable"]
    assert not any(c.passed for c in checks)


def test_a_bundle_of_another_answer_set_version_is_refused(engine_at):
    want = expectations()
    want["answers"]["set_version"] = 99
    _, checks = judged(ScriptedEngine(), engine_at, want)
    assert not checks["answers.correct"].passed and "99" in json.dumps(checks["answers.correct"].observed)


def baseline_record(differing: int = 0) -> dict:
    """A baseline verdict's answers: every reply right, with word_logprobs; the first `differing` questions
    recorded as another text (a baseline engine that wrote something else)."""
    texts = {q.id: q.answer for q in SET.every_question()}
    for question in SET.questions[:differing]:
        texts[question.id] = "0"
    logprobs = {qid: answers.read_logprobs({"logprobs": {"content": word_logprobs(text)}}) for qid, text in texts.items()}
    return {"set_version": answer_set.SET_VERSION, "texts": texts, "logprobs": logprobs,
            "recorded_at": "2026-12-01T00:00:00Z"}


@pytest.mark.parametrize("differing", [0, 2, 5])
def test_a_stacked_profile_must_agree_with_this_hosts_baseline(engine_at, differing):
    want = expectations(requested=["humming"], baseline=baseline_record(differing))
    _, checks = judged(ScriptedEngine(), engine_at, want)
    check = checks["answers.baseline_agreement"]
    total = len(SET.every_question())
    assert check.observed["agree"] == total - differing and check.observed["of"] == total
    assert check.passed is ((total - differing) / total >= SET.baseline_agreement_min)
    assert [d["question"] for d in check.observed["differing"]] == [q.id for q in SET.questions[:differing]]


@pytest.mark.parametrize(("shift", "agrees"), [(0.0, True), (-0.3, True), (0.005, True), (-0.6, False),
                                               (-3.0, False)])
def test_the_same_text_agrees_only_with_log_probabilities_within_the_tolerance(engine_at, shift, agrees):
    """A mis-scaled head keeps every greedy token (the text is identical, every answer right) but moves every
    log-probability: exact text cannot see it, the tolerance does."""
    shifted = {q.id: word_logprobs(q.answer, shift=shift) for q in SET.every_question()}
    want = expectations(requested=["fp8_lm_head"], baseline=baseline_record())
    _, checks = judged(ScriptedEngine(logprobs=shifted), engine_at, want)
    check = checks["answers.baseline_agreement"]
    assert checks["answers.correct"].passed
    assert check.passed is agrees and check.observed["max_delta_nats"] == pytest.approx(abs(shift), abs=1e-3)


@pytest.mark.parametrize(("margin", "taken", "still_right", "agrees"), [
    (0.3, "result", True, True),  # a near-tie moved to the baseline's runner-up, the answer still right
    (0.3, "result", False, False),  # a near-tie moved to a wrong answer
    (4.0, "result", True, False),  # the baseline was sure: a different token is not rounding
    (0.3, "banana", True, False),  # a near-tie, but the reply took neither of the baseline's two
    (-0.3, "result", True, False),  # a runner-up likelier than the greedy choice: not a greedy record
])
def test_a_reply_may_leave_the_baseline_only_for_its_runner_up_at_a_near_tie_and_still_right(
        margin, taken, still_right, agrees):
    baseline = [["The", -0.01, -6.0, "A"], ["answer", -0.4, -0.4 - margin, "result"], ["is", -0.01, -5.0, "was"],
                ["85", -0.01, -7.0, "58"]]
    ours = [["The", -0.02, -6.0, "A"], [taken, -0.5, -0.6, "other"], ["is", -0.01, -5.0, "was"],
            ["85", -0.01, -7.0, "58"]]
    verdict = answers.agreement(ours, baseline, still_right)
    assert verdict["agrees"] is agrees and "token 1" in verdict["how"]


def test_a_three_way_tie_may_move_to_a_third_token_when_both_engines_were_torn():
    """top_logprobs 2 shows one other token each: in a tie of three the reply may take a third token, agreeing when
    its own runner-up is the baseline's token within the near-tie (seen on CUDA with FP8 weights, tests/fixtures/gpu)."""
    baseline = [["0xda", -5.8367, -5.8367, "ce"]]
    assert answers.agreement([["lack", -5.835, -5.8369, "0xda"]], baseline, right=True)["agrees"]
    assert not answers.agreement([["lack", -5.835, -7.5, "0xda"]], baseline, right=True)["agrees"]  # not torn
    assert not answers.agreement([["lack", -5.835, -5.8369, "xx"]], baseline, right=True)["agrees"]


@pytest.mark.parametrize(("ours", "agrees"), [
    ([["85", -0.01, -7.0, "58"], ["5", -0.01, -7.0, "6"]], False),  # longer than the baseline
    ([], False),
    ([["85", -0.01, None, None]], True),  # no runner-up shown: the same token still compares
])
def test_replies_of_another_length_or_none_never_agree(ours, agrees):
    assert answers.agreement(ours, [["85", -0.02, -7.0, "58"]], right=True)["agrees"] is agrees


def test_byte_pieces_that_display_alike_are_different_tokens():
    """Byte-level BPE pieces of one character each display as U+FFFD: read by their bytes they stay apart."""
    piece = {"token": "\ufffd", "logprob": -0.2, "bytes": [0xE2],
             "top_logprobs": [{"token": "\ufffd", "logprob": -0.2, "bytes": [0xE2]},
                              {"token": "\ufffd", "logprob": -0.3, "bytes": [0xF0]}]}
    [token] = answers.read_logprobs({"logprobs": {"content": [piece]}})
    assert token == ["0xe2", -0.2, -0.3, "0xf0"]  # the runner-up is another token, not dropped as the same one


class _NeverEncoded(str):
    """A token text that fails the test if it is encoded (a hostile engine's huge token must not be)."""

    def encode(self, *args, **kwargs):
        raise AssertionError("encoded")


@pytest.mark.parametrize(("piece", "name"), [
    ({"token": "a", "bytes": [97]}, "a"),  # bytes that are the text's: the text
    ({"token": "a", "bytes": [97.0]}, "a"), ({"token": "a", "bytes": [True]}, "a"),  # not a byte list: the text
    ({"token": "a", "bytes": [300]}, "a"), ({"token": "a", "bytes": "a"}, "a"), ({"token": "a", "bytes": [1] * 65}, "a"),
    ({"token": "ab", "bytes": [97]}, "0x61"),  # a byte list that is not the text's: its bytes
    ({"token": _NeverEncoded("xx"), "bytes": [120]}, "0x78"),  # longer than its bytes: never the text's or encoded
    ({"token": 7, "bytes": [55]}, None),
])
def test_a_token_is_named_by_its_text_unless_valid_bytes_say_otherwise(piece, name):
    assert answers._token_name(piece) == name


@pytest.mark.parametrize("recorded", [
    [["85", 0.5, None, None]], [["85", "x", None, None]], [[85, -0.1, None, None]], [["85", -0.1]], "85", [None],
    [["85", float("nan"), None, None]], [["85", -0.1, None]], [["85", -0.1, -0.5, 7]],
])
def test_a_malformed_baseline_record_never_agrees_and_never_raises(engine_at, recorded):
    baseline = baseline_record()
    baseline["logprobs"] = {qid: recorded for qid in baseline["logprobs"]}
    _, checks = judged(ScriptedEngine(), engine_at, expectations(requested=["mtp"], baseline=baseline))
    assert not checks["answers.baseline_agreement"].passed


@pytest.mark.parametrize("content", [None, "x", [{"token": "85"}], [{"token": "85", "logprob": 1.0}],
                                     [{"token": "85", "logprob": True}], [{"token": None, "logprob": -0.1}]])
def test_a_reply_without_readable_log_probabilities_is_judged_as_text_and_never_agrees(engine_at, content):
    broken = {q.id: content for q in SET.every_question()}
    want = expectations(requested=["mtp"], baseline=baseline_record())
    result, checks = judged(ScriptedEngine(logprobs=broken), engine_at, want)
    assert checks["answers.correct"].passed and all(r.tokens is None for r in result.every_reply())
    assert not checks["answers.baseline_agreement"].passed


def test_a_baseline_record_of_too_few_right_replies_cannot_vouch_for_the_rest(engine_at):
    baseline = baseline_record()
    baseline["logprobs"] = {SET.repeat.id: baseline["logprobs"][SET.repeat.id]}
    _, checks = judged(ScriptedEngine(), engine_at, expectations(requested=["mtp"], baseline=baseline))
    check = checks["answers.baseline_agreement"]
    assert not check.passed and check.observed["agree"] == check.observed["of"] == 1
    assert "re-record" in check.hint and "needed" in check.hint


def test_baseline_agreement_needs_a_record_of_this_set_and_a_stacked_profile(engine_at):
    _, checks = judged(ScriptedEngine(), engine_at, expectations(requested=[], baseline=baseline_record()))
    assert "answers.baseline_agreement" not in checks  # the baseline is its own reference
    old = {**baseline_record(), "set_version": 1}
    _, checks = judged(ScriptedEngine(), engine_at, expectations(requested=["mtp"], baseline=old))
    assert not checks["answers.baseline_agreement"].passed
    assert "re-record" in checks["answers.baseline_agreement"].hint


@pytest.mark.parametrize(("question_id", "reply", "right"), [
    ("mul-23-17", "391", True),
    ("mul-23-17", "**391**", True),
    ("mul-23-17", "\\boxed{391}", True),
    ("add-47-38", "47 plus 38 is 85.", True),  # restating the question is not a wrong answer
    ("add-47-38", "<think>\n\n</think>\n\n85", True),
    ("km-to-m", "3.5 kilometers is 3,500 meters", True),
    ("div-144-12", "12", True),  # the answer is also a number of the question
    ("capital-france", "The capital of France is Paris.", True),
    ("capital-france", "paris", True),
    ("gold-symbol", "Au (gold)", True),
    ("count-to-24", "The integers from 1 to 24: " + SET.repeat.answer, True),
    ("add-47-38", "eighty-five", True),  # number words are read
    ("add-47-38", "86", False),
    ("add-47-38", "84 or 85", False),  # every candidate is not an answer
    ("add-47-38", "What is 47 plus 38?", False),  # an echo of the question
    ("div-144-12", "144", False),
    ("capital-france", "Lyon", False),
    ("gold-symbol", "Not Au, Ag", False),
    ("count-to-24", SET.repeat.answer.replace("13, 14", "13, 31, 14"), False),  # one number spliced in
    ("count-to-24", SET.repeat.answer.replace(", 20", ""), False),  # one dropped
    ("locker-107-code", "17439", True),
    ("locker-107-code", "The parcel code of locker 107 is 17439.", True),
    ("locker-107-code", "20713", False),  # locker 188's code: a neighbouring page read
    ("locker-107-code", "17439 or 20713", False),
    ("locker-107-code", "107", False),
    ("my-locker-plus-25", "442", True),
    ("my-locker-plus-25", "Your locker number plus 25 is 442.", True),
    ("my-locker-plus-25", "417 + 25 = 442", True),  # the earlier turn's number, restated
    ("my-locker-plus-25", "417", False),
    ("my-locker-plus-25", "5093 + 25 = 442", False),  # the code restated: wrong arithmetic for the result
    ("my-locker-plus-25", "417 + 5093 = 442", False),
    ("add-47-38", "47 plus 38 is 85", True),
    ("add-47-38", "38 plus 38 is 85", False),
    ("add-47-38", "47 x 38 = 85", False),
    ("my-locker-plus-25", "5093 x 25 = 442", False),
    ("my-locker-plus-25", "5093 + + 25 = 442", False),
    ("my-locker-plus-25", "5093 plus + 25 = 442", False),
    ("add-47-38", "one" + " hundred" * 2200, False),  # a runaway reply is wrong unread, never a crash
    ("my-locker-plus-25", "5118", False),  # the locker code plus 25
    ("baker-rolls-left", "He has 18 rolls left.", True),
    ("baker-rolls-left", "168", False),  # one step short
    ("mia-stickers-now", "Mia has 61 stickers now.", True),
    ("mia-stickers-now", "81", False),  # the gift not taken off
    ("train-km-total", "360 km", True),
    ("train-km-total", "360 kilometers in total", True),
    ("train-km-total", "240", False),
])
def test_the_judge_reads_the_answer_however_it_is_phrased_and_never_a_wrong_one(question_id, reply, right):
    assert answer_set.judge(SET.by_id(question_id), reply) is right


@given(st.text(max_size=300))
def test_the_judge_never_raises_and_reads_right_only_with_the_answer_in_the_reply(text):
    for question in SET.every_question():
        right, read_as = answer_set.read(question, text)
        assert not right or read_as is not None
        if right and question.kind == "integer":  # in digits, or in words ("eighteen")
            assert question.answer in text.replace(",", "") or any(c.isalpha() for c in text)


@given(st.integers(min_value=-10**9, max_value=10**9), st.integers(min_value=-10**9, max_value=10**9),
       st.text(alphabet=" *_:;()[]{}!?'\"\n\t=", max_size=30))
def test_an_integer_is_right_only_when_it_is_the_answer(got, want, prefix):
    question = answer_set.Question(id="q", prompt="What is it?", kind="integer", answer=str(want))
    assert answer_set.judge(question, f"{prefix} {got}") is (got == want)


ADMITTED = {"texts": {q.id: q.answer for q in SET.questions[1:]}}  # the first question was read wrong at admission


def context(client: EngineClient, period_s: float = 0.01, admitted: dict | None = ADMITTED) -> RecheckContext:
    ctx = RecheckContext("answers", client, period_s, expectations())
    answers.start_rechecks(ctx, admitted)
    return ctx


def test_after_admission_one_rotating_question_is_asked_only_when_idle_and_due(engine_at):
    engine = ScriptedEngine()
    ctx = context(engine_at(engine), period_s=0.01)
    ctx.state["last_probe_at"] = 0.0  # due at once
    engine.generated += 5  # client traffic in this period: not idle
    assert answers.rechecks(ctx) == [] and engine.requests == []
    first = answers.rechecks(ctx)  # a whole period without a token
    assert [c.name for c in first] == ["sentinel.answer_probe"] and first[0].passed
    # only short questions the admitting verdict read right: not the counting one, not the first question
    assert first[0].observed["question_id"] == SET.questions[1].id and first[0].observed["same_text_as_admission"]
    assert answers.rechecks(ctx) == []  # not due again yet
    ctx.state["last_probe_at"] = 0.0
    second = answers.rechecks(ctx)
    assert second[0].observed["question_id"] == SET.questions[2].id and len(engine.requests) == 2


def test_a_long_client_stream_is_never_read_as_idle_though_the_finish_counter_stands_still(engine_at):
    """sglang:generation_tokens_total moves only when a request finishes: read alone, a long stream looks idle and
    a probe would queue behind the client (batch 1). The per-forward-pass counter and the gauges say otherwise."""
    engine = ScriptedEngine()
    ctx = context(engine_at(engine))
    ctx.state["last_probe_at"] = 0.0  # due at once
    engine.running = 1
    for _ in range(3):
        engine.streamed += 40
        assert answers.rechecks(ctx) == []
    assert answers.rechecks(ctx) == [] and engine.requests == []  # a period without a token, but still running
    engine.running, engine.streamed = 0, engine.streamed + 7  # the stream ended; SGLang publishes the idle gauge
    assert answers.rechecks(ctx) == []  # its last tokens moved the counter in this period
    [probe] = answers.rechecks(ctx)
    assert probe.passed and len(engine.requests) == 1


def test_a_wrong_answer_after_admission_fails_the_probe_with_the_answers_shown(engine_at):
    question = SET.questions[1]
    engine = ScriptedEngine({question.id: "1234"})
    ctx = context(engine_at(engine))
    ctx.state["last_probe_at"] = 0.0
    [probe] = answers.rechecks(ctx)
    assert not probe.passed and not probe.observed["same_text_as_admission"]
    assert probe.observed["expected"] == question.answer and probe.observed["received"] == "1234"


@pytest.mark.parametrize("changed", ["{a} {a} {a}", "{a} ✅", "{a}, 7"])
def test_a_reply_that_changed_since_admission_is_judged_not_only_shown(engine_at, changed):
    """The admitted reply was the bare answer; the same question later answered with the answer repeated, a
    symbol spliced in or another number appended closes the gate (the judge's contract, not a text diff)."""
    question = SET.questions[1]
    engine = ScriptedEngine({question.id: changed.format(a=question.answer)})
    ctx = context(engine_at(engine))
    ctx.state["last_probe_at"] = 0.0
    [probe] = answers.rechecks(ctx)
    assert not probe.passed and not probe.observed["same_text_as_admission"]


def test_probes_without_an_answer_in_time_are_skipped_until_too_many_in_a_row(engine_at, monkeypatch):
    ctx = context(engine_at(ScriptedEngine()))

    def no_answer(*args, **kwargs):
        reply = answers.Reply(id=SET.questions[1].id, question=SET.questions[1].prompt, expected="x",
                              error="POST /v1/chat/completions: no answer within 2.0s")
        reply.timed_out = True
        return reply

    monkeypatch.setattr(answers, "ask", no_answer)
    outcomes = []
    for _ in range(answers.MAX_SKIPPED_PROBES):
        ctx.state["last_probe_at"] = 0.0
        [probe] = answers.rechecks(ctx)
        outcomes.append(probe.passed)
    assert outcomes == [True] * (answers.MAX_SKIPPED_PROBES - 1) + [False]


def test_no_right_answer_at_admission_fails_the_probe_closed(engine_at):
    ctx = context(engine_at(ScriptedEngine()), admitted=None)
    ctx.state["last_probe_at"] = 0.0
    [probe] = answers.rechecks(ctx)
    assert not probe.passed and probe.observed == "no question was answered right at admission"


def test_the_probe_fails_closed_without_the_generation_counter():
    ctx = RecheckContext("answers", EngineClient("http://127.0.0.1:9", timeout=0.2), 0.01, expectations())
    [probe] = answers.rechecks(ctx)
    assert probe.name == "sentinel.answer_probe" and not probe.passed


def test_a_reply_that_runs_to_max_tokens_is_wrong_and_says_it_was_cut(engine_at):
    """A right first token followed by decode garbage up to max_tokens: "85 85 85 ..." states the answer again and
    again, which the judge refuses, and the reply says it was cut."""
    question = SET.questions[0]
    engine = ScriptedEngine({question.id: " ".join([question.answer] * question.max_tokens)},
                            finishes={question.id: "length"})
    result = answers.run(engine_at(engine), expectations(), 1.0)
    reply = result.replies[0]
    assert not answer_set.judge(question, reply.text) and not reply.correct
    assert reply.shown()["finish_reason"] == "length (cut at max_tokens)"


def test_traffic_that_never_pauses_a_whole_period_gets_a_probe_at_the_first_gap_once_overdue(engine_at):
    """Bounded staleness: client tokens in every period keep the idle rule from ever holding. Until the probe is
    overdue nothing is asked; then the first reading with nothing running or queued asks one, and the page's
    reading (`checked`) says how long the gate went unchecked and that it was overdue."""
    engine = ScriptedEngine()
    ctx = context(engine_at(engine), period_s=0.01)
    ctx.state["last_probe_at"] = 0.0  # due at once
    engine.running = 1
    for _ in range(5):
        engine.generated += 30  # a client decodes in every period
        assert answers.rechecks(ctx) == []
    assert answers.last_checked(ctx)["overdue"] is False
    ctx.state["answered_at"] -= answers.MAX_UNCHECKED_PERIODS * ctx.period_s  # 120 periods without an answer
    assert answers.last_checked(ctx)["overdue"] is True
    engine.generated += 30
    assert answers.rechecks(ctx) == [] and engine.requests == []  # still running: no gap
    engine.running, engine.generated = 0, engine.generated + 30  # between two client requests
    [probe] = answers.rechecks(ctx)
    assert probe.passed and probe.observed["asked_at"] == "overdue: at the first gap"
    assert len(engine.requests) == 1 and answers.last_checked(ctx)["overdue"] is False


def timing_out_probe(engine, decoded: int):
    """An `ask` that gets no answer in time while the engine decodes `decoded` tokens meanwhile."""
    timeouts = []

    def ask(*args, timeout_s=None, **kwargs):
        timeouts.append(timeout_s)
        engine.generated += decoded
        reply = answers.Reply(id=SET.questions[1].id, question=SET.questions[1].prompt, expected="x",
                              error="POST /v1/chat/completions: no answer within 2.0s")
        reply.timed_out = True
        return reply

    return ask, timeouts


def probe_once(ctx) -> list:
    ctx.state["last_probe_at"] = 0.0
    ctx.state["previous_activity"] = answers.activity_mod.fresh(ctx.client)  # idle over the period
    return answers.rechecks(ctx)


def test_probes_deferred_behind_client_traffic_then_one_waits_its_turn_and_counts(engine_at, monkeypatch):
    """A probe that times out while the engine decodes more tokens than the probe could have made (a client's long
    request ahead of it) is deferred; after MAX_SKIPPED_PROBES deferrals the next one waits its turn with the whole
    request timeout, and a timeout then counts: a slow or wedged engine cannot defer forever."""
    engine = ScriptedEngine()
    ctx = context(engine_at(engine))
    ask, timeouts = timing_out_probe(engine, decoded=SET.questions[1].max_tokens + 200)
    monkeypatch.setattr(answers, "ask", ask)
    outcomes = []
    for _ in range(4 * (answers.MAX_SKIPPED_PROBES + 1)):
        [probe] = probe_once(ctx)
        outcomes.append((probe.passed, probe.observed["deferred_in_a_row"], probe.observed["skipped_in_a_row"]))
        if not probe.passed:
            break
    n = answers.MAX_SKIPPED_PROBES
    # n deferred probes, then every probe waits its turn and counts; the n-th counted one fails.
    expected = [(True, i, 0) for i in range(1, n + 1)] + [(k < n, n, k) for k in range(1, n + 1)]
    assert outcomes == expected
    assert sum(t > 5.0 for t in timeouts) == n and len(outcomes) == 2 * n


def test_the_probes_own_tokens_are_not_others_traffic(engine_at, monkeypatch):
    """A probe that made a token or two of its own and then stopped is not 'deferred': those are its tokens."""
    engine = ScriptedEngine()
    ctx = context(engine_at(engine))
    ask, _ = timing_out_probe(engine, decoded=2)
    monkeypatch.setattr(answers, "ask", ask)
    outcomes = [probe_once(ctx)[0].passed for _ in range(answers.MAX_SKIPPED_PROBES)]
    assert outcomes == [True] * (answers.MAX_SKIPPED_PROBES - 1) + [False]


def test_gauges_that_never_show_a_gap_delay_the_probe_by_at_most_twice_the_bound(engine_at):
    engine = ScriptedEngine()
    ctx = context(engine_at(engine), period_s=0.01)
    ctx.state["last_probe_at"] = 0.0
    engine.running = 1  # a stuck gauge, or traffic with no gap ever published
    ctx.state["answered_at"] -= answers.MAX_UNCHECKED_PERIODS * ctx.period_s
    engine.generated += 30
    assert answers.rechecks(ctx) == [] and answers.rechecks(ctx) == []  # overdue, but no gap yet
    ctx.state["answered_at"] -= answers.MAX_UNCHECKED_PERIODS * ctx.period_s  # twice the bound
    [probe] = answers.rechecks(ctx)
    assert probe.passed and probe.observed["asked_at"] == "overdue: waiting its turn behind client traffic"


# --- thinking replies (a chat template that ignores enable_thinking) --------------------------------------------

class ThinkingEngine(ScriptedEngine):
    """Thinks `words` words in a `<think>` block before each answer (`wrong`: a wrong one), one token per word, cut
    at the request's max_tokens as an engine cuts: finish_reason "length"."""

    def __init__(self, words: int, wrong: bool = False, cold_wrong: bool = False):
        super().__init__()
        self.words, self.wrong, self.cold_wrong = words, wrong, cold_wrong  # cold_wrong: only the first request

    def tokens_for(self, body: dict) -> tuple[list[str], bool]:
        answer = "7777" if self.wrong or (self.cold_wrong and not self.requests) else question_of(body).answer
        tokens = ["<think>", *["hmm"] * self.words, "</think>", *answer.split()]
        return tokens[: body["max_tokens"]], len(tokens) > body["max_tokens"]

    def reply_for(self, body: dict) -> str:
        return " ".join(self.tokens_for(body)[0])

    def finish_for(self, body: dict, text: str) -> str:
        return "length" if self.tokens_for(body)[1] else "stop"


def test_a_reply_that_thinks_past_max_tokens_is_asked_once_more_and_admitted(engine_at):
    engine = ThinkingEngine(words=48)
    result, checks = judged(engine, engine_at)
    assert all(c.passed for c in checks.values()), [c.hint for c in checks.values() if not c.passed]
    asked = (SET.repeat, *SET.questions, SET.repeat)
    cut = [q for q in asked if 50 + len(q.answer.split()) > q.max_tokens]  # 48 words and two tags, then the answer
    assert len(cut) >= len(SET.questions)
    thinking = result.as_dict()["thinking"]
    assert thinking == {"thought": len(asked), "retried": len(cut), "cut_after_retry": 0, "of": len(asked),
                        "retry_completion_tokens": sum(len(q.answer.split()) + 50 for q in cut)}
    budgets = [r["max_tokens"] for r in engine.requests]
    assert len(budgets) == len(asked) + len(cut)  # each cut question once more, never twice
    room = SET.repeat.max_tokens + answers.THINKING_RETRY_TOKENS
    assert budgets[0] == budgets[-1] == room  # the counting question: the retry's room from the start
    retries = [b for b in budgets[1:-1] if b > max(q.max_tokens for q in SET.questions)]
    assert sorted(retries) == sorted(q.max_tokens + answers.THINKING_RETRY_TOKENS for q in cut)


def test_a_reply_that_thinks_within_max_tokens_is_read_without_a_retry(engine_at):
    engine = ThinkingEngine(words=2)
    result, checks = judged(engine, engine_at)
    assert checks["answers.correct"].passed and checks["answers.cold_prefill"].passed
    thinking = result.as_dict()["thinking"]
    assert thinking["thought"] == thinking["of"] and thinking["retried"] == 0
    assert len(engine.requests) == len(SET.questions) + 2


def test_a_wrong_answer_after_thinking_is_refused_as_any_wrong_answer(engine_at):
    result, checks = judged(ThinkingEngine(words=48, wrong=True), engine_at)
    correct = checks["answers.correct"]
    assert not correct.passed and not checks["answers.cold_prefill"].passed
    assert "thinking not disabled" not in correct.hint and correct.hint == answers.LIKELY_GARBLE
    shown = correct.observed["wrong"][0]
    assert shown["received"].strip() == "7777" and shown["reasoning_chars"] > 0
    assert result.as_dict()["thinking"]["cut_after_retry"] == 0


def test_thinking_that_never_ends_is_refused_as_thinking_not_disabled(engine_at):
    result, checks = judged(ThinkingEngine(words=2000), engine_at)
    for name in ("answers.cold_prefill", "answers.correct"):
        check = checks[name]
        assert not check.passed and check.hint.startswith("thinking not disabled") and "\n" not in check.hint
        assert "enable_thinking" in check.hint and "Fix:" in check.hint
    shown = checks["answers.correct"].observed["wrong"][0]
    assert "after one retry" in shown["finish_reason"]
    assert shown["received"].startswith("(no answer")
    thinking = result.as_dict()["thinking"]
    assert thinking["cut_after_retry"] == thinking["of"]
    assert thinking["retried"] == thinking["of"] - 2  # the counting question had the room from the start


def test_the_probe_after_admission_reads_a_thinking_reply_and_names_thinking_that_never_ends(engine_at):
    engine = ThinkingEngine(words=48)
    ctx = context(engine_at(engine), period_s=1.0)
    ctx.state["last_probe_at"] = 0.0
    [probe] = answers.rechecks(ctx)
    assert probe.passed and [r["max_tokens"] for r in engine.requests] == [32, 32 + answers.THINKING_RETRY_TOKENS]

    ctx = context(engine_at(ThinkingEngine(words=2000)), period_s=1.0)
    ctx.state["last_probe_at"] = 0.0
    [probe] = answers.rechecks(ctx)
    assert not probe.passed and probe.hint.startswith("thinking not disabled")


def test_a_cold_garble_is_judged_although_the_reply_thinks_past_the_counting_questions_max_tokens(engine_at):
    """The cold reply is the one judged: a thinking reply longer than the counting question's max_tokens gets the
    retry's room from its first request, since a retry is warm and would hide a garbled cold prefill."""
    assert 200 + 2 + len(SET.repeat.answer.split()) > SET.repeat.max_tokens
    engine = ThinkingEngine(words=200, cold_wrong=True)
    result, checks = judged(engine, engine_at)
    failing = {name for name, c in checks.items() if not c.passed}
    assert failing == {"answers.cold_prefill", "answers.greedy_repeatable"}, failing
    assert checks["answers.cold_prefill"].hint != answers.thinking_hint([result.cold])
    assert not result.cold.retried and result.cold.thought and result.cold.extracted == "7777"

    engine = ThinkingEngine(words=200)
    result, checks = judged(engine, engine_at)
    assert all(c.passed for c in checks.values()), [c.hint for c in checks.values() if not c.passed]
    room = SET.repeat.max_tokens + answers.THINKING_RETRY_TOKENS
    repeat = [r["max_tokens"] for r in engine.requests if question_of(r).id == SET.repeat.id]
    assert repeat == [room, room] and not result.cold.retried and not result.warm.retried


class FakeClient:
    """A client answering `replies` in order: (content, finish_reason, completion_tokens), or an exception."""

    def __init__(self, replies):
        self.replies, self.max_tokens, self.now = list(replies), [], 0.0

    def clock(self) -> float:
        self.now += 1.0
        return self.now

    def post_json(self, path: str, body: dict, timeout: float) -> dict:
        self.max_tokens.append(body["max_tokens"])
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        text, finish, tokens = reply
        return {"choices": [{"message": {"content": text}, "finish_reason": finish}],
                "usage": {"completion_tokens": tokens, "prompt_tokens": 10}}


def asked_alone(replies, question=SET.questions[0]):
    client = FakeClient(replies)
    reply = answers.ask(client, MODEL, SET, question, 1.0)
    result = answers.AnswersResult(set_version=SET.set_version, cold=reply, replies=[reply])
    return client, reply, result, {c.name: c for c in answers.checks(result, expectations())}


def test_a_cut_reply_whose_reasoning_closed_is_not_asked_again_nor_called_thinking_not_disabled():
    """A block that closed and then an answer repeated up to max_tokens is decode garbage, not thinking."""
    question = SET.questions[0]
    garbled = "<think>\n\n</think>\n\n" + f"{question.answer} " * 40
    client, reply, result, checks = asked_alone([(garbled, "length", question.max_tokens)])
    assert client.max_tokens == [question.max_tokens] and not reply.retried
    assert reply.thought and not reply.thinking_cut and result.thinking()["cut_after_retry"] == 0
    assert checks["answers.correct"].hint == answers.LIKELY_GARBLE
    assert not checks["answers.cold_prefill"].hint.startswith("thinking not disabled")


def test_thinking_not_disabled_is_decided_from_the_final_reply_not_the_first_try():
    """The first try was cut inside its reasoning; the retry did not think and ran to max_tokens: garbage, not
    thinking not disabled."""
    room = SET.questions[0].max_tokens + answers.THINKING_RETRY_TOKENS
    client, reply, result, checks = asked_alone([("<think> hmm hmm", "length", 32), ("zzz " * 100, "length", room)])
    assert client.max_tokens == [SET.questions[0].max_tokens, room] and reply.retried
    assert not reply.thought and not reply.thinking_cut and result.thinking()["thought"] == 0
    assert checks["answers.correct"].hint == answers.LIKELY_GARBLE
    assert "after one retry" in checks["answers.correct"].observed["wrong"][0]["finish_reason"]


def test_a_retry_keeps_the_first_tries_tokens_apart_and_the_stage_counts_both():
    question = SET.questions[0]
    _, reply, result, checks = asked_alone([("<think>" + " w" * 40, "length", 32),
                                            (f"<think>x</think>{question.answer}", "stop", 100)])
    assert checks["answers.correct"].passed
    assert (reply.first_try_completion_tokens, reply.completion_tokens, reply.spent_tokens) == (32, 100, 132)
    # asked_alone's result holds the reply twice (as the cold one and as the only other)
    assert result.thinking()["retry_completion_tokens"] == 2 * 100
    assert result.completion_tokens() == result.as_dict()["completion_tokens"] == 2 * 132

    _, reply, result, checks = asked_alone([("<think>" + " w" * 40, "length", 32), EngineUnreachable("boom")])
    assert reply.error == "boom" and reply.completion_tokens is None and reply.first_try_completion_tokens == 32
    assert result.thinking()["retry_completion_tokens"] == 0 and reply.spent_tokens == 32
    assert not checks["answers.cold_prefill"].passed and "boom" in checks["answers.correct"].hint
