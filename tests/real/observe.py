"""What a real engine printed and served, recorded once per launch right after it started.

Several test modules read the same outputs (the fixture-in-output test, the differential against the
simulator): recording them when the launch first runs means a later module needs no second start of the same
variation. The requests are the ones a client and the gate make: greedy /generate (plain and streamed), OpenAI
chat (plain and streamed with usage), then /metrics, /server_info, /model_info and the log, read last so they
hold every request's records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tests.real.engine import RealEngine

PROMPTS = ("Count with me: 1 2 3", "The quick brown fox", "Hello, world!")
MAX_NEW_TOKENS = 32


@dataclass(frozen=True)
class Observation:
    argv: list[str]
    generate: list[dict[str, Any]]  # /generate responses (text, output_ids, meta_info)
    generate_stream: list[dict[str, Any]]  # the parsed `data:` events of one streamed /generate
    chat: dict[str, Any]
    chat_stream: list[dict[str, Any]]
    server_info: dict[str, Any]
    model_info: dict[str, Any]
    metrics_text: str
    log_text: str
    log_path: str
    extra: dict[str, Any] = field(default_factory=dict)


def sse_events(body: bytes) -> list[dict[str, Any]]:
    """The JSON payloads of an SSE stream (`data: {...}` lines), without the final `[DONE]`."""
    events = []
    for line in body.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            events.append(json.loads(line[len("data: "):]))
    return events


def observe(engine: RealEngine) -> Observation:
    sampling = {"temperature": 0, "max_new_tokens": MAX_NEW_TOKENS}
    generate = []
    for prompt in PROMPTS:
        resp = engine.post("/generate", {"text": prompt, "sampling_params": sampling})
        assert resp.status == 200, f"/generate: {resp.status} {resp.body[:300]!r}"
        generate.append(resp.json())
    stream = engine.post("/generate", {"text": PROMPTS[0], "sampling_params": sampling, "stream": True})
    assert stream.status == 200, f"/generate stream: {stream.status} {stream.body[:300]!r}"
    model = engine.launch.served_model_name or str(engine.launch.model_path)
    chat_body = {"model": model, "messages": [{"role": "user", "content": PROMPTS[1]}], "temperature": 0,
                 "max_tokens": MAX_NEW_TOKENS}
    chat = engine.post("/v1/chat/completions", chat_body)
    assert chat.status == 200, f"/v1/chat/completions: {chat.status} {chat.body[:300]!r}"
    chat_stream = engine.post("/v1/chat/completions",
                              {**chat_body, "stream": True, "stream_options": {"include_usage": True}})
    assert chat_stream.status == 200, f"chat stream: {chat_stream.status} {chat_stream.body[:300]!r}"
    return Observation(
        argv=list(engine.argv), generate=generate, generate_stream=sse_events(stream.body), chat=chat.json(),
        chat_stream=sse_events(chat_stream.body), server_info=engine.server_info(),
        model_info=engine.get_json("/model_info"), metrics_text=engine.metrics_text() if engine.launch.metrics else "",
        log_text=engine.log_text(), log_path=str(engine.log_path),
    )
