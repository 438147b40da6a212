"""The status page `/sparkgate/` (sentinel/page.py): rendered from GateState snapshots only, every check of the
latest verdict with its evidence, the re-check history as inline SVG whose points are the history's values, no
hostile value ever rendered as markup (property-based, parsed back with html.parser), and the headers that
forbid any script, served by the real sentinel HTTP server. The history itself (state.py): extracted
defensively from what the sentinel stored, bounded, and restarted at each full verification."""

from __future__ import annotations

import html
import json
import math
import time
import urllib.error
import urllib.request
from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkgate.bundle import render
from sparkgate.evidence.gather import Evidence
from sparkgate.evidence.results import CheckResult, Verdict, checked
from sparkgate.profile import loading as profiles
from sparkgate.runtime import gateway_routes as R
from sparkgate.sentinel import http as sentinel_http
from sparkgate.sentinel import page, service
from sparkgate.sentinel import state as state_mod
from sparkgate.sentinel.service import Sentinel, SentinelConfig
from sparkgate.sentinel.state import CLOSED, OPEN, GateState
from tests.plugins.simproc import free_port
from tests.unit.test_gateway_routes import _rendered_decision

NOW = 1_790_000_000.0
VOID = {"meta", "br", "hr", "img", "input", "link", "area", "base", "col", "embed", "source", "track", "wbr"}
# Every element and attribute the page may contain: anything else in a render is injected markup.
ALLOWED = {
    "html": {"lang"}, "head": set(), "meta": {"charset", "http-equiv", "content", "name"}, "title": set(),
    "style": set(), "body": set(), "header": set(), "h1": set(), "h2": set(), "span": {"id"},
    "div": {"id", "class"}, "p": {"id", "class"}, "dl": {"class", "id"}, "dt": set(), "dd": {"id", "class"},
    "section": {"id"}, "table": {"id"}, "thead": set(), "tbody": set(), "tr": {"class"}, "th": set(),
    "td": {"class", "colspan"}, "code": set(), "strong": set(), "footer": set(), "figure": {"class", "id"},
    "figcaption": set(),
    "svg": {"xmlns", "class", "viewbox", "width", "height", "role", "aria-label", "data-key", "data-lo", "data-hi",
            "data-t0", "data-t1"},
    "rect": {"class", "x", "y", "width", "height"}, "text": {"class", "x", "y", "text-anchor"},
    "line": {"class", "x1", "x2", "y1", "y2", "data-value"}, "polyline": {"class", "points"},
    "circle": {"class", "cx", "cy", "r"},
}


class Node:
    def __init__(self, tag: str, attrs: dict, parent: Node | None):
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def walk(self):
        yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.walk()

    def find_all(self, tag: str | None = None, **attrs) -> list[Node]:
        def hit(node: Node) -> bool:
            if tag is not None and node.tag != tag:
                return False
            for key, value in attrs.items():
                key = key.rstrip("_")
                if key == "class":
                    if value not in (node.attrs.get("class") or "").split():
                        return False
                elif node.attrs.get(key) != value:
                    return False
            return True
        return [node for node in self.walk() if hit(node)]

    def find(self, tag: str | None = None, **attrs) -> Node:
        found = self.find_all(tag, **attrs)
        assert found, f"no <{tag} {attrs}>"
        return found[0]


class Tree(HTMLParser):
    """A forgiving DOM: enough to find elements, attributes and text the way a browser would see them."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.current = self.root
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v for k, v in attrs}, self.current)
        self.current.children.append(node)
        if tag not in VOID:
            self.current = node

    def handle_startendtag(self, tag, attrs):
        self.current.children.append(Node(tag, {k: v for k, v in attrs}, self.current))

    def handle_endtag(self, tag):
        node = self.current
        while node is not self.root and node.tag != tag:
            node = node.parent
        if node is not self.root:
            self.current = node.parent

    def handle_data(self, data):
        self.current.children.append(data)


def dom(text: str) -> Node:
    return Tree(text).root


def check(name, passed, observed=None, expected=None, source="x", hint="the hint") -> dict:
    return {"name": name, "passed": passed, "observed": observed, "expected": expected, "source": source, "hint": hint}


def full_verdict(passed: bool = True, extra: list[dict] = ()) -> dict:
    checks = [
        check("engine.health", True, 200, 200, "GET /health"),
        check("engine.speed_floor", True, 55.2, ">= 50.0 tok/s (profile gate.min_decode_tok_s)"),
        check("mtp.accept_length", passed, 2.91 if passed else 1.01, ">= 2.4", "calibration",
              "~1.00 means every draft token is rejected"),
        check("host.memory_headroom", True, {"mem_available_gib": 80.5, "mem_total_gib": 121.7},
              ">= 4.0 GiB MemAvailable", "/proc/meminfo"),
        *extra,
    ]
    return {"passed": passed,
            "verification": {"checks": checks, "calibration": {"decode_tok_s": 55.2, "accept_length": 2.91}},
            "infra": {"passed": True, "tests": [{"name": "t", "outcome": "passed", "message": ""}]},
            "smoke": {"passed": True, "tests": [{"name": "s", "outcome": "passed", "message": ""}]}}


def gate(full: dict | None, state: str = OPEN, reason: str = "all checks, testinfra and smoke tests passed",
         recheck: dict | None = None) -> GateState:
    gs = GateState(profile="all-three")
    gs.full, gs.recheck, gs.engine_phase = full, recheck, "ready"
    gs.last_verdict_at, gs.full_runs = NOW - 60, 1 if full else 0
    if full:
        gs.record_admission()
    gs.set(state, reason)
    return gs


def rows(tree: Node) -> dict[str, Node]:
    return {r.find("td", class_="name").find("code").text: r for r in tree.find_all("tr", class_="check")}


def hint_after(row: Node) -> str:
    siblings = [c for c in row.parent.children if isinstance(c, Node)]
    following = siblings[siblings.index(row) + 1]
    assert "hint" in following.attrs.get("class", "")
    return following.text


# --- what the page shows ----------------------------------------------------------------------------------
def test_an_admitted_gate_shows_state_profile_phase_and_every_check():
    tree = dom(page.render(gate(full_verdict()).snapshot(history=True), now=NOW))
    assert tree.find(id="gate-state").text == "open" and "open" in tree.find(id="gate").attrs["class"].split()
    assert tree.find(id="profile").text == "all-three"
    assert tree.find(id="engine-phase").text == "ready"
    assert tree.find(id="reason").text == "all checks, testinfra and smoke tests passed"
    assert "UTC" in tree.find(id="opened-at").text
    shown = rows(tree)
    assert set(shown) == {"engine.health", "engine.speed_floor", "mtp.accept_length", "host.memory_headroom",
                          "suite.infra", "suite.smoke"}
    assert all(r.find("td", class_="result").text == "passed" for r in shown.values())
    assert shown["host.memory_headroom"].find("td", class_="observed").text == \
        '{"mem_available_gib":80.5,"mem_total_gib":121.7}'
    assert not tree.find_all("tr", class_="hint")  # hints are for failures
    meta = tree.find("meta", **{"http-equiv": "refresh"})
    assert meta.attrs["content"] == str(page.REFRESH_S)


def test_a_refused_gate_shows_the_failed_check_with_observed_expected_and_hint():
    full = full_verdict(passed=False)
    full["smoke"] = {"passed": False, "exit_code": 1, "output_tail": "1 failed",
                     "tests": [{"name": "test_chat", "outcome": "failed", "message": "HTTP 500"}]}
    tree = dom(page.render(gate(full, CLOSED, "verification failed: mtp.accept_length").snapshot(history=True),
                           now=NOW))
    assert tree.find(id="gate-state").text == "closed" and "closed" in tree.find(id="gate").attrs["class"]
    shown = rows(tree)
    refused = shown["mtp.accept_length"]
    assert refused.attrs["class"] == "check fail" and refused.find("td", class_="result").text == "FAILED"
    assert refused.find("td", class_="observed").text == "1.01"
    assert refused.find("td", class_="expected").text == ">= 2.4"
    assert "every draft token is rejected" in hint_after(refused)
    smoke = shown["suite.smoke"]
    assert "test_chat" in smoke.find("td", class_="observed").text and "1 failed" in hint_after(smoke)
    # Failures come first: the reader sees what refused the engine without scrolling.
    order = [r.find("code").text for r in tree.find_all("tr", class_="check")]
    assert order[:2] == ["mtp.accept_length", "suite.smoke"]


def test_the_latest_recheck_overlays_the_full_verdict_and_adds_its_own_checks():
    recheck = {"time": NOW - 5, "passed": False, "checks": [
        check("host.memory_headroom", False, {"mem_available_gib": 1.2}, ">= 4.0 GiB MemAvailable", "/proc/meminfo",
              "the host has 1.2 GiB left"),
        check("sentinel.engine_unchanged", True, {"t": 1}, {"t": 1}),
    ]}
    gs = gate(full_verdict())
    gs.recheck = recheck
    gs.record_recheck()
    gs.set(CLOSED, "re-check failed: host.memory_headroom")
    shown = rows(dom(page.render(gs.snapshot(history=True), now=NOW)))
    memory = shown["host.memory_headroom"]
    assert memory.find("td", class_="result").text == "FAILED" and memory.find("td", class_="asof").text == "re-check"
    assert memory.find("td", class_="observed").text == '{"mem_available_gib":1.2}'
    assert "1.2 GiB left" in hint_after(memory)
    assert shown["engine.health"].find("td", class_="asof").text == "full verdict"
    assert shown["sentinel.engine_unchanged"].find("td", class_="asof").text == "re-check only"


def test_long_values_are_truncated_and_say_so():
    huge = {"blob": "x" * 5000}
    tree = dom(page.render(gate(full_verdict(extra=[check("probe.report", True, huge, "ok")])).snapshot(), now=NOW))
    cell = rows(tree)["probe.report"].find("td", class_="observed").text
    assert len(cell) < page.PASSED_VALUE_CHARS + 40 and cell.endswith(f"({len(json.dumps(huge, separators=(',', ':')))} chars)")


def test_waiting_for_a_dead_engine_still_renders():
    gs = GateState(profile="baseline")
    gs.engine_phase = "loading target weights"
    gs.set("waiting", "engine not healthy (phase: loading target weights)")
    tree = dom(page.render(gs.snapshot(history=True)))
    assert tree.find(id="gate-state").text == "waiting" and "waiting" in tree.find(id="gate").attrs["class"]
    assert "no verdict yet" in tree.find(id="checks").text and "no samples yet" in tree.find(id="history").text


# --- hostile values ---------------------------------------------------------------------------------------
NASTY = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "'><svg onload=alert(1)>", "</td></tr>",
         "</textarea>", "<!--", "-->", "]]>", "<![CDATA[", "&lt;script&gt;", "&#60;script&#62;", "javascript:",
         '<meta http-equiv="refresh" content="0;url=http://evil">', "<style>", "</style>", "</svg>", "<a href=x>",
         "\u202e", "\u2066", "\x00", "\r", "\x1b[31m", "\ufeff", "{{ 7*7 }}", "${x}", "\\", "\n", "é", "😀"]
hostile_text = st.lists(st.one_of(st.sampled_from(NASTY), st.text(max_size=8)), min_size=1, max_size=6).map("".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | hostile_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile_text, inner, max_size=4), max_leaves=12)


def assert_inert(text: str) -> Node:
    """The render holds only the page's own elements and attributes: no script, no handler, no injected tag."""
    tree = dom(text)
    for node in tree.walk():
        if node.tag == "#document":
            continue
        assert node.tag != "script"
        assert node.tag in ALLOWED, f"injected element <{node.tag}>"
        for name in node.attrs:
            assert not name.startswith("on"), f"event handler attribute {name} on <{node.tag}>"
            assert name in ALLOWED[node.tag], f"unexpected attribute {name} on <{node.tag}>"
    assert len(tree.find_all("meta", **{"http-equiv": "refresh"})) == 1
    assert len(tree.find_all("style")) == 1 and len(tree.find("head").find_all("title")) == 1
    return tree


def shown_as(value: str, limit: int) -> str:
    """How the page prints a text value: truncated, invisible characters spelled out."""
    if len(value) > limit:
        value = f"{value[:limit]}… ({len(value)} chars)"
    return page._INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", value)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=hostile_text, observed=json_values, expected=json_values, hint=hostile_text, reason=hostile_text,
       profile=hostile_text, phase=hostile_text, value=hostile_text)
def test_no_hostile_value_is_ever_markup(name, observed, expected, hint, reason, profile, phase, value):
    full = full_verdict(passed=False, extra=[check(name, False, observed, expected, value, hint)])
    full["verification"]["calibration"] = {"decode_tok_s": value, "accept_length": observed}
    full["infra"] = {"passed": False, "tests": [{"name": value, "outcome": name, "message": hint}], "output_tail": hint}
    gs = GateState(profile=profile)
    gs.full, gs.engine_phase, gs.engine_startup_time, gs.last_verdict_at = full, phase, observed, NOW
    gs.record_admission()
    gs.recheck = {"time": value, "passed": observed, "checks": [
        check(value, False, observed, expected, name, hint),
        check("host.memory_headroom", False, {"mem_available_gib": observed}, value),
        check("sentinel.accept_probe", True, {"accept_length": observed, "decode_tok_s": value}, expected),
    ]}
    gs.record_recheck()
    gs.set(CLOSED, reason)
    gs.transitions.append({"at": value, "from": name, "to": phase, "reason": reason})
    text = page.render(gs.snapshot(history=True), now=NOW)
    tree = assert_inert(text)
    # Shown faithfully, as text: what a reader sees is the value itself, not markup and not mangled.
    assert tree.find(id="reason").text == shown_as(reason, page.HINT_CHARS)
    assert tree.find(id="profile").text == shown_as(profile, page.NAME_CHARS)
    assert shown_as(name, page.NAME_CHARS) in rows(tree)
    # html.escape leaves no raw markup characters of a value in the source.
    for raw in ("<script", "<img", "<svg onload", "<meta http-equiv=\"refresh\" content=\"0"):
        assert raw not in text


def test_a_hostile_render_parses_with_no_script_and_no_handler():
    """The fixed worst cases, spelled out (the property test above draws from them)."""
    evil = '"><img src=x onerror=alert(1)><script>alert(2)</script>'
    full = full_verdict(passed=False, extra=[check(evil, False, {evil: [evil]}, evil, evil, evil)])
    gs = gate(full, CLOSED, evil)
    gs.profile = evil
    text = page.render(gs.snapshot(history=True), now=NOW)
    tree = assert_inert(text)
    assert html.escape(evil) in text and evil not in text
    assert tree.find(id="reason").text == evil


def test_control_and_bidi_characters_are_spelled_out():
    gs = gate(full_verdict(), reason="ok\u202eevil\x00\ud800")
    assert dom(page.render(gs.snapshot(), now=NOW)).find(id="reason").text == "ok\\u202eevil\\u0000\\ud800"


@settings(max_examples=60, deadline=None)
@given(snapshot=st.dictionaries(st.sampled_from(["profile", "state", "reason", "full", "recheck", "history",
                                                 "transitions", "opened_at", "changed_at", "engine_phase"]),
                                json_values, max_size=10))
def test_any_shape_of_snapshot_renders(snapshot):
    """Whatever the state holds (engine-sourced: any type anywhere), the page renders and stays inert."""
    assert_inert(page.render(snapshot, now=NOW))


# --- the history ------------------------------------------------------------------------------------------
def test_samples_are_read_from_where_the_figures_live():
    admitted = state_mod.admission_sample(full_verdict(), at=NOW)
    assert admitted == {"time": NOW, "kind": "admission", "passed": True, "failing": [], "decode_tok_s": 55.2,
                        "accept_length": 2.91, "mem_available_gib": 80.5}
    refused = full_verdict(passed=False)
    refused["verification"]["calibration"] = {}  # no calibration figures: the checks' observed values stand in
    refused["infra"]["passed"] = False
    sample = state_mod.admission_sample(refused, at=NOW)
    assert sample["failing"] == ["mtp.accept_length", "suite.infra"] and not sample["passed"]
    assert sample["decode_tok_s"] == 55.2 and sample["accept_length"] == 1.01
    recheck = {"time": NOW + 5, "passed": True, "checks": [
        check("host.memory_headroom", True, {"mem_available_gib": 77.0}),
        check("sentinel.accept_probe", True, {"accept_length": 2.75, "completion_tokens": 48}),
    ]}
    assert state_mod.recheck_sample(recheck) == {"time": NOW + 5, "kind": "recheck", "passed": True, "failing": [],
                                                 "decode_tok_s": None, "accept_length": 2.75,
                                                 "mem_available_gib": 77.0}
    dspark = {"time": NOW, "passed": False, "checks": [
        check("sentinel.dspark_accept_probe", False, {"accept_length": 1.4, "decode_tok_s": 41}),
        check("engine.health", False, 503, 200)]}
    sample = state_mod.recheck_sample(dspark)
    assert sample["accept_length"] == 1.4 and sample["decode_tok_s"] == 41.0
    assert sample["failing"] == ["sentinel.dspark_accept_probe", "engine.health"] and sample["mem_available_gib"] is None


@pytest.mark.parametrize("odd", [None, "80.5", True, float("nan"), float("inf"), 10**400, [1], {"v": 1}, ""])
def test_a_figure_that_is_not_a_finite_number_is_a_gap(odd):
    recheck = {"time": "yesterday", "passed": "yes", "checks": [
        check("host.memory_headroom", True, {"mem_available_gib": odd}),
        check("sentinel.accept_probe", True, {"accept_length": odd}), "not a check", None]}
    sample = state_mod.recheck_sample(recheck, at=NOW)
    assert sample["mem_available_gib"] is None and sample["accept_length"] is None
    assert sample["time"] == NOW and sample["passed"] is False  # only a literal true passes
    assert state_mod.recheck_sample(odd, at=NOW)["failing"] == []


@settings(max_examples=100, deadline=None)
@given(recheck=json_values, full=json_values)
def test_extraction_never_raises_and_yields_only_finite_numbers(recheck, full):
    for sample in (state_mod.recheck_sample(recheck, at=NOW), state_mod.admission_sample(full, at=NOW)):
        for key in ("decode_tok_s", "accept_length", "mem_available_gib"):
            assert sample[key] is None or (type(sample[key]) is float and math.isfinite(sample[key]))
        assert isinstance(sample["passed"], bool) and all(isinstance(n, str) for n in sample["failing"])
        assert len(sample["failing"]) <= state_mod.MAX_FAILING_NAMES


def test_history_is_bounded_and_restarts_at_each_full_verification():
    gs = gate(full_verdict())
    assert [s["kind"] for s in gs.snapshot(history=True)["history"]] == ["admission"]
    for i in range(state_mod.HISTORY_SAMPLES + 50):
        gs.recheck = {"time": NOW + i, "passed": True, "checks": []}
        gs.record_recheck()
    kept = gs.snapshot(history=True)["history"]
    assert len(kept) == state_mod.HISTORY_SAMPLES and kept[-1]["time"] == NOW + state_mod.HISTORY_SAMPLES + 49
    assert "history" not in gs.snapshot()  # /verdict stays as it was
    gs.last_verdict_at = NOW + 10_000
    gs.record_admission()
    assert [(s["kind"], s["time"]) for s in gs.snapshot(history=True)["history"]] == [("admission", NOW + 10_000)]


# --- the plots --------------------------------------------------------------------------------------------
def read_plot(svg: Node) -> tuple[list[list[tuple[float, float]]], float | None]:
    """The (time, value) points of an SVG plot, segment by segment, read back through its scale; and the
    threshold line's value."""
    lo, hi = float(svg.attrs["data-lo"]), float(svg.attrs["data-hi"])
    t0, t1 = float(svg.attrs["data-t0"]), float(svg.attrs["data-t1"])
    inner_w = page.PLOT_W - page.PLOT_LEFT - page.PLOT_RIGHT
    inner_h = page.PLOT_H - page.PLOT_TOP - page.PLOT_BOTTOM

    def back(x: float, y: float) -> tuple[float, float]:
        stamp = t0 + (x - page.PLOT_LEFT) / inner_w * (t1 - t0) if t1 > t0 else t0
        return stamp, hi - (y - page.PLOT_TOP) / inner_h * (hi - lo)

    segments = []
    for node in svg.walk():
        if node.tag == "polyline":
            segments.append([back(*map(float, p.split(","))) for p in node.attrs["points"].split()])
        elif node.tag == "circle":
            segments.append([back(float(node.attrs["cx"]), float(node.attrs["cy"]))])
    line = svg.find_all("line", class_="threshold")
    threshold = hi - (float(line[0].attrs["y1"]) - page.PLOT_TOP) / inner_h * (hi - lo) if line else None
    return segments, threshold


def test_plot_points_are_the_history_values_with_gaps_and_threshold_lines():
    gs = gate(full_verdict())  # admission: 55.2 tok/s, accept 2.91, 80.5 GiB at NOW - 60
    memory = [79.0, 78.5, None, 60.25, 12.0, 3.5]
    accept = [None, 2.8, None, None, 2.7, None]
    for i, (mem, acc) in enumerate(zip(memory, accept, strict=True)):
        checks = [check("host.memory_headroom", mem is None or mem >= 4, {"mem_available_gib": mem},
                        ">= 4.0 GiB MemAvailable")]
        if acc is not None:
            checks.append(check("sentinel.accept_probe", True, {"accept_length": acc}, ">= 2.4 (greedy, ...)"))
        gs.recheck = {"time": NOW + 2 * i, "passed": all(c["passed"] for c in checks), "checks": checks}
        gs.record_recheck()
    tree = dom(page.render(gs.snapshot(history=True), now=NOW + 12))
    plots = {svg.attrs["data-key"]: svg for svg in tree.find_all("svg")}
    assert set(plots) == {"decode_tok_s", "accept_length", "mem_available_gib"}
    times = [NOW - 60] + [NOW + 2 * i for i in range(len(memory))]

    def expected(values):
        segments, current = [], []
        for stamp, value in zip(times, values, strict=True):
            if value is None:
                if current:
                    segments.append(current)
                current = []
            else:
                current.append((stamp, value))
        return segments + ([current] if current else [])

    for key, values, floor in (("mem_available_gib", [80.5, *memory], 4.0), ("accept_length", [2.91, *accept], 2.4),
                               ("decode_tok_s", [55.2] + [None] * len(memory), 50.0)):
        segments, threshold = read_plot(plots[key])
        want = expected(values)
        assert [len(s) for s in segments] == [len(s) for s in want], key
        for got_segment, want_segment in zip(segments, want, strict=True):
            for (t, v), (wt, wv) in zip(got_segment, want_segment, strict=True):
                assert t == pytest.approx(wt, abs=0.2) and v == pytest.approx(wv, abs=0.01 * max(1.0, abs(wv)))
        assert threshold == pytest.approx(floor, abs=0.01 * floor), key
    # The failed sample (3.5 GiB) is marked on every plot's time axis.
    assert all(len(svg.find_all("line", class_="failed-tick")) == 1 for svg in plots.values())
    samples = tree.find(id="samples").find_all("tr", class_="sample")
    assert len(samples) == len(times) and samples[0].find_all("td")[-1].text == "3.5"  # newest first


def test_a_plot_without_any_value_says_so():
    full = full_verdict()
    full["verification"]["calibration"] = {}
    full["verification"]["checks"] = [c for c in full["verification"]["checks"] if c["name"] == "engine.health"]
    tree = dom(page.render(gate(full).snapshot(history=True), now=NOW))
    assert not tree.find_all("svg")
    assert len(tree.find_all("p", class_="empty")) == 3


def test_figures_too_far_apart_to_scale_are_said_so_not_drawn_as_nan():
    snap = {"state": OPEN, "history": [{"time": NOW, "mem_available_gib": 1.7e308},
                                       {"time": NOW + 1, "mem_available_gib": 1.0}]}
    tree = dom(page.render(snap, now=NOW))
    assert "too wide a range" in tree.find(id="plot-mem_available_gib").text
    assert not tree.find(id="plot-mem_available_gib").find_all("svg")


def test_every_axis_starts_at_zero_and_a_negative_figure_is_a_gap():
    """A figure below zero measures no count or rate (an engine's bad number): it is not drawn and cannot drag
    the axis below zero; the axis runs from zero to just above the largest figure."""
    snap = {"state": OPEN, "history": [{"time": NOW, "decode_tok_s": 52.0}, {"time": NOW + 5, "decode_tok_s": -550.0},
                                       {"time": NOW + 10, "decode_tok_s": 53.0}]}
    svg = dom(page.render(snap, now=NOW + 10)).find(id="plot-decode_tok_s").find_all("svg")[0]
    assert float(svg.attrs["data-lo"]) == 0.0 and 53.0 < float(svg.attrs["data-hi"]) < 60.0
    segments, _ = read_plot(svg)
    assert [[round(v, 1) for _, v in segment] for segment in segments] == [[52.0], [53.0]]  # 2-decimal SVG points


def test_the_engine_startup_is_a_small_table_of_phases():
    startup = {"load_weight": 13.9, "kv_cache_allocation": 0.39, "cuda_graph": {"decode": 31.5, "draft": "x"},
               "<b>": -1}
    tree = dom(page.render({"state": OPEN, "engine_startup_time": startup}, now=NOW))
    rows = [[cell.text for cell in row.find_all("td")] for row in tree.find(id="startup").find_all("tr")
            if row.find_all("td")]
    assert rows == [["load_weight", "13.9 s"], ["kv_cache_allocation", "0.4 s"], ["cuda_graph.decode", "31.5 s"]]


def test_the_page_names_the_latest_capture():
    captures = {"last": "/var/lib/sparkgate/captures/last.capture.tar.gz",
                "refused": ["/var/lib/sparkgate/captures/refused-20261203T140000Z-1.capture.tar.gz"]}
    text = dom(page.render({"state": OPEN, "captures": captures}, now=NOW)).find(id="captures").text
    assert "last.capture.tar.gz" in text and "1 refused kept" in text and "refused-20261203T140000Z-1" in text
    assert "none yet" in dom(page.render({"state": OPEN}, now=NOW)).find(id="captures").text


@pytest.mark.parametrize(("checked", "shown"), [
    ({"at": NOW - 120, "overdue": False}, "(2 min ago)"),
    ({"at": NOW - 900, "overdue": True}, "overdue: the next gap in traffic asks one"),
    (None, "not since this sentinel started"),
    ({"at": "<script>alert(1)</script>", "overdue": True}, "not since this sentinel started"),
    ("<b>x</b>", "not since this sentinel started"),
])
def test_the_page_shows_how_long_the_gate_went_without_checking_answers(checked, shown):
    tree = dom(page.render({"state": OPEN, "answers_checked": checked}, now=NOW))
    text = tree.find(id="answers-checked").text
    assert shown in text and "<script>" not in page.render({"state": OPEN, "answers_checked": checked}, now=NOW)


# --- served by the sentinel ---------------------------------------------------------------------------------
def request(port: int, path: str, method: str = "GET"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=b"{}" if method in ("POST", "PUT") else None)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=5) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


@pytest.fixture
def served():
    gs = gate(full_verdict(), OPEN)
    port, closed_port = free_port(), free_port()
    servers = sentinel_http.serve(gs, "127.0.0.1", port, closed_port)
    yield gs, port
    for server in servers:
        server.shutdown()


def test_the_sentinel_serves_the_page_with_headers_that_forbid_script(served):
    _, port = served
    status, headers, body = request(port, "/sparkgate/")
    assert status == 200
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Content-Security-Policy"] == (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'")
    assert headers["X-Content-Type-Options"] == "nosniff" and headers["Cache-Control"] == "no-store"
    assert int(headers["Content-Length"]) == len(body)
    assert dom(body.decode()).find(id="gate-state").text == "open"
    assert request(port, "/sparkgate/?refresh=1")[0] == 200


def test_the_page_is_read_only_and_the_bare_path_redirects(served):
    _, port = served
    status, headers, body = request(port, "/sparkgate/", "HEAD")
    assert status == 200 and body == b"" and headers["Content-Security-Policy"] == page.CSP
    assert int(headers["Content-Length"]) > 1000  # the GET's length
    status, headers, _ = request(port, "/sparkgate")
    assert status == 308 and headers["Location"] == "/sparkgate/"
    for method in ("POST", "PUT", "DELETE"):
        status, headers, _ = request(port, "/sparkgate/", method)
        assert status == 405 and headers["Allow"] == "GET, HEAD"


def test_the_page_follows_the_state(served):
    gs, port = served
    gs.recheck = {"time": time.time(), "passed": False, "checks": [check("engine.health", False, 0, 200)]}
    gs.record_recheck()
    gs.set(CLOSED, "re-check failed: engine.health (HTTP no answer)")
    tree = dom(request(port, "/sparkgate/")[2].decode())
    assert tree.find(id="gate-state").text == "closed"
    assert rows(tree)["engine.health"].find("td", class_="result").text == "FAILED"


def test_a_rendering_bug_still_answers_html(served, monkeypatch):
    _, port = served
    monkeypatch.setattr(page, "render", lambda snap: 1 / 0)
    status, headers, body = request(port, "/sparkgate/")
    assert status == 200 and headers["Content-Security-Policy"] == page.CSP
    assert b"ZeroDivisionError" in body and b"/sparkgate/verdict" in body


# --- the sentinel records the history ------------------------------------------------------------------------
class Healthy:
    def __init__(self):
        self.health = 200

    def status(self, path: str) -> int:
        return self.health

    def get_json(self, path: str) -> dict:
        return {"weight_version": "default", "model_path": "/m"}


@pytest.fixture
def sentinel(tmp_path, monkeypatch):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "expectations.json").write_text(json.dumps({"profile": "baseline", "requested": [],
                                                          "engine": {"served_model_name": "m"}}))
    sentinel = Sentinel(SentinelConfig("http://engine:30000", bundle, "/nonexistent.log", period_s=5.0,
                                       admin_key_file=str(tmp_path / "no-key")))
    engine = Healthy()
    sentinel.client = sentinel.quick_client = engine
    memory = {"gib": 90.0}

    def headroom() -> CheckResult:
        return checked("host.memory_headroom", memory["gib"] >= 4, {"mem_available_gib": memory["gib"]},
                       ">= 4.0 GiB MemAvailable", "/proc/meminfo", "low")

    def fake_verify(url, expectations, log, **_):
        return Verdict("baseline", url, "now", [checked("engine.health", True, 200, 200, "x", "y"), headroom()],
                       engine={"startup_time": {"t": 1}}, calibration={"decode_tok_s": 30.5})

    suite = service.suites.SuiteResult("s", True, 0, 0.1, [service.suites.TestOutcome("t", "passed")])
    monkeypatch.setattr(service, "verify", fake_verify)
    monkeypatch.setattr(service.suites, "run_suite", lambda *a, **k: suite)
    monkeypatch.setattr(service, "gather", lambda *a, **k: Evidence(
        expectations={}, health_status=200, server_info={"startup_time": {"t": 1}}, model_info=engine.get_json("")))
    monkeypatch.setattr(service, "run_checks", lambda evidence: [headroom()])
    monkeypatch.setattr(service, "rechecked", lambda result: True)
    monkeypatch.setattr(sentinel, "_server_info", lambda: {"startup_time": {"t": 1}})
    monkeypatch.setattr(sentinel, "start_module_rechecks", lambda: None)  # each module's re-checks: their own tests
    monkeypatch.setattr(sentinel, "module_rechecks", lambda: [])
    return sentinel, engine, memory


def test_the_sentinel_records_a_sample_each_period_and_restarts_at_each_full_verification(sentinel):
    sentinel, engine, memory = sentinel
    assert sentinel.full_verification()
    history = sentinel.state.snapshot(history=True)["history"]
    assert [(s["kind"], s["decode_tok_s"], s["mem_available_gib"]) for s in history] == [("admission", 30.5, 90.0)]
    for gib in (85.0, 70.0):
        memory["gib"] = gib
        assert sentinel.recheck()
    memory["gib"] = 2.0
    assert not sentinel.recheck()
    engine.health = 503
    assert not sentinel.recheck()
    history = sentinel.state.snapshot(history=True)["history"]
    assert [s["mem_available_gib"] for s in history] == [90.0, 85.0, 70.0, 2.0, None]
    assert [s["passed"] for s in history] == [True, True, True, False, False]
    assert history[3]["failing"] == ["host.memory_headroom"] and history[4]["failing"] == ["engine.health"]
    engine.health, memory["gib"] = 200, 60.0
    assert sentinel.full_verification()
    assert [s["mem_available_gib"] for s in sentinel.state.snapshot(history=True)["history"]] == [60.0]


# --- through the gateway -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def haproxy_cfg() -> str:
    return render.render_files(profiles.load("all-three"), render.RenderOptions(target="sim"))["haproxy.cfg"]


@pytest.mark.parametrize("path", ["/sparkgate/", "/sparkgate"])
def test_the_gateway_forwards_the_page_to_the_status_port_read_only(haproxy_cfg, path):
    for method in ("GET", "HEAD"):
        assert R.allowed(method, path).backend == R.STATUS
        assert _rendered_decision(haproxy_cfg, method, path) == R.STATUS
    for method in ("POST", "PUT", "DELETE"):
        assert R.allowed(method, path) is None and R.known_path(path)  # 405 from the gateway itself
        assert _rendered_decision(haproxy_cfg, method, path) is None
    assert f"GET HEAD {path}" in R.LISTED


@pytest.mark.parametrize("trick", ["/SPARKGATE/", "/sparkgate//", "//sparkgate/", "/sparkgate/index.html",
                                   "/sparkgate/./", "/sparkgate/%2e/", "/sparkgate/../server_info"])
def test_only_the_exact_page_paths_are_forwarded(haproxy_cfg, trick):
    assert R.allowed("GET", trick) is None and _rendered_decision(haproxy_cfg, "GET", trick) is None
