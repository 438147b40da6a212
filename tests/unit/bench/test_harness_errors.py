"""Failure paths of the harness without a simulator: a dead endpoint, a closed gate, and an open gate that verified
another profile than the one benched."""

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


def _gate(verdict: dict) -> type[BaseHTTPRequestHandler]:
    """A gateway that answers only /sparkgate/verdict, with `verdict`."""

    class Gate(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802 - http.server's name
            body = json.dumps(verdict).encode()
            self.send_response(200 if self.path == "/sparkgate/verdict" else 503)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Gate


@pytest.fixture
def serve():
    servers = []

    def start(verdict: dict) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _gate(verdict))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_closed_gate_is_not_measured(tmp_path, serve):
    url = serve({"state": "closed", "reason": "verification failed: mtp.accept_length"})
    options = bench_run.BenchOptions(profile="all-three", url=url, out_root=tmp_path, progress=False)
    with pytest.raises(bench_run.BenchError, match="gate .* is closed"):
        bench_run.bench(options, say=lambda _line: None)
    assert not list(tmp_path.iterdir())  # nothing written


def test_an_open_gate_of_another_profile_is_not_measured_under_this_name(tmp_path, serve):
    # the documented switch: dspark deployed in the all-three project, whose deploy record still names the gateway
    url = serve({"state": "open", "reason": "verified", "profile": "dspark", "full": {"verification": {}}})
    bundle = tmp_path / "all-three"
    bundle.mkdir()
    (bundle / "deploy-record.json").write_text(json.dumps({"gateway_url": url, "admitted": True, "target": "sim"}))
    runs_root = tmp_path / "runs"
    options = bench_run.BenchOptions(profile="all-three", bundle=bundle, out_root=runs_root, progress=False)
    with pytest.raises(bench_run.BenchError) as refused:
        bench_run.bench(options, say=lambda _line: None)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"gate.profile: the gate at {url} verified profile 'dspark', not 'all-three'")
    assert "invoke bench --profile dspark" in message and "invoke deploy --profile all-three" in message
    assert not runs_root.exists()  # nothing measured, nothing written
