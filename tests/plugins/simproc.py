"""Run the simulator as a subprocess on a free 127.0.0.1 port and talk to it (stdlib only).

The simulator runs from its installed distribution (`python -m sparkgate_sim`, installed editable by
scripts/bootstrap), exactly as the runtime image runs it."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from devtasks.ports import free_port  # noqa: F401 - the tests import it from here

REPO = Path(__file__).resolve().parents[2]
# Fast by default: 100x real time and a 20 s (simulated) startup, so a start takes ~0.2 s of wall time.
DEFAULT_SCALE = 0.01
DEFAULT_STARTUP_S = 20.0


def profile_launch(name: str) -> tuple[list[str], dict[str, str]]:
    """The argv and env the real engine gets for a shipped profile."""
    from sparkgate.profile import loading as profiles
    plan = profiles.load(name).plan
    return list(plan.argv), dict(plan.env_map())


def with_address(argv: list[str], host: str, port: int) -> list[str]:
    argv = list(argv)
    for flag, value in (("--host", host), ("--port", str(port))):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    return argv


def _clean_environ() -> dict[str, str]:
    """The test runner's env minus anything that would leak into the engine's behaviour."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_", "SPARKGATE_SIM_"))}


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


@dataclass
class Sim:
    argv: list[str]
    env: dict[str, str]
    log_dir: Path
    scale: float = DEFAULT_SCALE
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    def start(self) -> Sim:
        env = {**_clean_environ(), **self.env}
        env.setdefault("SPARKGATE_SIM_TIME_SCALE", str(self.scale))
        env.setdefault("SPARKGATE_SIM_STARTUP_S", str(DEFAULT_STARTUP_S))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._out = open(self.log_dir / f"sim-{self.port}.out", "wb")  # noqa: SIM115 - closed in stop()
        self._err = open(self.log_dir / f"sim-{self.port}.err", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sparkgate_sim", *with_address(self.argv, self.host, self.port)],
            env=env, cwd=REPO, stdout=self._out, stderr=self._err,
        )
        return self

    # -- lifecycle
    def wait_listening(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.02)
        raise TimeoutError(f"sim not listening on {self.port}\n{self.log()}")

    def wait_ready(self, timeout: float = 20.0) -> Sim:
        self.wait_listening(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            if self.get("/health").status == 200:
                return self
            time.sleep(0.02)
        raise TimeoutError(f"sim not ready on {self.port}\n{self.log()}")

    def wait_exit(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def _check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"sim exited with {self.proc.returncode}\n{self.log()}\n{self.stderr()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # our own child, by its handle
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        for handle in (getattr(self, "_out", None), getattr(self, "_err", None)):
            if handle is not None:
                handle.close()

    def log(self) -> str:
        return (self.log_dir / f"sim-{self.port}.out").read_text(errors="replace")

    def stderr(self) -> str:
        return (self.log_dir / f"sim-{self.port}.err").read_text(errors="replace")

    # -- HTTP
    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def request(self, method: str, path: str, body=None, headers: dict | None = None, timeout: float = 30) -> Response:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            hdrs = {"content-type": "application/json", **(headers or {})}
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()

    def get(self, path: str, **kw) -> Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, body, **kw) -> Response:
        return self.request("POST", path, body, **kw)

    def server_info(self, **kw) -> dict:
        resp = self.get("/server_info", **kw)
        assert resp.status == 200, resp.body
        return resp.json()

    def engagement(self) -> dict | None:
        return self.server_info()["internal_states"][0].get("engagement")

    def stream(self, path: str, body: dict, headers: dict | None = None) -> list[tuple[float, object]]:
        """POST with stream=true; return (arrival monotonic time, parsed event) per SSE event."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request("POST", path, body=json.dumps({**body, "stream": True}).encode(),
                         headers={"content-type": "application/json", **(headers or {})})
            resp = conn.getresponse()
            assert resp.status == 200, resp.read()
            events, buffer = [], b""
            while True:
                line = resp.readline()  # HTTPResponse undoes the chunked transfer encoding
                if not line:
                    break
                buffer += line
                if buffer.endswith(b"\n\n"):
                    text = buffer.strip()
                    buffer = b""
                    if text.startswith(b"data: "):
                        payload = text[6:]
                        events.append((time.monotonic(), "[DONE]" if payload == b"[DONE]" else json.loads(payload)))
            return events
        finally:
            conn.close()

    def metrics(self) -> str:
        resp = self.get("/metrics")
        assert resp.status == 200
        return resp.body.decode()


def metric_total(text: str, name: str, **labels: str) -> float | None:
    """Sum of the samples of `name` whose labels include `labels`; None when there is none."""
    from sparkgate.evidence import metrics as parser

    return parser.total(parser.parse(text), name, **labels)


def decode_speed(sim: Sim, prompt: str, max_new_tokens: int) -> tuple[float, dict]:
    """The engine's own decode tok/s of one greedy request and its final meta_info: SGLang's `decode_throughput`
    ((completion_tokens - 1) / (e2e_latency - first_token_latency), observability/req_time_stats.py). Engine
    time, computed by the simulator's timing model: the same figure however busy the host is, so no re-measuring.
    The stream's wall-clock pace must agree with it (scaled), which the test of the pacing itself checks."""
    events = sim.stream("/generate", {"text": prompt, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}})
    meta = [e for _, e in events if e != "[DONE]"][-1]["meta_info"]
    decode_s = meta["e2e_latency"] - meta["first_token_latency"]
    speed = (meta["completion_tokens"] - 1) / decode_s
    assert speed == meta["decode_throughput"] or abs(speed - meta["decode_throughput"]) < 1e-6 * speed, meta
    return speed, meta
