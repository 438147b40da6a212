"""The log patterns (sparkgate/sglang/conformance.log_pattern) match exactly the lines a lazy `.*?` per hole matches,
without its backtracking: each free hole is a possessive tempered token, so a hostile line cannot stall a check."""

from __future__ import annotations

import re
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from sparkgate.sglang import conformance as C

KEYS = sorted(C.fixture()["log_formats"])


def lazy(key: str) -> re.Pattern[str]:
    parts = []
    for literal, field, _spec, _conversion in string.Formatter().parse(C.log_format(key)):
        parts.append(re.escape(literal))
        if field is not None:
            parts.append(".*?")
    return re.compile("".join(parts))


def fragments(key: str) -> list[str]:
    """The format's own literal pieces, split further, to build lines that nearly match in many ways."""
    pieces = [literal for literal, *_ in string.Formatter().parse(C.log_format(key)) if literal]
    return [*pieces, *(w for p in pieces for w in p.split()), " ", ",", "=", "x", "1.5"]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_each_pattern_matches_what_lazy_holes_match(data):
    key = data.draw(st.sampled_from(KEYS))
    line = "".join(data.draw(st.lists(st.sampled_from(fragments(key)), max_size=14)))
    assert bool(C.log_pattern(key).match(line)) == bool(lazy(key).match(line)), (key, line)
    assert bool(C.log_pattern(key).search(line)) == bool(lazy(key).search(line)), (key, line)


def test_every_rendered_line_matches_its_pattern():
    for key in KEYS:
        fields = {f for _, f, _, _ in string.Formatter().parse(C.log_format(key)) if f}
        line = C.log_format(key).format(**{f: "v a l" for f in fields}) if all(
            s in ("", None) or not s for _, f, s, _ in string.Formatter().parse(C.log_format(key)) if f) else None
        if line is not None:
            assert C.log_pattern(key).match(line), key


def test_no_free_hole_can_backtrack():
    """Structure, not timing: every free hole but a trailing one is possessive (`*+`), none is a lazy `.*?`."""
    for key in KEYS:
        pattern = C.log_pattern(key).pattern
        assert ".*?" not in pattern.removesuffix(".*?"), (key, pattern)


def test_a_label_run_in_metrics_is_read_in_one_pass():
    """Structure, not timing: a label name starts a word, so a long word run is not retried at every position."""
    from sparkgate.evidence import metrics

    assert metrics._LABEL.pattern.startswith("(?<!\\w)")
    assert metrics.parse('m{a="1",bb_c="x\\"y"} 2') == [("m", {"a": "1", "bb_c": 'x\\"y'}, 2.0)]
    assert metrics.parse("m{" + "a" * (metrics.MAX_LINE + 1) + "} 1") == []
