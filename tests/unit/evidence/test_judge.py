"""The answers judge's contract (sparkgate/evidence/judge.py, docs/checks/answers.md): right phrasings of each
question of the shipped set pass, and every corruption of them fails, whatever the question."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkgate.evidence import answer_set, judge

SET = answer_set.load()
INTEGERS = [q for q in SET.questions if q.kind == "integer"]
WORDS = [q for q in SET.questions if q.kind == "word"]
LIST = SET.repeat
UNICODE_DIGITS = ("٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "０１２３４５６７８９")


@pytest.mark.parametrize(("question_id", "reply", "right"), [
    # accepted, wrong, before this contract
    ("div-144-12", "144 divided by 12 is 144", False),
    ("div-144-12", "12 divided by 144", False),
    ("add-47-38", "85 85 85 85", False),
    ("add-47-38", "85 ✅ 🤖🤖🤖 ###@@@!!!", False),
    ("mul-23-17", "391 391 391 23 17 23 17", False),
    ("capital-france", "Paris 2024", False),
    ("capital-france", "capital France Paris of the", False),
    ("capital-france", "What is the capital of France? Paris", False),
    ("count-to-24", LIST.answer + ", 24, 1, 24, 24", False),
    # refused, right, before this contract
    ("hexagon-sides", "A hexagon has 6 sides.", True),
    ("sub-91-46", "91-46=45", True),
    ("km-to-m", "3.5 km = 3500 m", True),
    ("add-47-38", "eighty-five", True),
    ("km-to-m", "three thousand five hundred", True),
    ("count-to-24", "Sure! " + LIST.answer, True),
    ("add-47-38", "85<|endoftext|>", True),
    ("add-47-38", "85</s>", True),
    # more right phrasings
    ("h-to-min", "There are 360 minutes in 6 hours.", True),
    ("div-144-12", "144 / 12 = 12", True),
    ("mul-23-17", "23 * 17 = 391", True),
    ("leap-year-days", "A leap year has 366 days.", True),
    ("gold-symbol", "The chemical symbol for gold is Au.", True),
    ("capital-france", "Paris is the capital of France.", True),
    ("add-47-38", "*85*", True),
])
def test_the_contract_examples(question_id, reply, right):
    assert answer_set.judge(SET.by_id(question_id), reply) is right


def restatement(question: answer_set.Question) -> str:
    """The question's own quantities, as a reply restates them before its result."""
    return " and ".join(n for n in judge.question_facts(question.prompt)[1]) or "it"


def right_integer(question: answer_set.Question, rng: random.Random) -> str:
    answer = question.answer
    if rng.random() < 0.3:
        digits = rng.choice(UNICODE_DIGITS)
        answer = "".join(digits[int(c)] for c in answer)
    form = rng.choice(["{a}", "**{a}**", "\\boxed{{{a}}}", "The answer is {a}.", "{a} is the answer.",
                       "{r} is {a}.", "{r} = {a}", "It is {a}", "`{a}`", "$ {a} $"])
    text = form.format(a=answer, r=restatement(question))
    if rng.random() < 0.3:
        text = text.upper() if rng.random() < 0.5 else text.lower()
    return rng.choice(["", "<think>\n</think>\n\n"]) + text + rng.choice(["", "<|endoftext|>", "<|im_end|>", "\n"])


def corrupted(question: answer_set.Question, rng: random.Random) -> str:
    answer, words = question.answer, question.prompt.rstrip("?").split()
    kind = rng.choice(["repeat", "symbol", "append", "salad", "echo"])
    if kind == "repeat":
        return rng.choice([" ", ", ", "\n"]).join([answer] * rng.randint(2, 6))
    if kind == "symbol":
        return answer + rng.choice([" ✅", " 🤖", " ###", " @@", " <>", " ~", " ^", " |"]) * rng.randint(1, 3)
    if kind == "append":
        other = rng.choice([*judge.question_facts(question.prompt)[1], "7", "2024", answer])
        return f"{answer}{rng.choice([' ', ', ', '. '])}{other}"
    if kind == "salad":
        salad = [*words, answer]
        rng.shuffle(salad)
        return " ".join(salad)
    return f"{question.prompt} {answer} {rng.choice(words)}"


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), index=st.integers(min_value=0))
def test_right_phrasings_of_an_integer_answer_pass(seed, index):
    question = INTEGERS[index % len(INTEGERS)]
    reply = right_integer(question, random.Random(seed))
    assert answer_set.judge(question, reply), (question.id, reply)


@settings(max_examples=400, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), index=st.integers(min_value=0))
def test_corruptions_of_any_answer_fail(seed, index):
    questions = SET.every_question()
    question = questions[index % len(questions)]
    reply = corrupted(question, random.Random(seed))
    assert not answer_set.judge(question, reply), (question.id, reply)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), index=st.integers(min_value=0))
def test_right_phrasings_of_a_word_answer_pass(seed, index):
    question = WORDS[index % len(WORDS)]
    rng = random.Random(seed)
    answer = rng.choice([question.answer, question.answer.lower(), question.answer.upper()])
    reply = rng.choice(["{a}", "**{a}**", "It is {a}.", "The answer is {a}", "{a}."]).format(a=answer)
    assert answer_set.judge(question, reply + rng.choice(["", "<|endoftext|>"])), (question.id, reply)


@given(st.text(max_size=300))
def test_the_judge_never_raises(text):
    for question in SET.every_question():
        right, read_as = answer_set.read(question, text)
        assert not right or read_as is not None


# --- thinking replies: the final answer after the reasoning block is what is judged (judge.reasoning) -----------

START, END = judge.THINK_START, judge.THINK_END
# Reasoning text with tag fragments and tags themselves in odd places, never the closing tag (that would end it).
_PIECES = st.sampled_from([START, "<think", "think>", "</think", "/think>", "<", ">", "\n", " ", "85", "Paris",
                           "</thinking>", "<|im_end|>", "**", "="])
REASONING = st.lists(st.one_of(_PIECES, st.text(max_size=30)), max_size=12).map("".join).filter(
    lambda text: END not in text)


@settings(max_examples=300, deadline=None)
@given(thinking=REASONING, opened=st.booleans(), seed=st.integers(min_value=0, max_value=2**32 - 1),
       index=st.integers(min_value=0))
def test_reasoning_before_the_first_end_tag_never_changes_the_verdict(thinking, opened, seed, index):
    """Whatever the reasoning holds (nested or stray `<think>`, numbers, the answer itself, a wrong one), the verdict
    is the final answer's: a right answer stays right, a corrupted one stays wrong."""
    questions = SET.every_question()
    question = questions[index % len(questions)]
    rng = random.Random(seed)
    reply = right_integer(question, rng) if question.kind == "integer" else question.answer
    reply = reply.removeprefix(START + "\n" + END + "\n\n")  # its own empty block: a second block would be wrong
    wrong = corrupted(question, rng)
    block = (START if opened else "") + thinking + END + "\n\n"
    assert answer_set.judge(question, block + reply) is answer_set.judge(question, reply) is True, (question.id, block)
    assert not answer_set.judge(question, block + wrong)
    split = judge.reasoning(block + reply)
    assert split.thought and split.answer == "\n\n" + reply


@settings(max_examples=200, deadline=None)
@given(thinking=REASONING, index=st.integers(min_value=0))
def test_a_block_never_closed_has_no_answer(thinking, index):
    """`<think>` with no `</think>` anywhere: all reasoning (cut short, or opened where the answer belongs), even
    when the right answer is written inside it or right after it."""
    question = SET.every_question()[index % len(SET.every_question())]
    for reply in (START + thinking + " " + question.answer, question.answer + " " + START + thinking):
        assert judge.reasoning(reply).answer is None
        assert answer_set.read(question, reply) == (False, None)


@settings(max_examples=200, deadline=None)
@given(first=REASONING, second=REASONING, index=st.integers(min_value=0))
def test_a_second_block_after_the_answer_makes_it_wrong(first, second, index):
    """The split is at the first `</think>` (SGLang's parser): tags left in the answer are symbols there."""
    question = SET.every_question()[index % len(SET.every_question())]
    reply = f"{START}{first}{END}{question.answer} {START}{second}{END}"
    assert not answer_set.judge(question, reply)
    assert not answer_set.judge(question, f"{START}{first}{END}{START}{second}{END}{question.answer}")


@given(st.text(alphabet=st.characters(blacklist_characters="<"), max_size=200))
def test_a_reply_without_tags_is_all_answer(text):
    assert judge.reasoning(text) == judge.Thought(reasoning=None, answer=text)


def test_long_reasoning_is_read_but_a_huge_reply_is_not():
    question = SET.by_id("add-47-38")
    thinking = " ".join(["hmm"] * 2000)  # 8 KB: above the answer's bound, under the whole reply's
    assert answer_set.judge(question, f"{START}{thinking}{END}85")
    assert answer_set.read(question, "x" * (answer_set.MAX_REASONING_REPLY_CHARS + 1) + END + "85") == (False, None)


@pytest.mark.sglang
@settings(max_examples=300, deadline=None)
@given(text=st.lists(st.one_of(_PIECES, st.just(END), st.text(max_size=20)), max_size=10).map("".join))
def test_the_final_answer_is_what_sglangs_own_parser_calls_content(text):
    """Wherever the tags are, the answer judged is SGLang 0.5.23's `content` (deepseek-r1, non-streaming) whenever
    the reply closed a block; without `</think>` SGLang calls it all reasoning, and the judge reads an answer only
    when no `<think>` was opened either (raw text, `separate_reasoning: false`: a plain reply)."""
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    _, content = ReasoningParser("deepseek-r1", stream_reasoning=False).parse_non_stream(text)
    split = judge.reasoning(text)
    if END in text:
        assert split.answer == (content or "")
    else:
        assert split.answer == (None if START in text else text)
