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
from sparkgate.evidence.client import EngineClient
from sparkgate.evidence.recheck import RecheckContext

SET = answer_set.load()
MODEL = "ling-v3-flash-fp4"


def expectations(requested=(), baseline=None) -> dict:
    return {"engine": {"served_model_name": MODEL}, "time_scale": 1.0, "requested": list(requested),
            "answers": {"set_version": answer_set.SET_VERSION, "baseline": baseline}}


class ScriptedEngine:
    """Answers each question from `replies` (question id -> text, or a callable of the request number)."""

    def __init__(self, replies: dict | None = None, status: int = 200):
        self.replies = replies or {}
        self.status = status
        self.requests: list[dict] = []
        self.generated = 0.0
        self.lock = threading.Lock()

    def reply_for(self, body: dict) -> str:
        content = body["messages"][-1]["content"]
        question = next(q for q in SET.every_question() if content.startswith(q.prompt))
        scripted = self.replies.get(question.id, question.answer)
        return scripted(len(self.requests)) if callable(scripted) else scripted

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
                    self._send(200, f"sglang:generation_tokens_total {engine.generated}\n".encode(), "text/plain")
                else:
                    self._send(404, b"{}")

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with engine.lock:
                    if engine.status != 200:
                        self._send(engine.status, b'{"error": "boom"}')
                        return
                    text = engine.reply_for(body)
                    engine.requests.append({"path": self.path, **body})
                    engine.generated += len(text.split())
                response = {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                            "usage": {"completion_tokens": len(text.split())}}
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
    assert shown["set_version"] == 1 and shown["right"] == shown["of"] == len(SET.questions)
    assert set(shown["read_as"]) == {q.id for q in SET.every_question()}
    assert checks["answers.greedy_repeatable"].observed.startswith("identical")


def test_the_cold_question_goes_first_and_every_request_is_a_greedy_thinking_off_chat(engine_at):
    engine = ScriptedEngine()
    judged(engine, engine_at)
    asked = [next(q.id for q in SET.every_question() if r["messages"][0]["content"].startswith(q.prompt))
             for r in engine.requests]
    assert asked == [SET.repeat.id, *(q.id for q in SET.questions), SET.repeat.id]
    for request in engine.requests:
        assert request["path"] == "/v1/chat/completions" and request["model"] == MODEL
        assert request["temperature"] == 0 and request["stream"] is False
        assert request["chat_template_kwargs"] == {"enable_thinking": False}
        assert request["separate_reasoning"] is False
        assert request["messages"][0]["content"].endswith(SET.instruction)


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


def baseline_read_as(differing: int) -> dict:
    read_as = {q.id: answer_set.extract(q.kind, q.answer) for q in SET.every_question()}
    for question in SET.questions[:differing]:
        read_as[question.id] = "0"
    return {"set_version": answer_set.SET_VERSION, "read_as": read_as, "recorded_at": "2026-12-01T00:00:00Z"}


@pytest.mark.parametrize("differing", [0, 2, 3])
def test_a_stacked_profile_must_agree_with_this_hosts_baseline(engine_at, differing):
    want = expectations(requested=["humming"], baseline=baseline_read_as(differing))
    _, checks = judged(ScriptedEngine(), engine_at, want)
    check = checks["answers.baseline_agreement"]
    total = len(SET.every_question())
    assert check.observed["agree"] == total - differing and check.observed["of"] == total
    assert check.passed is ((total - differing) / total >= SET.baseline_agreement_min)
    assert [d["question"] for d in check.observed["differing"]] == [q.id for q in SET.questions[:differing]]


def test_baseline_agreement_needs_a_record_of_this_set_and_a_stacked_profile(engine_at):
    _, checks = judged(ScriptedEngine(), engine_at, expectations(requested=[], baseline=baseline_read_as(0)))
    assert "answers.baseline_agreement" not in checks  # the baseline is its own reference
    old = {**baseline_read_as(0), "set_version": 0}
    _, checks = judged(ScriptedEngine(), engine_at, expectations(requested=["mtp"], baseline=old))
    assert not checks["answers.baseline_agreement"].passed
    assert "re-record" in checks["answers.baseline_agreement"].hint


@pytest.mark.parametrize(("kind", "reply", "answer", "right"), [
    ("integer", "391", "391", True),
    ("integer", "The answer is 3,500 meters.", "3500", True),
    ("integer", "<think>\n\n</think>\n\n85", "85", True),
    ("integer", "eighty-five", "85", False),
    ("integer", "86 (85 if rounded)", "85", False),
    ("word", "Paris.", "Paris", True),
    ("word", "paris", "Paris", True),
    ("word", "Ag", "Au", False),
    ("integer_list", "1,2,3", "1, 2, 3", True),
    ("integer_list", "1, 2, 2, 3", "1, 2, 3", False),
])
def test_the_judge_reads_a_short_answer_however_it_is_phrased_and_never_a_wrong_one(kind, reply, answer, right):
    question = answer_set.Question(id="q", prompt="?", kind=kind, answer=answer)
    assert answer_set.judge(question, reply) is right


@given(st.text(max_size=300))
def test_the_judge_never_raises_and_never_reads_a_number_where_there_is_none(text):
    question = answer_set.Question(id="q", prompt="?", kind="integer", answer="85")
    extracted = answer_set.extract("integer", text)
    assert extracted is None or any(ch.isdigit() for ch in extracted)
    assert answer_set.judge(question, text) is (extracted == "85")


@given(st.integers(min_value=-10**9, max_value=10**9), st.integers(min_value=-10**9, max_value=10**9),
       st.text(alphabet=st.characters(blacklist_categories=("Nd",)), max_size=30))
def test_an_integer_is_right_only_when_its_first_number_is_the_answer(got, want, prefix):
    question = answer_set.Question(id="q", prompt="?", kind="integer", answer=str(want))
    assert answer_set.judge(question, f"{prefix} {got} (not {want + 1})") is (got == want)


def context(client: EngineClient, period_s: float = 0.01) -> RecheckContext:
    ctx = RecheckContext("answers", client, period_s, expectations())
    answers.start_rechecks(ctx)
    return ctx


def test_after_admission_one_rotating_question_is_asked_only_when_idle_and_due(engine_at):
    engine = ScriptedEngine()
    ctx = context(engine_at(engine), period_s=0.01)
    ctx.state["last_probe_at"] = 0.0  # due at once
    engine.generated += 5  # client traffic in this period: not idle
    assert answers.rechecks(ctx) == [] and engine.requests == []
    first = answers.rechecks(ctx)  # a whole period without a token
    assert [c.name for c in first] == ["sentinel.answer_probe"] and first[0].passed
    assert first[0].observed["question_id"] == SET.repeat.id
    assert answers.rechecks(ctx) == []  # not due again yet
    ctx.state["last_probe_at"] = 0.0
    second = answers.rechecks(ctx)
    assert second[0].observed["question_id"] == SET.questions[0].id and len(engine.requests) == 2


def test_a_wrong_answer_after_admission_fails_the_probe_with_the_answers_shown(engine_at):
    engine = ScriptedEngine({SET.repeat.id: "1, 2, 3"})
    ctx = context(engine_at(engine))
    ctx.state["last_probe_at"] = 0.0
    [probe] = answers.rechecks(ctx)
    assert not probe.passed
    assert probe.observed["expected"] == SET.repeat.answer and probe.observed["received"] == "1, 2, 3"


def test_the_probe_fails_closed_without_the_generation_counter():
    ctx = RecheckContext("answers", EngineClient("http://127.0.0.1:9", timeout=0.2), 0.01, expectations())
    [probe] = answers.rechecks(ctx)
    assert probe.name == "sentinel.answer_probe" and not probe.passed
