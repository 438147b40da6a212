"""Per-token log-probabilities of what the simulated model writes: a pure function of the request and the token.

Ranges, the FP8 head's rounding and `fp8-head-scale-off`'s three-group model: docs/simulator.md, "Questions the
model answers" (Log-probabilities) and "Faults". Not there: `return_logprob` on /generate gets them too; a
non-answer token's runner-up is 0 to 3 nats below; under scale-off, sampling at a temperature wanders; speculative
decoding does not change them (verification is lossless at temperature 0).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

from sparkgate_sim import textgen

SCALE_OFF_FACTOR = 4.0
LING_VOCAB = 157184


@dataclass(frozen=True)
class Head:
    fp8: bool = False
    scale_off: bool = False


def _hash(*parts: object) -> int:
    material = ":".join(str(p) for p in parts).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(material, digest_size=8).digest(), "big")


def rescaled(logprob: float, margin: float, factor: float) -> tuple[float, float]:
    """The chosen token's log-probability and its margin to the runner-up after every logit is multiplied by
    `factor` (chosen at 0, runner-up at -margin, the other LING_VOCAB - 2 tokens at one logit -t)."""
    rest = math.exp(-logprob) - 1.0 - math.exp(-margin)  # the tail's mass relative to the chosen token's
    tail = math.log(rest / (LING_VOCAB - 2)) if rest > 0 else None  # -t
    total = 1.0 + math.exp(-factor * margin) + ((LING_VOCAB - 2) * math.exp(factor * tail) if tail is not None else 0.0)
    return -math.log(total), factor * margin


def token_logprobs(seed: int, words: Sequence[str], ids: Sequence[int], answer_at: int | None, answer_len: int,
                   head: Head, top: int) -> tuple[list[tuple[float, int, str]], list[list[tuple[float, int, str]]]]:
    """(output_token_logprobs, output_top_logprobs) as SGLang's meta_info holds them: (logprob, token id, text)
    per token, and the `top` most likely per position (the chosen token first)."""
    chosen, tops = [], []
    for position, (word, token_id) in enumerate(zip(words, ids, strict=True)):
        h = _hash(seed, position, word)
        answering = answer_at is not None and answer_at <= position < answer_at + answer_len
        # The runner-up `margin` below, and the rest of the vocabulary holding `tail` times the chosen token's mass.
        if answering:
            margin, tail = 4.0 + (h >> 8) % 501 / 100, 0.001 + (h % 40) / 1000
        else:
            margin, tail = (h >> 12) % 301 / 100, 0.05 + (h % 1000) / 1000 * 6
        logprob = -math.log(1.0 + math.exp(-margin) + tail)
        if head.scale_off:
            logprob, margin = rescaled(logprob, margin, 1.0 / SCALE_OFF_FACTOR)
        if head.fp8:
            logprob = min(-1e-4, logprob + ((h >> 24) % 81 - 40) / 1000)
        logprob = round(logprob, 4)
        runner_up_index = (h >> 32) % textgen.VOCAB_SIZE
        runner_up = textgen.VOCAB[runner_up_index]
        if runner_up == word:
            runner_up_index = (runner_up_index + 1) % textgen.VOCAB_SIZE
            runner_up = textgen.VOCAB[runner_up_index]
        entry = (logprob, token_id, word)
        chosen.append(entry)
        candidates = [entry, (round(logprob - margin, 4), textgen.TOKEN_ID_OFFSET + runner_up_index, runner_up)]
        tops.append(candidates[:top])
    return chosen, tops
