"""The answer set: fixed questions with one exact answer each, shipped as data with the product
(data/answer-set-N.json), and how a reply is judged against its answer.

Why these questions and what the set holds: docs/checks/answers.md, "Why" and "The answer set"; how a reply is
judged (judge.py): the same page, "The judge's contract". A change of questions, answers or thresholds is a new
file and a new SET_VERSION, never an edit in place.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Annotated, Literal

from pydantic import Field

from sparkgate.evidence import judge as judge_mod
from sparkgate.frozen import Frozen

SET_VERSION = 2
_DATA = f"data/answer-set-{SET_VERSION}.json"
Kind = Literal["integer", "word", "integer_list"]
# A document is asked about in the same user message, ahead of the question: long enough to span many KV pages
# (64 tokens each on a Spark), short enough that its prefill stays a fraction of a second there.
MAX_DOCUMENT_CHARS = 8000
MAX_REPLY_CHARS = 4000  # far above the longest right reply (the counting list, about 90 characters)
# A whole reply, reasoning included: a thinking reply asked again has at most a few hundred tokens of reasoning
# (answers.THINKING_RETRY_TOKENS), a few thousand characters; anything longer is not read at all.
MAX_REASONING_REPLY_CHARS = 32_000
_ID = r"^[a-z0-9][a-z0-9-]{0,40}$"


class Turn(Frozen):
    """An earlier turn of a multi-turn exchange, sent as it is (the assistant's turn too)."""

    role: Literal["user", "assistant"]
    content: Annotated[str, Field(min_length=1, max_length=300)]


class Question(Frozen):
    id: Annotated[str, Field(pattern=_ID)]
    prompt: Annotated[str, Field(min_length=1, max_length=300)]
    kind: Kind
    answer: Annotated[str, Field(min_length=1, max_length=400)]
    max_tokens: Annotated[int, Field(ge=1, le=256)] = 32
    document: Annotated[str | None, Field(pattern=_ID)] = None  # an id of the set's documents
    history: Annotated[tuple[Turn, ...], Field(max_length=6)] = ()  # user, assistant, ... before this question

    @property
    def judged_text(self) -> str:
        """What the judge reads as the question: the earlier turns and the question (never the document: its
        hundred distractor numbers would all pass as the question's own)."""
        return " ".join([*(turn.content for turn in self.history), self.prompt])

    @property
    def short(self) -> bool:
        """A question of its own (no document, no earlier turns): what the sentinel asks after admission."""
        return self.document is None and not self.history


class AnswerSet(Frozen):
    set_version: Annotated[int, Field(ge=1)]
    instruction: Annotated[str, Field(min_length=1, max_length=200)]
    max_wrong: Annotated[int, Field(ge=0, le=3)]
    baseline_agreement_min: Annotated[float, Field(gt=0.0, le=1.0)]
    # Documents by id, line by line (sent joined by newlines).
    documents: dict[Annotated[str, Field(pattern=_ID)],
                    Annotated[tuple[Annotated[str, Field(min_length=1, max_length=200)], ...], Field(min_length=1)]] = {}
    repeat: Question  # asked first (cold) and again last (warm): greedy must give the same tokens
    questions: Annotated[tuple[Question, ...], Field(min_length=4, max_length=32)]

    def messages(self, question: Question) -> list[dict]:
        """The chat messages of one question: its earlier turns, then one user message with the document (if
        any) ahead of the question and the set's instruction."""
        last = f"{question.prompt} {self.instruction}"
        if question.document is not None:
            last = "\n".join(self.documents[question.document]) + f"\n\n{last}"
        return [*({"role": t.role, "content": t.content} for t in question.history), {"role": "user", "content": last}]

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
    for name, lines in answer_set.documents.items():
        if sum(len(line) + 1 for line in lines) > MAX_DOCUMENT_CHARS:
            raise ValueError(f"sparkgate/evidence/{_DATA}: document {name!r} is over {MAX_DOCUMENT_CHARS} characters")
    for question in answer_set.every_question():
        if question.document is not None and question.document not in answer_set.documents:
            raise ValueError(f"sparkgate/evidence/{_DATA}: {question.id}: no document {question.document!r}")
        if [t.role for t in question.history] != ["user", "assistant"] * (len(question.history) // 2):
            raise ValueError(f"sparkgate/evidence/{_DATA}: {question.id}: history must alternate user, assistant")
        if not judge(question, question.answer):
            raise ValueError(f"sparkgate/evidence/{_DATA}: {question.id}: its own answer does not judge right")
    return answer_set


def read(question: Question, reply: str) -> tuple[bool, str | None]:
    """(right, what the judge read), by the contract of sparkgate/evidence/judge.py: the answer stated once in the
    result position, no other candidate, only allowed words, no symbols. What was read is the answer when right,
    else what the reply stated (its numbers, or its first word). Only the final answer after a reasoning block is
    judged (judge.reasoning); a reply whose block never closed has none and is wrong. An answer longer than any right
    one could be (MAX_REPLY_CHARS), or a reply longer than MAX_REASONING_REPLY_CHARS, is wrong unread."""
    if len(reply) > MAX_REASONING_REPLY_CHARS:
        return False, None
    final = judge_mod.reasoning(reply).answer
    if final is None or len(final) > MAX_REPLY_CHARS:
        return False, None
    read_as = {"integer": judge_mod.read_integer, "word": judge_mod.read_word,
               "integer_list": judge_mod.read_integer_list}[question.kind]
    return read_as(question.judged_text, question.answer, reply)


def judge(question: Question, reply: str) -> bool:
    return read(question, reply)[0]
