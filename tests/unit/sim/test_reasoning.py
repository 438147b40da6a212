"""The simulator's thinking model and its `--reasoning-parser deepseek-r1` split, held to SGLang 0.5.23's
own detector (differential tests) and exercised live through the chat endpoint."""

from __future__ import annotations

import pytest

from sparkgate_sim import reasoning, textgen
from tests.plugins.simproc import profile_launch

PROMPT = [{"role": "user", "content": "What is 12 times 17? Answer with the number."}]
THINKING_OFF = {"chat_template_kwargs": {"enable_thinking": False}}

# Texts a thinking model produces: a full block, a block cut short, no block at all, tags split oddly.
SAMPLES = (
    "<think>\n bame dido\n</think>\n\n kafe lomi",
    "<think>\n bame dido kafe",
    " kafe lomi nupa",
    "\n</think>\n\n lomi",
    "<think><think>\n a\n</think>\n\n b </think> c",
    "",
)


def _chunkings(text: str) -> list[list[str]]:
    """Whole, per character, and in threes: the ways a stream can cut the same text."""
    return [[text], list(text), [text[i:i + 3] for i in range(0, len(text), 3)]]


@pytest.mark.sglang
@pytest.mark.parametrize("text", SAMPLES)
def test_whole_text_split_matches_sglang(text):
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    # serving_chat passes force_reasoning from the request; DeepSeekR1Detector ignores it, so both values.
    for force in (False, True):
        theirs = ReasoningParser("deepseek-r1", stream_reasoning=False, force_reasoning=force).parse_non_stream(text)
        ours = reasoning.split_whole(text)
        assert (ours.reasoning, ours.content) == (theirs[0] or "", theirs[1] or ""), (text, force)


@pytest.mark.sglang
@pytest.mark.parametrize("text", SAMPLES)
@pytest.mark.parametrize("stream_reasoning", [True, False])
def test_streaming_split_matches_sglang(text, stream_reasoning):
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    for pieces in _chunkings(text):
        parser = ReasoningParser("deepseek-r1", stream_reasoning=stream_reasoning, force_reasoning=True)
        splitter = reasoning.StreamSplitter(stream_reasoning=stream_reasoning)
        for piece in pieces:
            theirs = parser.parse_stream_chunk(piece)
            ours = splitter.feed(piece)
            assert (ours.reasoning, ours.content) == (theirs[0] or "", theirs[1] or ""), (text, pieces, piece)
        theirs, ours = parser.parse_stream_end(), splitter.finish()
        assert (ours.reasoning, ours.content) == (theirs[0] or "", theirs[1] or "")


def test_model_thinks_only_in_an_open_assistant_turn():
    seed = textgen.request_seed("x", {"temperature": 0})
    tokens = [textgen.output_token(seed, i, thinks=True)[0] for i in range(textgen.natural_length(seed, True))]
    end = textgen.reasoning_length(seed) + 1
    assert tokens[0] == reasoning.THINK_START and tokens[end] == reasoning.THINK_END
    assert tokens.count(reasoning.THINK_START) == tokens.count(reasoning.THINK_END) == 1
    assert len(textgen.render_output(tokens).split()) == len(tokens)  # whitespace tokenization still holds
    assert textgen.model_thinks(textgen.render_chat(PROMPT))
    assert not textgen.model_thinks(textgen.render_chat(PROMPT, thinking=False))
    assert not textgen.model_thinks("Question: 2 + 2?")
    assert reasoning.reasoning_token_count(tokens) == end + 1


def _chat(sim, extra=None, **params):
    body = {"model": "ling-v3-flash-fp4", "messages": PROMPT, "temperature": 0, **params, **(extra or {})}
    response = sim.post("/v1/chat/completions", body)
    assert response.status == 200, response.body
    return response.json()


def test_thinking_answer_is_split_into_reasoning_then_content(start_profile):
    sim = start_profile("baseline")  # --reasoning-parser deepseek-r1, like every shipped profile
    whole = _chat(sim)  # no token limit: the model thinks, closes the block, answers, stops
    message, usage = whole["choices"][0]["message"], whole["usage"]
    assert whole["choices"][0]["finish_reason"] == "stop"
    assert message["reasoning_content"] and message["content"].strip()
    assert "<think>" not in message["reasoning_content"] + message["content"]
    assert "</think>" not in message["reasoning_content"] + message["content"]
    # The tags are tokens too: reasoning words + content words + 2 tags = completion_tokens.
    words = len(message["reasoning_content"].split()) + len(message["content"].split())
    assert words + 2 == usage["completion_tokens"]
    assert usage["reasoning_tokens"] == len(message["reasoning_content"].split()) + 2
    assert usage["completion_tokens_details"] == {"reasoning_tokens": usage["reasoning_tokens"]}

    cut = _chat(sim, max_tokens=10)  # still thinking when the budget ends: no content yet
    assert cut["choices"][0]["finish_reason"] == "length"
    assert cut["choices"][0]["message"]["content"] == ""
    assert cut["choices"][0]["message"]["reasoning_content"].split() == message["reasoning_content"].split()[:9]
    assert cut["usage"]["reasoning_tokens"] == cut["usage"]["completion_tokens"] == 10

    raw = _chat(sim, {"separate_reasoning": False})
    assert raw["choices"][0]["message"]["reasoning_content"] is None
    assert raw["choices"][0]["message"]["content"].startswith("<think>")
    assert "</think>" in raw["choices"][0]["message"]["content"]


def test_streaming_sends_reasoning_deltas_before_content(start_profile):
    sim = start_profile("baseline")
    whole = _chat(sim)["choices"][0]["message"]
    body = {"model": "ling-v3-flash-fp4", "messages": PROMPT, "temperature": 0,
            "stream_options": {"include_usage": True}}
    events = [e for _, e in sim.stream("/v1/chat/completions", body) if e != "[DONE]"]
    kinds = []
    for event in events:
        for choice in event["choices"]:
            delta = choice["delta"]
            kinds += [k for k in ("reasoning_content", "content") if delta.get(k)]
    assert kinds[0] == "reasoning_content" and kinds[-1] == "content"
    assert kinds.index("content") > max(i for i, k in enumerate(kinds) if k == "reasoning_content")
    text = {k: "".join(c["delta"].get(k) or "" for e in events for c in e["choices"]) for k in ("reasoning_content", "content")}
    assert text == {"reasoning_content": whole["reasoning_content"], "content": whole["content"]}
    finish = [c for e in events for c in e["choices"] if c["finish_reason"]]
    # a finish event of its own, as serving_chat sends it (sse_utils.StreamDelta always carries reasoning_content)
    assert len(finish) == 1 and finish[0]["delta"] == {"reasoning_content": None}
    assert events[-1]["usage"]["reasoning_tokens"] > 0

    held = [e for _, e in sim.stream("/v1/chat/completions", {**body, "stream_reasoning": False}) if e != "[DONE]"]
    thoughts = [c["delta"]["reasoning_content"] for e in held for c in e["choices"] if c["delta"].get("reasoning_content")]
    assert thoughts == [whole["reasoning_content"]]  # held until </think>, then sent at once


def test_thinking_off_still_lands_in_reasoning_content_with_deepseek_r1(start_profile):
    """enable_thinking=false changes the prompt, not the parser: deepseek-r1 assumes the model starts inside
    <think>, so an answer with no </think> is all reasoning_content and content stays empty."""
    sim = start_profile("baseline")
    off = _chat(sim, THINKING_OFF, max_tokens=16)
    message = off["choices"][0]["message"]
    # The prompt is a question the simulated model answers (answers.py): 12 times 17, then EOS.
    assert message["content"] == "" and message["reasoning_content"].split() == ["204"]
    assert off["choices"][0]["finish_reason"] == "stop" and off["usage"]["completion_tokens"] == 1
    raw = _chat(sim, {**THINKING_OFF, "separate_reasoning": False}, max_tokens=16)["choices"][0]["message"]
    assert raw["content"].split() == message["reasoning_content"].split() and "<think>" not in raw["content"]
    again = _chat(sim, {**THINKING_OFF, "separate_reasoning": False}, max_tokens=16)["choices"][0]["message"]
    assert again["content"] == raw["content"]  # temperature 0: deterministic


def test_generate_returns_raw_text_with_the_tags_the_model_writes(start_profile):
    sim = start_profile("baseline")
    chat_prompt = textgen.render_chat(PROMPT)
    out = sim.post("/generate", {"text": chat_prompt, "sampling_params": {"max_new_tokens": 80, "temperature": 0}}).json()
    assert out["text"].startswith("<think>") and "</think>" in out["text"]
    assert out["meta_info"]["reasoning_tokens"] == 0  # /generate does not require reasoning
    plain = sim.post("/generate", {"text": "Question: 2 + 2?", "sampling_params": {"max_new_tokens": 24}}).json()
    assert "<think>" not in plain["text"] and len(plain["text"].split()) == 24


def test_without_a_reasoning_parser_everything_is_content(start_sim):
    argv, env = profile_launch("baseline")
    index = argv.index("--reasoning-parser")
    sim = start_sim(argv[:index] + argv[index + 2:], env)
    message = _chat(sim, max_tokens=12)["choices"][0]["message"]
    assert message["reasoning_content"] is None and message["content"].startswith("<think>")
    assert _chat(sim, max_tokens=12)["usage"]["reasoning_tokens"] == 0


def test_an_unmodelled_reasoning_parser_is_refused(start_sim):
    argv, env = profile_launch("baseline")
    index = argv.index("--reasoning-parser")
    sim = start_sim(argv[:index + 1] + ["qwen3"] + argv[index + 2:], env, ready=False)
    assert sim.wait_exit() == 1
    assert "models --reasoning-parser deepseek-r1 only" in sim.stderr()


def test_thinks_anyway_ignores_enable_thinking_off(start_profile):
    """faults.THINKS_ANYWAY: the template ignores enable_thinking=false, so the model reasons N words, closes the
    block and answers; the parser splits it as any thinking reply."""
    sim = start_profile("baseline", extra_env={"SPARKGATE_SIM_FAULTS": "thinks-anyway:7"})
    raw = _chat(sim, {**THINKING_OFF, "separate_reasoning": False}, max_tokens=64)
    content = raw["choices"][0]["message"]["content"]
    assert content.split() == ["<think>", *content.split()[1:8], "</think>", "204"]
    assert raw["choices"][0]["finish_reason"] == "stop" and raw["usage"]["completion_tokens"] == 10
    split = _chat(sim, THINKING_OFF, max_tokens=64)["choices"][0]["message"]
    assert len(split["reasoning_content"].split()) == 7 and split["content"].split() == ["204"]
    cut = _chat(sim, {**THINKING_OFF, "separate_reasoning": False}, max_tokens=5)["choices"][0]
    assert cut["finish_reason"] == "length" and "</think>" not in cut["message"]["content"]
    assert _chat(sim, max_tokens=64)["usage"]["completion_tokens"] == 10  # thinking on: N words too
