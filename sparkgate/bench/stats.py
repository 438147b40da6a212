"""The numbers of the table, from per-request records, and the paired exact McNemar test.

The definitions (TTFT, e2e latency, decode tok/s against the published figure, TPOT, accept length) and engine
against client time: docs/bench.md, "What a run measures". Precisely: e2e ends at the last chunk carrying text or
the finish reason, decode time runs from the first text chunk to the last, and the accept length counts the first
token, as SGLang's own per-request definition does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    data = sorted(values)
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    rank = (len(data) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (rank - low)


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def summarize(records: Sequence[dict]) -> dict:
    """Summary numbers of one run from its per-request records (dicts, as written to requests.jsonl)."""
    ok = [r for r in records if not r.get("error")]
    timed = [r for r in ok if r.get("decode_s") and r["decode_s"] > 0 and r.get("completion_tokens", 0) > 1]
    decode_tokens = sum(r["completion_tokens"] - 1 for r in timed)
    decode_time = sum(r["decode_s"] for r in timed)
    decode_tok_s = decode_tokens / decode_time if decode_time > 0 else None
    e2e = [r["e2e_s"] for r in ok if r.get("e2e_s") is not None]
    spec = [r for r in ok if r.get("spec_verify_ct")]
    accept = None
    if ok and len(spec) == len(ok):
        accept = sum(r["completion_tokens"] for r in spec) / sum(r["spec_verify_ct"] for r in spec)
    scored = [r for r in records if r.get("expected") is not None]
    correct = sum(1 for r in scored if r.get("correct"))
    chunks = sum(r.get("text_chunks") or 0 for r in ok)
    tokens = sum(r.get("completion_tokens") or 0 for r in ok)
    sources = {r.get("timing", "client") for r in ok}
    client = [r for r in ok if r.get("client_decode_s") and r["client_decode_s"] > 0 and r.get("completion_tokens", 0) > 1]
    client_time = sum(r["client_decode_s"] for r in client)
    return {
        # "engine": every duration is the engine's own (meta_info); "client": the client's stopwatch.
        "timing": sources.pop() if len(sources) == 1 else "mixed" if sources else None,
        "client_decode_tok_s": sum(r["completion_tokens"] - 1 for r in client) / client_time if client_time > 0 else None,
        "requests": len(records),
        "completed": len(ok),
        "errors": len(records) - len(ok),
        "truncated": sum(1 for r in ok if r.get("finish_reason") == "length"),
        "completion_tokens": tokens,
        "decode_tok_s": decode_tok_s,
        "tpot_ms": 1000.0 / decode_tok_s if decode_tok_s else None,
        "tpot_ms_median_request": percentile([1000.0 * r["decode_s"] / (r["completion_tokens"] - 1) for r in timed], 50),
        "mean_ttft_s": _mean(r["ttft_s"] for r in ok if r.get("ttft_s") is not None),
        "mean_e2e_s": _mean(e2e),
        "p50_e2e_s": percentile(e2e, 50),
        "p95_e2e_s": percentile(e2e, 95),
        "accept_length": accept,
        "accept_length_reported": f"{len(spec)}/{len(ok)}",
        # Tokens per stream chunk: > 1 under speculative decoding; counting chunks would under-report by this.
        "tokens_per_chunk": tokens / chunks if chunks else None,
        "scored": len(scored),
        "correct": correct,
        "accuracy": correct / len(scored) if scored else None,
    }


# ---------------------------------------------------------------------------------------------- McNemar
def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: the binomial test of min(b, c) among n = b + c discordant pairs
    at p = 1/2, doubled and capped at 1. With no discordant pairs it is 1."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = Fraction(sum(math.comb(n, i) for i in range(k + 1)), 2**n)
    return float(min(Fraction(1), 2 * tail))


def smallest_possible_p(n: int) -> float:
    """The smallest p-value n discordant pairs can produce (all of them one way): 2 / 2**n."""
    return 1.0 if n == 0 else min(1.0, 2.0 / 2**n)


def power(n: int, alpha: float, share: float) -> float:
    """Probability that the exact test rejects at `alpha` when a discordant pair goes one way with
    probability `share` (e.g. 2/3 for a 2:1 split), given n discordant pairs."""
    if n == 0:
        return 0.0
    return sum(math.comb(n, k) * share**k * (1 - share) ** (n - k)
               for k in range(n + 1) if mcnemar_exact_p(k, n - k) < alpha)


@dataclass(frozen=True)
class McNemar:
    paired: int  # questions answered in both runs
    both_correct: int
    a_only: int  # b: correct in A (the baseline), wrong in B
    b_only: int  # c: wrong in A, correct in B
    both_wrong: int
    p_value: float
    alpha: float
    power_2to1: float  # power to detect a 2:1 split of the discordant pairs
    verdict: str
    detail: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


MIN_POWER = 0.8


def mcnemar(a: dict[str, bool], b: dict[str, bool], alpha: float = 0.05) -> McNemar:
    """Paired test on per-question correctness of two runs (dicts item id -> correct), A the baseline."""
    ids = sorted(set(a) & set(b))
    both = sum(1 for i in ids if a[i] and b[i])
    a_only = sum(1 for i in ids if a[i] and not b[i])
    b_only = sum(1 for i in ids if b[i] and not a[i])
    neither = len(ids) - both - a_only - b_only
    n = a_only + b_only
    p = mcnemar_exact_p(a_only, b_only)
    pw = power(n, alpha, 2 / 3)
    if not ids:
        verdict, detail = "not paired", "no question was answered in both runs (different workloads?)"
    elif n == 0:
        verdict = "identical on these questions"
        detail = (f"all {len(ids)} paired questions scored the same in both runs: no discordant pairs, so McNemar "
                  "has nothing to test; this says nothing about questions outside the set")
    elif p < alpha:
        worse = "worse" if a_only > b_only else "better"
        verdict = f"significant: {worse}"
        detail = f"{a_only} vs {b_only} discordant pairs, exact p = {p:.3g} < {alpha}"
    elif smallest_possible_p(n) >= alpha:
        verdict = "inconclusive"
        detail = (f"only {n} discordant pair(s): even if all went one way, p could not go below {alpha} "
                  f"(smallest possible p = {smallest_possible_p(n):.3g}); run more questions")
    elif pw < MIN_POWER:
        verdict = "inconclusive"
        detail = (f"p = {p:.3g}, but with {n} discordant pairs the test had only {pw:.0%} power to detect a 2:1 "
                  f"split at alpha {alpha}; run more questions")
    else:
        verdict = "no detectable difference"
        detail = (f"p = {p:.3g} with {n} discordant pairs ({a_only} vs {b_only}); the test had {pw:.0%} power "
                  f"to detect a 2:1 split at alpha {alpha}")
    return McNemar(len(ids), both, a_only, b_only, neither, p, alpha, pw, verdict, detail)


# ------------------------------------------------------------------------- paired decode-speed difference
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with df degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


def t_critical(confidence: float, df: int) -> float:
    """The two-sided critical value: P(|T| >= value) = 1 - confidence (bisection on the exact tail)."""
    alpha = 1.0 - confidence
    low, high = 0.0, 1.0
    while t_two_sided_p(high, df) > alpha:
        high *= 2.0
    for _ in range(200):
        mid = (low + high) / 2.0
        low, high = (mid, high) if t_two_sided_p(mid, df) > alpha else (low, mid)
    return (low + high) / 2.0


MIN_PAIRED_ITEMS = 3  # a t-test needs at least 2 degrees of freedom to say anything


@dataclass(frozen=True)
class PairedDifference:
    """The paired t-test on per-item decode rates of two runs over the same prompts: B minus A, tok/s."""
    n: int
    mean_a: float | None  # mean per-item decode rate, tok/s
    mean_b: float | None
    mean_difference: float | None  # mean of (rate_B - rate_A) over the paired items
    ci_low: float | None
    ci_high: float | None
    confidence: float
    t: float | None
    df: int
    p_value: float | None

    def significant(self, alpha: float) -> bool:
        return self.p_value is not None and self.p_value < alpha

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def decode_rate(record: dict) -> float | None:
    """Per-request decode rate, (completion tokens - 1) / decode time, or None when it was not timed."""
    if record.get("error") or not record.get("decode_s") or record["decode_s"] <= 0:
        return None
    tokens = record.get("completion_tokens") or 0
    return (tokens - 1) / record["decode_s"] if tokens > 1 else None


def paired_difference(rates_a: Sequence[float], rates_b: Sequence[float], confidence: float = 0.95) -> PairedDifference:
    """Paired t-test and confidence interval of mean(rate_B - rate_A); the pairs are item by item."""
    if len(rates_a) != len(rates_b):
        raise ValueError("paired samples must have the same length")
    n = len(rates_a)
    if n < MIN_PAIRED_ITEMS:
        return PairedDifference(n, _mean(rates_a), _mean(rates_b), None, None, None, confidence, None, max(n - 1, 0),
                                None)
    diffs = [b - a for a, b in zip(rates_a, rates_b, strict=True)]
    mean_d = sum(diffs) / n
    sd = math.sqrt(sum((d - mean_d) ** 2 for d in diffs) / (n - 1))
    se = sd / math.sqrt(n)
    df = n - 1
    if se == 0.0:  # every pair differs by exactly the same amount: no spread to test against
        t = 0.0 if mean_d == 0.0 else math.copysign(math.inf, mean_d)
        half = 0.0
    else:
        t = mean_d / se
        half = t_critical(confidence, df) * se
    return PairedDifference(n, sum(rates_a) / n, sum(rates_b) / n, mean_d, mean_d - half, mean_d + half, confidence,
                            t, df, 1.0 if t == 0.0 else t_two_sided_p(t, df))


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the input's order: the i-th smallest p times (m - i + 1), made
    monotone (an adjusted p is never below a smaller raw p's) and capped at 1. Rejecting where the adjusted p
    is below alpha keeps the chance of any false rejection among the m tests at most alpha."""
    m = len(p_values)
    adjusted = [1.0] * m
    running = 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def cell(value, pattern: str, missing: str = "-") -> str:
    return missing if value is None else pattern.format(value)


def accuracy_text(results: dict, pattern: str = "{:.1%}") -> str:
    """"n/a (simulator)" where accuracy is not measured, else the score and its counts."""
    if results.get("accuracy_not_measured"):
        return f"n/a ({results['accuracy_not_measured']})"
    return f"{cell(results.get('accuracy'), pattern, 'n/a')} ({results.get('correct')}/{results.get('scored')})"
