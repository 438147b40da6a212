"""What kind of text a prompt asks for, read from the prompt alone (the timing model's accept lengths depend on it).

A drafter's acceptance depends on how predictable the continuation is: code (identifiers, syntax) is the
easiest, arithmetic reasoning next, free prose the hardest. The bench's workloads and the simulator agree
only on the prompt text (no shared code), so the rules are plain and robust:

  code  - a Python `def name(` signature, or a fenced code block (```);
  arith - a GSM8K-style answer marker (`####`), a "step by step" instruction, or an arithmetic question
          (a number and a "how many / much / far / long ...?" question);
  prose - everything else (essays, explanations, letters, summaries, filler).
"""

from __future__ import annotations

import re

CODE, ARITH, PROSE = "code", "arith", "prose"

_DEF_SIGNATURE = re.compile(r"\bdef\s+[A-Za-z_]\w*\s*\(")
_FENCE = "```"
_STEP_BY_STEP = re.compile(r"step[ -]by[ -]step", re.IGNORECASE)
_NUMBER = re.compile(r"\d")
_QUANTITY_QUESTION = re.compile(r"\bhow\s+(many|much|far|long|old)\b[^?]*\?", re.IGNORECASE)


def classify(prompt: str) -> str:
    """code, arith or prose (see the module doc)."""
    if _DEF_SIGNATURE.search(prompt) or _FENCE in prompt:
        return CODE
    if "####" in prompt or _STEP_BY_STEP.search(prompt):
        return ARITH
    if _NUMBER.search(prompt) and _QUANTITY_QUESTION.search(prompt):
        return ARITH
    return PROSE
