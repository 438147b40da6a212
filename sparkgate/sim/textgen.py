"""Deterministic text: a fixed word vocabulary, whitespace tokenization, prompt-seeded output.

Tokenization is deliberately simple and documented: a token is a whitespace-separated word. The
output vocabulary is 1,000 pseudo-words ("bade", "kilo"...) so every output token is one word and
completion text split on whitespace gives back exactly `completion_tokens`. At temperature 0 the
output is a pure function of the prompt (a hash of it seeds every token), as greedy decoding is.
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
EOS_TOKEN_ID = 1
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's sampling default for /generate


def count_tokens(text: str) -> int:
    return len(text.split())


def prompt_token_count(text: str | None = None, input_ids: Iterable[int] | None = None) -> int:
    if input_ids is not None:
        return len(list(input_ids))
    return count_tokens(text or "")


def render_chat(messages: Iterable[Mapping[str, Any]]) -> str:
    """A stand-in chat template: `<role:user> content ... <role:assistant>` (the markers are tokens)."""
    parts = []
    for message in messages:
        content = message.get("content") or ""
        if isinstance(content, list):  # OpenAI content parts
            content = " ".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        parts.append(f"<role:{message.get('role', 'user')}> {content}")
    parts.append("<role:assistant>")
    return " ".join(parts)


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


def natural_length(seed: int) -> int:
    """How many tokens the 'model' writes before EOS when the request sets no token limit."""
    return 16 + seed % 48
