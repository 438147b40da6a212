"""The answers stage: the engine must still answer correctly, cold, greedy, and like this host's baseline.

Asked cold first, then the rest, then the counting question warm; after admission the sentinel's
`sentinel.answer_probe` (`start_rechecks` / `rechecks`). How each check asks and judges, thinking replies included:
docs/checks/answers.md, "The checks" and "Thinking replies".
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from sparkgate.evidence import activity as activity_mod
from sparkgate.evidence import answer_set as answer_set_mod
from sparkgate.evidence import judge as judge_mod
from sparkgate.evidence.answer_set import AnswerSet, Question
from sparkgate.evidence.client import EngineClient, EngineUnreachable
from sparkgate.evidence.recheck import RecheckContext, scrape
from sparkgate.evidence.results import CheckResult, checked, failed
from sparkgate.evidence.stages import Stage
from sparkgate.sglang import conformance as C

DOCS = "answers.md"
CHECKS = {
    "answers.cold_prefill": Stage.ANSWERS,
    "answers.correct": Stage.ANSWERS,
    "answers.greedy_repeatable": Stage.ANSWERS,
    "answers.baseline_agreement": Stage.ANSWERS,
    "sentinel.answer_probe": Stage.RECHECK_ONLY,
}
# The SGLang facts each check reads: "section.key" (conformance fixture) or "probe.<field>" (the probe report).
# evidence/catalog.py validates them; tests/unit/test_declared_reads.py proves them on the recorded captures.
READS = {
    'answers.cold_prefill': ('strings.chat_enable_thinking', 'strings.think_end', 'strings.think_start'),
    'answers.correct': ('strings.chat_enable_thinking', 'strings.think_end', 'strings.think_start'),
    'answers.greedy_repeatable': ('strings.think_end', 'strings.think_start'),
    'answers.baseline_agreement': ('strings.think_end', 'strings.think_start'),
    'sentinel.answer_probe': (
        'metrics.num_queue_reqs', 'metrics.num_running_reqs', 'metrics.realtime_tokens', 'strings.chat_enable_thinking',
        'strings.realtime_mode_decode', 'strings.think_end', 'strings.think_start',
    ),
}

CHAT_ROUTE = "/v1/chat/completions"
# Thinking off, raw text back: what the smoke suite (sparkgate/suites/smoke) asks too (serving_chat.py: chat_template_kwargs, separate_reasoning).
RAW_ANSWER = {"chat_template_kwargs": {C.string_("chat_enable_thinking"): False}, "separate_reasoning": False}
REQUEST_TIMEOUT_S = 30.0  # engine seconds for one answer; far above a Spark's (under 5 s for the longest)
# After admission a probe that gets no answer in time is skipped (a client may hold the batch-1 engine); this
# many in a row fail the probe: an engine that answers no fixed question is not admitted traffic's engine.
MAX_SKIPPED_PROBES = 3
# An idle engine is asked one question every 6 periods (30 s at the default 5 s period). Only on that clock,
# never "after client traffic": the MTP probe's tokens would read as traffic here, and this probe's as traffic
# there, and the two would then keep a batch-1 engine busy every period.
PROBE_EVERY_PERIODS = 6
# Bounded staleness: traffic that never leaves a whole idle period would keep the probe from ever asking. After
# this many periods without an answered probe (10 min at the default 5 s period) the probe goes at the next gap
# instead: a reading with nothing running or queued, tokens decoded during the period or not; after twice as many it
# goes whatever the gauges say, and waits its turn behind the client (batch 1). A probe that times out while the
# engine decoded more tokens than the probe itself could (others' tokens: it was serving, not wedged) is deferred,
# not counted as unanswered; after MAX_SKIPPED_PROBES deferrals in a row the next probe waits its turn with the
# whole REQUEST_TIMEOUT_S, and a timeout then counts.
MAX_UNCHECKED_PERIODS = 120
GENERATION_TOKENS = C.metric("generation_tokens")
SHOWN_CHARS = 120
# Each reply comes with its tokens' log-probabilities and the runner-up's (serving_chat.py: logprobs,
# top_logprobs), what baseline agreement compares.
WITH_LOGPROBS = {"logprobs": True, "top_logprobs": 2}
# Baseline agreement (docs/checks/answers.md). A healthy stacked engine gives each baseline token nearly the
# baseline's probability: FP8 rounding of the head's weights moves a logit by hundredths, so a log-probability by
# well under 0.5 nats (a factor 1.65); kernels that compute wrongly move it by whole nats (a right token's -0.01
# becomes -3 or worse), and a mis-scaled head moves every token's while greedy text stays the same. A reply may
# leave the baseline's tokens only where the baseline's top two were within NEAR_TIE_NATS.
TOKEN_TOLERANCE_NATS = 0.5
NEAR_TIE_NATS = 0.5
MAX_LOGPROB_TOKENS = 1024  # above a question's max_tokens (256 at most) plus THINKING_RETRY_TOKENS
# A model that thinks although asked not to (a chat template that ignores enable_thinking) runs out of a short
# question's max_tokens inside its reasoning. Such a reply is asked once more with this many more tokens: room for
# a short reasoning block and the answer; bounded (once per question, in the stage's time), never open-ended.
THINKING_RETRY_TOKENS = 512


class LogprobsUnreadable(ValueError):
    pass


def read_logprobs(choice: dict) -> list[list]:
    """[token, logprob, runner-up logprob or None, runner-up token or None] per generated token, from an OpenAI chat
    choice's `logprobs.content` (untrusted: every field type-checked, finite, at most 0). A token is named by its
    `bytes` where they are not its text's (byte-level pieces that all display as U+FFFD stay apart)."""
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or len(content) > MAX_LOGPROB_TOKENS:
        raise LogprobsUnreadable("no choices[0].logprobs.content list (is `logprobs` honoured by this engine?)")
    tokens = []
    for at, item in enumerate(content):
        token, value = (_token_name(item), item.get("logprob")) if isinstance(item, dict) else (None, None)
        if token is None or not _is_logprob(value):
            raise LogprobsUnreadable(f"logprobs.content[{at}] is not a token with a finite logprob <= 0")
        top = item.get("top_logprobs")
        others = [(t.get("logprob"), _token_name(t)) for t in top if isinstance(t, dict)] if isinstance(top, list) else []
        others = [(v, name) for v, name in others if name is not None and name != token and _is_logprob(v)]
        runner_up = max(others, default=None, key=lambda pair: pair[0])
        tokens.append([token, round(float(value), 4), None if runner_up is None else round(float(runner_up[0]), 4),
                       None if runner_up is None else runner_up[1]])
    return tokens


def _token_name(item: dict) -> str | None:
    """The token's text, or `0x<hex>` of its bytes when they are not its text's; None when it has no text."""
    text, raw = item.get("token"), item.get("bytes")
    if not isinstance(text, str):
        return None
    # The common case first: the bytes are the text's (compared as lists, so no element needs validating for it). A
    # text longer than the list cannot be its bytes, so a huge hostile text is never encoded.
    if isinstance(raw, list) and len(raw) <= 64 and (
            len(text) > len(raw) or raw != list(text.encode("utf-8", "surrogatepass"))) and all(
            isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255 for b in raw):
        return "0x" + bytes(raw).hex()
    return text[:64]


def _is_logprob(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and -1e4 <= value <= 0.0


@dataclass
class Reply:
    id: str
    question: str
    expected: str
    text: str | None = None
    extracted: str | None = None
    correct: bool = False
    completion_tokens: int | None = None  # the judged (last) request's
    first_try_completion_tokens: int | None = None  # the first try's, when it was asked again (retried)
    prompt_tokens: int | None = None  # the engine's count: how many KV pages the question reached
    finish_reason: str | None = None
    elapsed_s: float | None = None  # engine time
    error: str | None = None
    timed_out: bool = False
    tokens: list[list] | None = None  # [token, logprob, runner-up logprob] each (read_logprobs)
    thought: bool = False  # the judged (last) reply opened a reasoning block (judge.reasoning)
    retried: bool = False  # cut inside its reasoning, asked once more with THINKING_RETRY_TOKENS more

    @property
    def thinking_cut(self) -> bool:
        """Thinking not disabled: the judged reply was cut at max_tokens inside a reasoning block that never closed
        (after its one retry, or with the retry's room from the start)."""
        return self.cut and self.text is not None and judge_mod.reasoning(self.text).answer is None

    @property
    def spent_tokens(self) -> int:
        """Every token the engine decoded for this question: the first try's and the retry's."""
        return (self.completion_tokens or 0) + (self.first_try_completion_tokens or 0)

    @property
    def cut(self) -> bool:
        """The reply ran into max_tokens instead of ending: a runaway reply, or thinking not disabled."""
        return self.finish_reason == "length"

    def as_dict(self) -> dict:
        """dataclasses.asdict's result, without its recursive deep copy of every token (most of a replay's time)."""
        data = dict(vars(self))
        data["tokens"] = None if self.tokens is None else [list(token) for token in self.tokens]
        return data

    def shown(self) -> dict:
        thought = judge_mod.reasoning(self.text or "")
        received = self.error if self.error else _clip(thought.answer or "")
        shown = {"question": self.question, "expected": self.expected, "received": received, "read_as": self.extracted}
        if self.thought and not self.error:
            # The answer is what is shown; of the reasoning, only its size (the whole text is in the verdict's replies).
            shown["reasoning_chars"] = len(thought.reasoning or "")
            if thought.answer is None:
                shown["received"] = "(no answer: the reasoning block never closed)"
        if self.cut:
            shown["finish_reason"] = "length (cut at max_tokens" + (
                f", also after one retry with {THINKING_RETRY_TOKENS} more tokens)" if self.retried else ")")
        if self.retried:
            shown["first_try_completion_tokens"] = self.first_try_completion_tokens
        return shown


@dataclass
class AnswersResult:
    set_version: int
    cold: Reply
    replies: list[Reply] = field(default_factory=list)
    warm: Reply | None = None
    elapsed_s: float = 0.0  # engine time
    version_problem: str | None = None

    def wrong(self) -> list[Reply]:
        return [r for r in self.replies if not r.correct]

    def every_reply(self) -> list[Reply]:
        return [self.cold, *self.replies]

    def as_dict(self) -> dict:
        return {"set_version": self.set_version, "elapsed_s": round(self.elapsed_s, 3),
                "right": sum(r.correct for r in self.replies), "of": len(self.replies),
                "cold": self.cold.as_dict(), "replies": [r.as_dict() for r in self.replies],
                "warm": self.warm.as_dict() if self.warm else None,
                # What a baseline record keeps of this verdict (floor.json), by question id: the exact replies
                # to the questions answered right, and how each reply was read.
                "read_as": {r.id: r.extracted for r in self.every_reply()},
                "texts": {r.id: r.text for r in self.every_reply() if r.correct},
                "logprobs": {r.id: r.tokens for r in self.every_reply() if r.correct and r.tokens is not None},
                "completion_tokens": self.completion_tokens(), "thinking": self.thinking()}

    def _asked(self) -> list[Reply]:
        return [r for r in (*self.every_reply(), self.warm) if r is not None]

    def completion_tokens(self) -> int:
        """The stage's decode cost: every request's tokens, first tries and retries."""
        return sum(r.spent_tokens for r in self._asked())

    def thinking(self) -> dict:
        """How many replies thought, how many were asked again, what the retries cost, and how many were still cut
        inside their reasoning."""
        every = self._asked()
        retried = [r for r in every if r.retried]
        return {"thought": sum(r.thought for r in every), "retried": len(retried),
                "cut_after_retry": sum(r.thinking_cut for r in every),
                "retry_completion_tokens": sum(r.completion_tokens or 0 for r in retried), "of": len(every)}


def _clip(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def ask(client: EngineClient, model: str, answers: AnswerSet, question: Question, scale: float,
        timeout_s: float | None = None, room_first: bool = False) -> Reply:
    """One question through the chat route; the reply judged against the set's answer. `timeout_s` is wall
    time (default: REQUEST_TIMEOUT_S of engine time), per request. A reply cut at max_tokens inside a reasoning
    block that never closed (judge.reasoning: no answer) is asked once more with THINKING_RETRY_TOKENS more room
    (docs/checks/answers.md, "Thinking replies"); its time counts. `room_first`: that room from the first request,
    never a retry (the cold question, whose first request is the one judged)."""
    reply = Reply(id=question.id, question=question.prompt, expected=question.answer)
    room = question.max_tokens + THINKING_RETRY_TOKENS
    body = {"model": model, "messages": answers.messages(question), "temperature": 0,
            "max_tokens": room if room_first else question.max_tokens, "stream": False, **RAW_ANSWER, **WITH_LOGPROBS}
    timeout = timeout_s or max(5.0, REQUEST_TIMEOUT_S * scale)
    started = client.clock()
    try:
        _ask_once(client, body, reply, timeout)
        if reply.error is None and reply.thinking_cut and not room_first:
            first_try = reply.completion_tokens
            reply.retried = True
            _ask_once(client, {**body, "max_tokens": room}, reply, timeout)
            reply.first_try_completion_tokens = first_try
    finally:
        reply.elapsed_s = round((client.clock() - started) / scale, 3)
    if reply.error is None and reply.text is not None:
        reply.correct, reply.extracted = answer_set_mod.read(question, reply.text)
        # A right answer ends by itself: "85 85 85 ..." up to max_tokens is decode garbage after a right first token.
        reply.correct = reply.correct and reply.finish_reason == "stop"
    return reply


def _ask_once(client: EngineClient, body: dict, reply: Reply, timeout: float) -> None:
    """One request; its reply's fields set afresh (a retry replaces the first try's)."""
    reply.text = reply.finish_reason = reply.error = reply.tokens = None
    reply.completion_tokens = reply.prompt_tokens = None
    reply.thought = reply.timed_out = False
    try:
        response = client.post_json(CHAT_ROUTE, body, timeout=timeout)
    except EngineUnreachable as exc:
        reply.error = str(exc)
        reply.timed_out = exc.timed_out
        return
    try:
        choice = response["choices"][0]
        content = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        reply.error = "no choices[0].message.content in the chat response"
        return
    if not isinstance(content, str):
        reply.error = f"choices[0].message.content is {type(content).__name__}, not text"
        return
    reply.text = content
    reply.thought = judge_mod.reasoning(content).thought
    reply.finish_reason = choice.get("finish_reason") if isinstance(choice, dict) else None
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    tokens, prompt_tokens = usage.get("completion_tokens"), usage.get("prompt_tokens")
    reply.completion_tokens = tokens if isinstance(tokens, int) else None
    reply.prompt_tokens = prompt_tokens if isinstance(prompt_tokens, int) else None
    try:
        reply.tokens = read_logprobs(choice)
    except LogprobsUnreadable:
        reply.tokens = None  # judged as text still; baseline agreement reports the missing log-probabilities


def run(client: EngineClient, expectations: dict, scale: float, repeat_room_first: bool = True) -> AnswersResult:
    """The whole stage, cold question first. Call it before any other request of the verification.
    `repeat_room_first=False`: the repeated question (cold and warm) at its own room, retried like the others (how
    recordings made before sparkgate asked it with the retry's room were asked; replayed as asked)."""
    answers = answer_set_mod.load()
    model = expectations["engine"]["served_model_name"]
    started = client.clock()
    result = AnswersResult(set_version=answers.set_version,
                           cold=ask(client, model, answers, answers.repeat, scale, room_first=repeat_room_first))
    wanted = (expectations.get("answers") or {}).get("set_version")
    if wanted != answers.set_version:
        result.version_problem = (f"the bundle expects answer set {wanted}, this sparkgate ships set "
                                  f"{answers.set_version}")
    for question in answers.questions:
        if any(r.timed_out for r in result.every_reply()):
            # Bounded: an engine that stopped answering is not waited on question after question.
            result.replies.append(Reply(id=question.id, question=question.prompt, expected=question.answer,
                                        error="not asked: an earlier question got no answer in time"))
            continue
        result.replies.append(ask(client, model, answers, question, scale))
    result.warm = ask(client, model, answers, answers.repeat, scale, room_first=repeat_room_first)
    result.elapsed_s = (client.clock() - started) / scale
    return result


# --- checks -------------------------------------------------------------------------------------------

LIKELY_GARBLE = (
    "engaged kernels that emit wrong tokens at full speed: an MoE kernel path the checkpoint does not suit "
    "(Humming / Marlin on a quantization it mishandles), a missing SM12x fix in the engine build (SwigluStep "
    "clamp on the CUTLASS path), an FP8 head quantized from the wrong weights, or a draft whose verify step "
    "corrupts accepted tokens. Fix: deploy the baseline profile on this host; if it answers right, disable "
    "the optimizations one at a time (profiles/humming.yaml, fp8-lm-head.yaml, mtp.yaml) to find the one"
)


def checks(answers: AnswersResult | None, expectations: dict) -> list[CheckResult]:
    source = f"POST {CHAT_ROUTE} (temperature 0, thinking off), answer set"
    if answers is None:
        hint = "no answers were asked (engine unhealthy, or `sparkgate verify --no-calibrate`): correctness is unproven"
        return [failed(name, "not asked", "answers", source, hint)
                for name in ("answers.cold_prefill", "answers.correct", "answers.greedy_repeatable")]
    answer_set = answer_set_mod.load()
    source = f"{source} v{answers.set_version}"
    results = [_cold(answers, source), _correct(answers, answer_set, source), _repeatable(answers, source)]
    baseline = (expectations.get("answers") or {}).get("baseline")
    if baseline and expectations.get("requested"):
        results.append(_agreement(answers, answer_set, baseline, source))
    return results


def thinking_hint(cut: list[Reply]) -> str:
    """The one-line hint when replies were cut inside a reasoning block even with the retry's room."""
    return (f"thinking not disabled: {len(cut)} repl{'y' if len(cut) == 1 else 'ies'} opened a reasoning block that "
            f"never closed, cut at max_tokens even with {THINKING_RETRY_TOKENS} more tokens (threshold: the final "
            "answer within the question's max_tokens plus the retry's); likely cause: the chat template "
            f"ignores chat_template_kwargs.{C.string_('chat_enable_thinking')}=false (a template or model build "
            "that always reasons). Fix: serve the model's own chat template (one that honours enable_thinking, "
            "--chat-template), or a build that does not think when asked not to")


def _cold(answers: AnswersResult, source: str) -> CheckResult:
    cold = answers.cold
    hint = ("the engine answered its cold first request wrong: kernels that garble only the cold prefill (a JIT "
            "kernel compiled for the first shape, speculative decoding's first verify, a CUDA graph captured with "
            "bad buffers). Later requests may look right, so smoke tests pass; this one does not. " + LIKELY_GARBLE)
    return checked(
        "answers.cold_prefill", cold.correct, {"right": cold.correct, **cold.shown()},
        "the first request after start answered right", f"{source}: the first request the gate sends",
        thinking_hint([cold]) if cold.thinking_cut else hint,
    )


def _correct(answers: AnswersResult, answer_set: AnswerSet, source: str) -> CheckResult:
    wrong = answers.wrong()
    observed = {"right": len(answers.replies) - len(wrong), "of": len(answers.replies),
                "wrong": [r.shown() for r in wrong]}
    if answers.version_problem:
        return failed("answers.correct", {"answer_set": answers.version_problem}, f"answer set {answers.set_version}",
                      source, "the bundle was rendered by another sparkgate version: re-render and redeploy")
    errors = [r for r in wrong if r.error]
    thinking_cut = [r for r in wrong if r.thinking_cut]
    hint = LIKELY_GARBLE
    if thinking_cut:
        hint = thinking_hint(thinking_cut)
    elif errors:
        hint = (f"{len(errors)} question(s) got no answer ({errors[0].error}): check `invoke logs`; the chat "
                "route must answer within the request timeout")
    return checked(
        "answers.correct", len(wrong) <= answer_set.max_wrong, observed,
        f"<= {answer_set.max_wrong} wrong of {len(answers.replies)} (answer set v{answers.set_version})", source, hint,
    )


def divergence(cold: str, warm: str) -> dict:
    """Where two texts first differ, with a little of each around that point."""
    at = next((i for i, (a, b) in enumerate(zip(cold, warm, strict=False)) if a != b), min(len(cold), len(warm)))
    lo = max(0, at - 20)
    return {"diverge_at_char": at, "cold": cold[lo: at + 30], "warm": warm[lo: at + 30],
            "cold_chars": len(cold), "warm_chars": len(warm)}


def _repeatable(answers: AnswersResult, source: str) -> CheckResult:
    cold, warm = answers.cold, answers.warm
    if warm is None or cold.text is None or warm.text is None:
        return failed("answers.greedy_repeatable", {"cold": cold.error, "warm": warm.error if warm else "not asked"},
                      "the same greedy reply twice", source, "one of the two requests got no answer: check `invoke logs`")
    same = cold.text == warm.text
    observed = f"identical ({cold.completion_tokens} tokens)" if same else divergence(cold.text, warm.text)
    return checked(
        "answers.greedy_repeatable", same, observed, "the cold and the warm greedy reply are the same text",
        f"{source}: question {cold.id!r} asked first and last",
        "greedy decoding gave two different replies to one prompt: at temperature 0 speculative decoding is "
        "lossless, so a difference means a kernel that computes differently cold and warm, or a verify step "
        "that splices a token. " + LIKELY_GARBLE,
    )


def agreement(ours: list[list] | None, baseline: list[list] | None, right: bool) -> dict:
    """One reply against the baseline's reply to the same question, by their tokens' log-probabilities (the rule:
    docs/checks/answers.md, `answers.baseline_agreement`): {"agrees": bool, "how": why, in words, "max_delta_nats"}."""
    if not ours or not baseline:
        return {"agrees": False, "how": "no log-probabilities " + ("in this reply" if not ours else "recorded")}
    worst, worst_at = 0.0, None
    for at, (mine, theirs) in enumerate(zip(ours, baseline, strict=False)):
        if mine[0] != theirs[0]:
            margin = None if theirs[2] is None else theirs[1] - theirs[2]
            near_tie = margin is not None and 0.0 <= margin <= NEAR_TIE_NATS
            # A near-tie moved, not another token altogether: the reply took the baseline's runner-up, or (a tie of
            # more than two, where `top_logprobs: 2` shows one other each) its own runner-up is the baseline's token
            # and it was torn between the two as well.
            torn = mine[2] is not None and 0.0 <= mine[1] - mine[2] <= NEAR_TIE_NATS
            runner_up = mine[0] == theirs[3] or (mine[3] == theirs[0] and torn)
            how = (f"left the baseline's tokens at token {at} ({mine[0]!r} for {theirs[0]!r}), where the baseline's "
                   f"top two were {'?' if margin is None else round(margin, 3)} nats apart")
            if near_tie and not runner_up:
                how += f", with a token other than the baseline's runner-up ({theirs[3]!r})"
            if near_tie and runner_up and not right:
                how += ", and the reply is wrong"
            agrees = near_tie and runner_up and right and worst <= TOKEN_TOLERANCE_NATS
            return {"agrees": agrees, "how": how, "max_delta_nats": round(worst, 3)}
        delta = abs(mine[1] - theirs[1])
        if delta > worst:
            worst, worst_at = delta, at
    if len(ours) != len(baseline):
        return {"agrees": False, "how": f"{len(ours)} tokens where the baseline has {len(baseline)}, same prefix",
                "max_delta_nats": round(worst, 3)}
    how = f"same {len(ours)} tokens, max |delta logprob| {round(worst, 3)} nats"
    if worst_at is not None and worst > TOKEN_TOLERANCE_NATS:
        how += f" at token {worst_at} ({ours[worst_at][0]!r}: {ours[worst_at][1]} vs {baseline[worst_at][1]})"
    return {"agrees": worst <= TOKEN_TOLERANCE_NATS, "how": how, "max_delta_nats": round(worst, 3)}


def _agreement(answers: AnswersResult, answer_set: AnswerSet, baseline: dict, source: str) -> CheckResult:
    """Each question the baseline engine answered right on this host, against this profile's reply to it: the
    same prompt, greedy, compared by per-token log-probabilities (`agreement`)."""
    recorded = baseline.get("logprobs") if isinstance(baseline.get("logprobs"), dict) else {}
    ours = {r.id: r for r in answers.every_reply()}
    shared = [qid for qid in recorded if qid in ours and isinstance(recorded[qid], list)]
    verdicts = {qid: agreement(ours[qid].tokens, well_formed(recorded[qid]), ours[qid].correct) for qid in shared}
    differing = [{"question": qid, **verdicts[qid], "baseline": _clip(str(baseline.get("texts", {}).get(qid, ""))),
                  "this_profile": _clip(ours[qid].text or "")} for qid in shared if not verdicts[qid]["agrees"]]
    share = (len(shared) - len(differing)) / len(shared) if shared else 0.0
    worst = max((v.get("max_delta_nats", 0.0) for v in verdicts.values()), default=None)
    observed = {"agree": len(shared) - len(differing), "of": len(shared), "share": round(share, 3),
                "max_delta_nats": worst, "differing": differing, "baseline_recorded_at": baseline.get("recorded_at")}
    same_set = baseline.get("set_version") == answers.set_version
    # A record of only a few right replies cannot vouch for the rest: it must cover the share the check asks of.
    needed = math.ceil(answer_set.baseline_agreement_min * len(answer_set.every_question()))
    ok = same_set and len(shared) >= needed and share >= answer_set.baseline_agreement_min
    hint = ("this profile's replies are not the baseline engine's on this host (same questions, greedy): where the "
            "tokens match, their probabilities moved beyond what FP8 rounding does (a mis-scaled FP8 head, kernels "
            "that compute wrongly); where they differ, the baseline was not torn between two tokens. " + LIKELY_GARBLE)
    if not same_set or len(shared) < needed:
        hint = (f"the recorded baseline answers are of answer set {baseline.get('set_version')} (this sparkgate asks "
                f"set {answers.set_version}) or hold log-probabilities of {len(shared)} right replies (at least "
                f"{needed} needed): re-record with `invoke bench --profile baseline --record-floor` on a baseline "
                "engine that answers right")
    return checked(
        "answers.baseline_agreement", ok, observed,
        f">= {answer_set.baseline_agreement_min:.0%} of the baseline's right replies agree: the same tokens, each "
        f"within {TOKEN_TOLERANCE_NATS} nats of the baseline's log-probability, or leaving them only at a near-tie "
        f"(top two within {NEAR_TIE_NATS} nats) and still right",
        f"{source} vs the baseline verdict recorded with the floor", hint,
    )


def well_formed(tokens: list) -> list[list] | None:
    """A recorded baseline reply's tokens, each [str, logprob, logprob or None, str or None]; None when any is not."""
    ok = all(isinstance(t, list) and len(t) == 4 and isinstance(t[0], str) and _is_logprob(t[1])
             and (t[2] is None or _is_logprob(t[2])) and (t[3] is None or isinstance(t[3], str)) for t in tokens)
    return tokens if ok and len(tokens) <= MAX_LOGPROB_TOKENS else None


# --- after admission ------------------------------------------------------------------------------------


def start_rechecks(ctx: RecheckContext, admitted: dict | None = None) -> None:
    """Right after a full verification, with the answers of its verdict (`AnswersResult.as_dict`): the rotation
    starts afresh over the short questions (no document, no earlier turns: a few tokens of prefill, so a client
    rarely waits behind one) that verdict answered right. One it answered wrong (a healthy engine
    may phrase one answer in a way the judge does not read) is never asked again, so the probe cannot close a
    gate the verdict opened on the very same reply."""
    texts = (admitted or {}).get("texts") or {}
    ctx.state.update(next_index=0, previous_activity=activity_mod.fresh(ctx.client), last_probe_at=time.monotonic(),
                     skipped=0, admitted_texts=texts, answered_at=time.monotonic(), answered_wall=time.time(),
                     rotation=[q.id for q in answer_set_mod.load().questions if q.short and q.id in texts])


def last_checked(ctx: RecheckContext) -> dict | None:
    """When a right answer was last read (the admitting verdict or a probe), and whether a probe is overdue."""
    state = ctx.state
    if "answered_wall" not in state:
        return None
    return {"at": state["answered_wall"], "overdue": _unchecked_periods(ctx) >= MAX_UNCHECKED_PERIODS}


def _unchecked_periods(ctx: RecheckContext) -> float:
    """Periods since a right answer was last read (the admitting verdict or a probe)."""
    return (time.monotonic() - ctx.state.get("answered_at", 0.0)) / ctx.period_s


def rechecks(ctx: RecheckContext) -> list[CheckResult]:
    """One question every PROBE_EVERY_PERIODS periods, when the engine is idle; at the next gap when no probe
    was answered for MAX_UNCHECKED_PERIODS (bounded staleness).

    Idle is read as every re-check reads it (evidence/activity.py: nothing running or queued, no token decoded
    over a whole period), so a client rarely queues behind a question at batch 1: the questions asked here
    are the short ones (a few tokens). A probe that gets no answer in time is skipped, since a client's
    request may have arrived meanwhile; MAX_SKIPPED_PROBES in a row fail, not counting those during which the
    engine decoded other requests' tokens (it was serving, not wedged)."""
    state = ctx.state
    try:
        now = activity_mod.read(ctx.metrics())
    except (EngineUnreachable, activity_mod.ActivityUnreadable) as exc:
        return [failed("sentinel.answer_probe", str(exc), f"{activity_mod.PROGRESS} and the request gauges in "
                       "/metrics", "GET /metrics", "the engine's /metrics lost its progress counter (restart, or "
                       "--enable-metrics missing): idleness cannot be read, so the gate closes")]
    previous, state["previous_activity"] = state.get("previous_activity"), now
    idle = activity_mod.idle(previous, now)
    clock = time.monotonic()
    due = clock - state.get("last_probe_at", 0.0) >= PROBE_EVERY_PERIODS * ctx.period_s
    unchecked = _unchecked_periods(ctx)
    overdue, long_overdue = unchecked >= MAX_UNCHECKED_PERIODS, unchecked >= 2 * MAX_UNCHECKED_PERIODS
    gap = idle or (previous is not None and (long_overdue or (overdue and not now.busy)))
    rotation = state.get("rotation") or []
    if not (gap and due):
        return []
    answer_set = answer_set_mod.load()
    expected = f"the answer set's answer (v{answer_set.set_version}, one question per probe, rotating)"
    source = f"POST {CHAT_ROUTE} (sentinel probe, temperature 0, thinking off)"
    if not rotation:
        return [failed("sentinel.answer_probe", "no question was answered right at admission", expected, source,
                       "the admitting verdict carries no right answers (a verdict from an older sparkgate?): "
                       "a fresh full verification runs")]
    question = answer_set.by_id(rotation[state.get("next_index", 0) % len(rotation)])
    state["next_index"] = state.get("next_index", 0) + 1
    scale = float(ctx.expectations.get("time_scale") or 1.0)
    waits_its_turn = state.get("deferred", 0) >= MAX_SKIPPED_PROBES
    # Read right before the question goes: the period's shared reading predates the other re-checks' probes (the
    # MTP probe's tokens are not a client's, nor this probe's).
    before_samples = scrape(ctx.client)
    # A re-check finishes inside about one period, unless earlier probes were deferred behind client traffic.
    timeout_s = max(5.0, REQUEST_TIMEOUT_S * scale) if waits_its_turn else max(2.0, ctx.period_s)
    reply = ask(ctx.client, ctx.expectations["engine"]["served_model_name"], answer_set, question, scale,
                timeout_s=timeout_s)
    after_samples = scrape(ctx.client)
    if ctx.own_traffic is not None:
        # This request is the sentinel's, not a client's (mtp_recheck.py).
        ctx.own_traffic.record(before_samples, after_samples)
    before_probe, after = activity_mod.of(before_samples), activity_mod.of(after_samples)
    state.update(last_probe_at=time.monotonic(), previous_activity=after)
    observed = {**reply.shown(), "question_id": reply.id,
                "same_text_as_admission": reply.text == state["admitted_texts"].get(reply.id),
                "asked_at": "idle period" if idle else "overdue: at the first gap" if not long_overdue and not now.busy
                else "overdue: waiting its turn behind client traffic"}
    if reply.timed_out:
        # More tokens decoded than this probe could have made itself: the engine served other requests meanwhile.
        own = question.max_tokens + (question.max_tokens + THINKING_RETRY_TOKENS if reply.retried else 0)
        served = (after is not None and before_probe is not None
                  and after.decode_tokens - before_probe.decode_tokens > own)
        deferred = served and not waits_its_turn
        # Once a probe that waited its turn went unanswered, every later one waits its turn too, until an answer.
        state["deferred"] = MAX_SKIPPED_PROBES if waits_its_turn else state.get("deferred", 0) + 1 if deferred else 0
        state["skipped"] = state.get("skipped", 0) + (0 if deferred else 1)
        observed.update(skipped_in_a_row=state["skipped"], engine_decoded_meanwhile=served,
                        deferred_in_a_row=state["deferred"])
        return [checked(
            "sentinel.answer_probe", state["skipped"] < MAX_SKIPPED_PROBES, observed,
            f"{expected}; fewer than {MAX_SKIPPED_PROBES} probes in a row without an answer", source,
            f"{MAX_SKIPPED_PROBES} probes in a row got no answer within their timeout: the engine no longer "
            "answers a short question (a wedged decode, or traffic that never pauses); check `invoke logs`",
        )]
    state["skipped"] = state["deferred"] = 0
    if reply.correct and not reply.error:
        state.update(answered_at=time.monotonic(), answered_wall=time.time())
    hint = ("the engine answered a fixed question wrong after admission (the admitting verdict read this very "
            "question right): weights, kernels or the draft changed behaviour while serving; the gate stays closed "
            "until a fresh full verification passes. " + LIKELY_GARBLE)
    if reply.error:
        hint = f"the probe got an error instead of an answer ({reply.error}): check `invoke logs`"
    elif reply.thinking_cut:
        hint = thinking_hint([reply])
    return [checked("sentinel.answer_probe", reply.correct, observed, expected, source, hint)]
