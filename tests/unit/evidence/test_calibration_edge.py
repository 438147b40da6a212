"""Calibration fails closed on streams that stall or end without their final chunk."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sparkgate.evidence import calibration
from sparkgate.evidence.client import EngineClient


def serve(behaviour):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            return

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            chunk = {"text": "one", "meta_info": {"completion_tokens": 1}}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            if behaviour == "stall":
                time.sleep(3)
            # "cut": close without the final chunk carrying finish_reason

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("behaviour", ["stall", "cut"])
def test_broken_stream_is_not_a_completed_request(behaviour):
    server = serve(behaviour)
    try:
        client = EngineClient(f"http://127.0.0.1:{server.server_address[1]}", timeout=1)
        result = calibration.run(client, prompts=1, max_new_tokens=8, time_budget_s=0.5, time_scale=1.0)
    finally:
        server.shutdown()
    assert len(result.requests) == 1
    assert result.requests[0].error
    assert result.completed == []
    assert result.decode_tok_s() is None and result.accept_length() is None
