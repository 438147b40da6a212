"""OpenAI-compatible request parsing and response shaping (`/v1/completions`, `/v1/chat/completions`),
in the shapes SGLang's OpenAI layer returns, including the `stream_options.include_usage` chunk and,
with `--reasoning-parser`, the `reasoning_content` / `content` split (see reasoning.py)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from sparkgate.sglang import conformance as C
from sparkgate_sim import reasoning, textgen
from sparkgate_sim.engine import Chunk, GenRequest

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
    return GenRequest(key, count, max_tokens, _sampling(body), bool(body.get("stream")), _stop(body),
                      ignore_eos=bool(body.get("ignore_eos")))


def _content(message: dict) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _last_user_text(messages: list) -> tuple[str, str]:
    """(the text of the last user message, where a question is looked for; the turns before it, joined: what
    the model was told earlier in the conversation)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role", "user") == "user":
            earlier = "\n".join(_content(m) for m in messages[:index] if isinstance(m, dict))
            return _content(message), earlier
    return "", ""


def chat_request(body: dict, reasoning_parser: str | None = None) -> GenRequest:
    _check_n(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise BadRequest("chat_template_kwargs must be an object")
    # chat_template_kwargs reach the template (serving_chat.py passes them to apply_chat_template).
    rendered = textgen.render_chat(messages, thinking=reasoning.thinking_requested(body))
    question, earlier = _last_user_text(messages)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    return GenRequest(
        rendered, textgen.count_tokens(rendered), max_tokens, _sampling(body), bool(body.get("stream")), _stop(body),
        require_reasoning=reasoning_parser is not None, question=question, context=earlier,
        ignore_eos=bool(body.get("ignore_eos")), return_logprob=body.get("logprobs") is True,
        top_logprobs=_top_logprobs(body),
    )


def _top_logprobs(body: dict) -> int:
    """ChatCompletionRequest.top_logprobs (an optional integer, no range check; used only with logprobs). The
    simulated model knows its top two candidates per position (logits.py)."""
    top = body.get("top_logprobs")
    if top is not None and (not isinstance(top, int) or isinstance(top, bool)):
        raise BadRequest("top_logprobs must be an integer")
    return max(0, top or 0)


def chat_logprobs(meta: dict) -> dict[str, Any] | None:
    """serving_chat._process_response_logprobs: the engine's (logprob, id, text) triples as ChoiceLogprobs."""
    chosen = meta.get("output_token_logprobs")
    if chosen is None:
        return None
    tops = meta.get("output_top_logprobs") or [[] for _ in chosen]

    def item(logprob: float, text: str) -> dict[str, Any]:
        return {"token": text, "bytes": list(text.encode("utf-8")), "logprob": logprob}

    return {"content": [{**item(lp, text), "top_logprobs": [item(t_lp, t_text) for t_lp, _, t_text in top]}
                        for (lp, _, text), top in zip(chosen, tops, strict=True)]}


def include_usage(body: dict) -> bool:
    return bool((body.get("stream_options") or {}).get("include_usage"))


def finish_reason(meta: dict) -> tuple[str | None, Any]:
    reason = meta.get(C.string_("meta_finish_reason"))
    if not reason:
        return None, None
    return reason["type"], reason.get("matched")


def usage(meta: dict) -> dict[str, Any]:
    """UsageProcessor.calculate_token_usage: completion_tokens_details only when reasoning was counted."""
    prompt, completion = meta[C.string_("meta_prompt_tokens")], meta[C.string_("meta_completion_tokens")]
    thought = meta.get(C.string_("meta_reasoning_tokens")) or 0
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
        "reasoning_tokens": thought,
        "completion_tokens_details": {"reasoning_tokens": thought} if thought else None,
    }


# SpecTokensDetails (sglang/srt/entrypoints/openai/protocol.py): every field, with its default.
SPEC_DETAIL_DEFAULTS: dict[str, Any] = {
    C.string_("meta_spec_accept_rate"): 0.0,
    C.string_("meta_spec_accept_length"): 0.0,
    "spec_cap_length": 0.0,
    "spec_block_accept_length": 0.0,
    C.string_("meta_spec_num_correct_drafts"): 0,
    C.string_("meta_spec_num_proposed_drafts"): 0,
    C.string_("meta_spec_verify_ct"): 0,
    "spec_correct_drafts_histogram": [],
    "spec_cap_lens_histogram": [],
}


def spec_tokens_details(body: dict, meta: dict) -> dict[str, Any] | None:
    """SGLang's `sglext` with `spec_tokens_details` (request `return_spec_tokens_details: true`), built as
    entrypoints/openai/utils.py spec_tokens_details_from_meta_info builds it: None unless the final meta_info
    has a speculative field, otherwise every SpecTokensDetails field (`meta.get(key) or default`; pydantic
    makes the float fields floats)."""
    if not body.get("return_spec_tokens_details") or not any(key in meta for key in SPEC_DETAIL_DEFAULTS):
        return None
    details = {}
    for key, default in SPEC_DETAIL_DEFAULTS.items():
        value = meta.get(key) or default
        details[key] = float(value) if isinstance(default, float) else value
    return {"spec_tokens_details": details}


def weight_version_metadata(meta: dict) -> dict[str, Any]:
    """The OpenAI responses' `metadata` (utils/weight_versions.py build_endpoint_weight_version_metadata)."""
    metadata = {"weight_version": meta[C.string_("meta_weight_version")]}
    if "weight_versions" in meta:
        metadata["weight_versions"] = meta["weight_versions"]
    return metadata


class Shaper:
    """Turns engine chunks into one endpoint's response objects (one id/created per request)."""

    def __init__(self, kind: str, model: str, reasoning_parser: str | None = None, body: dict | None = None):
        self.kind = kind  # "completion" | "chat"
        self.model = model
        self.id = ("cmpl-" if kind == "completion" else "chatcmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.sent_chars = 0
        body = body or {}
        # serving_chat runs the parser only with a server parser and the request's separate_reasoning (default on).
        self.separates = kind == "chat" and reasoning_parser is not None and body.get("separate_reasoning", True) is not False
        self.splitter = reasoning.StreamSplitter(stream_reasoning=body.get("stream_reasoning", True) is not False)

    def _base(self, obj: str, **fields: Any) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, **fields}

    def full(self, chunk: Chunk) -> dict[str, Any]:
        reason, matched = finish_reason(chunk.meta_info)
        if self.kind == "completion":
            choice = {"index": 0, "text": chunk.text, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
            body = self._base("text_completion")
        else:
            if self.separates:
                split = reasoning.split_whole(chunk.text)
                # content is "" rather than None when empty; reasoning_content None when empty.
                content, thought = split.content, split.reasoning or None
            else:
                content, thought = chunk.text.lstrip(), None
            # ChatMessage drops tool_calls when None (entrypoints/openai/protocol.py).
            message = {"role": "assistant", "content": content, "reasoning_content": thought}
            choice = {"index": 0, "message": message, "logprobs": chat_logprobs(chunk.meta_info),
                      "finish_reason": reason, "matched_stop": matched}
            body = self._base("chat.completion")
        body.update(choices=[choice], usage=usage(chunk.meta_info), metadata=weight_version_metadata(chunk.meta_info))
        return body

    def first_chat_delta(self) -> dict[str, Any]:
        # serving_chat sends the role first: build_sse_content(role="assistant", content="").
        return self._chat_event({"role": "assistant", "content": ""})

    def _piece(self, chunk: Chunk) -> str:
        """The text added since the last delta (cumulative text minus what was already sent)."""
        if self.kind == "chat" and not self.separates and self.sent_chars == 0:
            self.sent_chars = len(chunk.text) - len(chunk.text.lstrip())
        piece = chunk.text[self.sent_chars :]
        self.sent_chars = len(chunk.text)
        return piece

    def _chat_event(self, delta: dict[str, Any], reason: str | None = None, matched: Any = None) -> dict[str, Any]:
        """One chunk as entrypoints/openai/sse_utils.py build_sse_content encodes it: the delta always carries
        reasoning_content (null or text) and role/content only when set; the choice carries all its fields;
        the chunk has no usage key (StreamChunk omits a None usage)."""
        delta = {"reasoning_content": None, **{k: v for k, v in delta.items() if v is not None}}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
        return self._base("chat.completion.chunk", choices=[choice])

    def deltas(self, chunk: Chunk) -> list[dict[str, Any]]:
        """The stream events one engine chunk becomes. Chat, as serving_chat streams it: a reasoning event
        and/or a content event (only non-empty ones), and after the last chunk a separate event that
        carries only the finish reason."""
        piece = self._piece(chunk)
        reason, matched = finish_reason(chunk.meta_info)
        if self.kind == "completion":
            choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
            return [self._base("text_completion", choices=[choice], usage=None)]
        thought, content = "", piece
        if self.separates:
            split = self.splitter.feed(piece)
            thought, content = split.reasoning, split.content
            if reason is not None and reason != "abort":
                end = self.splitter.finish()
                thought, content = thought + end.reasoning, content + end.content
        events = []
        if thought:
            events.append(self._chat_event({"reasoning_content": thought}))
        if content:
            events.append(self._chat_event({"content": content}))
        if reason is not None:
            events.append(self._chat_event({}, reason, matched))
        return events

    def _chunk_object(self) -> str:
        return "text_completion" if self.kind == "completion" else "chat.completion.chunk"

    def usage_chunk(self, meta: dict) -> dict[str, Any]:
        counts = usage(meta)
        if self.kind == "completion":
            # serving_completions dumps its usage chunk with exclude_none=True: no null details.
            counts = {key: value for key, value in counts.items() if value is not None}
        return self._base(self._chunk_object(), choices=[], usage=counts)

    def sglext_chunk(self, sglext: dict[str, Any]) -> dict[str, Any]:
        """The separate chunk that carries `sglext` after the finish event (serving_chat / serving_completions:
        a ChatCompletionStreamResponse / CompletionStreamResponse with no choices and a null usage)."""
        return self._base(self._chunk_object(), choices=[], usage=None, sglext=sglext)
