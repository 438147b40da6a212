"""The endpoint serves the model: listing, deterministic completion, thinking, streaming with usage.

Ling-3.0-flash thinks by default and every profile runs `--reasoning-parser deepseek-r1`. That parser
assumes the model starts inside `<think>` (SGLang's DeepSeekR1Detector forces reasoning whatever the
request says): everything before `</think>` is `reasoning_content`, and `content` stays empty until the
model closes the block, which a short budget may never reach. So these tests never demand `content`
from a thinking request:

- determinism asks for thinking off (`chat_template_kwargs.enable_thinking: false`, the model answers at
  once) *and* `separate_reasoning: false`, so the raw text is `content` however the template frames
  the answer (with the split on, an answer without `</think>` would land in `reasoning_content`);
- the thinking test asks for the default and requires the text to arrive as `reasoning_content`.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.smoke

PROMPT = [{"role": "user", "content": "What is 12 times 17? Answer with the number."}]
RAW_ANSWER = {"chat_template_kwargs": {"enable_thinking": False}, "separate_reasoning": False}


def test_models_lists_served_model(http, model):
    status, body = http.json("GET", "/v1/models")
    assert status == 200
    assert model in [entry["id"] for entry in body["data"]]


def test_temperature_zero_chat_is_deterministic(http, model):
    request = {"model": model, "messages": PROMPT, "temperature": 0, "max_tokens": 32, **RAW_ANSWER}
    status_a, first = http.json("POST", "/v1/chat/completions", request)
    status_b, second = http.json("POST", "/v1/chat/completions", request)
    assert (status_a, status_b) == (200, 200), (first, second)
    text = first["choices"][0]["message"]["content"]
    assert text and text == second["choices"][0]["message"]["content"]
    assert first["usage"]["completion_tokens"] > 0
    assert first["usage"]["total_tokens"] == first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"]


def test_thinking_arrives_as_reasoning_content(http, model):
    request = {"model": model, "messages": PROMPT, "temperature": 0, "max_tokens": 48}
    status, body = http.json("POST", "/v1/chat/completions", request)
    assert status == 200, body
    message = body["choices"][0]["message"]
    assert message.get("reasoning_content"), f"no reasoning_content from a thinking request: {message}"
    assert isinstance(message.get("content"), str)  # "" until </think>, never None
    assert 0 < body["usage"]["completion_tokens"] <= 48
    assert body["choices"][0]["finish_reason"] in ("length", "stop")


def test_streaming_counts_tokens_from_usage(http, model):
    request = {
        "model": model, "messages": PROMPT, "temperature": 0, "max_tokens": 48, "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = list(http.sse("/v1/chat/completions", request))
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    kinds = [k for d in deltas for k in ("reasoning_content", "content") if d.get(k)]
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert kinds and kinds[0] == "reasoning_content", kinds[:5]  # the thinking streams first
    assert len(usage) >= 1 and usage[-1]["completion_tokens"] > 0
    # Tokens come from usage, never from counting chunks (speculative decoding sends several per chunk).
    assert len(kinds) <= usage[-1]["completion_tokens"]
