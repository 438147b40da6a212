"""Just enough Prometheus text parsing to read SGLang's counters."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)')
# A label name starts a word: without the lookbehind a long run of word characters is tried at every position.
_LABEL = re.compile(r'(?<!\w)(\w+)="((?:[^"\\]|\\.)*)"')
MAX_LINE = 64 * 1024  # longer than any sample SGLang writes: not read (bounded work on a hostile /metrics)


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#") or len(line) > MAX_LINE:
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        labels = dict(_LABEL.findall(match.group("labels") or ""))
        try:
            value = float(match.group("value"))
        except ValueError:
            continue
        samples.append((match.group("name"), labels, value))
    return samples


def total(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float | None:
    """Sum of a metric over series matching `labels`; None if no such series exists."""
    values = [v for n, l, v in samples if n == name and all(l.get(k) == want for k, want in labels.items())]
    return sum(values) if values else None
