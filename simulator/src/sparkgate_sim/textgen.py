"""Deterministic text: a fixed word vocabulary, whitespace tokenization, prompt-seeded output.

The pseudo-words, the code vocabulary, the think tags and the answer words (answers.py) with their ids:
docs/simulator.md, "Tokenization and text" and "Questions the model answers".
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

_ONSETS = "bdfghklmnprstvz"
_VOWELS = "aeiou"
_SYLLABLES = [o + v for o in _ONSETS for v in _VOWELS]  # 75
VOCAB_SIZE = 1000
VOCAB: tuple[str, ...] = tuple(_SYLLABLES[i // len(_SYLLABLES)] + _SYLLABLES[i % len(_SYLLABLES)] for i in range(VOCAB_SIZE))
TOKEN_ID_OFFSET = 100  # ids below are reserved (0 = pad/health probe, 1 = EOS...)
CODE_VOCAB: tuple[str, ...] = (
    "def", "return", "if", "elif", "else:", "for", "while", "in", "not", "and", "or", "is", "None", "True",
    "False", "=", "==", "!=", "+=", "-=", "+", "-", "*", "//", "%", "<", "<=", ">", ">=", "(", ")", "[", "]",
    "{", "}", ":", ",", ".", "0", "1", "2", "i", "j", "n", "x", "y", "result", "values", "value", "total",
    "count", "items", "key", "seen", "len(", "range(", "enumerate(", ".append(", "sorted(", "max(", "min(",
    "sum(", "list(", "dict(", "set(", "str(", "int(", "break", "continue", "pass", "lambda", "yield", "#",
)
CODE_TOKEN_ID_OFFSET = TOKEN_ID_OFFSET + VOCAB_SIZE
ANSWER_TOKEN_ID_OFFSET = CODE_TOKEN_ID_OFFSET + len(CODE_VOCAB)  # answer words that no vocabulary holds
ANSWER_TOKEN_ID_SPAN = 100_000
VOCAB_IDS = {w: TOKEN_ID_OFFSET + i for i, w in enumerate(VOCAB)}  # the ids /generate returns as output_ids
CODE_IDS = {w: CODE_TOKEN_ID_OFFSET + i for i, w in enumerate(CODE_VOCAB)}
EOS_TOKEN_ID = 1
THINK_START, THINK_END = "<think>", "</think>"
THINK_TOKEN_IDS = {THINK_START: 3, THINK_END: 4}
# How the detokenizer renders each tag (Ling-3 writes "<think>\n...\n</think>\n\n" around its reasoning).
_TAG_TEXT = {THINK_START: THINK_START + "\n", THINK_END: "\n" + THINK_END + "\n\n"}
ASSISTANT_OPEN = "<role:assistant>"
THINKING_OFF_PREFILL = f"{THINK_START} {THINK_END}"  # the template closes the think block itself
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's sampling default for /generate


def count_tokens(text: str) -> int:
    return len(text.split())


def prompt_token_count(text: str | None = None, input_ids: Iterable[int] | None = None) -> int:
    if input_ids is not None:
        return len(list(input_ids))
    return count_tokens(text or "")


def render_chat(messages: Iterable[Mapping[str, Any]], thinking: bool = True) -> str:
    """A stand-in chat template: `<role:user> content ... <role:assistant>` (the markers are tokens).
    With thinking off it pre-fills an empty think block after the assistant marker."""
    parts = []
    for message in messages:
        content = message.get("content") or ""
        if isinstance(content, list):  # OpenAI content parts
            content = " ".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        parts.append(f"<role:{message.get('role', 'user')}> {content}")
    parts.append(ASSISTANT_OPEN if thinking else f"{ASSISTANT_OPEN} {THINKING_OFF_PREFILL}")
    return " ".join(parts)


def model_thinks(prompt: str, template_ignores_off: bool = False) -> bool:
    """The model opens a think block when the prompt ends in an open assistant turn; with a template that ignores
    `enable_thinking: false` (faults.THINKS_ANYWAY), also after the pre-filled empty block."""
    prompt = prompt.rstrip()
    return prompt.endswith(ASSISTANT_OPEN) or (template_ignores_off and prompt.endswith(THINKING_OFF_PREFILL))


def reasoning_length(seed: int, words: int | None = None) -> int:
    """Reasoning words between the tags (not counting them): `words` when given (thinks-anyway:N)."""
    return 24 + seed % 40 if words is None else words


def request_seed(prompt_key: str, sampling: Mapping[str, Any]) -> int:
    """Greedy (temperature 0) or an explicit seed: reproducible. Otherwise: a fresh sample each time."""
    temperature = float(sampling.get("temperature", 1.0) if sampling.get("temperature") is not None else 1.0)
    material = prompt_key
    if temperature > 0:
        seed = sampling.get("seed")
        material += f"|t={temperature}|seed={seed if seed is not None else secrets.token_hex(8)}"
    return int.from_bytes(hashlib.blake2b(material.encode("utf-8"), digest_size=8).digest(), "big")


def token_index(seed: int, position: int) -> int:
    digest = hashlib.blake2b(f"{seed}:{position}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % VOCAB_SIZE


def token_id(seed: int, position: int) -> int:
    return TOKEN_ID_OFFSET + token_index(seed, position)


def word(seed: int, position: int) -> str:
    return VOCAB[token_index(seed, position)]


def _tag_at(seed: int, position: int, thinks: bool, words: int | None = None) -> str | None:
    if not thinks:
        return None
    if position == 0:
        return THINK_START
    if position == reasoning_length(seed, words) + 1:
        return THINK_END
    return None


def answer_start(seed: int, thinks: bool, words: int | None = None) -> int:
    """The position of an answer's first token: right after `</think>` when the model thinks."""
    return reasoning_length(seed, words) + 2 if thinks else 0


def answer_token_id(text: str) -> int:
    """A vocabulary word keeps its id; any other answer word gets a stable id of its own."""
    known = VOCAB_IDS.get(text, CODE_IDS.get(text))
    if known is not None:
        return known
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=4).digest()
    return ANSWER_TOKEN_ID_OFFSET + int.from_bytes(digest, "big") % ANSWER_TOKEN_ID_SPAN


def output_token(
    seed: int, position: int, thinks: bool = False, code: bool = False, answer: tuple[str, ...] | None = None,
    reasoning_words: int | None = None,
) -> tuple[str, int]:
    """(token text, token id) the model writes at `position` (from the code vocabulary when `code`; the
    answer's words where the answer goes when the prompt is a question it answers)."""
    tag = _tag_at(seed, position, thinks, reasoning_words)
    if tag is not None:
        return tag, THINK_TOKEN_IDS[tag]
    start = answer_start(seed, thinks, reasoning_words)
    if answer is not None and position >= start:
        text = answer[position - start]
        return text, answer_token_id(text)
    if code:
        index = token_index(seed, position) % len(CODE_VOCAB)
        return CODE_VOCAB[index], CODE_TOKEN_ID_OFFSET + index
    return word(seed, position), token_id(seed, position)


def render_output(tokens: Iterable[str]) -> str:
    """Detokenized output: words with a leading space, tags with their newlines."""
    return "".join(_TAG_TEXT.get(t, " " + t) for t in tokens)


def natural_length(seed: int, thinks: bool = False, answer: tuple[str, ...] | None = None,
                   reasoning_words: int | None = None) -> int:
    """How many tokens the 'model' writes before EOS (a question's answer: up to its last word)."""
    if answer is not None:
        return answer_start(seed, thinks, reasoning_words) + len(answer)
    words = 16 + seed % 48
    return words + (reasoning_length(seed, reasoning_words) + 2 if thinks else 0)
