"""The sentinel's HTTP side: /ready (200 only while the latest verdict passes), /verdict (JSON),
/metrics (Prometheus), /healthz, the status page /sparkgate/ (HTML, GET/HEAD only, sentinel/page.py); and on a
second port, the body the gateway returns while closed."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sparkgate import optimizations
from sparkgate.optimizations import REGISTRY
from sparkgate.sentinel import page
from sparkgate.sentinel.state import GateState


def _metrics(state: GateState) -> str:
    """The Prometheus text format (0.0.4). Label values come from untrusted data (profile and check names):
    backslash, double quote and newline are escaped as the format requires, and each series is written once."""

    def label(value) -> str:
        return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    def number(value) -> str:  # a finite number, else NaN (what the format says for "no value")
        real = isinstance(value, (int, float)) and not isinstance(value, bool)
        return repr(float(value)) if real and value == value and abs(value) != float("inf") else "NaN"

    snap = state.snapshot()
    lines = [
        "# HELP sparkgate_gate_open 1 while the latest verdict passes and traffic is admitted.",
        "# TYPE sparkgate_gate_open gauge",
        f"sparkgate_gate_open{{profile=\"{label(snap['profile'])}\"}} {1 if snap['ready'] else 0}",
        "# HELP sparkgate_last_verdict_timestamp_seconds Unix time of the latest verdict.",
        "# TYPE sparkgate_last_verdict_timestamp_seconds gauge",
        f"sparkgate_last_verdict_timestamp_seconds {snap['last_verdict_at'] or 0}",
        "# HELP sparkgate_full_verifications_total Full verifications (with calibration) run.",
        "# TYPE sparkgate_full_verifications_total counter",
        f"sparkgate_full_verifications_total {snap['full_runs']}",
        "# HELP sparkgate_rechecks_total Cheap re-checks run.",
        "# TYPE sparkgate_rechecks_total counter",
        f"sparkgate_rechecks_total {snap['rechecks']}",
        "# HELP sparkgate_check_passed 1 if the check passed in the latest verdict.",
        "# TYPE sparkgate_check_passed gauge",
    ]
    checks = ((snap.get("full") or {}).get("verification") or {}).get("checks", [])
    recheck = {c["name"]: c for c in ((snap.get("recheck") or {}).get("checks") or [])}
    passed: dict[str, bool] = {}  # latest result per check name: a re-check supersedes the full verdict's
    for check in checks:
        passed.setdefault(check["name"], bool(recheck.get(check["name"], check)["passed"]))
    for name, check in recheck.items():  # re-check-only checks (restart detection, served acceptance, stalls)
        passed.setdefault(name, bool(check["passed"]))
    for suite in ("infra", "smoke"):
        result = (snap.get("full") or {}).get(suite)
        if result:
            passed.setdefault(f"suite.{suite}", bool(result["passed"]))
    lines += [f"sparkgate_check_passed{{check=\"{label(name)}\"}} {1 if ok else 0}" for name, ok in passed.items()]
    # Host memory as the latest host.memory_headroom read it (re-check first, else the full verdict): NaN unread.
    headroom = recheck.get("host.memory_headroom") or next(
        (c for c in checks if c["name"] == "host.memory_headroom"), None)
    observed = (headroom or {}).get("observed")
    gib = observed.get("mem_available_gib") if isinstance(observed, dict) else None
    lines += [
        "# HELP sparkgate_host_mem_available_bytes Host MemAvailable at the latest host.memory_headroom check.",
        "# TYPE sparkgate_host_mem_available_bytes gauge",
        f"sparkgate_host_mem_available_bytes {number(gib * 1024**3) if number(gib) != 'NaN' else 'NaN'}",
    ]
    lines += _speculation_lines(snap.get("speculation_by_context"), label, number)
    verification = (snap.get("full") or {}).get("verification") or {}
    for module in REGISTRY.values():  # each optimization's gauges, read from the latest full verdict
        for name, (help_text, path) in optimizations.part(module, "GAUGES").items():
            value = _at(verification, path)
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge",
                      f"{name} {value if isinstance(value, (int, float)) else 'NaN'}"]
    return "\n".join(lines) + "\n"


def _speculation_lines(read, label, number) -> list[str]:
    """Speculative profiles: per context band, the accept length client traffic got and whether speculation pays
    there (1, 0; NaN: too few decode lines to judge), and the break-even accept length (evidence/context_bands.py)."""
    if not isinstance(read, dict):
        return []
    bands = read.get("bands") if isinstance(read.get("bands"), dict) else {}
    lines = ["# HELP sparkgate_speculation_break_even_accept_length Accept length above which speculation pays: "
             "a verify step's cost in plain decode steps.",
             "# TYPE sparkgate_speculation_break_even_accept_length gauge",
             f"sparkgate_speculation_break_even_accept_length {number(read.get('break_even_accept_length'))}",
             "# HELP sparkgate_context_accept_length Mean accept length of client traffic since admission, per "
             "context band (engine decode log).",
             "# TYPE sparkgate_context_accept_length gauge"]
    lines += [f"sparkgate_context_accept_length{{band=\"{label(name)}\"}} {number(band.get('accept_length'))}"
              for name, band in bands.items() if isinstance(band, dict)]
    lines += ["# HELP sparkgate_speculation_pays 1 where speculation pays in the context band, 0 where it does not "
              "(accept length at or below the break-even), NaN with too few decode lines to judge.",
              "# TYPE sparkgate_speculation_pays gauge"]
    for name, band in bands.items():
        pays = band.get("pays") if isinstance(band, dict) else None
        lines.append(f"sparkgate_speculation_pays{{band=\"{label(name)}\"}} "
                     f"{'NaN' if not isinstance(pays, bool) else int(pays)}")
    return lines


def _at(value, path: tuple[str, ...]):
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def closed_body(state: GateState) -> dict:
    snap = state.snapshot()
    failing = [c["name"] for c in ((snap.get("recheck") or {}).get("checks") or []) if not c["passed"]]
    if not failing:
        failing = [c["name"] for c in (((snap.get("full") or {}).get("verification") or {}).get("checks") or [])
                   if not c["passed"]]
    return {"error": "sparkgate gate closed: the engine is not proven", "state": snap["state"],
            "reason": snap["reason"], "failing_checks": failing[:10]}


def _handler(state: GateState, closed_port: bool):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet: the sentinel logs transitions itself
            return

        def _send(self, status: int, body: bytes, content_type: str, headers: dict | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, status: int, value: dict) -> None:
            self._send(status, (json.dumps(value, default=str) + "\n").encode(), "application/json")

        def _route(self) -> None:
            path = self.path.split("?", 1)[0]
            if closed_port:
                self._json(503, closed_body(state))
            elif path in ("/ready", "/sparkgate/ready"):
                snap = state.snapshot()
                self._json(200 if snap["ready"] else 503, {"ready": snap["ready"], "state": snap["state"], "reason": snap["reason"]})
            elif path in ("/verdict", "/sparkgate/verdict"):
                self._json(200, state.snapshot())
            elif path in ("/metrics", "/sparkgate/metrics"):
                self._send(200, _metrics(state).encode(), "text/plain; version=0.0.4")
            elif path == "/healthz":
                self._json(200, {"alive": True, "time": time.time()})
            elif path in (page.PATH, page.BARE_PATH):
                self._page(path)
            else:
                self._json(404, {"error": f"unknown path {path}"})

        def _page(self, path: str) -> None:
            """The status page: read-only, rendered from the state alone, no script allowed to run."""
            if self.command not in ("GET", "HEAD"):
                self._send(405, b"the status page is read-only: GET or HEAD\n", "text/plain; charset=utf-8",
                           {**page.HEADERS, "Allow": "GET, HEAD"})
            elif path == page.BARE_PATH:
                self._send(308, b"", "text/plain; charset=utf-8", {**page.HEADERS, "Location": page.PATH})
            else:
                try:
                    text = page.render(state.snapshot(history=True))
                except Exception as exc:  # noqa: BLE001 - a rendering bug must not take the status port down
                    text = page.error_page(exc)
                self._send(200, text.encode("utf-8", "replace"), page.CONTENT_TYPE, page.HEADERS)

        def do_GET(self):  # noqa: N802 - http.server naming
            self._route()

        do_HEAD = do_GET

        def do_POST(self):  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self._route()

        do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_POST

    return Handler


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # HAProxy's health checks hang up once they have the status line; that is not an error.
        import sys

        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def serve(state: GateState, host: str, port: int, closed_port: int) -> list[ThreadingHTTPServer]:
    servers = [
        _QuietServer((host, port), _handler(state, closed_port=False)),
        _QuietServer((host, closed_port), _handler(state, closed_port=True)),
    ]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    return servers
