"""The sentinel's status page, `GET /sparkgate/`: the gate, every check of the latest verdict, and the re-check
history since the last full verification as small inline SVG plots.

It renders from a GateState snapshot only (never calls the engine), so it stays readable while the engine is
down or refused. Every value on it can come from the engine or a profile and is untrusted: each one passes
through `_esc` (control, bidi and surrogate characters made visible, then `html.escape`), no value is ever put
into an attribute or a URL, and the page carries no script at all - the headers (`HEADERS`) forbid one anyway.
Secrets: the sentinel redacts every verdict before it stores it in GateState; the page shows nothing else.
"""

from __future__ import annotations

import html
import json
import math
import re
import time
from typing import Any

from sparkgate.sentinel import state as S
from sparkgate.sentinel.state import CLOSED, OPEN, VERIFYING, WAITING, number

PATH = "/sparkgate/"
BARE_PATH = "/sparkgate"  # redirected to PATH
REFRESH_S = 5
CONTENT_TYPE = "text/html; charset=utf-8"
CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

# How much of a value a cell shows (characters, before escaping): a failed check's evidence gets more room.
PASSED_VALUE_CHARS = 160
FAILED_VALUE_CHARS = 800
HINT_CHARS = 1200
NAME_CHARS = 200
RECENT_SAMPLES = 12
RECENT_TRANSITIONS = 10

# Plot geometry (the unit tests invert it to read the values back from the points).
PLOT_W, PLOT_H = 360, 130
PLOT_LEFT, PLOT_RIGHT, PLOT_TOP, PLOT_BOTTOM = 48, 10, 10, 24
PLOTS = (  # (history key, title, unit, checks whose `expected` ">= X" gives the threshold line)
    ("decode_tok_s", "Decode speed", "tok/s", S.CALIBRATION_SPEED_CHECKS),
    ("accept_length", "Accept length", "tokens/step", (*S.PROBE_CHECKS, *S.CALIBRATION_ACCEPT_CHECKS)),
    ("mem_available_gib", "Host memory available", "GiB", (S.MEMORY_CHECK,)),
)
STATE_CLASSES = {OPEN: "open", CLOSED: "closed", VERIFYING: "verifying", WAITING: "waiting"}

# C0/C1 controls (tab and newline kept), zero-width and bidi formatting characters, line/paragraph
# separators, BOM and lone surrogates: shown as \uXXXX so nothing reorders or hides the text around it.
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
                        "\ud800-\udfff]")
_FLOOR = re.compile(r"^\s*>=?\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")


# --- escaping and formatting ---------------------------------------------------------------------------
def _esc(value: Any, limit: int | None = None) -> str:
    """Any value as safe HTML text: truncated first (never inside an entity), then made visible and escaped."""
    text = value if isinstance(value, str) else str(value)
    if limit is not None and len(text) > limit:
        text = f"{text[:limit]}… ({len(text)} chars)"
    text = _INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return html.escape(text, quote=True)


def compact(value: Any) -> str:
    """A value as short text: strings as they are, everything else compact JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "–"
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") if abs(value) < 1e6 else f"{value:.3g}"


def _ago(seconds: float) -> str:
    if seconds < -1:
        return "in the future"
    if seconds < 90:
        return f"{max(seconds, 0):.0f} s ago"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.0f} days ago"


def _clock(stamp: float, fmt: str = "%Y-%m-%d %H:%M:%S") -> str | None:
    try:
        return time.strftime(fmt, time.gmtime(stamp))
    except (OverflowError, OSError, ValueError):
        return None


def _when(value: Any, now: float) -> str:
    """A unix time as escaped 'UTC date (n s ago)'; anything else as its escaped text."""
    stamp = number(value)
    if stamp is None:
        return "–" if value is None else _esc(compact(value), PASSED_VALUE_CHARS)
    clock = _clock(stamp)
    return _esc(f"{clock} UTC ({_ago(now - stamp)})" if clock else compact(value))


def _floor(expected: Any) -> float | None:
    """The number of an expectation written ">= X ..." (the checks' own wording), else None."""
    match = _FLOOR.match(expected) if isinstance(expected, str) else None
    if match is None:
        return None
    try:
        return number(float(match.group(1)))
    except ValueError:
        return None


# --- what the page shows -----------------------------------------------------------------------------
def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def check_rows(snap: dict) -> list[dict]:
    """Every check of the latest verdict: the full verdict's, each overlaid with the latest re-check's result of
    the same name, then the re-check-only ones, then the two suites. Each row: the check's dict plus `as_of`."""
    full = _dict(snap.get("full"))
    latest: dict[str, dict] = {}
    for check in S.checks_of(snap.get("recheck")):
        latest.setdefault(str(check.get("name")), check)
    named = [(str(check.get("name")), check) for check in S.checks_of(full.get("verification"))]
    rows = [{**(latest.get(name) or check), "as_of": "re-check" if name in latest else "full verdict"}
            for name, check in named]
    known = {name for name, _ in named}
    rows += [{**check, "as_of": "re-check only"} for name, check in latest.items() if name not in known]
    for suite in ("infra", "smoke"):
        result = full.get(suite)
        if isinstance(result, dict):
            rows.append(_suite_row(suite, result))
    return rows


def _suite_row(suite: str, result: dict) -> dict:
    tests = [t for t in result.get("tests") or [] if isinstance(t, dict)] if isinstance(result.get("tests"), list) else []
    passed = result.get("passed") is True
    not_passed = [{"name": t.get("name"), "outcome": t.get("outcome"), "message": t.get("message")}
                  for t in tests if t.get("outcome") != "passed"]
    observed = (f"{len(tests)} tests passed" if passed else
                {"not_passed": not_passed, "of": len(tests), "exit_code": result.get("exit_code")})
    return {"name": f"suite.{suite}", "passed": passed, "observed": observed,
            "expected": "every test ran and passed (a skip, an error or no test at all fails)",
            "source": f"pytest sparkgate/suites/{suite}" + (" (testinfra)" if suite == "infra" else ""),
            "hint": "output tail: " + compact(result.get("output_tail") or ""), "as_of": "full verdict"}


def thresholds(rows: list[dict]) -> dict[str, float]:
    """Each plot's threshold line, read from the expectations of the checks that judge it (the highest floor)."""
    expected = {str(row.get("name")): row.get("expected") for row in rows}
    found = {}
    for key, _title, _unit, names in PLOTS:
        floors = [f for f in (_floor(expected.get(name)) for name in names if name in expected) if f is not None]
        if floors:
            found[key] = max(floors)
    return found


# --- plots ---------------------------------------------------------------------------------------------
def plot_points(history: list[dict], key: str) -> list[tuple[float, float | None]]:
    """(time, value or None) of every sample with a time: None is a gap, never a zero (a negative figure is no
    measurement of a count or a rate, so it is a gap too)."""
    points = []
    for sample in history:
        if not isinstance(sample, dict):
            continue
        stamp = number(sample.get("time"))
        if stamp is not None:
            value = number(sample.get(key))
            points.append((stamp, value if value is not None and value >= 0 else None))
    return points


def _plot(key: str, title: str, unit: str, history: list[dict], threshold: float | None, now: float) -> str:
    points = plot_points(history, key)
    values = [v for _, v in points if v is not None]
    latest = next((v for _, v in reversed(points) if v is not None), None)
    caption = (f"<figcaption><strong>{_esc(title)}</strong> ({_esc(unit)}): latest {_fmt(latest)}"
               + (f", min {_fmt(min(values))}, max {_fmt(max(values))}" if values else "")
               + (f", threshold {_fmt(threshold)}" if threshold is not None else "")
               + f"; {len(values)} of {len(points)} samples carry it</figcaption>")
    if not values:
        return (f'<figure class="plot" id="plot-{key}">{caption}'
                '<p class="empty">no sample carries this figure yet</p></figure>')
    # Every plotted figure is a count or a rate (never below zero: plot_points leaves a negative one out), so the
    # axis starts at zero: a drop reads as its true share of the whole, not as a cliff of a zoomed-in band.
    span = [*values, *([threshold] if threshold is not None and threshold >= 0 else [])]
    lo, hi = 0.0, max(span)
    hi = hi * 1.08 if hi > 0 else 1.0
    t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
    if not all(math.isfinite(v) for v in (hi - lo, t1 - t0)):
        return (f'<figure class="plot" id="plot-{key}">{caption}'
                '<p class="empty">the figures span too wide a range to plot</p></figure>')
    inner_w = PLOT_W - PLOT_LEFT - PLOT_RIGHT
    inner_h = PLOT_H - PLOT_TOP - PLOT_BOTTOM

    def x(stamp: float) -> float:
        return PLOT_LEFT + ((stamp - t0) / (t1 - t0) * inner_w if t1 > t0 else inner_w / 2)

    def y(value: float) -> float:
        return PLOT_TOP + (hi - value) / (hi - lo) * inner_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {PLOT_W} {PLOT_H}" width="{PLOT_W}" '
        f'height="{PLOT_H}" role="img" aria-label="{_esc(title)}" data-key="{key}" data-lo="{lo!r}" data-hi="{hi!r}" '
        f'data-t0="{t0!r}" data-t1="{t1!r}">',
        f"<title>{_esc(title)} ({_esc(unit)})</title>",
        f'<rect class="frame" x="{PLOT_LEFT}" y="{PLOT_TOP}" width="{inner_w}" height="{inner_h}"/>',
        f'<text class="axis" x="{PLOT_LEFT - 4}" y="{PLOT_TOP + 9}" text-anchor="end">{_fmt(hi)}</text>',
        f'<text class="axis" x="{PLOT_LEFT - 4}" y="{PLOT_TOP + inner_h}" text-anchor="end">{_fmt(lo)}</text>',
        f'<text class="axis" x="{PLOT_LEFT}" y="{PLOT_H - 6}">{_esc(_clock(t0, "%H:%M:%S") or "")} UTC</text>',
        f'<text class="axis" x="{PLOT_W - PLOT_RIGHT}" y="{PLOT_H - 6}" text-anchor="end">'
        f'{_esc(_clock(t1, "%H:%M:%S") or "")} UTC ({_esc(_ago(now - t1))})</text>',
    ]
    if threshold is not None:
        ty = y(threshold)
        parts.append(f'<line class="threshold" x1="{PLOT_LEFT}" x2="{PLOT_W - PLOT_RIGHT}" y1="{ty:.2f}" '
                     f'y2="{ty:.2f}" data-value="{threshold!r}"/>')
        parts.append(f'<text class="axis threshold-label" x="{PLOT_W - PLOT_RIGHT - 2}" y="{ty - 3:.2f}" '
                     f'text-anchor="end">threshold {_fmt(threshold)}</text>')
    for sample in history:  # failed samples: a red tick on the time axis
        stamp = number(sample.get("time")) if isinstance(sample, dict) else None
        if stamp is not None and sample.get("passed") is not True:
            fx = x(stamp)
            parts.append(f'<line class="failed-tick" x1="{fx:.2f}" x2="{fx:.2f}" y1="{PLOT_TOP + inner_h}" '
                         f'y2="{PLOT_TOP + inner_h - 8}"/>')
    segments: list[list[tuple[float, float]]] = [[]]
    for stamp, value in points:
        if value is None:
            if segments[-1]:
                segments.append([])
        else:
            segments[-1].append((x(stamp), y(value)))
    for segment in segments:
        if len(segment) >= 2:
            joined = " ".join(f"{px:.2f},{py:.2f}" for px, py in segment)
            parts.append(f'<polyline class="series" points="{joined}"/>')
        elif segment:
            parts.append(f'<circle class="series" cx="{segment[0][0]:.2f}" cy="{segment[0][1]:.2f}" r="2.5"/>')
    parts.append("</svg>")
    return f'<figure class="plot" id="plot-{key}">{caption}{"".join(parts)}</figure>'


# --- the page ------------------------------------------------------------------------------------------
STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1200px;padding:12px 20px;
color:#1d232a;background:#f7f8fa}
h1{font-size:20px;margin:4px 0}h2{font-size:16px;margin:22px 0 8px;border-bottom:1px solid #d5d9df}
.gate{display:inline-block;padding:6px 14px;border-radius:6px;font-size:18px;font-weight:600;color:#fff;margin:6px 0}
.gate.open{background:#1f7a3a}.gate.closed{background:#b3261e}.gate.verifying,.gate.waiting{background:#a66300}
.gate.unknown{background:#555}
#reason{margin:4px 0 10px;white-space:pre-wrap;word-break:break-word}
dl.summary{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0}
dl.summary dt{color:#5a6470}dl.summary dd{margin:0;word-break:break-word}
dl.summary dd.warn{color:#a66300}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{border:1px solid #e1e4e8;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#eef1f4;font-weight:600}
td.observed,td.expected,td.values{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;
white-space:pre-wrap;overflow-wrap:anywhere}
td.name{width:22%}td.result{width:5%}td.asof{width:7%}td.observed{width:38%}
td.name code{font-size:13px;overflow-wrap:anywhere}.source{color:#6a737d;font-size:11px;overflow-wrap:anywhere}
tr.check.fail td.result{color:#b3261e;font-weight:700}tr.check.pass td.result{color:#1f7a3a}
tr.check.fail td{background:#fdf0ef}tr.hint td{background:#fff7e0;font-size:13px;white-space:pre-wrap;
word-break:break-word}
.plots{display:flex;flex-wrap:wrap;gap:12px}figure.plot{margin:0;background:#fff;border:1px solid #e1e4e8;
padding:6px;width:min-content}figcaption{font-size:12px;margin-bottom:4px;min-height:3em}
svg .frame{fill:#fbfcfd;stroke:#c9ced6}svg .axis{font-size:10px;fill:#5a6470}
svg polyline.series{fill:none;stroke:#1f5fbf;stroke-width:1.6}svg circle.series{fill:#1f5fbf}
svg .threshold{stroke:#b3261e;stroke-dasharray:5 3;stroke-width:1.2}svg .threshold-label{fill:#b3261e}
svg .failed-tick{stroke:#b3261e;stroke-width:1.5}
.empty{color:#6a737d;font-style:italic}footer{color:#6a737d;font-size:12px;margin:24px 0 8px}
"""


def render(snap: dict, now: float | None = None) -> str:
    """The whole page from a GateState snapshot (`snapshot(history=True)`)."""
    now = time.time() if now is None else now
    state = snap.get("state")
    state_class = STATE_CLASSES.get(state, "unknown") if isinstance(state, str) else "unknown"
    rows = check_rows(snap)
    history = [s for s in snap.get("history") or [] if isinstance(s, dict)] if isinstance(snap.get("history"), list) else []
    full = _dict(snap.get("full"))
    body = [
        f"<header><h1>sparkgate status: <span id=\"profile\">{_esc(snap.get('profile'), NAME_CHARS)}</span></h1>",
        f'<div id="gate" class="gate {state_class}">gate <span id="gate-state">{_esc(state, NAME_CHARS)}</span></div>',
        f'<p id="reason">{_esc(snap.get("reason"), HINT_CHARS)}</p>',
        '<dl class="summary" id="summary">',
        f"<dt>profile</dt><dd>{_esc(snap.get('profile'), NAME_CHARS)}</dd>",
        f"<dt>state since</dt><dd id=\"changed-at\">{_when(snap.get('changed_at'), now)}</dd>",
        f"<dt>open since</dt><dd id=\"opened-at\">"
        f"{_when(snap.get('opened_at'), now) if snap.get('opened_at') is not None else 'not open'}</dd>",
        f"<dt>engine phase</dt><dd id=\"engine-phase\">{_esc(snap.get('engine_phase'), NAME_CHARS)}</dd>",
        f"<dt>engine startup</dt><dd id=\"engine-startup\">{_startup(snap.get('engine_startup_time'), now)}</dd>",
        f"<dt>captures</dt><dd id=\"captures\">{_captures(snap.get('captures'), snap.get('profile'))}</dd>",
        f"<dt>latest verdict</dt><dd>{_when(snap.get('last_verdict_at'), now)}</dd>",
        f"<dt>full verifications</dt><dd>{_esc(snap.get('full_runs'))}</dd>",
        f"<dt>re-checks</dt><dd>{_esc(snap.get('rechecks'))}</dd>",
        f"<dt>answers last checked</dt><dd id=\"answers-checked\">{_answers_checked(snap.get('answers_checked'), now)}"
        "</dd>",
        *_speculation(snap.get("speculation_by_context")),
        "</dl></header>",
        _history_section(history, rows, now),
        _checks_section(rows, full),
        _samples_section(history, now),
        _transitions_section(snap.get("transitions"), now),
        f"<footer>Read-only; rendered by the sentinel from its own state at {_esc(_clock(now) or now)} UTC, "
        f"refreshed every {REFRESH_S} s. It never calls the engine. JSON: /sparkgate/verdict, "
        "Prometheus: /sparkgate/metrics.</footer>",
    ]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="refresh" content="{REFRESH_S}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>sparkgate {_esc(snap.get('profile'), NAME_CHARS)}: {_esc(state, NAME_CHARS)}</title>"
        f"<style>{STYLE}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


STARTUP_ROWS = 12


def _speculation(read: Any) -> list[str]:
    """Speculative profiles: per context band of client traffic, whether speculation still pays (context_bands.py)."""
    if not isinstance(read, dict):
        return []
    break_even = number(read.get("break_even_accept_length"))
    parts, warn = [], False
    for name, band in _dict(read.get("bands")).items():
        band = _dict(band)
        accept, pays = number(band.get("accept_length")), band.get("pays")
        if pays is True:
            parts.append(f"{_esc(name, NAME_CHARS)} pays ({_fmt(accept)})")
        elif pays is False:
            warn = True
            parts.append(f"<strong>{_esc(name, NAME_CHARS)} not paying ({_fmt(accept)} &le; {_fmt(break_even)})</strong>")
    text = "; ".join(parts) or "no band judged yet (each needs 3 decode lines of client traffic)"
    return [f"<dt>speculation by context</dt><dd id=\"speculation-by-context\" class=\"{'warn' if warn else 'ok'}\">"
            f"{text}; break-even accept length {_fmt(break_even)}</dd>"]


def _answers_checked(checked: Any, now: float) -> str:
    """How long the gate has gone without a right answer from the engine (the admitting verdict's or a probe's)."""
    at = number(checked.get("at")) if isinstance(checked, dict) else None
    if at is None:
        return "not since this sentinel started"
    late = " (overdue: the next gap in traffic asks one)" if checked.get("overdue") is True else ""
    return _when(at, now) + late


def startup_rows(value: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, float]]:
    """SGLang's /server_info startup_time ({"load_weight": s, "cuda_graph": {"decode": s, ...}, ...}) as
    (phase, seconds) rows, nested phases joined by '.', only finite non-negative numbers, at most STARTUP_ROWS."""
    rows: list[tuple[str, float]] = []
    if isinstance(value, dict):
        for name, item in value.items():
            label = f"{prefix}{name}"
            seconds = number(item)
            if isinstance(item, dict):
                if depth < 2:  # SGLang nests one level (cuda_graph.decode); deeper is not a startup report
                    rows.extend(startup_rows(item, label + ".", depth + 1))
            elif seconds is not None and seconds >= 0:
                rows.append((label, seconds))
    return rows[:STARTUP_ROWS]


def _startup(value: Any, now: float) -> str:
    """The engine's startup phases as a small table; a unix time as a date; anything else as escaped text."""
    rows = startup_rows(value)
    if not rows:
        return _when(value, now)
    body = "".join(f"<tr><td>{_esc(name, NAME_CHARS)}</td><td class=\"num\">{_fmt(seconds, 1)} s</td></tr>"
                   for name, seconds in rows)
    return f'<table id="startup"><thead><tr><th>phase</th><th>seconds</th></tr></thead><tbody>{body}</tbody></table>'


def _captures(value: Any, profile: Any) -> str:
    """Where the sentinel keeps its captures (sentinel/captures.py), and how to copy one out."""
    captures = _dict(value)
    if captures.get("error"):
        return _esc(captures["error"], HINT_CHARS)
    if not captures.get("last"):
        return "none yet (one is written after each full verification)"
    refused = captures.get("refused") if isinstance(captures.get("refused"), list) else []
    return (f"last: <code>{_esc(captures['last'], NAME_CHARS)}</code>"
            + (f"; {len(refused)} refused kept, latest <code>{_esc(refused[-1], NAME_CHARS)}</code>" if refused else "")
            + "; copy one out with <code>invoke capture --profile " + _esc(profile or "P", NAME_CHARS)
            + "</code>")


def _checks_section(rows: list[dict], full: dict) -> str:
    if not rows:
        return ('<section id="checks"><h2>Checks</h2><p class="empty">no verdict yet: the sentinel is waiting for '
                "the engine or still verifying it</p></section>")
    failing = [row for row in rows if row.get("passed") is not True]
    ordered = failing + [row for row in rows if row.get("passed") is True]
    out = [f'<section id="checks"><h2>Checks: {len(rows)}, {len(failing)} failing'
           f'{"" if full else " (no full verdict kept)"}</h2>',
           '<table id="check-table"><thead><tr><th>check</th><th>result</th><th>observed</th><th>expected</th>'
           "<th>as of</th></tr></thead><tbody>"]
    for row in ordered:
        ok = row.get("passed") is True
        limit = PASSED_VALUE_CHARS if ok else FAILED_VALUE_CHARS
        out.append(
            f'<tr class="check {"pass" if ok else "fail"}">'
            f'<td class="name"><code>{_esc(row.get("name"), NAME_CHARS)}</code>'
            f'<div class="source">{_esc(compact(row.get("source", "")), NAME_CHARS)}</div></td>'
            f'<td class="result">{"passed" if ok else "FAILED"}</td>'
            f'<td class="observed">{_esc(compact(row.get("observed")), limit)}</td>'
            f'<td class="expected">{_esc(compact(row.get("expected")), limit)}</td>'
            f'<td class="asof">{_esc(row.get("as_of"))}</td></tr>'
        )
        if not ok:
            out.append(f'<tr class="hint"><td colspan="5"><strong>hint:</strong> '
                       f'{_esc(compact(row.get("hint", "")), HINT_CHARS)}</td></tr>')
    out.append("</tbody></table></section>")
    return "".join(out)


def _history_section(history: list[dict], rows: list[dict], now: float) -> str:
    lines = thresholds(rows)
    failed = sum(1 for s in history if s.get("passed") is not True)
    first = number(history[0].get("time")) if history else None
    head = (f'<section id="history"><h2>Since the last full verification: {len(history)} sample{"" if len(history) == 1 else "s"}, {failed} failed'
            f'{", from " + _when(first, now) if first is not None else ""}</h2>')
    if not history:
        return head + '<p class="empty">no samples yet</p></section>'
    plots = "".join(_plot(key, title, unit, history, lines.get(key), now) for key, title, unit, _ in PLOTS)
    return head + f'<div class="plots">{plots}</div></section>'


def _samples_section(history: list[dict], now: float) -> str:
    if not history:
        return ""
    recent = ['<section id="latest-samples"><h2>Latest samples</h2><table id="samples"><thead><tr><th>time</th>'
              "<th>kind</th><th>result</th><th>failing</th><th>decode tok/s</th><th>accept length</th><th>mem available GiB</th></tr></thead><tbody>"]
    for sample in reversed(history[-RECENT_SAMPLES:]):
        ok = sample.get("passed") is True
        names = sample.get("failing") if isinstance(sample.get("failing"), list) else []
        recent.append(
            f'<tr class="sample {"pass" if ok else "fail"}"><td>{_when(sample.get("time"), now)}</td>'
            f'<td>{_esc(sample.get("kind"), NAME_CHARS)}</td><td>{"passed" if ok else "FAILED"}</td>'
            f'<td class="values">{_esc(", ".join(str(n) for n in names), FAILED_VALUE_CHARS)}</td>'
            f'<td>{_fmt(number(sample.get("decode_tok_s")))}</td><td>{_fmt(number(sample.get("accept_length")), 3)}</td>'
            f'<td>{_fmt(number(sample.get("mem_available_gib")))}</td></tr>'
        )
    recent.append("</tbody></table></section>")
    return "".join(recent)


def _transitions_section(transitions: Any, now: float) -> str:
    items = [t for t in transitions if isinstance(t, dict)] if isinstance(transitions, list) else []
    if not items:
        return '<section id="transitions"><h2>Transitions</h2><p class="empty">none yet</p></section>'
    out = ['<section id="transitions"><h2>Transitions</h2><table><thead><tr><th>at</th><th>from</th><th>to</th>'
           "<th>reason</th></tr></thead><tbody>"]
    for item in reversed(items[-RECENT_TRANSITIONS:]):
        out.append(f"<tr><td>{_when(item.get('at'), now)}</td><td>{_esc(item.get('from'), NAME_CHARS)}</td>"
                   f"<td>{_esc(item.get('to'), NAME_CHARS)}</td>"
                   f"<td class=\"values\">{_esc(item.get('reason'), HINT_CHARS)}</td></tr>")
    out.append("</tbody></table></section>")
    return "".join(out)


def error_page(exc: BaseException) -> str:
    """What the page says if rendering itself failed (a sentinel bug): still HTML, still escaped."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="refresh" content="{REFRESH_S}"><title>sparkgate status</title></head><body>'
            f"<p>the status page could not be rendered ({_esc(type(exc).__name__)}); "
            "/sparkgate/verdict has the state as JSON</p></body></html>\n")
