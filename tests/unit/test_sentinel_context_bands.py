"""The sentinel's read of acceptance per context band: wired into the re-check loop of speculative profiles only,
never closing the gate; shown in /verdict, /metrics (parsed back) and on the status page, hostile values escaped."""

from __future__ import annotations

import json
import math

from prometheus_client.parser import text_string_to_metric_families

from sparkgate.sentinel import http as sentinel_http
from sparkgate.sentinel import page
from sparkgate.sentinel.service import Sentinel, SentinelConfig
from sparkgate.sentinel.state import GateState
from tests.unit.evidence.test_context_bands import decode_line
from tests.unit.test_sentinel_rechecks import FakeEngine


def sentinel(tmp_path, requested: list[str]) -> tuple[Sentinel, object]:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "expectations.json").write_text(json.dumps({
        "profile": "all-three", "requested": requested, "optimizations": {"mtp": {"min_accept_length": 2.0}},
    }))
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 127604736 kB\nMemAvailable: 20971520 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n")
    log = tmp_path / "engine.log"
    log.write_text(decode_line(9000, 1.0) * 5)  # before admission: never read
    made = Sentinel(SentinelConfig("http://engine:30000", bundle, str(log), period_s=5.0,
                                   meminfo_path=str(meminfo)))
    made.client = made.quick_client = FakeEngine()
    made.start_module_rechecks()
    if "mtp" in made.module_contexts:
        made.module_contexts["mtp"].state["last_probe_at"] = 1e18  # no routine probe in these periods
    return made, log


def bands_check(results) -> dict:
    return next(c for c in results if c.name == "sentinel.accept_by_context")


def test_decay_with_context_reads_as_not_paying_and_never_closes_the_gate(tmp_path):
    made, log = sentinel(tmp_path, ["humming", "mtp"])
    with log.open("a") as handle:
        handle.write(decode_line(500, 2.7) * 4 + decode_line(6000, 1.5) * 4)
    made.client.serve(400, 2.0)  # busy: the MTP probe is not due
    results = made.module_rechecks()
    check = bands_check(results)
    assert check.passed and check.observed["not_paying"] == ["4k-16k"]
    assert check.observed["bands"]["0-1k"] == {"lines": 4, "accept_length": 2.7, "pays": True}
    assert check.observed["bands"]["16k-64k"]["lines"] == 0  # the lines from before admission were not read


def test_a_profile_without_speculation_has_no_band_read(tmp_path):
    made, log = sentinel(tmp_path, ["humming"])
    with log.open("a") as handle:
        handle.write(decode_line(6000, 1.5) * 4)
    assert not [c for c in made.module_rechecks() if c.name == "sentinel.accept_by_context"]


def observed() -> dict:
    return {"bands": {"0-1k": {"lines": 5, "accept_length": 2.7, "pays": True},
                      "4k-16k": {"lines": 4, "accept_length": 1.5, "pays": False},
                      "64k+": {"lines": 1, "accept_length": 1.2, "pays": None}},
            "break_even_accept_length": 2.26, "break_even_source": "published", "not_paying": ["4k-16k"],
            "periods_left_out_for_own_probes": 0}


def state_with(read: dict) -> GateState:
    state = GateState(profile="all-three")
    state.recheck = {"time": 1.0, "passed": True, "checks": [
        {"name": "sentinel.accept_by_context", "passed": True, "observed": read, "expected": "", "source": "",
         "hint": ""}]}
    return state


def test_verdict_metrics_and_page_show_the_band_read():
    state = state_with(observed())
    assert state.snapshot()["speculation_by_context"]["not_paying"] == ["4k-16k"]
    families = {f.name: f for f in text_string_to_metric_families(sentinel_http._metrics(state))}
    pays = {s.labels["band"]: s.value for s in families["sparkgate_speculation_pays"].samples}
    assert pays["0-1k"] == 1 and pays["4k-16k"] == 0 and math.isnan(pays["64k+"])
    accept = {s.labels["band"]: s.value for s in families["sparkgate_context_accept_length"].samples}
    assert accept == {"0-1k": 2.7, "4k-16k": 1.5, "64k+": 1.2}
    assert families["sparkgate_speculation_break_even_accept_length"].samples[0].value == 2.26
    html = page.render(state.snapshot(history=True), now=2.0)
    line = html.split('id="speculation-by-context"', 1)[1].split("</dd>", 1)[0]
    assert 'class="warn"' in html and "4k-16k not paying (1.5 &le; 2.26)" in line and "0-1k pays (2.7)" in line


def test_no_band_series_before_a_read_or_without_speculation():
    state = GateState(profile="baseline")
    assert state.snapshot()["speculation_by_context"] is None
    assert "sparkgate_speculation_pays" not in sentinel_http._metrics(state)
    assert 'id="speculation-by-context"' not in page.render(state.snapshot(history=True), now=2.0)


def test_hostile_band_names_and_values_are_escaped_and_parse_back():
    read = {"bands": {'a"}\n<script>x</script>': {"lines": "x", "accept_length": "1e999", "pays": "yes"},
                      "b": {"accept_length": float("inf"), "pays": False}, "c": None},
            "break_even_accept_length": {"no": 1}, "not_paying": "<b>"}
    state = state_with(read)
    families = {f.name: f for f in text_string_to_metric_families(sentinel_http._metrics(state))}
    samples = families["sparkgate_speculation_pays"].samples
    assert {s.labels["band"] for s in samples} == {'a"}\n<script>x</script>', "b", "c"}
    assert math.isnan(families["sparkgate_speculation_break_even_accept_length"].samples[0].value)
    html = page.render(state.snapshot(history=True), now=2.0)
    assert "<script>x" not in html


def test_the_admitting_calibrations_verify_step_is_shown_beside_the_break_even(tmp_path):
    made, log = sentinel(tmp_path, ["mtp"])
    made.state.full = {"verification": {"calibration": {"verify_step_s": 0.0493}}}
    made.start_module_rechecks()
    made.module_contexts["mtp"].state["last_probe_at"] = 1e18
    made.client.serve(400, 2.0)
    check = bands_check(made.module_rechecks())
    assert check.observed["calibration_verify_step_ms"] == 49.3
    made.state.full = {"verification": {"calibration": {"verify_step_s": "nan"}}}  # not a figure: none shown
    made.start_module_rechecks()
    made.module_contexts["mtp"].state["last_probe_at"] = 1e18
    assert bands_check(made.module_rechecks()).observed["calibration_verify_step_ms"] is None


def test_the_sentinels_own_mtp_probe_is_not_read_as_client_traffic(tmp_path):
    """A probe the MTP re-check sends while idle decodes lines into the log too: that period is left out."""
    made, log = sentinel(tmp_path, ["humming", "mtp"])
    made.module_contexts["mtp"].state["last_probe_at"] = 0.0  # the periodic probe is due now
    with log.open("a") as handle:  # what the probe's own decode lines look like
        handle.write(decode_line(60, 2.7) * 4)
    check = bands_check(made.module_rechecks())
    assert check.observed["bands"]["0-1k"]["lines"] == 0, check.observed
    assert check.observed["periods_left_out_for_own_probes"] == 1
