"""The answer set: fixed questions with one exact answer each, shipped as data with the product
(data/answer-set-N.json), and how a reply is judged against its answer.

Speed at unchanged accuracy is the point of the stack, and engaged kernels can emit garbage at full speed
(a spliced token, a garbled cold prefill, a wrong MoE path). So the gate asks questions whose answers a
healthy model cannot miss: integer arithmetic, unit conversions, short facts, and a counting list long
enough to span many decode (or verify) steps. The set's version goes into every verdict; a change of
questions, answers or thresholds is a new file and a new version, never an edit in place.

Judging is deliberately narrow, so that a correct model passes however it phrases a short answer and a
garbled one cannot pass by accident:
- `integer`: the first number in the reply (thousands commas allowed) equals the answer;
- `word`: the first word of the reply, case-insensitively, equals the answer;
- `integer_list`: the integers of the reply, in order, equal the answer's.
A reasoning block the model writes anyway (`... </think>`) is cut off first.
"""

from __future__ import annotations

import functools
import json
import re
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


def extract(kind: Kind, reply: str) -> str | None:
    """What the judge reads in the reply, as a string (None: nothing of the kind found)."""
    text = answer_part(reply)
    if kind == "integer":
        found = _NUMBER.search(text)
        if not found:
            return None
        value = found.group().replace(",", "")
        return value[:-2] if value.endswith(".0") else value
    if kind == "word":
        found = _WORD.search(text)
        return found.group().casefold() if found else None
    found = _INTEGER.findall(text)
    return ", ".join(found) if found else None


def judge(question: Question, reply: str) -> bool:
    got = extract(question.kind, reply)
    return got is not None and got == extract(question.kind, question.answer)
