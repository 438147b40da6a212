"""The answer set: fixed questions with one exact answer each, shipped as data with the product
(data/answer-set-N.json), and how a reply is judged against its answer.

Speed at unchanged accuracy is the point of the stack, and engaged kernels can emit garbage at full speed
(a spliced token, a garbled cold prefill, a wrong MoE path). So the gate asks questions whose answers a
healthy model cannot miss: integer arithmetic, unit conversions, short facts, and a counting list long
enough to span many decode (or verify) steps. The set's version goes into every verdict; a change of
questions, answers or thresholds is a new file and a new version, never an edit in place.

Judging reads the answer, and only the answer, wherever a correct model puts it in a short reply, so that
a garbled one cannot pass by accident: the reply must contain the answer and nothing else but what the
question itself says (see `read`):
- `integer`: its numbers (thousands commas allowed) are the answer and numbers of the question;
- `word`: its words, case-insensitively, are the answer, words of the question and a few fillers;
- `integer_list`: its integers hold the answer's as one contiguous run, the rest numbers of the question.
A reasoning block the model writes anyway (`... </think>`) is cut off first.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from decimal import Decimal
from importlib import resources
from typing import Annotated, Literal

from pydantic import Field

from sparkgate.frozen import Frozen

SET_VERSION = 1
_DATA = f"data/answer-set-{SET_VERSION}.json"
_THINK_END = "</think>"
_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?")
_INTEGER = re.compile(r"-?\d+")
_WORD = re.compile(r"[^\W\d_]+")
# Words a short answer may carry besides the answer and the question's own words ("It is Paris.").
_FILLER = frozenset({"a", "an", "the", "is", "it", "s", "are", "here", "so", "that", "this", "answer", "equals",
                     "total", "symbol", "city", "boxed", "text"})  # \boxed{85}, $\text{Au}$

Kind = Literal["integer", "word", "integer_list"]


class Question(Frozen):
    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,40}$")]
    prompt: Annotated[str, Field(min_length=1, max_length=300)]
    kind: Kind
    answer: Annotated[str, Field(min_length=1, max_length=400)]
    max_tokens: Annotated[int, Field(ge=1, le=256)] = 32


class AnswerSet(Frozen):
    set_version: Annotated[int, Field(ge=1)]
    instruction: Annotated[str, Field(min_length=1, max_length=200)]
    max_wrong: Annotated[int, Field(ge=0, le=3)]
    baseline_agreement_min: Annotated[float, Field(gt=0.0, le=1.0)]
    repeat: Question  # asked first (cold) and again last (warm): greedy must give the same tokens
    questions: Annotated[tuple[Question, ...], Field(min_length=4, max_length=32)]

    def message(self, question: Question) -> str:
        return f"{question.prompt} {self.instruction}"

    def every_question(self) -> tuple[Question, ...]:
        return (self.repeat, *self.questions)

    def by_id(self, question_id: str) -> Question | None:
        return next((q for q in self.every_question() if q.id == question_id), None)


@functools.cache
def load() -> AnswerSet:
    raw = resources.files("sparkgate.evidence").joinpath(_DATA).read_text(encoding="utf-8")
    answer_set = AnswerSet.model_validate(json.loads(raw))
    if answer_set.set_version != SET_VERSION:
        raise ValueError(f"sparkgate/evidence/{_DATA}: set_version {answer_set.set_version} != {SET_VERSION}")
    ids = [q.id for q in answer_set.every_question()]
    if len(set(ids)) != len(ids):
        raise ValueError(f"sparkgate/evidence/{_DATA}: question ids repeat")
    for question in answer_set.every_question():
        if not judge(question, question.answer):
            raise ValueError(f"sparkgate/evidence/{_DATA}: {question.id}: its own answer does not judge right")
    return answer_set


def answer_part(reply: str) -> str:
    """The reply after any reasoning block the model wrote despite thinking off."""
    return reply.rpartition(_THINK_END)[2] if _THINK_END in reply else reply


def _canonical(number: str) -> str:
    """One spelling per value: "3,500", "3500.", "3500.00" and "3500" all read "3500"."""
    return format(Decimal(number.replace(",", "")).normalize(), "f")


def _numbers(text: str) -> list[str]:
    return [_canonical(n) for n in _NUMBER.findall(text)]


def _words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def _plain(reply: str) -> str:
    """The answer part of a reply with compatibility forms folded (full-width "８５" reads "85")."""
    return unicodedata.normalize("NFKC", answer_part(reply))


def read(question: Question, reply: str) -> tuple[bool, str | None]:
    """(right, what the judge read). Right means the reply holds the answer and nothing else but what the
    question itself says (and a few filler words): "85", "**85**", "47 plus 38 is 85" and "3.5 kilometers is
    3,500 meters" are right; "86", "84 or 85", "85 xq zzv", an echo of the question, and a list with one
    number dropped or anything spliced in are not. What was read is the answer when right, else the reply's
    own numbers (or first word of its own)."""
    text = _plain(reply)
    asked_words = set(_words(question.prompt)) | _FILLER
    stray_words = [w for w in _words(text) if w not in asked_words]
    if question.kind == "word":
        right = bool(stray_words) and set(stray_words) == {question.answer.casefold()}
        return right, (stray_words or _words(text) or [None])[0]
    if question.kind == "integer":
        given, answer = set(_numbers(question.prompt)), _canonical(question.answer)
        found = _numbers(text)
        right = answer in found and all(n == answer or n in given for n in found) and not stray_words
        own = [n for n in found if n not in given] or found
        return right, answer if right else (", ".join(own) or None)
    matches = list(_INTEGER.finditer(text))
    values, run = [m.group() for m in matches], _INTEGER.findall(question.answer)
    width = len(run)
    at = next((i for i in range(len(values) - width + 1) if values[i: i + width] == run), None)
    right = False
    if at is not None:
        inside = text[matches[at].start(): matches[at + width - 1].end()]
        outside = text[: matches[at].start()] + " " + text[matches[at + width - 1].end():]
        given = set(_INTEGER.findall(question.prompt))
        right = (not _WORD.search(inside) and all(v in given for v in _INTEGER.findall(outside))
                 and all(w in asked_words for w in _words(outside)))
    return right, ", ".join(run) if right else (", ".join(values) or None)


def judge(question: Question, reply: str) -> bool:
    return read(question, reply)[0]
