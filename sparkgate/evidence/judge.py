"""How a reply is judged against its question's one answer.

The contract (normalising, the four rules, number words, `word` and `integer_list` answers, worked examples):
docs/checks/answers.md, "The judge's contract".
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from sparkgate.sglang import conformance as C

# SGLang's reasoning markup (sglang/srt/parser/reasoning_parser.py, the deepseek-r1 detector Ling-3 uses).
THINK_START = C.string_("think_start")
THINK_END = C.string_("think_end")
_END_MARKERS = re.compile(r"(?:\s*(?:<\|[a-z_]{1,20}\|>|</s>|<eos>|<\|endoftext\|>))+\s*$", re.IGNORECASE)
_MARKDOWN = re.compile(r"\*\*|__|`+|\$|\\boxed\{|\\text\{|\\mathrm\{|\\[()\[\]]|^\s*(?:#{1,6}|>|[-*+]\s)\s*",
                       re.MULTILINE)
_TOKEN = re.compile(r"\d[\d,]*(?:\.\d+)?|[^\W\d_]+(?:['’][^\W\d_]+)*|\S")
_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?")
PUNCTUATION = frozenset(".,!?;'\"()[]{}…—–“”‘’")
OPERATORS = frozenset("+-−×÷/*")
MARKERS = frozenset({"is", "are", "was", "were", "=", "equals", "equal", "makes", "gives", ":"})
# Connective words a short answer may carry besides the question's own words (documented in docs/checks/answers.md).
ALLOWED_WORDS = frozenset({
    "a", "an", "the", "it", "its", "they", "that", "this", "there", "here", "so", "then", "sure", "yes", "ok",
    "you", "your",
    "answer", "result", "total", "equals", "equal", "makes", "gives", "is", "are", "was", "were", "be", "have",
    "has", "contain", "contains",
    "of", "in", "to", "from", "and", "by", "for", "with", "per", "exactly",
    "plus", "minus", "times", "divided", "multiplied", "over", "x", "sum", "difference", "product", "quotient",
    "symbol", "city", "integers", "numbers", "number", "list",
})
# Inflections read as their question word (has/have, is/are): irregular forms; regular plurals lose their -s.
_LEMMA = {"has": "have", "had": "have", "having": "have", "is": "be", "are": "be", "was": "be", "were": "be",
          "am": "be", "does": "do", "did": "do", "done": "do", "contains": "contain"}
UNITS = {"km": "kilometer", "m": "meter", "kg": "kilogram", "g": "gram", "h": "hour", "hr": "hour", "hrs": "hour",
         "min": "minute", "mins": "minute", "s": "second", "sec": "second", "secs": "second", "d": "day"}
_SMALL = {w: i for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"])}
_TENS = {w: 10 * (i + 2) for i, w in enumerate(["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"])}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}


@dataclass(frozen=True)
class Token:
    kind: str  # "num", "word", "op", "marker", "symbol"
    text: str


def lemma(word: str) -> str:
    word = _LEMMA.get(word, word)
    word = UNITS.get(word, word)
    if len(word) > 3 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def canonical(number: str) -> str | None:
    """One spelling per value: "3,500", "3500.", "3500.00" and "3500" all read "3500"."""
    try:
        return format(Decimal(number.replace(",", "")).normalize(), "f")
    except InvalidOperation:
        return None


@dataclass(frozen=True)
class Thought:
    """A reply split into its reasoning block and its final answer (`reasoning`)."""

    reasoning: str | None  # None: the reply opened no reasoning block
    answer: str | None  # None: the block was never closed, so no answer followed it

    @property
    def thought(self) -> bool:
        return self.reasoning is not None


def reasoning(reply: str) -> Thought:
    """Split at the first `</think>`, as SGLang's deepseek-r1 detector does (force_reasoning: everything before the
    first end tag is reasoning, a leading `<think>` stripped): what follows is the final answer, judged by the
    contract. A reply with a `<think>` and no `</think>` is all reasoning, with no answer (thinking cut short, or a
    block opened where an answer belongs). A reply with neither tag is all answer. Any tag left in the answer (a
    second block, a nested one) is a symbol there, so the answer is wrong: the split never guesses further."""
    head, end, tail = reply.partition(THINK_END)
    if end:
        body = head.lstrip()
        return Thought(reasoning=body[len(THINK_START):] if body.startswith(THINK_START) else head, answer=tail)
    if THINK_START in reply:
        return Thought(reasoning=reply, answer=None)
    return Thought(reasoning=None, answer=reply)


def normalised(reply: str) -> str:
    text = reasoning(reply).answer or ""
    text = _END_MARKERS.sub("", text)
    text = "".join(str(unicodedata.digit(c)) if unicodedata.category(c) == "Nd" else c
                   for c in unicodedata.normalize("NFKC", text))
    return _MARKDOWN.sub(" ", text.casefold()).replace("}", " ").replace("{", " ")


def tokens(text: str) -> list[Token]:
    out: list[Token] = []
    for match in _TOKEN.finditer(text):
        piece = match.group()
        if piece[0].isdigit():
            piece = piece.rstrip(",")
            parts = [piece] if "," not in piece or _THOUSANDS.fullmatch(piece) else piece.split(",")
            for part in parts:
                value = canonical(part) if part else None
                if value is not None:
                    if out and out[-1].text in ("-", "−") and (len(out) < 2 or out[-2].kind not in ("num", "word")):
                        out[-1] = Token("num", canonical("-" + value) or value)
                    else:
                        out.append(Token("num", value))
        elif piece[0].isalpha():
            out.append(Token("marker" if piece in MARKERS else "word", piece))
        elif piece == "=" or piece == ":":
            out.append(Token("marker", piece))
        elif piece == "_" or (piece == "*" and not (out and out[-1].kind == "num")):
            continue  # markdown emphasis; `*` after a number is multiplication
        elif piece in OPERATORS:
            out.append(Token("op", piece))
        elif piece not in PUNCTUATION:
            out.append(Token("symbol", piece))
    # A `*` is multiplication only between two numbers; elsewhere it was emphasis.
    out = [t for k, t in enumerate(out) if not (t.text == "*" and (k + 1 >= len(out) or out[k + 1].kind != "num"))]
    return _number_words(out)


def _number_words(stream: list[Token]) -> list[Token]:
    """Runs of number words ("eighty-five", "three thousand five hundred") become one number."""
    out: list[Token] = []
    i = 0
    while i < len(stream):
        j, total, current, used = i, 0, 0, False
        while j < len(stream):
            token = stream[j]
            if token.kind == "word" and token.text in _SMALL:
                current += _SMALL[token.text]
            elif token.kind == "word" and token.text in _TENS:
                current += _TENS[token.text]
            elif token.kind == "word" and token.text in _SCALES and used:
                scale = _SCALES[token.text]
                if scale == 100:
                    current *= 100
                else:
                    total, current = total + current * scale, 0
            elif token.text in ("-", "and") and used and j + 1 < len(stream) and (
                    stream[j + 1].text in _SMALL or stream[j + 1].text in _TENS):
                pass
            else:
                break
            used = True
            j += 1
        if used:
            out.append(Token("num", str(total + current)))
            i = j
        else:
            out.append(stream[i])
            i += 1
    return out


# A question's asking words never belong in its answer: an echo or a salad of the prompt carries them.
INTERROGATIVES = frozenset({"how", "what", "which", "who", "whom", "whose", "why", "when", "where", "many", "much"})


def _words_allowed(toks: list[Token], question_words: set[str], answer_word: str | None = None) -> bool:
    allowed = (question_words | ALLOWED_WORDS) - INTERROGATIVES
    return all(lemma(t.text) in allowed or t.text in allowed or t.text == answer_word
               for t in toks if t.kind == "word")


def question_facts(prompt: str) -> tuple[set[str], list[str]]:
    toks = tokens(normalised(prompt))
    words = {lemma(t.text) for t in toks if t.kind in ("word", "marker")} | {
        t.text for t in toks if t.kind in ("word", "marker")}
    return words, [t.text for t in toks if t.kind == "num"]


def read_integer(prompt: str, answer: str, reply: str) -> tuple[bool, str | None]:
    toks = tokens(normalised(reply))
    words, given = question_facts(prompt)
    want = canonical(answer)
    nums = [t.text for t in toks if t.kind == "num"]
    stated = ", ".join(nums) or None  # what the reply stated: its numbers
    if any(t.kind == "symbol" for t in toks) or not _words_allowed(toks, words):
        return False, stated
    markers = [i for i, t in enumerate(toks) if t.kind == "marker"]
    if markers:
        left, right_side = toks[: markers[-1]], toks[markers[-1] + 1:]
        left_nums = [t.text for t in left if t.kind == "num"]
        right_nums = [t.text for t in right_side if t.kind == "num"]
        if any(t.kind == "op" for t in right_side):
            return False, stated
        if right_nums:  # "<restatement> is <answer> [<the question's quantities>]"
            ok = (right_nums[0] == want and all(n in given for n in right_nums[1:]) and want not in right_nums[1:]
                  and all(n in given for n in left_nums) and _restatement_holds(left, want))
        else:  # "<answer> is the answer"
            ok = left_nums == [want] and not any(t.kind == "op" for t in left)
    else:
        ok = nums == [want] and not any(t.kind == "op" for t in toks)
    return ok, want if ok else stated


_OPERATION = {"+": "+", "plus": "+", "-": "-", "−": "-", "minus": "-", "×": "*", "*": "*", "x": "*", "times": "*",
              "multiplied": "*", "÷": "/", "/": "/", "divided": "/", "over": "/"}


def _restatement_holds(left: list[Token], want: str) -> bool:
    """A restatement of one operation (`417 + 25`, `47 plus 38`, `144 divided by 12`) must compute the stated
    result: `5093 + 25 = 442` restates numbers of the question but is wrong arithmetic. Any other form is not
    computed (its numbers are still the question's own)."""
    kept = [t for t in left if t.kind == "num" or t.text in _OPERATION]
    if any(a.text in _OPERATION and b.text in _OPERATION for a, b in zip(kept, kept[1:], strict=False)):
        return False  # `5093 + + 25`, `plus +`: no operation reads so
    if len(kept) != 3 or kept[0].kind != "num" or kept[2].kind != "num" or kept[1].text not in _OPERATION:
        return True
    try:
        a, b, result = Decimal(kept[0].text), Decimal(kept[2].text), Decimal(want)
        value = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else None}[_OPERATION[kept[1].text]]
    except (InvalidOperation, ArithmeticError):
        return False
    return value is not None and value == result


def _stated(toks: list[Token]) -> str | None:
    nums = [t.text for t in toks if t.kind == "num"]
    return ", ".join(nums) if nums else next((t.text for t in toks if t.kind == "word"), None)


def read_word(prompt: str, answer: str, reply: str) -> tuple[bool, str | None]:
    toks = tokens(normalised(reply))
    words, given = question_facts(prompt)
    want = answer.casefold()
    hits = [i for i, t in enumerate(toks) if t.kind == "word" and t.text == want]
    stray = next((t.text for t in toks if t.kind == "word" and t.text != want and (
        t.text in INTERROGATIVES or (lemma(t.text) not in words and t.text not in words
                                     and t.text not in ALLOWED_WORDS))), None)
    shown = answer if len(hits) == 1 else (stray or _stated(toks))
    if len(hits) != 1 or stray is not None or any(t.kind in ("symbol", "op") for t in toks):
        return False, shown
    if any(t.kind == "num" and t.text not in given for t in toks):
        return False, _stated(toks)
    at = hits[0]
    content = [i for i, t in enumerate(toks) if t.kind in ("word", "num", "marker")]
    before = [toks[i] for i in content if i < at]
    after = [toks[i] for i in content if i > at]
    beside_marker = (before and before[-1].kind == "marker") or (after and after[0].kind == "marker")
    only_connectives = all(t.text in ALLOWED_WORDS for t in before)
    ok = bool(beside_marker or not before or only_connectives)
    return ok, answer if ok else _stated(toks)


def read_integer_list(prompt: str, answer: str, reply: str) -> tuple[bool, str | None]:
    toks = tokens(normalised(reply))
    words, given = question_facts(prompt)
    run = [canonical(n) for n in re.findall(r"-?\d+", answer)]
    nums = [(i, t.text) for i, t in enumerate(toks) if t.kind == "num"]
    values = [v for _, v in nums]
    width = len(run)
    starts = [k for k in range(len(values) - width + 1) if values[k: k + width] == run]
    shown = ", ".join(values) or None
    if len(starts) != 1 or any(t.kind in ("symbol", "op") for t in toks) or not _words_allowed(toks, words):
        return False, shown
    first, last = nums[starts[0]][0], nums[starts[0] + width - 1][0]
    inside, before = toks[first: last + 1], toks[:first]
    # Before the list: nothing, connectives only ("Sure!"), or a restatement that ends in a marker ("The integers
    # from 1 to 24:"); a salad of the prompt's words runs straight into the list.
    lead_in = (not before or all(t.kind == "word" and t.text in ALLOWED_WORDS for t in before)
               or before[-1].kind == "marker")
    ok = (lead_in and not any(t.kind == "word" for t in inside)
          and all(v in given for _, v in nums[: starts[0]])
          and not toks[last + 1:])
    return ok, ", ".join(str(v) for v in run) if ok else shown
