"""Failure paths of the harness without a simulator: a dead endpoint and a closed gate."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sparkgate.bench import harness, workloads
from sparkgate.bench import run as bench_run
from tests.plugins.simproc import free_port


def test_a_dead_endpoint_stops_the_run_after_three_failures():
    target = harness.Target(url=f"http://127.0.0.1:{free_port()}", model="m", timeout_s=2)
    records, stopped = harness.run(target, workloads.arith(10), harness.GREEDY, 16)
    assert len(records) == 3 and all(r.error for r in records)
    assert "3 consecutive failed requests" in stopped


class _ClosedGate(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 - http.server's name
        body = json.dumps({"state": "closed", "reason": "verification failed: mtp.accept_length"}).encode()
        self.send_response(200 if self.path == "/sparkgate/verdict" else 503)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_closed_gate_is_not_measured(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ClosedGate)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        options = bench_run.BenchOptions(profile="all-three", url=f"http://127.0.0.1:{server.server_port}",
                                         out_root=tmp_path, progress=False)
        with pytest.raises(bench_run.BenchError, match="gate .* is closed"):
            bench_run.bench(options, say=lambda _line: None)
    finally:
        server.shutdown()
        server.server_close()
    assert not list(tmp_path.iterdir())  # nothing written
