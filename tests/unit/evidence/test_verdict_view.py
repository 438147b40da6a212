"""The verdict report prints what profiles and engines supply as text: markup in a served name, an observed value
or a profile name is shown literally, never interpreted (and never a MarkupError traceback)."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from sparkgate.evidence.results import CheckResult, Verdict
from sparkgate.evidence.verdict_view import print_verdict

HOSTILE = ["x[/red]", "[bold]admitted[/bold]", "[/]", "[link=http://127.0.0.1/]y[/link]", "\\[", "[1/8]"]


def printed(verdict: Verdict) -> str:
    out = io.StringIO()
    print_verdict(verdict, Console(file=out, width=400, color_system=None))
    return out.getvalue()


def verdict_with(text: str) -> Verdict:
    check = CheckResult(name=f"engine.identity{text}", passed=False, observed={"served_model_name": text},
                        expected=text, source=text, hint=text)
    return Verdict(profile=f"all-three{text}", engine_url="http://127.0.0.1:30000", time="t", checks=[check])


def test_markup_from_the_engine_is_printed_literally():
    for text in HOSTILE:
        shown = printed(verdict_with(text))
        assert f"Hint: {text}" in shown, (text, shown)


@given(st.text(alphabet=st.sampled_from("[]/\\ab=#:"), max_size=40))
def test_any_bracketed_text_prints_without_error(text):
    assert "FAIL" in printed(verdict_with(text))


def test_replies_that_thought_are_counted_in_one_line():
    verdict = verdict_with("x")
    assert "reasoned" not in printed(verdict)
    verdict.answers = {"thinking": {"thought": 18, "of": 18, "retried": 16, "retry_completion_tokens": 816,
                                    "cut_after_retry": 0}}
    line = next(line for line in printed(verdict).splitlines() if "reasoned" in line)
    assert line.startswith("answers: 18 of 18 replies") and "16 asked again" in line and "816 tokens" in line
    verdict.answers = {"thinking": {"thought": "[red]x", "of": None}}
    assert "answers: ? of ? replies" in printed(verdict)
