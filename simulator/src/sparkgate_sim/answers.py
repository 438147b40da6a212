"""Short questions the simulated model answers right, computed from the question text itself.

Its own parsers and fact table, nothing from the checker. The shapes, where they are looked for and what is no
question: docs/simulator.md, "Questions the model answers". `garbled()` is the plausible wrong answer of the
answer-corrupting faults (docs/simulator.md, "Faults", `answers-garbled`).
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from fractions import Fraction

MAX_LIST = 10_000  # a longer counting request is not answered (the budget would cut it anyway)

NUMBER = "number"
WORD = "word"
LIST = "list"


@dataclass(frozen=True)
class Answer:
    kind: str  # NUMBER | WORD | LIST
    words: tuple[str, ...]  # the output tokens of the right answer
    key: str  # the normalized question (seeds the wrong answer)
    decoy: tuple[str, ...] = ()  # WORD: the plausible wrong answer

    @property
    def text(self) -> str:
        return " ".join(self.words)

    def garbled(self) -> tuple[str, ...]:
        """The plausible wrong answer (deterministic: seeded by the question)."""
        h = _hash(self.key)
        if self.kind == WORD:
            return self.decoy
        if self.kind == NUMBER:
            return (_wrong_number(self.words[0], h),)
        return _wrong_list(self.words, h)


# ---------------------------------------------------------------------------------------------- text
_ROLE = re.compile(r"<role:(\w+)>")
_TAGS = re.compile(r"</?think>")
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+|\n+")
_WORKED_LABEL = re.compile(r"\s*question\s*:", re.IGNORECASE)
_STEP_BY_STEP = re.compile(r"step[ -]by[ -]step", re.IGNORECASE)


def conversation(prompt: str) -> tuple[str, str]:
    """(the last user turn, the turns before it) of a rendered chat prompt; (the prompt, "") otherwise."""
    parts = _ROLE.split(prompt)
    if len(parts) == 1:  # [before, role, content, role, content, ...]
        return _TAGS.sub(" ", prompt), ""
    turns = [(parts[i], parts[i + 1]) for i in range(1, len(parts) - 1, 2)]
    last = max((i for i, (role, _) in enumerate(turns) if role == "user"), default=None)
    if last is None:
        return "", ""
    return _TAGS.sub(" ", turns[last][1]), _TAGS.sub(" ", "\n".join(content for _, content in turns[:last]))


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def _normalize(sentence: str) -> str:
    sentence = sentence.strip().replace("\u2019", "'").replace("\u2212", "-")
    return re.sub(r"\s+", " ", sentence).strip().lower()


def worked_answer_requested(text: str) -> bool:
    """A prompt in the GSM8K shape (`Question: ...`) or one that asks for the working ("step by step"): the
    model writes a worked solution (the arithmetic workload of the speed anchors), not a short answer."""
    return _WORKED_LABEL.match(text) is not None or _STEP_BY_STEP.search(text) is not None


def answer(text: str | None, context: str = "") -> Answer | None:
    """The answer to the last recognised question in `text` (a prompt or a message), or None. `context`: what
    the conversation told the model before (earlier turns), where facts are looked for too."""
    if not text:
        return None
    text, earlier = conversation(text)
    if worked_answer_requested(text):
        return None
    told = _Told.read("\n".join(part for part in (context, earlier, text) if part))
    found = None
    for sentence in sentences(text):
        key = _normalize(sentence)
        result = told.recall(key)
        key = told.substituted(key)
        for parse in _PARSERS:
            if result is not None:
                break
            result = parse(key)
        if result is not None:
            found = result
    return found if found is not None else _word_problem(text)


def _hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big")


# ---------------------------------------------------------------------------------------------- numbers
_NUM = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+"
_END = r"\s*[?.!]?"


def _value(text: str) -> Fraction:
    return Fraction(text.replace(",", ""))  # Fraction parses decimals exactly ("3.5" -> 7/2)


def format_number(value: Fraction) -> str:
    """A whole number as an integer, any other in its shortest decimal form."""
    if value.denominator == 1:
        return str(value.numerator)
    denominator, twos, fives = value.denominator, 0, 0
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    if denominator != 1:  # non-terminating: what float arithmetic prints
        return repr(float(value))
    places = max(twos, fives)
    scaled = abs(value) * 10**places
    digits = str(scaled.numerator).rjust(places + 1, "0")
    whole, frac = digits[:-places], digits[-places:].rstrip("0")
    return ("-" if value < 0 else "") + whole + ("." + frac if frac else "")


def _number_answer(value: Fraction, key: str) -> Answer:
    return Answer(NUMBER, (format_number(value),), key)


# ---------------------------------------------------------------------------------------------- arithmetic
_OPS = {
    "plus": "+", "+": "+", "added to": "+",
    "minus": "-", "-": "-",
    "times": "*", "multiplied by": "*", "x": "*", "×": "*", "*": "*",
    "divided by": "/", "over": "/", "/": "/", "÷": "/",
}
_OP = "|".join(re.escape(op) for op in sorted(_OPS, key=len, reverse=True))
_ASK = r"(?:what is|what's|whats|how much is|calculate|compute|evaluate|work out)"
_EXPR = re.compile(rf"{_ASK}\s+(?P<expr>(?:{_NUM})(?:\s*(?:{_OP})\s*(?:{_NUM}))+)\s*(?:=\s*)?{_END}")
_NUMBER_TOKEN = re.compile(rf"\s*({_NUM})")
_OP_TOKEN = re.compile(rf"\s*({_OP})")
_PAIR = re.compile(
    rf"{_ASK}\s+the\s+(?P<what>sum|product|difference|quotient)\s+(?:of|between)\s+(?P<a>{_NUM})\s+and\s+(?P<b>{_NUM}){_END}"
)


def _tokens(expr: str) -> list[str]:
    """Alternating numbers and operators; a sign after an operator belongs to the number."""
    out, pos, want_number = [], 0, True
    while pos < len(expr):
        match = (_NUMBER_TOKEN if want_number else _OP_TOKEN).match(expr, pos)
        if match is None:
            if expr[pos:].strip():
                raise ValueError(expr)
            break
        out.append(match.group(1))
        pos, want_number = match.end(), not want_number
    if len(out) % 2 == 0:
        raise ValueError(expr)
    return out


def _evaluate(tokens: list[str]) -> Fraction | None:
    """Left to right, `*` and `/` before `+` and `-`; None on a division by zero."""
    terms: list[Fraction] = [_value(tokens[0])]
    signs: list[str] = []
    for op_word, number in zip(tokens[1::2], tokens[2::2], strict=True):
        op, value = _OPS[op_word], _value(number)
        if op in "*/":
            if op == "/" and value == 0:
                return None
            terms[-1] = terms[-1] * value if op == "*" else terms[-1] / value
        else:
            signs.append(op)
            terms.append(value)
    total = terms[0]
    for sign, term in zip(signs, terms[1:], strict=True):
        total = total + term if sign == "+" else total - term
    return total


def _arithmetic(key: str) -> Answer | None:
    match = _EXPR.fullmatch(key)
    if match is not None:
        try:
            tokens = _tokens(match.group("expr"))
        except ValueError:
            return None
        value = _evaluate(tokens)
        return None if value is None else _number_answer(value, key)
    match = _PAIR.fullmatch(key)
    if match is None:
        return None
    a, b, what = _value(match.group("a")), _value(match.group("b")), match.group("what")
    if what == "quotient" and b == 0:
        return None
    value = {"sum": a + b, "product": a * b, "difference": a - b}.get(what)
    return _number_answer(value if value is not None else a / b, key)


# ---------------------------------------------------------------------------------------------- units
_UNIT_GROUPS: dict[str, dict[tuple[str, ...], Fraction]] = {
    "length": {
        ("meter", "meters", "metre", "metres", "m"): Fraction(1),
        ("kilometer", "kilometers", "kilometre", "kilometres", "km"): Fraction(1000),
        ("centimeter", "centimeters", "centimetre", "centimetres", "cm"): Fraction(1, 100),
        ("millimeter", "millimeters", "millimetre", "millimetres", "mm"): Fraction(1, 1000),
    },
    "time": {
        ("second", "seconds", "sec", "secs", "s"): Fraction(1),
        ("minute", "minutes", "min", "mins"): Fraction(60),
        ("hour", "hours", "hr", "hrs", "h"): Fraction(3600),
        ("day", "days"): Fraction(86400),
        ("week", "weeks"): Fraction(7 * 86400),
    },
    "mass": {
        ("gram", "grams", "gramme", "grammes", "g"): Fraction(1),
        ("kilogram", "kilograms", "kilogramme", "kilogrammes", "kg"): Fraction(1000),
        ("milligram", "milligrams", "mg"): Fraction(1, 1000),
    },
    "volume": {
        ("milliliter", "milliliters", "millilitre", "millilitres", "ml"): Fraction(1),
        ("liter", "liters", "litre", "litres", "l"): Fraction(1000),
    },
}
UNITS = {name: (dimension, factor)
         for dimension, units in _UNIT_GROUPS.items() for names, factor in units.items() for name in names}
_UNIT = r"[a-z]+"
_AMOUNT = rf"(?:{_NUM}|an|a|one)"
_IN = r"(?:are|is)\s+(?:there\s+)?in"
_UNIT_QUESTIONS = (
    re.compile(rf"how many (?P<to>{_UNIT}) {_IN} (?P<n>{_AMOUNT}) (?P<from>{_UNIT}){_END}"),
    re.compile(rf"how many (?P<to>{_UNIT}) (?:is|are|make|makes|equals?|in) (?P<n>{_AMOUNT}) (?P<from>{_UNIT}){_END}"),
    re.compile(rf"convert (?P<n>{_AMOUNT}) (?P<from>{_UNIT}) (?:to|into|in) (?P<to>{_UNIT}){_END}"),
    re.compile(rf"(?P<n>{_AMOUNT}) (?P<from>{_UNIT}) (?:is|are|equals?) how many (?P<to>{_UNIT}){_END}"),
)


def _amount(text: str) -> Fraction:
    return Fraction(1) if text in ("a", "an", "one") else _value(text)


def _conversion(key: str) -> Answer | None:
    for pattern in _UNIT_QUESTIONS:
        match = pattern.fullmatch(key)
        if match is None:
            continue
        source, target = UNITS.get(match.group("from")), UNITS.get(match.group("to"))
        if source is None or target is None or source[0] != target[0]:
            return None
        return _number_answer(_amount(match.group("n")) * source[1] / target[1], key)
    return None


# ---------------------------------------------------------------------------------------------- facts
# (what is counted, in what) -> how many; (thing) -> sides.
COUNTS = {
    ("days", "year"): 365, ("days", "leap year"): 366, ("days", "common year"): 365, ("days", "non-leap year"): 365,
    ("months", "year"): 12, ("weeks", "year"): 52, ("hours", "day"): 24, ("days", "week"): 7,
    ("minutes", "hour"): 60, ("seconds", "minute"): 60,
}
SIDES = {
    "triangle": 3, "square": 4, "rectangle": 4, "rhombus": 4, "quadrilateral": 4, "pentagon": 5, "hexagon": 6,
    "heptagon": 7, "septagon": 7, "octagon": 8, "nonagon": 9, "enneagon": 9, "decagon": 10, "hendecagon": 11,
    "undecagon": 11, "dodecagon": 12,
}
# element -> (symbol, a plausible wrong symbol)
SYMBOLS = {
    "gold": ("Au", "Ag"), "silver": ("Ag", "Au"), "iron": ("Fe", "Ir"), "copper": ("Cu", "Co"),
    "sodium": ("Na", "S"), "potassium": ("K", "P"), "lead": ("Pb", "Pd"), "mercury": ("Hg", "Mg"),
    "tin": ("Sn", "Ti"), "oxygen": ("O", "Os"), "hydrogen": ("H", "He"), "helium": ("He", "H"),
    "carbon": ("C", "Ca"), "nitrogen": ("N", "Ni"), "calcium": ("Ca", "C"), "zinc": ("Zn", "Zr"),
}
# country -> (capital, a plausible wrong city)
CAPITALS = {
    "france": ("Paris", "Lyon"), "germany": ("Berlin", "Munich"), "italy": ("Rome", "Milan"),
    "spain": ("Madrid", "Barcelona"), "portugal": ("Lisbon", "Porto"), "japan": ("Tokyo", "Kyoto"),
    "china": ("Beijing", "Shanghai"), "canada": ("Ottawa", "Toronto"), "australia": ("Canberra", "Sydney"),
    "egypt": ("Cairo", "Alexandria"), "united kingdom": ("London", "Manchester"), "uk": ("London", "Manchester"),
    "england": ("London", "Manchester"), "russia": ("Moscow", "Saint Petersburg"), "brazil": ("Brasília", "Rio de Janeiro"),
    "india": ("New Delhi", "Mumbai"), "turkey": ("Ankara", "Istanbul"), "switzerland": ("Bern", "Zurich"),
    "netherlands": ("Amsterdam", "Rotterdam"), "greece": ("Athens", "Thessaloniki"), "norway": ("Oslo", "Bergen"),
    "sweden": ("Stockholm", "Gothenburg"), "poland": ("Warsaw", "Krakow"), "kenya": ("Nairobi", "Mombasa"),
}
_A = r"(?:an?|one|the)\s+"
_COUNT_QUESTIONS = (
    re.compile(rf"how many (?P<what>[a-z]+) {_IN} {_A}(?P<thing>[a-z -]+?){_END}"),
    re.compile(rf"how many (?P<what>[a-z]+) (?:does|do) {_A}(?P<thing>[a-z -]+?) have{_END}"),
    re.compile(rf"how many (?P<what>[a-z]+) (?:has|have) {_A}(?P<thing>[a-z -]+?)(?: got)?{_END}"),
    re.compile(rf"how many (?P<what>[a-z]+) (?:are\s+)?(?:there\s+)?(?:in|on) {_A}(?P<thing>[a-z -]+?){_END}"),
)
_POLYGON_PARTS = ("sides", "edges", "corners", "vertices", "angles")
_SYMBOL_QUESTIONS = (
    re.compile(rf"what(?: is|'s) the (?:chemical |atomic )?symbol (?:for|of) (?:the element )?(?P<x>[a-z]+){_END}"),
    re.compile(rf"what(?: is|'s) (?:the chemical symbol of |the symbol of )?(?P<x>[a-z]+)'s (?:chemical )?symbol{_END}"),
    re.compile(rf"which (?:chemical )?symbol (?:does|do) (?P<x>[a-z]+) have{_END}"),
)
_CAPITAL_QUESTIONS = (
    re.compile(rf"what(?: is|'s) the capital(?: city)? of (?:the )?(?P<x>[a-z ]+?){_END}"),
    re.compile(rf"(?:what|which) city is the capital of (?:the )?(?P<x>[a-z ]+?){_END}"),
    re.compile(rf"what(?: is|'s) (?:the )?(?P<x>[a-z ]+?)'s capital(?: city)?{_END}"),
)


def _count_fact(key: str) -> Answer | None:
    for pattern in _COUNT_QUESTIONS:
        match = pattern.fullmatch(key)
        if match is None:
            continue
        what, thing = match.group("what"), match.group("thing").strip()
        if what in _POLYGON_PARTS and thing in SIDES:
            return _number_answer(Fraction(SIDES[thing]), key)
        if (what, thing) in COUNTS:
            return _number_answer(Fraction(COUNTS[what, thing]), key)
    return None


def _symbol(key: str) -> Answer | None:
    for pattern in _SYMBOL_QUESTIONS:
        match = pattern.fullmatch(key)
        if match is not None and match.group("x") in SYMBOLS:
            right, wrong = SYMBOLS[match.group("x")]
            return Answer(WORD, (right,), key, (wrong,))
    return None


def _capital(key: str) -> Answer | None:
    for pattern in _CAPITAL_QUESTIONS:
        match = pattern.fullmatch(key)
        if match is not None and match.group("x").strip() in CAPITALS:
            right, wrong = CAPITALS[match.group("x").strip()]
            return Answer(WORD, tuple(right.split()), key, tuple(wrong.split()))
    return None


# ---------------------------------------------------------------------------------------------- counting
_INT = r"[-+]?\d+"
_LIST = re.compile(
    rf"(?:please )?(?:list|write(?: out)?|write down|give|print|output|count)(?: me)?(?: all)?(?: of)?(?: the)?"
    rf"(?: (?:integers|whole numbers|numbers|natural numbers|counting numbers))?"
    rf" from (?P<a>{_INT}) (?:to|through|up to|down to) (?P<b>{_INT})"
    rf"(?P<tail>(?:,? (?:inclusive|in (?:increasing|ascending|decreasing|descending|reverse|numerical) order"
    rf"|separated by (?:commas?|a comma)(?: and (?:a )?spaces?)?|comma[- ]separated|as a comma[- ]separated list))*)"
    rf"{_END}"
)


def _counting(key: str) -> Answer | None:
    match = _LIST.fullmatch(key)
    if match is None:
        return None
    a, b, tail = int(match.group("a")), int(match.group("b")), match.group("tail")
    if abs(b - a) + 1 > MAX_LIST:
        return None
    if any(word in tail for word in ("decreasing", "descending", "reverse")):
        numbers = list(range(max(a, b), min(a, b) - 1, -1))
    elif any(word in tail for word in ("increasing", "ascending", "numerical")):
        numbers = list(range(min(a, b), max(a, b) + 1))
    else:
        numbers = list(range(a, b + 1)) if a <= b else list(range(a, b - 1, -1))
    return Answer(LIST, _list_words([str(n) for n in numbers]), key)


def _list_words(items: list[str]) -> tuple[str, ...]:
    """`1, 2, 3` as tokens: every item but the last carries its comma."""
    return tuple(item + "," for item in items[:-1]) + tuple(items[-1:])


_PARSERS = (_arithmetic, _conversion, _count_fact, _symbol, _capital, _counting)


# ---------------------------------------------------------------------------------------------- told facts
_FACT = re.compile(rf"the (?P<attr>[a-z][a-z ]*?) of (?P<entity>[a-z]+ \d+) is (?P<value>{_NUM})[.!]?")
_MINE = re.compile(rf"my (?P<attr>[a-z][a-z ]*?) is (?P<value>{_NUM})[.!]?")
_CLAUSES = re.compile(r",? and |, ")
_RECALL = re.compile(rf"what(?: is|'s) the (?P<attr>[a-z][a-z ]*?) of (?P<entity>[a-z]+ \d+){_END}")
_RECALL_MINE = re.compile(rf"what(?: is|'s) my (?P<attr>[a-z][a-z ]*?){_END}")
_AMBIGUOUS = "ambiguous"
MAX_TOLD_SENTENCES = 2000  # a longer text's later facts are not read (a register of the answer set has 101)


@dataclass
class _Told:
    """The facts a text states: "the <attr> of <entity> is <n>" and "my <attr> is <n>"; a fact stated with two
    values is ambiguous and answers nothing."""

    facts: dict[tuple[str, str], str]
    mine: dict[str, str]

    @classmethod
    def read(cls, text: str) -> _Told:
        facts: dict[tuple[str, str], str] = {}
        mine: dict[str, str] = {}
        for sentence in sentences(text)[:MAX_TOLD_SENTENCES]:
            key = _normalize(sentence)
            match = _FACT.fullmatch(key)
            if match is not None:
                _note(facts, (match.group("attr"), match.group("entity")), match.group("value"))
            for clause in _CLAUSES.split(key):
                match = _MINE.fullmatch(clause)
                if match is not None:
                    _note(mine, match.group("attr"), match.group("value"))
        return cls(facts, mine)

    def substituted(self, key: str) -> str:
        """`my locker number` read as the number it was told to be (longest attribute first, one pattern)."""
        if "my " not in key or self.pattern is None:
            return key
        return self.pattern.sub(lambda m: self.mine[m.group(1)], key)

    @functools.cached_property
    def pattern(self) -> re.Pattern | None:
        told = sorted((attr for attr, value in self.mine.items() if value != _AMBIGUOUS), key=len, reverse=True)
        return re.compile(rf"\bmy ({'|'.join(re.escape(attr) for attr in told)})\b") if told else None

    def recall(self, key: str) -> Answer | None:
        match = _RECALL.fullmatch(key)
        value = self.facts.get((match.group("attr"), match.group("entity"))) if match else None
        if value is None:
            match = _RECALL_MINE.fullmatch(key)
            value = self.mine.get(match.group("attr")) if match else None
        if value is None or value == _AMBIGUOUS:
            return None
        return _number_answer(_value(value), key)


def _note(table: dict, key, value: str) -> None:
    table[key] = value if table.get(key, value) == value else _AMBIGUOUS


# ---------------------------------------------------------------------------------------------- word problems
_ADDS = frozenset({"has", "have", "bakes", "makes", "buys", "gets", "collects", "picks", "earns", "receives",
                   "finds", "travels", "drives", "walks", "rides", "reads", "writes"})
_SUBTRACTS = frozenset({"sells", "gives", "eats", "uses", "loses", "spends", "donates"})
_STEPS = re.compile(r",? then |, and |, ")
_EACH = re.compile(r"(?P<n>\d+) [a-z]+ of (?P<m>\d+) (?P<thing>[a-z]+) each")
_RATE = re.compile(r"at (?P<n>\d+) (?P<what>[a-z]+) (?:per|an|a) (?P<per>hour|day|minute) for (?P<m>\d+) "
                   r"(?P<unit>hours|days|minutes)")
_COUNTED = re.compile(r"(?P<n>\d+) (?P<thing>[a-z]+)(?: (?:to|from|for|at|on) [a-z' ]+)?")
_HOW_MANY = re.compile(r"how many (?P<noun>[a-z]+) (?:does|do) (?P<who>[a-z]+) (?:have|has|travel|drive|walk|ride)"
                       r"(?: left| now| in total| altogether)?\?")
_PRONOUNS = frozenset({"he", "she", "it", "they"})


def _amount_of(words: str) -> tuple[int, str] | None:
    """(the amount, what it counts) of a clause's object."""
    match = _EACH.fullmatch(words)
    if match is not None:
        return int(match.group("n")) * int(match.group("m")), match.group("thing")
    match = _RATE.fullmatch(words)
    if match is not None and match.group("unit").startswith(match.group("per")):
        return int(match.group("n")) * int(match.group("m")), match.group("what")
    match = _COUNTED.fullmatch(words)
    return (int(match.group("n")), match.group("thing")) if match is not None else None


def _word_problem(text: str) -> Answer | None:
    """A few plain steps, each clause read (docs/simulator.md, "Questions the model answers"); the running total
    is the answer when the question asks for the total of the very thing every clause counts, held by the subject
    of the first clause (or a pronoun)."""
    parts = sentences(text)
    asks = [i for i, part in enumerate(parts) if _HOW_MANY.fullmatch(_normalize(part))]
    if not asks or asks[0] == 0:
        return None
    asked = _HOW_MANY.fullmatch(_normalize(parts[asks[0]]))
    total, verb, subject = 0, None, None
    for sentence in parts[: asks[0]]:
        for clause in _STEPS.split(_normalize(sentence).rstrip(".!")):
            words = clause.split()
            at = next((i for i, word in enumerate(words[:3]) if word in _ADDS | _SUBTRACTS), None)
            if at is not None:
                who = words[at - 1] if at else None
                subject = subject or who
                if who is not None and who not in _PRONOUNS and who != subject:
                    return None  # a clause about someone else ("Tom gives 20 stickers to her")
                verb, words = words[at], words[at + 1:]
            elif verb is None:
                return None
            amount = _amount_of(" ".join(words))
            if amount is None or amount[1] != asked.group("noun"):
                return None
            total += amount[0] if verb in _ADDS else -amount[0]
    who = asked.group("who")
    if total < 0 or (who not in _PRONOUNS and who != subject):
        return None
    return _number_answer(Fraction(total), _normalize(parts[asks[0]]))


# ---------------------------------------------------------------------------------------------- wrong answers
def _wrong_number(text: str, h: int) -> str:
    """`text` with two neighbouring (different) digits swapped, or off by a little; never `text` itself."""
    sign = "-" if text.startswith("-") else ""
    body = text[len(sign):]
    swaps = [
        i for i in range(len(body) - 1)
        if body[i].isdigit() and body[i + 1].isdigit() and body[i] != body[i + 1]
        and not (i == 0 and body[1] == "0" and len(body.split(".")[0]) > 1)  # no leading zero
    ]
    if swaps and h % 3 == 0:
        i = swaps[(h // 3) % len(swaps)]
        return sign + body[:i] + body[i + 1] + body[i] + body[i + 2:]
    value = _value(text)
    decimals = len(body.split(".")[1]) if "." in body else 0
    if decimals > 6:  # a non-terminating quotient: wrong in the second place, not in the float's last digit
        decimals, value = 2, Fraction(round(value, 2))
    unit = Fraction(1, 10**decimals)
    steps = (1, 1, 2, 10) if abs(value) >= 50 * unit else (1, 1, 2)
    step = steps[(h // 7) % len(steps)] * unit
    wrong = value + step if (h // 29) % 2 == 0 or value - step < 0 <= value else value - step
    return format_number(wrong)


def _wrong_list(words: tuple[str, ...], h: int) -> tuple[str, ...]:
    """One number dropped, repeated or replaced by a wrong one."""
    items = [w.rstrip(",") for w in words]
    if len(items) == 1:
        return _list_words(items * 2)
    i = 1 + (h // 5) % max(1, len(items) - 2) if len(items) > 2 else (h // 5) % len(items)
    mode = h % 3
    if mode == 0:
        changed = items[:i] + items[i + 1:]
    elif mode == 1:
        changed = items[: i + 1] + items[i:]
    else:
        changed = items[:i] + [_wrong_number(items[i], h // 11)] + items[i + 1:]
        if changed == items:  # cannot happen (a wrong number differs), kept for safety
            changed = items[:i] + items[i + 1:]
    return _list_words(changed)
