"""OpenAI-compatible request parsing and response shaping (`/v1/completions`, `/v1/chat/completions`),
in the shapes SGLang's OpenAI layer returns, including the `stream_options.include_usage` chunk."""

from __future__ import annotations

import time
import uuid
from typing import Any

from sparkgate.sim import textgen
from sparkgate.sim.engine import Chunk, GenRequest

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's (and SGLang's CompletionRequest) default


class BadRequest(ValueError):
    pass


def _stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(str(s) for s in stop)


def _sampling(body: dict) -> dict[str, Any]:
    return {k: body[k] for k in ("temperature", "top_p", "top_k", "seed") if body.get(k) is not None}


def _check_n(body: dict) -> None:
    if int(body.get("n") or 1) != 1:
        raise BadRequest("the simulator serves n=1 only (batch size 1)")


def completion_request(body: dict) -> GenRequest:
    _check_n(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        if len(prompt) != 1 and not all(isinstance(p, int) for p in prompt):
            raise BadRequest("the simulator serves one prompt per request")
        prompt = prompt[0] if prompt and isinstance(prompt[0], str) else prompt
    if isinstance(prompt, list):  # token ids
        key, count = "ids:" + ",".join(map(str, prompt)), len(prompt)
    elif isinstance(prompt, str):
        key, count = prompt, textgen.count_tokens(prompt)
    else:
        raise BadRequest("prompt must be a string, a list of one string, or a list of token ids")
    max_tokens = body.get("max_tokens", COMPLETIONS_DEFAULT_MAX_TOKENS)
    return GenRequest(key, count, max_tokens, _sampling(body), bool(body.get("stream")), _stop(body))


def chat_request(body: dict) -> GenRequest:
    _check_n(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    rendered = textgen.render_chat(messages)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    return GenRequest(
        rendered, textgen.count_tokens(rendered), max_tokens, _sampling(body), bool(body.get("stream")), _stop(body)
    )


def include_usage(body: dict) -> bool:
    options = body.get("stream_options") or {}
    return bool(options.get("include_usage"))


def finish_reason(meta: dict) -> tuple[str | None, Any]:
    reason = meta.get("finish_reason")
    if not reason:
        return None, None
    return reason["type"], reason.get("matched")


def usage(meta: dict) -> dict[str, Any]:
    prompt, completion = meta["prompt_tokens"], meta["completion_tokens"]
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
    }


SPEC_DETAIL_KEYS = (
    "spec_accept_rate", "spec_accept_length", "spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_verify_ct",
)


def spec_tokens_details(body: dict, meta: dict) -> dict[str, Any] | None:
    """SGLang's `sglext.spec_tokens_details` (request `return_spec_tokens_details: true`): the same
    per-request speculative fields /generate puts in meta_info, present only when speculation ran."""
    if not body.get("return_spec_tokens_details"):
        return None
    details = {key: meta[key] for key in SPEC_DETAIL_KEYS if key in meta}
    return {"spec_tokens_details": details} if details else None


class Shaper:
    """Turns engine chunks into one endpoint's response objects (one id/created per request)."""

    def __init__(self, kind: str, model: str):
        self.kind = kind  # "completion" | "chat"
        self.model = model
        self.id = ("cmpl-" if kind == "completion" else "chatcmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.sent_chars = 0

    def _base(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def full(self, chunk: Chunk) -> dict[str, Any]:
        reason, matched = finish_reason(chunk.meta_info)
        if self.kind == "completion":
            choice = {"index": 0, "text": chunk.text, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
            body = self._base("text_completion")
        else:
            message = {"role": "assistant", "content": chunk.text.lstrip(), "reasoning_content": None, "tool_calls": None}
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
            body = self._base("chat.completion")
        body.update(choices=[choice], usage=usage(chunk.meta_info))
        return body

    def first_chat_delta(self) -> dict[str, Any]:
        body = self._base("chat.completion.chunk")
        body.update(
            choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}],
            usage=None,
        )
        return body

    def delta(self, chunk: Chunk) -> dict[str, Any]:
        """The text added since the last delta (cumulative text minus what was already sent)."""
        text = chunk.text
        if self.kind == "chat" and self.sent_chars == 0:
            text = text.lstrip()
            self.sent_chars = len(chunk.text) - len(text)
        piece = chunk.text[self.sent_chars :]
        self.sent_chars = len(chunk.text)
        reason, matched = finish_reason(chunk.meta_info)
        if self.kind == "completion":
            choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
            body = self._base("text_completion")
        else:
            choice = {"index": 0, "delta": {"content": piece}, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
            body = self._base("chat.completion.chunk")
        body.update(choices=[choice], usage=None)
        return body

    def usage_chunk(self, meta: dict) -> dict[str, Any]:
        body = self._base("text_completion" if self.kind == "completion" else "chat.completion.chunk")
        body.update(choices=[], usage=usage(meta))
        return body
