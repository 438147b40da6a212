"""The simulated model answers short questions right (answers.py computes them from the question text), in the
requests a client sends; word problems, calibration prompts and everything else keep the pseudo-word output;
`answers-garbled` and `cold-prefill-garble` answer wrong, plausibly and deterministically, and give nothing away."""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkgate_sim import answers, faults, textgen, workload
from tests.plugins.simproc import Sim, profile_launch

INSTRUCTION = "Reply with only the answer: no words, no units, no explanation."
THINKING_OFF = {"chat_template_kwargs": {"enable_thinking": False}, "separate_reasoning": False}

# The brief's question shapes and their answers (computed by hand here, by answers.py in the simulator).
QUESTIONS = {
    "What is 47 plus 38?": "85",
    "What is 91 minus 46?": "45",
    "What is 23 times 17?": "391",
    "What is 144 divided by 12?": "12",
    "How many meters are in 3.5 kilometers?": "3500",
    "How many minutes are in 6 hours?": "360",
    "How many grams are in 2.25 kilograms?": "2250",
    "How many seconds are in 4 minutes?": "240",
    "How many days are in a leap year?": "366",
    "How many sides does a hexagon have?": "6",
    "What is the chemical symbol for gold?": "Au",
    "What is the capital of France?": "Paris",
}
LIST_QUESTION = "List the integers from 1 to 24 in increasing order, separated by commas."
LIST_ANSWER = ", ".join(str(n) for n in range(1, 25))

# sparkgate/evidence/calibration.py PROMPTS, copied as literals (the simulator reads nothing of the checker's).
CALIBRATION_PROMPTS = (
    "Question: A baker makes 24 rolls per tray and bakes 7 trays. She sells 150 rolls. How many are left? "
    "Answer step by step.",
    "Question: A train travels 180 km in 2.5 hours. At the same speed, how far does it go in 4 hours? "
    "Answer step by step.",
    "Question: Tom has three times as many marbles as Ann. Together they have 48. How many does Tom have? "
    "Answer step by step.",
    "Question: A tank holds 1200 litres and drains 35 litres per minute. How long until it holds 500 litres? "
    "Answer step by step.",
)
# Prompts of the other simulator tests (speed anchors, faults, API): pseudo-words, as before.
UNANSWERED = (
    *CALIBRATION_PROMPTS,
    "Question: what is 17 times 23? Answer step by step.",
    "Question: A shop sells 12 pens a day. How many pens does it sell in 9 days?",
    "Question: A train travels 180 km in 2.5 hours. How far in 4 hours?",
    "Question: Tom has three times as many marbles as Ann. Together they have 48. How many has Tom?",
    "Question: 2 + 2?",
    "What is 12 times 17? Answer step by step.",
    "Write a short essay about the sea.",
    "def add(a, b):",
    "How many days are in a fortnight-ish period?",
    "What is the capital of Atlantis?",
    "What is the chemical symbol for kryptonite?",
    "How many meters are in 3 hours?",
    "What is 5 divided by 0?",
    "hi",
    "",
)


def _expected(value: Fraction | Decimal | int) -> str:
    """The test's own formatting of a terminating result: an integer when whole, else the shortest decimal."""
    text = format(Decimal(value.numerator) / Decimal(value.denominator) if isinstance(value, Fraction) else Decimal(value), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


# ------------------------------------------------------------------------------------------ the recogniser
@pytest.mark.parametrize(("question", "expected"), [*QUESTIONS.items(), (LIST_QUESTION, LIST_ANSWER)])
def test_the_brief_questions_are_answered(question, expected):
    for text in (question, f"{question} {INSTRUCTION}", f"{INSTRUCTION} {question}", f"  {question}\n{INSTRUCTION}\n"):
        found = answers.answer(text)
        assert found is not None and found.text == expected, text
        assert " ".join(found.words).split() == list(found.words)  # one whitespace word per token


@pytest.mark.parametrize(("question", "expected"), [
    ("How many kilometers are in 3500 meters?", "3.5"),
    ("How many millimeters are in 2 centimeters?", "20"),
    ("How many centimetres are in a metre?", "100"),
    ("How many hours are in 2 days?", "48"),
    ("How many days are in 72 hours?", "3"),
    ("How many minutes are in 90 seconds?", "1.5"),
    ("How many kilograms are in 500 grams?", "0.5"),
    ("How many milliliters are in 1.5 liters?", "1500"),
    ("How many liters are in 250 milliliters?", "0.25"),
    ("How many seconds are in an hour?", "3600"),
    ("How many days are in a year?", "365"),
    ("How many days are in a week?", "7"),
    ("How many sides does a triangle have?", "3"),
    ("How many sides does a square have?", "4"),
    ("How many sides does a pentagon have?", "5"),
    ("How many sides does a heptagon have?", "7"),
    ("How many sides does an octagon have?", "8"),
    ("What is the chemical symbol for silver?", "Ag"),
    ("What is the chemical symbol for iron?", "Fe"),
    ("What is the capital of Japan?", "Tokyo"),
    ("What is the capital of Australia?", "Canberra"),
    ("What is the capital of India?", "New Delhi"),
    ("What is 10 divided by 4?", "2.5"),
    ("What is 0.1 plus 0.2?", "0.3"),
    ("What is 7 minus 12?", "-5"),
    ("What is 2 plus 3 times 4?", "14"),
    ("What is 1,000 times 3?", "3000"),
    ("What's 6 x 7?", "42"),
    ("What is 2 + 3?", "5"),
    ("List the integers from 5 to 1 in decreasing order, separated by commas.", "5, 4, 3, 2, 1"),
    ("List the integers from 3 to 3.", "3"),
])
def test_other_numbers_units_and_facts(question, expected):
    assert answers.answer(f"{question} {INSTRUCTION}").text == expected


@pytest.mark.parametrize("prompt", UNANSWERED)
def test_word_problems_and_other_prompts_are_no_questions(prompt):
    assert answers.answer(prompt) is None


def test_only_the_last_user_turn_of_a_rendered_chat_counts():
    chat = [{"role": "user", "content": "What is 2 plus 2?"}, {"role": "assistant", "content": "4"},
            {"role": "user", "content": f"What is 47 plus 38? {INSTRUCTION}"}]
    assert answers.answer(textgen.render_chat(chat, thinking=False)).text == "85"
    assert answers.answer(textgen.render_chat(chat[:2] + [{"role": "user", "content": "Thanks!"}])) is None


def _register(count: int = 100) -> tuple[str, dict[int, int]]:
    """A register of `count` lockers and their five-digit codes (this test's own, not the answer set's)."""
    codes = {100 + i: 10000 + (i * 7919) % 90000 for i in range(1, count + 1)}
    lines = [f"The parcel code of locker {locker} is {code}." for locker, code in codes.items()]
    return "Station parcel lockers, morning register.\n" + "\n".join(lines), codes


@pytest.mark.parametrize("locker", [101, 107, 150, 188, 200])
def test_a_planted_fact_is_recalled_from_anywhere_in_a_long_register(locker):
    register, codes = _register()
    assert len(register) > 4000
    found = answers.answer(f"{register}\n\nWhat is the parcel code of locker {locker}? {INSTRUCTION}")
    assert found.text == str(codes[locker])
    assert found.garbled() != found.words  # the garbling faults answer it wrong too


def test_a_fact_not_in_the_register_or_told_twice_differently_answers_nothing():
    register, _ = _register(10)
    assert answers.answer(f"{register}\nWhat is the parcel code of locker 999?") is None
    twice = register + "\nThe parcel code of locker 101 is 12345."
    assert answers.answer(f"{twice}\nWhat is the parcel code of locker 101?") is None


def test_an_earlier_turn_is_remembered_through_the_chat_and_the_rendered_prompt():
    chat = [{"role": "user", "content": "I just rented a locker. My locker number is 417 and my locker code is 5093."},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": f"What is my locker number plus 25? {INSTRUCTION}"}]
    assert answers.answer(chat[-1]["content"], context=chat[0]["content"]).text == "442"
    assert answers.answer(textgen.render_chat(chat, thinking=False)).text == "442"
    recall = chat[:2] + [{"role": "user", "content": "What is my locker code?"}]
    assert answers.answer(textgen.render_chat(recall)).text == "5093"
    assert answers.answer(chat[-1]["content"]) is None  # without the earlier turn there is nothing to add 25 to


@pytest.mark.parametrize(("problem", "expected"), [
    ("A baker bakes 7 trays of 24 rolls each. He sells 150 rolls. How many rolls does he have left?", "18"),
    ("Mia has 45 stickers. She buys 3 packs of 12 stickers each, then gives 20 stickers to her brother. "
     "How many stickers does Mia have now?", "61"),
    ("A train travels at 80 kilometers per hour for 3 hours, then at 60 kilometers per hour for 2 hours. "
     "How many kilometers does it travel in total?", "360"),
    ("Sam has 10 apples. He eats 3 apples, and gets 5 apples from a friend. How many apples does Sam have?", "12"),
])
def test_plain_word_problems_are_worked_out_step_by_step(problem, expected):
    assert answers.answer(f"{problem} {INSTRUCTION}").text == expected


@pytest.mark.parametrize("problem", [
    "Tom has three times as many marbles as Ann. Together they have 48. How many does Tom have?",
    "A baker bakes 7 trays of 24 rolls each. He sells most of them. How many rolls does he have left?",
    "Mia has 5 stickers. She gives 9 stickers to Ann. How many stickers does Mia have now?",  # below zero
    "A baker bakes 7 trays of 24 rolls each.",  # no question
    "How many rolls are there? A baker bakes 7 trays of 24 rolls each.",  # the question comes first
    "A baker bakes 7 trays of 24 rolls each. He sells 150 rolls. How many rolls did he sell?",  # not the total
    "Tom has 5 apples. How many stars does he have?",  # another thing asked about
    "Tom has 5 apples. He gives 2 apples to Anna. How many apples does Anna have?",  # not the subject
    "A train travels at 80 kilometers per hour for 3 hours. How many hours does it travel?",
    "Tom has 5 apples. He eats 2 bananas. How many apples does Tom have?",  # another thing counted
    "Mia has 45 stickers. Tom gives 20 stickers to her. How many stickers does Mia have now?",  # someone else acts
])

def test_word_problems_it_cannot_read_whole_are_not_answered(problem):
    assert answers.answer(problem) is None


def test_many_told_facts_are_read_in_bounded_time():
    """Two thousand "my ..." facts (one pattern for all of them, not one per fact) answer at once."""
    def name(i: int) -> str:
        return "".join(chr(97 + (i // 26**k) % 26) for k in range(3))

    told = "".join(f"My item {name(i)} is {i}. " for i in range(2000))
    assert answers.answer(f"{told}What is my item {name(1)} plus 1?").text == "2"


@settings(max_examples=300, deadline=None)
@given(a=st.integers(-10**6, 10**6), b=st.integers(-10**6, 10**6), op=st.sampled_from(["plus", "minus", "times"]))
def test_integer_arithmetic_property(a, b, op):
    want = {"plus": a + b, "minus": a - b, "times": a * b}[op]
    assert answers.answer(f"What is {a} {op} {b}? {INSTRUCTION}").text == str(want)


@settings(max_examples=300, deadline=None)
@given(a=st.decimals("-9999.99", "9999.99", places=2), b=st.decimals("0.01", "999.99", places=2),
       op=st.sampled_from(["plus", "minus", "times", "divided by"]))
def test_decimal_arithmetic_property(a, b, op):
    fa, fb = Fraction(a), Fraction(b)
    want = {"plus": fa + fb, "minus": fa - fb, "times": fa * fb, "divided by": fa / fb}[op]
    got = answers.answer(f"What is {a} {op} {b}?").text
    if _primes(want.denominator) <= {2, 5}:
        assert got == _expected(want)
    else:  # a non-terminating quotient: the float's shortest repr
        assert float(got) == float(want)


def _primes(n: int) -> set[int]:
    found, p = set(), 2
    while p * p <= n:
        while n % p == 0:
            found.add(p)
            n //= p
        p += 1
    return found | ({n} if n > 1 else set())


@settings(max_examples=200, deadline=None)
@given(q=st.integers(0, 10**5), b=st.integers(1, 999))
def test_whole_quotients_print_as_integers(q, b):
    assert answers.answer(f"What is {q * b} divided by {b}?").text == str(q)


@settings(max_examples=200, deadline=None)
@given(n=st.decimals("0", "5000", places=3), pair=st.sampled_from([
    ("meters", "kilometers", 1000), ("kilometers", "meters", Fraction(1, 1000)), ("grams", "kilograms", 1000),
    ("seconds", "hours", 3600), ("minutes", "days", 1440), ("milliliters", "liters", 1000), ("millimeters", "meters", 1000),
]))
def test_unit_conversion_property(n, pair):
    to, source, factor = pair
    assert answers.answer(f"How many {to} are in {n} {source}?").text == _expected(Fraction(n) * factor)


@settings(max_examples=200, deadline=None)
@given(a=st.integers(-50, 500), length=st.integers(1, 200))
def test_counting_property(a, length):
    b = a + length - 1
    found = answers.answer(f"List the integers from {a} to {b} in increasing order, separated by commas.")
    assert found.text == ", ".join(str(n) for n in range(a, b + 1)) and len(found.words) == length


@settings(max_examples=300, deadline=None)
@given(a=st.integers(0, 10**5), b=st.integers(0, 10**5), op=st.sampled_from(["plus", "minus", "times"]))
def test_garbled_numbers_are_wrong_plausible_and_deterministic(a, b, op):
    found = answers.answer(f"What is {a} {op} {b}?")
    wrong = found.garbled()
    assert wrong == answers.answer(f"What is {a} {op} {b}?").garbled()  # greedy: the same wrong answer
    assert len(wrong) == 1 and wrong[0] != found.words[0]
    right, bad = int(found.words[0]), int(wrong[0])
    digits_swapped = sorted(wrong[0]) == sorted(found.words[0])
    assert digits_swapped or abs(bad - right) <= 10  # a small slip, not noise


@pytest.mark.parametrize("question", [*QUESTIONS, LIST_QUESTION])
def test_every_garbled_answer_differs(question):
    found = answers.answer(question)
    wrong = found.garbled()
    assert wrong != found.words and wrong == answers.answer(question).garbled()
    if found.kind == answers.LIST:
        right_items = [w.rstrip(",") for w in found.words]
        wrong_items = [w.rstrip(",") for w in wrong]
        assert all(item.lstrip("-").isdigit() for item in wrong_items)
        assert abs(len(wrong_items) - len(right_items)) <= 1 and wrong[-1][-1] != ","
    if question.endswith("gold?"):
        assert wrong == ("Ag",)


# ------------------------------------------------------------------------------------------ through HTTP
def _start(tmp_path_factory, profile: str, faults_spec: str | None = None) -> Sim:
    argv, env = profile_launch(profile)
    env = {**env, "SPARKGATE_SIM_ADMIN": "1", **({"SPARKGATE_SIM_FAULTS": faults_spec} if faults_spec else {})}
    return Sim(argv, env, tmp_path_factory.mktemp("answers-logs")).start()


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """One healthy all-three engine (MTP on, so the speculative fields are there) for the read-only tests."""
    started = _start(tmp_path_factory, "all-three")
    try:
        yield started.wait_ready()
    finally:
        started.stop()


@pytest.fixture
def start(tmp_path_factory):
    """start(profile, faults) -> a ready engine of its own (fault tests change its state)."""
    sims: list[Sim] = []

    def run(profile: str = "all-three", faults_spec: str | None = None) -> Sim:
        started = _start(tmp_path_factory, profile, faults_spec)
        sims.append(started)
        return started.wait_ready()

    yield run
    for started in sims:
        started.stop()


def _model(sim: Sim) -> str:
    return sim.get("/v1/models").json()["data"][0]["id"]


def _body(sim: Sim, question: str, max_tokens: int = 32) -> dict:
    """The exact request the gate's answers stage sends."""
    return {"model": _model(sim), "messages": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
            "temperature": 0, "max_tokens": max_tokens, **THINKING_OFF}


def ask(sim: Sim, question: str, max_tokens: int | None = None) -> dict:
    budget = max_tokens if max_tokens is not None else (96 if question.startswith("List") else 32)
    response = sim.post("/v1/chat/completions", _body(sim, question, budget))
    assert response.status == 200, response.body
    return response.json()


def content(reply: dict) -> str:
    return reply["choices"][0]["message"]["content"]


def ask_streamed(sim: Sim, question: str) -> tuple[str, str | None, dict]:
    budget = 96 if question.startswith("List") else 32
    body = {**_body(sim, question, budget), "stream_options": {"include_usage": True}}
    events = [e for _, e in sim.stream("/v1/chat/completions", body) if e != "[DONE]"]
    text = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
    finish = next((c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]), None)
    return text, finish, events[-1]["usage"]


def assert_no_giveaway(sim: Sim, *surfaces: str) -> None:
    text = sim.log() + sim.stderr() + "".join(surfaces)
    for name in (faults.ANSWERS_GARBLED, faults.COLD_PREFILL_GARBLE):
        assert name not in text, name


@pytest.mark.parametrize(("question", "expected"), [*QUESTIONS.items(), (LIST_QUESTION, LIST_ANSWER)])
def test_chat_answers_right_then_stops(sim, question, expected):
    reply = ask(sim, question)
    assert content(reply) == expected
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"]["reasoning_content"] is None
    assert reply["usage"]["completion_tokens"] == len(expected.split())
    assert content(ask(sim, question)) == expected  # temperature 0: the same answer again


@pytest.mark.parametrize("question", [LIST_QUESTION, "What is 23 times 17?", "What is the capital of France?"])
def test_streamed_chat_answers_the_same(sim, question):
    whole = ask(sim, question)
    text, finish, usage = ask_streamed(sim, question)
    assert text == content(whole) and finish == "stop"
    assert usage["completion_tokens"] == len(text.split()) == whole["usage"]["completion_tokens"]


def test_generate_and_completions_answer_too(sim):
    out = sim.post("/generate", {"text": f"What is 91 minus 46? {INSTRUCTION}",
                                 "sampling_params": {"temperature": 0, "max_new_tokens": 32}}).json()
    assert out["text"].strip() == "45" and out["meta_info"]["finish_reason"] == {"type": "stop", "matched": 1}
    assert out["meta_info"]["completion_tokens"] == 1 == len(out["output_ids"])
    listed = sim.post("/generate", {"text": LIST_QUESTION, "sampling_params": {"temperature": 0, "max_new_tokens": 96}}).json()
    assert listed["text"].strip() == LIST_ANSWER and listed["meta_info"]["completion_tokens"] == 24
    assert listed["meta_info"]["spec_accept_length"] > 2.0  # MTP runs as for any text
    streamed = [e for _, e in sim.stream("/generate", {"text": LIST_QUESTION, "sampling_params": {"temperature": 0, "max_new_tokens": 96}})
                if e != "[DONE]"]
    assert streamed[-1]["text"] == listed["text"] and streamed[-1]["output_ids"] == listed["output_ids"]
    completion = sim.post("/v1/completions", {"model": _model(sim), "prompt": "How many sides does a hexagon have?",
                                              "temperature": 0}).json()
    assert completion["choices"][0]["text"].strip() == "6" and completion["choices"][0]["finish_reason"] == "stop"


def test_the_budget_cuts_an_answer(sim):
    cut = ask(sim, LIST_QUESTION, max_tokens=10)
    assert content(cut) == "1, 2, 3, 4, 5, 6, 7, 8, 9, 10," and cut["choices"][0]["finish_reason"] == "length"
    assert cut["usage"]["completion_tokens"] == 10
    exact = ask(sim, LIST_QUESTION, max_tokens=24)  # as long as the budget: the length check comes first
    assert content(exact) == LIST_ANSWER and exact["choices"][0]["finish_reason"] == "length"


def test_thinking_on_answers_after_the_reasoning(sim):
    body = {"model": _model(sim), "messages": [{"role": "user", "content": f"What is 23 times 17? {INSTRUCTION}"}],
            "temperature": 0}
    reply = sim.post("/v1/chat/completions", body).json()
    message = reply["choices"][0]["message"]
    assert message["content"].strip() == "391" and len(message["reasoning_content"].split()) >= 24
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert reply["usage"]["completion_tokens"] == len(message["reasoning_content"].split()) + 2 + 1
    raw = sim.post("/v1/chat/completions", {**body, "separate_reasoning": False}).json()["choices"][0]["message"]["content"]
    assert raw.startswith("<think>") and raw.split("</think>")[1].strip() == "391"


def _pseudo_words(prompt_key: str, budget: int) -> str:
    """Today's output for a prompt the model does not answer (computed from textgen, as before answers.py)."""
    seed = textgen.request_seed(prompt_key, {"temperature": 0})
    thinks, code = textgen.model_thinks(prompt_key), workload.classify(prompt_key) == workload.CODE
    return textgen.render_output(textgen.output_token(seed, i, thinks, code)[0] for i in range(budget))


@pytest.mark.parametrize("prompt", [*CALIBRATION_PROMPTS, "Write a short essay about the sea.", "def add(a, b):"])
def test_calibration_and_other_prompts_keep_their_pseudo_words(sim, prompt):
    for ignore_eos in (True, False):
        sampling = {"temperature": 0, "max_new_tokens": 48, **({"ignore_eos": True} if ignore_eos else {})}
        out = sim.post("/generate", {"text": prompt, "sampling_params": sampling}).json()
        assert out["text"] == _pseudo_words(prompt, 48)
        assert out["meta_info"]["completion_tokens"] == 48 == len(out["text"].split())
        assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 48}
    messages = [{"role": "user", "content": prompt}]
    chat = sim.post("/v1/chat/completions", {"model": _model(sim), "messages": messages, "temperature": 0,
                                             "max_tokens": 20, **THINKING_OFF}).json()
    assert content(chat) == _pseudo_words(textgen.render_chat(messages, thinking=False), 20).lstrip()


def test_ignore_eos_decodes_the_whole_budget_even_for_a_question(sim):
    prompt = f"What is 47 plus 38? {INSTRUCTION}"
    out = sim.post("/generate", {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": 40,
                                                                     "ignore_eos": True}}).json()
    assert out["meta_info"]["completion_tokens"] == 40 and out["meta_info"]["finish_reason"]["type"] == "length"
    assert out["text"] == _pseudo_words(prompt, 40)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=st.integers(0, 10**6), b=st.integers(0, 10**6), op=st.sampled_from(["plus", "minus", "times"]))
def test_arithmetic_through_http_property(sim, a, b, op):
    want = {"plus": a + b, "minus": a - b, "times": a * b}[op]
    reply = ask(sim, f"What is {a} {op} {b}?")
    assert content(reply) == str(want) and reply["choices"][0]["finish_reason"] == "stop"


# ------------------------------------------------------------------------------------------ faults
SPEC_KEYS = ("completion_tokens", "finish_reason", "spec_accept_length", "spec_verify_ct", "spec_num_correct_drafts",
             "spec_correct_drafts_histogram")


def test_answers_garbled_at_runtime_through_the_admin_endpoint(start):
    sim = start("all-three")
    long_prompt = {"text": "Write a short essay about the sea.", "sampling_params": {"temperature": 0, "max_new_tokens": 60}}
    healthy = sim.post("/generate", long_prompt).json()
    assert content(ask(sim, "What is 47 plus 38?")) == "85"

    state = sim.post("/admin/faults", {"add": [faults.ANSWERS_GARBLED]}).json()
    assert state["active"] == [faults.ANSWERS_GARBLED] and state["pending_restart"] == []  # runtime: at once
    replies = {}
    for question, right in [*QUESTIONS.items(), (LIST_QUESTION, LIST_ANSWER)]:
        wrong = content(ask(sim, question))
        assert wrong != right and wrong == content(ask(sim, question)), question  # wrong the same way each time
        streamed, finish, _ = ask_streamed(sim, question)
        assert streamed == wrong and finish == "stop"
        replies[question] = wrong
    assert replies["What is the chemical symbol for gold?"] == "Ag"
    assert replies["What is 47 plus 38?"].lstrip("-").isdigit()  # a plausible number, not noise
    garbled_list = sim.post("/generate", {"text": LIST_QUESTION, "sampling_params": {"temperature": 0, "max_new_tokens": 96}}).json()
    assert garbled_list["meta_info"]["spec_accept_length"] > 2.0  # accept length and speed stay healthy
    during = sim.post("/generate", long_prompt).json()  # a prompt that is no question: nothing changes
    assert during["text"] == healthy["text"] and during["output_ids"] == healthy["output_ids"]
    assert {k: during["meta_info"][k] for k in SPEC_KEYS} == {k: healthy["meta_info"][k] for k in SPEC_KEYS}

    sim.post("/admin/faults", {"remove": [faults.ANSWERS_GARBLED]})
    assert content(ask(sim, "What is 47 plus 38?")) == "85"
    assert_no_giveaway(sim, json.dumps(replies), json.dumps(sim.server_info()))


def test_cold_prefill_garble_garbles_only_the_first_request_after_ready(start):
    sim = start("all-three", faults.COLD_PREFILL_GARBLE)
    # Health polls, info routes and the startup's own warmup do not count as the first request.
    for path in ("/health", "/health_generate", "/server_info", "/model_info", "/v1/models"):
        assert sim.get(path).status == 200, path
    first = ask(sim, LIST_QUESTION)
    assert content(first) != LIST_ANSWER and first["choices"][0]["finish_reason"] == "stop"
    assert first["usage"]["completion_tokens"] == len(content(first).split())
    assert content(ask(sim, LIST_QUESTION)) == LIST_ANSWER  # warm: right
    assert all(content(ask(sim, q)) == a for q, a in QUESTIONS.items())
    assert sim.get("/admin/faults").json()["in_effect_since_start"] == [faults.COLD_PREFILL_GARBLE]

    assert sim.post("/admin/restart", {}).status == 200
    sim.wait_ready()
    again = ask(sim, LIST_QUESTION)
    assert content(again) == content(first)  # re-armed, and wrong the same way (greedy)
    assert content(ask(sim, LIST_QUESTION)) == LIST_ANSWER

    assert sim.post("/admin/restart", {}).status == 200
    sim.wait_ready()
    plain = {"text": "Write a short essay about the sea.", "sampling_params": {"temperature": 0, "max_new_tokens": 20}}
    assert sim.post("/generate", plain).json()["text"] == _pseudo_words(plain["text"], 20)  # consumed, words unchanged
    assert content(ask(sim, "What is 23 times 17?")) == "391"
    assert_no_giveaway(sim, json.dumps(first), json.dumps(sim.server_info()))


def test_cold_prefill_garble_set_at_runtime_waits_for_a_restart(start):
    sim = start("baseline")
    state = sim.post("/admin/faults", {"add": [faults.COLD_PREFILL_GARBLE]}).json()
    assert state["pending_restart"] == [faults.COLD_PREFILL_GARBLE]
    assert content(ask(sim, "What is 144 divided by 12?")) == "12"  # load-time: not this lifetime
    sim.post("/admin/restart", {})
    sim.wait_ready()
    assert content(ask(sim, "What is 144 divided by 12?")) != "12"
    assert content(ask(sim, "What is 144 divided by 12?")) == "12"


def test_chat_logprobs_come_in_openais_shape_and_are_greedy(sim):
    body = {**_body(sim, "What is 23 times 17?"), "logprobs": True, "top_logprobs": 2}
    first, again = (sim.post("/v1/chat/completions", body).json() for _ in range(2))
    content_logprobs = first["choices"][0]["logprobs"]["content"]
    assert [t["token"] for t in content_logprobs] == ["391"]
    [token] = content_logprobs
    assert -0.07 <= token["logprob"] < 0 and token["bytes"] == list(b"391")
    chosen, runner_up = token["top_logprobs"]
    assert chosen["token"] == "391" and runner_up["logprob"] < token["logprob"] - 3  # an answer is near-certain
    assert again["choices"][0]["logprobs"] == first["choices"][0]["logprobs"]
    plain = sim.post("/v1/chat/completions", _body(sim, "What is 23 times 17?")).json()
    assert plain["choices"][0]["logprobs"] is None


def test_a_mis_scaled_fp8_head_keeps_every_answer_and_flattens_every_logprob(start):
    healthy, off = start("all-three"), start("all-three", "fp8-head-scale-off")
    for question, expected in [*list(QUESTIONS.items())[:3], (LIST_QUESTION, LIST_ANSWER)]:
        body = {**_body(healthy, question, 96), "logprobs": True, "top_logprobs": 2}
        ok, bad = (s.post("/v1/chat/completions", body).json()["choices"][0] for s in (healthy, off))
        assert ok["message"]["content"] == bad["message"]["content"] == expected
        deltas = [a["logprob"] - b["logprob"] for a, b in zip(ok["logprobs"]["content"], bad["logprobs"]["content"], strict=True)]
        assert min(deltas) > 2.0
    assert "scale" not in off.log() + off.stderr()
