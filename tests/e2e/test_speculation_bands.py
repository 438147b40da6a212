"""Speculation that stops paying at long context, end to end on the admitted all-three stack: with the simulator's
acceptance decaying past 1000 tokens of context, long client requests through the gateway show as "not paying" in
the 1k-4k band of the sentinel's sentinel.accept_by_context, in /sparkgate/metrics and on the status page, while
the gate stays open (it informs, it does not close the gate)."""

from __future__ import annotations

import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkgate.sentinel import page
from tests.e2e.conftest import E2E_PERIOD_S
from tests.e2e.test_deploy import MODEL, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

DECAY_AFTER = 1000  # tokens of context
PROMPT = " ".join(["lighthouse"] * 1200) + " Explain step by step how the lens focuses the light."


def text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def band_read(stack) -> dict | None:
    return stack.verdict().get("speculation_by_context")


def test_acceptance_decaying_with_context_shows_not_paying_and_the_gate_stays_open(healthy_all_three):
    stack = healthy_all_three
    stack.engine_admin("/admin/faults", {"faults": [f"accept-decay:{DECAY_AFTER}"]})
    try:
        for _ in range(2):  # about 6 decode-log lines past 1000 tokens each (40 verify steps a line)
            status, body = stack.get("/v1/chat/completions", {
                "model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 400,
                "temperature": 0, "ignore_eos": True}, timeout=120)
            assert status == 200 and body["usage"]["prompt_tokens"] > DECAY_AFTER, body
        read = wait_for(lambda: (r := band_read(stack)) and "1k-4k" in r["not_paying"] and r,
                        timeout=10 * E2E_PERIOD_S)
        assert read and read["bands"]["1k-4k"]["lines"] >= 3, band_read(stack)
        assert read["bands"]["1k-4k"]["accept_length"] < read["break_even_accept_length"] == 2.26
        verdict = stack.verdict()
        assert verdict["state"] == "open", verdict["reason"]  # informational: never closes the gate
        check = next(c for c in verdict["recheck"]["checks"] if c["name"] == "sentinel.accept_by_context")
        assert check["passed"] and "1k-4k" in check["hint"]

        families = {f.name: f for f in text_string_to_metric_families(text(stack.url + "/sparkgate/metrics"))}
        pays = {s.labels["band"]: s.value for s in families["sparkgate_speculation_pays"].samples}
        assert pays["1k-4k"] == 0
        assert families["sparkgate_speculation_break_even_accept_length"].samples[0].value == 2.26
        shown = text(stack.url + page.PATH).split('id="speculation-by-context"', 1)[1].split("</dd>", 1)[0]
        assert "1k-4k not paying" in shown and 'class="warn"' in shown
    finally:
        stack.engine_admin("/admin/faults", {"faults": []})
    json.dumps(read)  # the read is plain JSON (it is what /verdict serves)
