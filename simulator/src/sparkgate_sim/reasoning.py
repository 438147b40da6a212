"""The chat layer's reasoning split, as SGLang 0.5.23 does it for `--reasoning-parser deepseek-r1`.

See docs/simulator.md, "Thinking and the reasoning parser". Beyond it: non-streamed, an empty reasoning is None
and an empty content ""; streamed, a trailing fragment that could start a tag is held back, and `finish` flushes
the buffer as reasoning inside the block, as content after it; `require_reasoning` is `_get_reasoning_from_request`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkgate.sglang import conformance as C

DEEPSEEK_R1 = C.string_("reasoning_parser_deepseek_r1")
THINK_START = C.string_("think_start")
THINK_END = C.string_("think_end")
ENABLE_THINKING = C.string_("chat_enable_thinking")
SUPPORTED_PARSERS = (DEEPSEEK_R1,)


@dataclass(frozen=True)
class Split:
    reasoning: str = ""
    content: str = ""


def split_whole(text: str) -> Split:
    """detect_and_parse with force_reasoning=True (non-streaming)."""
    body = text
    while body.startswith(THINK_START):
        body = body[len(THINK_START):]
    if THINK_END not in body:
        return Split(reasoning=body)  # "Assume reasoning was truncated before end token"
    reasoning, content = body.split(THINK_END, 1)
    return Split(reasoning=reasoning, content=content)


def _partial_suffix(buffer: str, token: str) -> int:
    """Length of the longest end of `buffer` that is a strict prefix of `token`."""
    sizes = range(min(len(buffer), len(token) - 1), 0, -1)
    return next((size for size in sizes if token.startswith(buffer[-size:])), 0)


@dataclass
class StreamSplitter:
    """parse_streaming_increment / finish of a force_reasoning detector, for one choice."""

    stream_reasoning: bool = True
    _buffer: str = ""
    _in_reasoning: bool = True  # forced: the model is assumed to start inside <think>
    _stripped_start: bool = False

    def feed(self, delta: str) -> Split:
        self._buffer += delta
        current = self._buffer
        if any(token.startswith(current) and token != current for token in (THINK_START, THINK_END)):
            return Split()  # could still become a tag: keep buffering
        if not self._stripped_start and THINK_START in current:
            current = current.replace(THINK_START, "", 1)
            self._buffer = current
            self._stripped_start = True
            self._in_reasoning = True
        if self._in_reasoning and THINK_END in current:
            reasoning, content = current.split(THINK_END, 1)
            self._buffer = ""
            self._in_reasoning = False
            return Split(reasoning=reasoning, content=content)
        if self._in_reasoning:
            if not self.stream_reasoning:
                return Split()
            holdback_tokens = [THINK_END] + ([] if self._stripped_start else [THINK_START])
            holdback = max(_partial_suffix(current, token) for token in holdback_tokens)
            self._buffer = current[len(current) - holdback:]
            return Split(reasoning=current[: len(current) - holdback])
        self._buffer = ""
        return Split(content=current)

    def finish(self) -> Split:
        leftover, self._buffer = self._buffer, ""
        if not self._in_reasoning:
            return Split(content=leftover)
        while leftover.startswith(THINK_START):
            leftover = leftover[len(THINK_START):]
        return Split(reasoning=leftover)


def reasoning_token_count(tokens: list[str]) -> int:
    """Scheduler-side `update_reasoning_tokens`: tokens up to and including `</think>`, or all of them."""
    return tokens.index(THINK_END) + 1 if THINK_END in tokens else len(tokens)


def thinking_requested(body: dict) -> bool:
    """What Ling-3's chat template does with chat_template_kwargs: thinking is on unless
    `enable_thinking` is explicitly false (the template defaults to thinking on)."""
    kwargs = body.get("chat_template_kwargs") or {}
    return kwargs.get(ENABLE_THINKING) is not False
