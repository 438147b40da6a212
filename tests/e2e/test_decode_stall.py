"""Decode stalls and the status page end to end, on one admitted all-three stack:

- the page in a real browser (Debian's headless Chromium, through the gateway): the open gate and its checks;
- a long healthy client stream keeps the gate open (and no sentinel probe queues behind it);
- a decode that hangs with /health still answering closes the gate by engine.stalled within the profile's
  stall_after_s plus two periods, with SGLang's counters shown, and the page names engine.stalled with what it
  observed and expected; both renders are screenshotted into tests/artifacts/status_page/;
- the hang cleared, the gate reopens only after a fresh passing verdict."""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from sparkgate.sentinel import page
from tests.e2e.browser import rendered, screenshot
from tests.e2e.conftest import E2E_PERIOD_S
from tests.e2e.test_deploy import wait_for
from tests.unit.test_status_page import assert_inert, hint_after, rows

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

# This stack runs at 4x, not the suite's 10x: the client's stream must outlast the stall window plus two re-check
# periods in wall time (periods are wall seconds), and a 1200-token stream at 10x would not.
STALL_SCALE = 0.25
STALL_AFTER_S = 10.0  # engine seconds (2.5 s of wall time at that scale)
MODEL = "ling-v3-flash-fp4"


def tightened_profile(tmp_path) -> str:
    path = tmp_path / "stall-watch.yaml"
    path.write_text("name: stall-watch\ndescription: all-three with a tightened stall watch\nextends: [all-three]\n"
                    f"gate:\n  watch:\n    stall_after_s: {STALL_AFTER_S}\n")
    return str(path)


def stream_chat(url: str, max_tokens: int, outcome: dict) -> None:
    """A streaming chat completion through the gateway; `outcome` gets the chunk times and the finish reason."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Write a long story about a lighthouse."}],
            "max_tokens": max_tokens, "temperature": 0.7, "stream": True}
    request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    outcome.update(chunks=[], finish=None, error=None)
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            for line in response:
                if line.startswith(b"data:") and line.strip() != b"data: [DONE]":
                    outcome["chunks"].append(time.monotonic())
                    choice = (json.loads(line[5:]).get("choices") or [{}])[0]
                    outcome["finish"] = choice.get("finish_reason") or outcome["finish"]
    except OSError as exc:
        outcome["error"] = str(exc)


def recheck_of(verdict: dict, name: str) -> dict | None:
    return next((c for c in (verdict.get("recheck") or {}).get("checks", []) if c["name"] == name), None)


def page_shows_the_open_gate(chromium, tmp_path, url: str) -> None:
    # Through the gateway, with the sentinel's headers intact; read-only.
    with urllib.request.urlopen(url, timeout=10) as response:
        headers, body = response.headers, response.read().decode()
    assert headers["Content-Type"] == page.CONTENT_TYPE and headers["Content-Security-Policy"] == page.CSP
    assert headers["X-Content-Type-Options"] == "nosniff" and headers["Cache-Control"] == "no-store"
    assert_inert(body)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"), timeout=10)
    assert refused.value.code == 405  # the gateway itself: the page is GET/HEAD only
    tree = rendered(chromium, tmp_path, url)
    assert tree.find(id="gate-state").text == "open" and "open" in tree.find(id="gate").attrs["class"].split()
    assert tree.find(id="profile").text == "stall-watch"
    shown = rows(tree)
    for name in ("engine.health", "host.memory_headroom", "mtp.accept_length", "suite.infra", "suite.smoke"):
        assert shown[name].find("td", class_="result").text == "passed", name
    memory_plot = tree.find("svg", **{"data-key": "mem_available_gib"})
    assert memory_plot.find_all("polyline") or memory_plot.find_all("circle")
    assert memory_plot.find_all("line", class_="threshold")
    screenshot(chromium, tmp_path, url, "status-open.png")


def page_names_the_stall(chromium, tmp_path, url: str) -> None:
    tree = rendered(chromium, tmp_path, url)
    assert tree.find(id="gate-state").text == "closed" and "closed" in tree.find(id="gate").attrs["class"].split()
    assert "engine.stalled" in tree.find(id="reason").text
    stalled = rows(tree)["engine.stalled"]
    assert stalled.find("td", class_="result").text == "FAILED"
    assert '"seconds_without_a_token":' in stalled.find("td", class_="observed").text
    assert stalled.find("td", class_="expected").text.startswith(f"< {STALL_AFTER_S:g} s")
    assert "Restart the engine" in hint_after(stalled)
    screenshot(chromium, tmp_path, url, "status-closed.png")


def test_streams_stalls_and_the_status_page_on_one_stack(deploy_stack, chromium, tmp_path):
    stack = deploy_stack(tightened_profile(tmp_path), sim_time_scale=STALL_SCALE)
    assert stack.result.admitted, stack.result.reason
    # 0. A couple of re-checks, so the page's history holds more than the admission sample.
    assert wait_for(lambda: stack.verdict()["rechecks"] >= 2, timeout=E2E_PERIOD_S * 4 + 3, interval=0.5)
    page_shows_the_open_gate(chromium, tmp_path, stack.url + page.PATH)

    # 1. A healthy stream several times longer than the stall threshold and several periods long.
    outcome: dict = {}
    client = threading.Thread(target=stream_chat, args=(stack.url, 1200, outcome))
    rechecks_before = stack.verdict()["rechecks"]
    client.start()
    seen = []
    while client.is_alive():
        verdict = stack.verdict()
        assert verdict["state"] == "open", verdict["reason"]
        seen.append(recheck_of(verdict, "engine.stalled"))
        time.sleep(0.5)
    assert outcome["error"] is None and outcome["finish"] == "length", outcome.get("error")
    chunks = outcome["chunks"]
    assert chunks[-1] - chunks[0] > STALL_AFTER_S * STALL_SCALE + 2 * E2E_PERIOD_S  # longer than the watch window
    assert stack.verdict()["rechecks"] - rechecks_before >= 3
    watched = [c for c in seen if c is not None]
    assert all(c["passed"] for c in watched)
    assert any(c["observed"]["requests_running"] >= 1 for c in watched)  # the stream was seen running, not idle
    # No sentinel probe was sent while the client streamed (it would have queued behind it at batch 1).
    gaps = max(b - a for a, b in itertools.pairwise(chunks))
    assert gaps < 1.0, f"the stream paused {gaps:.2f} s: something queued in front of it"

    # 2. A decode that hangs: the stream stays open and silent, /health keeps answering.
    stack.engine_admin("/admin/faults", {"add": ["decode-stall"]})
    hung: dict = {}
    threading.Thread(target=stream_chat, args=(stack.url, 1200, hung), daemon=True).start()
    started = time.monotonic()
    documented_s = STALL_AFTER_S * STALL_SCALE + 2 * E2E_PERIOD_S
    closed = wait_for(lambda: stack.verdict()["state"] != "open", timeout=documented_s + 4, interval=0.25)
    took = time.monotonic() - started
    assert closed, f"a hung decode left the gate open for {took:.1f} s"
    verdict = stack.verdict()
    stalled = recheck_of(verdict, "engine.stalled")
    assert stalled is not None and not stalled["passed"], verdict["reason"]
    assert "engine.stalled" in verdict["reason"]
    assert stalled["observed"]["requests_running"] >= 1
    assert stalled["observed"]["seconds_without_a_token"] >= STALL_AFTER_S
    assert stack.engine_health() == 200  # /health lies, as SGLang's does
    assert wait_for(lambda: stack.get("/v1/models", timeout=5)[0] == 503, timeout=3), "gateway still admits"
    page_names_the_stall(chromium, tmp_path, stack.url + page.PATH)

    # 3. The hang cleared: the silent stream finishes; the gate reopens only after a fresh full verification.
    runs_before = verdict["full_runs"]
    stack.engine_admin("/admin/faults", {"remove": ["decode-stall"]})
    reopened = wait_for(lambda: stack.verdict()["state"] == "open", timeout=120, interval=1)
    assert reopened, stack.verdict()["reason"]
    assert stack.verdict()["full_runs"] > runs_before
