"""The endpoint serves the model: listing, deterministic completion, streaming with usage."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.smoke

PROMPT = [{"role": "user", "content": "What is 12 times 17? Answer with the number."}]


def test_models_lists_served_model(http, model):
    status, body = http.json("GET", "/v1/models")
    assert status == 200
    assert model in [entry["id"] for entry in body["data"]]


def test_temperature_zero_chat_is_deterministic(http, model):
    request = {"model": model, "messages": PROMPT, "temperature": 0, "max_tokens": 32}
    status_a, first = http.json("POST", "/v1/chat/completions", request)
    status_b, second = http.json("POST", "/v1/chat/completions", request)
    assert (status_a, status_b) == (200, 200)
    text = first["choices"][0]["message"]["content"]
    assert text and text == second["choices"][0]["message"]["content"]
    assert first["usage"]["completion_tokens"] > 0
    assert first["usage"]["total_tokens"] == first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"]


def test_streaming_counts_tokens_from_usage(http, model):
    request = {
        "model": model, "messages": PROMPT, "temperature": 0, "max_tokens": 48, "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = list(http.sse("/v1/chat/completions", request))
    text = "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks if c.get("choices"))
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert text
    assert len(usage) >= 1 and usage[-1]["completion_tokens"] > 0
    # Tokens come from usage, never from counting chunks (speculative decoding sends several per chunk).
    content_chunks = sum(1 for c in chunks if c.get("choices") and c["choices"][0]["delta"].get("content"))
    assert content_chunks <= usage[-1]["completion_tokens"]
