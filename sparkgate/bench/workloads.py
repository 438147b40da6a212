"""Workloads: each is a fixed list of items, fingerprinted so that two runs can be paired question by question.

The five workloads, the shots (sparkgate's own) and `--jsonl` input: docs/bench.md, "Workloads"; pairing runs
workload by workload to pick a drafter: "Which drafter".
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from sparkgate.bench import gsm8k_scoring, prompts
from sparkgate.errors import Refusal

INSTRUCTION = (
    "Solve the math problem. Reason step by step, then give the final answer on its own line "
    "as '#### <number>'."
)

DEFAULT_SHOTS: tuple[tuple[str, str], ...] = (
    ("A bakery packs muffins in boxes of 6. It baked 9 trays of 8 muffins. How many full boxes can it pack?",
     "The bakery baked 9 * 8 = 72 muffins. 72 / 6 = 12 full boxes.\n#### 12"),
    ("Lena earns $14 an hour and worked 7 hours on Monday and 5 hours on Tuesday. She spent $30 on lunch. "
     "How much money does she have left from those two days?",
     "She worked 7 + 5 = 12 hours and earned 12 * 14 = 168 dollars. After lunch she has 168 - 30 = 138 dollars."
     "\n#### 138"),
    ("A garden has 4 rows of tomato plants with 11 plants in each row. Each plant gives 3 tomatoes. "
     "The gardener gives away 20 tomatoes. How many tomatoes does she keep?",
     "There are 4 * 11 = 44 plants giving 44 * 3 = 132 tomatoes. She keeps 132 - 20 = 112.\n#### 112"),
    ("A cyclist rides 18 km every weekday and 35 km on each weekend day. How many kilometres does he ride in "
     "two weeks?",
     "One week is 5 * 18 + 2 * 35 = 90 + 70 = 160 km. Two weeks are 2 * 160 = 320 km.\n#### 320"),
    ("A school orders 250 pencils. A third of the remaining pencils break after 40 are handed out. "
     "How many unbroken pencils are left?",
     "After handing out 40, 250 - 40 = 210 remain. A third break: 210 / 3 = 70. Unbroken: 210 - 70 = 140."
     "\n#### 140"),
)


@dataclass(frozen=True)
class Item:
    id: str
    prompt: str  # the user message (chat API) and the raw text (native /generate API)
    expected: str | None = None  # the reference number; None: not scored


@dataclass(frozen=True)
class Workload:
    name: str
    items: tuple[Item, ...]
    description: str
    scored: bool
    fixed_length: bool  # outputs run to max_tokens (ignore_eos): a pure decode-speed workload
    default_max_tokens: int
    source: dict
    # "sampled" (the published GSM8K protocol) or "greedy": the speed-only workloads compare drafters, and
    # greedy output is the same text on both, so the pairs differ only in how fast it was produced.
    default_sampling: str = "sampled"

    def limited(self, limit: int | None) -> Workload:
        if not limit or limit >= len(self.items):
            return self
        return replace(self, items=self.items[:limit], source={**self.source, "limit": limit})

    def fingerprint(self) -> str:
        """Identifies the exact prompt set: runs pair question by question only when this matches."""
        digest = hashlib.sha256()
        for item in self.items:
            digest.update(json.dumps([item.id, item.prompt, item.expected]).encode())
        return digest.hexdigest()[:16]


def few_shot_prompt(question: str, shots: tuple[tuple[str, str], ...] = DEFAULT_SHOTS) -> str:
    parts = [INSTRUCTION, ""]
    for shot_question, shot_answer in shots:
        parts += [f"Question: {shot_question}", f"Answer: {shot_answer}", ""]
    parts += [f"Question: {question.strip()}", "Answer:"]
    return "\n".join(parts)


class WorkloadError(Refusal, ValueError):
    pass


def _json_lines(path: Path, text: str) -> Iterator[tuple[int, object]]:
    """(line number, parsed value) for each non-blank line of a JSONL file's text."""
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}:{number}: not JSON ({exc.msg})") from None


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise WorkloadError(f"{path}: no such file (point --jsonl at a GSM8K-format JSONL file)")
    rows = []
    for number, row in _json_lines(path, path.read_text(encoding="utf-8")):
        if not isinstance(row, dict) or not isinstance(row.get("question"), str) or not isinstance(row.get("answer"), str):
            raise WorkloadError(f"{path}:{number}: expected an object with string fields 'question' and 'answer'")
        rows.append(row)
    if not rows:
        raise WorkloadError(f"{path}: no questions")
    return rows


def load_shots(path: Path | None) -> tuple[tuple[str, str], ...]:
    if path is None:
        return DEFAULT_SHOTS
    return tuple((row["question"], row["answer"].strip()) for row in _read_jsonl(path)[:5])


def gsm8k(path: Path, shots_path: Path | None = None) -> Workload:
    rows = _read_jsonl(path)
    shots = load_shots(shots_path)
    items = []
    for index, row in enumerate(rows):
        expected = gsm8k_scoring.reference_answer(row["answer"])
        if expected is None:
            raise WorkloadError(f"{path}: question {index + 1} has no '#### <number>' in its answer")
        items.append(Item(f"gsm8k-{index:04d}", few_shot_prompt(row["question"], shots), expected))
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return Workload(
        "gsm8k", tuple(items), f"GSM8K-style 5-shot CoT from {path.name} ({len(items)} questions)",
        scored=True, fixed_length=False, default_max_tokens=32768,
        source={"jsonl": str(path), "jsonl_sha256": sha, "shots": str(shots_path) if shots_path else "sparkgate default",
                "questions": len(items)},
    )


# Arithmetic templates: (text, answer) from a seeded random generator; every answer is a positive integer.
def _baker(r: random.Random) -> tuple[str, int]:
    trays, per = r.randint(3, 12), r.randint(6, 30)
    sold = r.randint(1, trays * per - 1)
    return (f"A baker bakes {trays} trays with {per} rolls on each tray and sells {sold} rolls. "
            "How many rolls are left?", trays * per - sold)


def _reader(r: random.Random) -> tuple[str, int]:
    pages, days, extra = r.randint(5, 60), r.randint(2, 14), r.randint(1, 99)
    return (f"Mia reads {pages} pages a day for {days} days and then {extra} more pages on the weekend. "
            "How many pages does she read in total?", pages * days + extra)


def _tank(r: random.Random) -> tuple[str, int]:
    rate, hours = r.randint(5, 40), r.randint(2, 12)
    left = r.randint(1, 500)
    return (f"A tank holds {rate * hours + left} litres of water. {rate} litres drain out every hour for "
            f"{hours} hours. How many litres are still in the tank?", left)


def _share(r: random.Random) -> tuple[str, int]:
    friends, each = r.randint(2, 12), r.randint(3, 40)
    return (f"{friends} friends share {friends * each} stickers equally. How many stickers does each friend get?",
            each)


def _tickets(r: random.Random) -> tuple[str, int]:
    price, count = r.randint(4, 60), r.randint(2, 15)
    discount = r.randint(1, price * count - 1)
    return (f"A concert ticket costs ${price}. A family buys {count} tickets and gets ${discount} off the total. "
            "How many dollars do they pay?", price * count - discount)


_TEMPLATES: tuple[Callable[[random.Random], tuple[str, int]], ...] = (_baker, _reader, _tank, _share, _tickets)


def arith(count: int = 16, seed: int = 20260, shots_path: Path | None = None) -> Workload:
    rng = random.Random(seed)
    shots = load_shots(shots_path)
    items = []
    for index in range(count):
        text, answer = _TEMPLATES[index % len(_TEMPLATES)](rng)
        items.append(Item(f"arith-{seed}-{index:03d}", few_shot_prompt(text, shots), str(answer)))
    return Workload(
        "arith", tuple(items), f"{count} generated arithmetic word problems (seed {seed}), 5-shot",
        scored=True, fixed_length=False, default_max_tokens=1024, source={"generator": "arith", "seed": seed},
    )


_FILLER = (
    "river", "lamp", "orbit", "cedar", "signal", "harbor", "copper", "meadow", "engine", "lantern", "quartz",
    "valley", "ember", "tunnel", "glacier", "saddle", "prism", "canyon", "willow", "beacon", "mosaic", "anchor",
)


def synthetic(count: int = 32, seed: int = 20260, prompt_words: tuple[int, int] = (64, 512)) -> Workload:
    """Fixed filler prompts (seeded lengths and words); outputs run to max_tokens. Decode speed only."""
    rng = random.Random(seed)
    items = []
    for index in range(count):
        words = " ".join(rng.choice(_FILLER) for _ in range(rng.randint(*prompt_words)))
        items.append(Item(f"synthetic-{seed}-{index:03d}", f"Continue this text with more of the same: {words}"))
    return Workload(
        "synthetic", tuple(items), f"{count} seeded synthetic prompts (seed {seed}), fixed-length outputs",
        scored=False, fixed_length=True, default_max_tokens=256,
        source={"generator": "synthetic", "seed": seed, "prompt_words": list(prompt_words)},
    )


SPEED_MAX_TOKENS = 512  # code and prose: long enough for a steady decode rate, short enough for 20 items


def _read_prompts(path: Path, kind: str) -> tuple[list[tuple[str, str]], str]:
    """User-supplied prompts: one {"prompt": ...} object per line, with an optional string "id"."""
    if not path.is_file():
        raise WorkloadError(f"{path}: no such file (point --jsonl at a JSONL file of {{\"prompt\": ...}} lines)")
    raw = path.read_bytes()
    rows: list[tuple[str, str]] = []
    for number, row in _json_lines(path, raw.decode("utf-8")):
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise WorkloadError(f"{path}:{number}: expected an object with a non-empty string field 'prompt'")
        item_id = row.get("id", f"{kind}-jsonl-{len(rows):04d}")
        if not isinstance(item_id, str) or not item_id:
            raise WorkloadError(f"{path}:{number}: field 'id' must be a non-empty string")
        rows.append((item_id, row["prompt"]))
    if not rows:
        raise WorkloadError(f"{path}: no prompts")
    duplicates = sorted({i for i, _ in rows if sum(1 for j, _ in rows if j == i) > 1})
    if duplicates:
        raise WorkloadError(f"{path}: duplicate id(s) {', '.join(duplicates[:5])}: runs are paired item by item")
    return rows, hashlib.sha256(raw).hexdigest()


def _speed_workload(kind: str, builtin: tuple[tuple[str, str], ...], what: str, count: int | None,
                    jsonl: Path | None) -> Workload:
    if jsonl is not None:
        rows, sha = _read_prompts(jsonl, kind)
        source: dict = {"jsonl": str(jsonl), "jsonl_sha256": sha, "prompts": len(rows)}
        description = f"{len(rows)} {kind} prompts from {jsonl.name}"
    else:
        rows, source = list(builtin), {"generator": kind, "count": count or len(builtin)}
        description = f"{count or len(builtin)} {what} (sparkgate's own)"
    if count is not None and not 1 <= count <= len(rows):
        raise WorkloadError(f"--count {count}: the {kind} workload has {len(rows)} prompts (choose 1..{len(rows)})")
    items = tuple(Item(item_id, text) for item_id, text in rows[:count])
    return Workload(kind, items, f"{description}, not scored (decode speed only)", scored=False,
                    fixed_length=False, default_max_tokens=SPEED_MAX_TOKENS, source=source,
                    default_sampling="greedy")


def code(count: int | None = None, jsonl: Path | None = None) -> Workload:
    """HumanEval-style function completions: each prompt has a `def ` signature and a docstring."""
    builtin = tuple((f"code-{name}", prompts.code_prompt(sig)) for name, sig in prompts.CODE_FUNCTIONS)
    return _speed_workload("code", builtin, "Python function completions", count, jsonl)


def prose(count: int | None = None, jsonl: Path | None = None) -> Workload:
    """Alpaca-style writing requests: no code, no digits, no arithmetic."""
    builtin = tuple((f"prose-{name}", text) for name, text in prompts.PROSE_REQUESTS)
    return _speed_workload("prose", builtin, "natural-language writing requests", count, jsonl)


NAMES = ("arith", "synthetic", "gsm8k", "code", "prose")
# `--workload all`: the GSM8K-style set (generated, so it needs no file) and the two drafter-sensitive ones.
ALL = ("arith", "code", "prose")


def expand(spec: str) -> list[str]:
    """`--workload` value -> workload names: one name, a comma list, or `all` (arith, code, prose)."""
    names: list[str] = []
    for part in (p.strip() for p in spec.split(",")):
        for name in (ALL if part == "all" else (part,) if part else ()):
            if name not in NAMES:
                raise WorkloadError(f"unknown workload {name!r}: choose {', '.join(NAMES)}, a comma list or all")
            if name not in names:
                names.append(name)
    if not names:
        raise WorkloadError(f"--workload {spec!r} names no workload: choose {', '.join(NAMES)}, a comma list or all")
    return names


def build(name: str, *, jsonl: Path | None = None, shots: Path | None = None, seed: int = 20260,
          count: int | None = None) -> Workload:
    if name == "gsm8k":
        if jsonl is None:
            raise WorkloadError("the gsm8k workload needs --jsonl PATH (GSM8K test split: question/answer per line)")
        return gsm8k(jsonl, shots)
    if name == "arith":
        return arith(count or 16, seed, shots)
    if name == "synthetic":
        return synthetic(count or 32, seed)
    if name == "code":
        return code(count, jsonl)
    if name == "prose":
        return prose(count, jsonl)
    raise WorkloadError(f"unknown workload {name!r}: choose {', '.join(NAMES)}")
