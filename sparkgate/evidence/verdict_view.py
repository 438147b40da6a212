"""Show a verdict: a staged table (rich) with hints for failures, and atomic JSON output."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sparkgate.errors import inert
from sparkgate.evidence.results import Verdict
from sparkgate.evidence.stages import VERDICT_STAGES
from sparkgate.evidence.verify import stage_of


def _short(value, limit: int = 70) -> str:
    text = inert(value if isinstance(value, str) else json.dumps(value, default=str))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table(verdict: Verdict) -> Table:
    # Names, observed values and hints come from profiles and from the engine: shown as text, never read as markup.
    title = inert(f"sparkgate verdict for {verdict.profile} @ {verdict.engine_url}: ") + ("PASS" if verdict.passed else "FAIL")
    out = Table(title=Text(title), show_lines=False)
    for column in ("stage", "check", "result", "observed", "expected"):
        out.add_column(column)
    for check in verdict.checks:
        stage = stage_of(check)
        out.add_row(
            Text("undeclared" if stage is None else f"[{stage + 1}/{len(VERDICT_STAGES)}] {stage.title}"),
            Text(inert(check.name)),
            "[green]pass[/green]" if check.passed else "[red]FAIL[/red]",
            Text(_short(check.observed)),
            Text(_short(check.expected)),
        )
    return out


def print_verdict(verdict: Verdict, console: Console) -> None:
    console.print(table(verdict))
    for check in verdict.failures():
        console.print(Text.assemble(
            ("FAIL", "red"),
            inert(f" {check.name}: observed {_short(check.observed, 1500)}, expected {_short(check.expected, 120)} "
                  f"(source: {check.source}). Hint: {check.hint}"),
        ))
    if thinking := thinking_line(verdict):
        console.print(Text(thinking))
    if verdict.passed:
        console.print(f"[green]all {len(verdict.checks)} checks passed[/green]")


def thinking_line(verdict: Verdict) -> str | None:
    """One line when replies reasoned although asked with thinking off (answers.py: read, asked again)."""
    counts = (verdict.answers or {}).get("thinking")
    if not isinstance(counts, dict) or not counts.get("thought"):
        return None
    count = {k: counts.get(k) if isinstance(counts.get(k), int) else "?" for k in
             ("thought", "of", "retried", "retry_completion_tokens", "cut_after_retry")}
    return (f"answers: {count['thought']} of {count['of']} replies reasoned although thinking was off (read past "
            f"the reasoning); {count['retried']} asked again with more tokens ({count['retry_completion_tokens']} "
            f"tokens), {count['cut_after_retry']} still cut")


def write_json(verdict: Verdict, path: Path) -> None:
    from sparkgate.atomic import write_text_atomically

    write_text_atomically(path, json.dumps(verdict.as_dict(), indent=1, default=str) + "\n")
