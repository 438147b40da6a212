"""Answer extraction and scoring for GSM8K-style numeric answers.

The reference answer is what follows `####` in the dataset's `answer` field. From a model's output we take,
in order: the first `#### N`, else the last `\\boxed{N}`, else the last number in the text (the fallback
lm-eval calls "flexible extract"). Numbers compare as decimals after dropping thousands separators, `$`
and a trailing period, so `1,200`, `$1200` and `1200.00` are all 1200.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_NUMBER = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_HASHES = re.compile(r"####\s*\$?\s*(" + _NUMBER + ")")
_BOXED = re.compile(r"\\boxed\{\s*\$?\s*(" + _NUMBER + r")\s*\}")
_ANY_NUMBER = re.compile(_NUMBER)


def to_decimal(text: str | None) -> Decimal | None:
    if text is None:
        return None
    cleaned = text.strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def reference_answer(answer_field: str) -> str | None:
    """The number after `####` in a GSM8K `answer` field (None when it has none)."""
    match = _HASHES.search(answer_field or "")
    return match.group(1).replace(",", "") if match else None


def extract(text: str | None) -> tuple[str | None, str]:
    """(answer, how) from a model output; how is `####`, `boxed`, `last-number` or `none`."""
    text = text or ""
    match = _HASHES.search(text)
    if match:
        return match.group(1).replace(",", ""), "####"
    boxed = _BOXED.findall(text)
    if boxed:
        return boxed[-1].replace(",", ""), "boxed"
    numbers = _ANY_NUMBER.findall(text)
    if numbers:
        return numbers[-1].replace(",", ""), "last-number"
    return None, "none"


def is_correct(extracted: str | None, expected: str | None) -> bool:
    got, want = to_decimal(extracted), to_decimal(expected)
    return got is not None and want is not None and got == want
