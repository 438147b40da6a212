"""Start the real SGLang 0.5.23 server (`python -m sglang.launch_server`) on this CPU machine, one at a time.

    launch = Launch(model_path=path, served_model_name="tiny", max_running_requests=4, extra_args=(...,))
    engine = start_engine(launch, run_dir)   # ready, or raises EngineStartError with the log tail
    engine.generate("Hello", max_new_tokens=8)
    engine.stop()                            # always: the whole process tree, TERM then KILL

The server runs from this venv's interpreter on 127.0.0.1 and a free port, with stdout and stderr in
one log file. The test-only stand-ins (tests/real/stand_ins: the `sgl_kernel` stand-in and the
`sparkgate_cpu_platform` plugin with a generated dist-info, and a `sitecustomize` that starts SGLang's
scheduler and detokenizer by fork instead of spawn, half a launch's CPU) are copied into a per-launch
directory that the server's PYTHONPATH names: the pytest process never imports them as such.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.plugins.simproc import Response, free_port  # one reply shape and port picker for both engines

HOST = "127.0.0.1"
STAND_INS = Path(__file__).resolve().parent / "stand_ins"
PROBE_PLUGIN = "engagement_probe"  # the probe's entry point name (probe/pyproject.toml)
CPU_PLATFORM_PLUGIN = "sparkgate_cpu_platform"  # tests/real/stand_ins/sparkgate_cpu_platform
# SGLang loads every installed general plugin when SGLANG_PLUGINS is empty (sglang/srt/plugins/__init__.py),
# so "no plugins" is a list naming none that exists.
NO_PLUGINS = "none"

START_TIMEOUT_S = 180.0
# The first MoE forward compiles C++ (torch inductor, the torch.compile'd biased_grouped_topk_impl of
# sglang/srt/layers/moe/topk.py): 3 s with a warm inductor cache, ~25 s cold.
REQUEST_TIMEOUT_S = 120.0
# SGLang's graceful shutdown (drain, then kill its children) took 4-12 s here. No test of this lane is about a
# graceful stop and every start is fresh (own port, own run dir), so after a short grace the tree is killed.
STOP_GRACE_S = 1.0
ORPHAN_GRACE_S = 3.0  # leader gone, children still up: stop waiting and signal them directly
PROGRESS_EVERY_S = 15.0

# The flags every launch gets (CPU, no CUDA graphs, bounded memory): SGLang's CPU "device memory" is
# the whole machine's RAM, so --mem-fraction-static stays small and --max-total-tokens caps the KV pool.
# --sleep-on-idle: otherwise the idle scheduler spins a whole core.
BASE_ARGS = (
    "--device", "cpu",
    "--sampling-backend", "pytorch",
    "--disable-cuda-graph",
    "--mem-fraction-static", "0.3",
    "--max-total-tokens", "8192",
    "--chunked-prefill-size", "1024",
    "--skip-server-warmup",
    "--sleep-on-idle",
    "--random-seed", "0",
)
# A CUDA launch (tests/gpu): the triton attention backend and torch sampling (no flashinfer, no sgl-kernel
# sampling ops), decode CUDA graphs at batch size 1 and no prefill graphs (their breakable capture needs more of
# sgl-kernel and ~30 s); the KV pool capped (a tiny model on a 141 GB card would otherwise take 40 GB of it).
CUDA_BASE_ARGS = (
    "--sampling-backend", "pytorch",
    "--attention-backend", "triton",
    "--mem-fraction-static", "0.3",
    "--max-total-tokens", "32768",
    "--cuda-graph-max-bs-decode", "1",
    "--cuda-graph-backend-prefill", "disabled",
    "--skip-server-warmup",
    "--random-seed", "0",
)
# NEXTN (MTP) speculation with the model's own MTP layer as the draft (the draft path defaults to the
# model for NEXTN). Needs Launch(cpu_amx=True).
NEXTN_ARGS = (
    "--speculative-algorithm", "NEXTN",
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
)


def standalone_args(draft_model_path: Path) -> tuple[str, ...]:
    """STANDALONE speculation (a separate small LM drafts; EAGLE's worker and kernels). Needs cpu_amx=True."""
    return (
        "--speculative-algorithm", "STANDALONE",
        "--speculative-draft-model-path", str(draft_model_path),
        "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4",
    )


BASE_ENV = {
    "SGLANG_USE_CPU_ENGINE": "1",  # mandatory on CPU (else the scheduler imports vllm's CUDA rotary op)
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PYTHONUNBUFFERED": "1",
}


class EngineStartError(RuntimeError):
    """The server exited or did not become ready in time; the message carries the log tail."""


@dataclass(frozen=True)
class Launch:
    """One launch variation. Equal Launches are the same variation (EngineSlot reuses a running one)."""

    model_path: Path
    served_model_name: str | None = None
    max_running_requests: int | None = None  # the batch size limit (--max-running-requests)
    extra_args: tuple[str, ...] = ()  # appended last: for single-valued flags they win over BASE_ARGS
    env: Mapping[str, str] = field(default_factory=dict)  # applied last, over BASE_ENV and the plugin list
    probe: bool = True  # load the engagement probe (SGLANG_PLUGINS)
    metrics: bool = True  # --enable-metrics (/metrics)
    # The test platform plugin and --attention-backend intel_amx with the stand-in's torch attention:
    # needed for EAGLE/NEXTN speculation on CPU; otherwise --attention-backend torch_native.
    cpu_amx: bool = False
    start_timeout_s: float = START_TIMEOUT_S
    device: str = "cpu"  # "cuda": tests/gpu (CUDA_BASE_ARGS, the CUDA stand-ins of tests/gpu/stand_ins)
    # Top-level packages made unimportable for the server (a package first on its path that raises ImportError):
    # an image that lacks one, e.g. humming-kernels.
    unimportable: tuple[str, ...] = ()
    # SGLang's own start of its scheduler and detokenizer (spawn: fresh interpreters). Otherwise the lane forks them
    # from the launcher (stand_ins/sitecustomize.py): the same code and environment at half the launch's CPU.
    spawn_children: bool = False

    @property
    def plugins(self) -> list[str]:
        return [name for name, on in ((PROBE_PLUGIN, self.probe), (CPU_PLATFORM_PLUGIN, self.cpu_amx)) if on]

    def server_args(self, port: int) -> list[str]:
        argv = ["--model-path", str(self.model_path), "--host", HOST, "--port", str(port)]
        if self.device == "cuda":
            argv += CUDA_BASE_ARGS
        else:
            argv += [*BASE_ARGS, "--attention-backend", "intel_amx" if self.cpu_amx else "torch_native"]
        if self.metrics:
            argv.append("--enable-metrics")
        if self.served_model_name is not None:
            argv += ["--served-model-name", self.served_model_name]
        if self.max_running_requests is not None:
            argv += ["--max-running-requests", str(self.max_running_requests)]
        return argv + list(self.extra_args)


def _clean_environ() -> dict[str, str]:
    """The test runner's env minus what would change the server: SGLang knobs, Python path and caches."""
    drop = ("SGLANG_", "SGL_", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "HF_", "TRANSFORMERS_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def write_site_dir(site: Path, spawn_children: bool = False) -> Path:
    """The server's private PYTHONPATH entry: a copy of the stand-ins and the dist-info that makes the
    test platform plugin discoverable as an `sglang.srt.plugins` entry point (no install)."""
    skip = ("__pycache__", "sitecustomize.py") if spawn_children else ("__pycache__",)
    shutil.copytree(STAND_INS, site, ignore=shutil.ignore_patterns(*skip), dirs_exist_ok=True)
    dist_info = site / f"{CPU_PLATFORM_PLUGIN}-0.0.0.dist-info"
    dist_info.mkdir(exist_ok=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {CPU_PLATFORM_PLUGIN.replace('_', '-')}\nVersion: 0.0.0\n"
        "Summary: test-only SGLang plugin of sparkgate's tests/real (never installed)\n"
    )
    (dist_info / "entry_points.txt").write_text(
        f"[sglang.srt.plugins]\n{CPU_PLATFORM_PLUGIN} = {CPU_PLATFORM_PLUGIN}:register\n"
    )
    return site


# -- process tree -------------------------------------------------------------------------------------

def _proc_stat(pid: int) -> tuple[int, int, str] | None:
    """(ppid, pgrp, state) of a live process, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[2]), fields[0]


def alive(pid: int) -> bool:
    stat = _proc_stat(pid)
    return stat is not None and stat[2] != "Z"


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def tree_pids(root: int, pgid: int | None = None) -> set[int]:
    """Live (non-zombie) descendants of `root`, plus members of process group `pgid`."""
    stats = {pid: st for pid in _all_pids() if (st := _proc_stat(pid)) is not None and st[2] != "Z"}
    found = {pid for pid, st in stats.items() if pgid is not None and st[1] == pgid}
    frontier = {root}
    while frontier:
        children = {pid for pid, st in stats.items() if st[0] in frontier and pid not in found}
        found |= children
        frontier = children
    if root in stats:
        found.add(root)
    return found


def _signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


# -- one server at a time -----------------------------------------------------------------------------

_LOCK = threading.Lock()
_ACTIVE: RealEngine | None = None
STARTED: list[RealEngine] = []  # every server this process started, in order (timings for the summary)


def active_engine() -> RealEngine | None:
    return _ACTIVE


@atexit.register
def _stop_active_at_exit() -> None:  # the last line of defence if pytest dies without teardown
    if _ACTIVE is not None:
        _ACTIVE.stop()


def _progress(message: str) -> None:
    print(f"[tests/real] {message}", flush=True)


class RealEngine:
    """A running real SGLang server. Use start_engine(); stop() is idempotent."""

    def __init__(self, launch: Launch, run_dir: Path) -> None:
        self.launch = launch
        self.run_dir = run_dir
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log_path = run_dir / "server.log"
        self.argv = [sys.executable, "-m", "sglang.launch_server", *launch.server_args(self.port)]
        if launch.device == "cuda":
            from tests.gpu.site import sglang_site, write_cuda_site_dir

            python_path = [str(write_cuda_site_dir(run_dir / "site")), *sglang_site()]
            base_env = {k: v for k, v in BASE_ENV.items() if k != "SGLANG_USE_CPU_ENGINE"}
        else:
            python_path, base_env = [str(write_site_dir(run_dir / "site", launch.spawn_children))], BASE_ENV
        for name in launch.unimportable:
            shadow = Path(python_path[0]) / name / "__init__.py"
            shadow.parent.mkdir(parents=True, exist_ok=True)
            shadow.write_text(f"raise ModuleNotFoundError({f'No module named {name!r}'!r}, name={name!r})\n")
        self.env = {
            **_clean_environ(),
            **base_env,
            "HF_HOME": str(run_dir / "hf-home"),  # remote-code config modules land here, not in ~/.cache
            "PYTHONPATH": os.pathsep.join(python_path),
            "SGLANG_PLUGINS": ",".join(launch.plugins) or NO_PLUGINS,
            **launch.env,
        }
        self.proc: subprocess.Popen | None = None
        self.started_at: float | None = None
        self.startup_s: float | None = None  # process start -> /model_info answers
        self.first_health_s: float | None = None  # the first /health (one generated token) after that
        self.stop_s: float | None = None  # stop() call -> no process of the tree left
        self.leftover_pids: set[int] = set()
        self._log = None

    # -- lifecycle
    def start(self) -> RealEngine:
        global _ACTIVE
        with _LOCK:
            if _ACTIVE is not None:
                raise RuntimeError(f"one real SGLang server at a time: {_ACTIVE.url} ({_ACTIVE.log_path}) still runs")
            _ACTIVE = self
        STARTED.append(self)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "argv.json").write_text(json.dumps(self.argv, indent=1) + "\n")
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.started_at = time.monotonic()
        # A session of its own: stop() signals the whole group (scheduler, detokenizer, compile workers).
        self.proc = subprocess.Popen(
            self.argv, env=self.env, cwd=self.run_dir, stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        return self

    def wait_ready(self) -> RealEngine:
        """Until /model_info answers 200 and /health has generated its token; bounded by start_timeout_s."""
        assert self.proc is not None and self.started_at is not None
        deadline = self.started_at + self.launch.start_timeout_s
        next_note = self.started_at + PROGRESS_EVERY_S
        while True:
            self._check_alive("while starting")
            now = time.monotonic()
            if now > deadline:
                raise EngineStartError(self._failure(f"not ready after {self.launch.start_timeout_s:.0f} s"))
            if now >= next_note:
                _progress(f"waiting for SGLang on {self.url}: {now - self.started_at:.0f} s (log {self.log_path})")
                next_note += PROGRESS_EVERY_S
            try:
                if self.get("/model_info", timeout=5).status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        self.startup_s = time.monotonic() - self.started_at
        # /health generates one token. On a MoE model the first generation compiles C++ (see
        # REQUEST_TIMEOUT_S) and /health answers 503 after 20 s without detokenizer output: retry.
        health_start = time.monotonic()
        last = None
        while True:
            self._check_alive("before its first healthy /health")
            if time.monotonic() > deadline:
                raise EngineStartError(self._failure(f"/health not 200 within the start timeout (last: {last})"))
            try:
                resp = self.get("/health", timeout=max(1.0, deadline - time.monotonic()))
                if resp.status == 200:
                    break
                last = f"{resp.status} {resp.body[:200]!r}"
            except OSError as exc:
                last = repr(exc)
            _progress(f"/health on {self.url}: {last}; retrying")
            time.sleep(1.0)
        self.first_health_s = time.monotonic() - health_start
        _progress(
            f"SGLang ready on {self.url} after {self.startup_s:.1f} s (+{self.first_health_s:.1f} s first /health); "
            f"model {self.launch.model_path.name}, log {self.log_path}"
        )
        return self

    def _check_alive(self, when: str) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise EngineStartError(self._failure(f"exited with {self.proc.returncode} {when}"))

    def _failure(self, what: str) -> str:
        tail = self.log_tail(80)
        self.stop()
        return f"SGLang server {what}\nargv: {self.argv}\nlog: {self.log_path}\n--- log tail ---\n{tail}"

    def stop(self) -> None:
        """SIGTERM the server, then KILL the process group and every descendant still alive. Idempotent;
        leftover_pids says what survived."""
        global _ACTIVE
        proc = self.proc
        if proc is not None:
            stop_start = time.monotonic()
            pgid = proc.pid  # start_new_session: the leader's pid is the group id
            known = tree_pids(proc.pid, pgid)
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
            for sig, grace in ((None, STOP_GRACE_S), (signal.SIGKILL, 10.0)):
                if sig is not None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pgid, sig)
                    _signal_all(known, sig)
                if self._wait_gone(known, grace):
                    break
            self.leftover_pids = tree_pids(proc.pid, pgid) | {pid for pid in known if alive(pid)}
            if self.stop_s is None:
                self.stop_s = time.monotonic() - stop_start
        if self._log is not None:
            self._log.close()
            self._log = None
        with _LOCK:
            if _ACTIVE is self:
                _ACTIVE = None

    def _wait_gone(self, known: set[int], timeout: float) -> bool:
        """Until the leader is reaped and no process of the tree or group is alive; adds new finds to known.
        Gives up early once the leader is gone but orphans remain (its shutdown did not take them along)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        orphan_deadline = None
        while True:
            self.proc.poll()  # reaps the leader
            living = tree_pids(self.proc.pid, self.proc.pid) | {pid for pid in known if alive(pid)}
            known |= living
            if not living and self.proc.returncode is not None:
                return True
            now = time.monotonic()
            if self.proc.returncode is not None and orphan_deadline is None:
                orphan_deadline = now + ORPHAN_GRACE_S
            if now > deadline or (orphan_deadline is not None and now > orphan_deadline):
                return False
            time.sleep(0.2)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- log
    def log_text(self) -> str:
        if self._log is not None:
            self._log.flush()
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    # -- HTTP (127.0.0.1 only)
    def request(self, method: str, path: str, body=None, timeout: float = REQUEST_TIMEOUT_S) -> Response:
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            conn.request(method, path, body=data, headers={"content-type": "application/json"})
            resp = conn.getresponse()
            return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()

    def get(self, path: str, timeout: float = REQUEST_TIMEOUT_S) -> Response:
        return self.request("GET", path, timeout=timeout)

    def post(self, path: str, body, timeout: float = REQUEST_TIMEOUT_S) -> Response:
        return self.request("POST", path, body, timeout=timeout)

    def get_json(self, path: str, timeout: float = REQUEST_TIMEOUT_S):
        resp = self.get(path, timeout=timeout)
        assert resp.status == 200, f"GET {path}: {resp.status} {resp.body[:500]!r}"
        return resp.json()

    def generate(self, text: str, max_new_tokens: int = 16, timeout: float = REQUEST_TIMEOUT_S, **sampling) -> dict:
        """POST /generate, greedy unless `sampling` says otherwise; the response JSON (text, meta_info)."""
        params = {"max_new_tokens": max_new_tokens, "temperature": 0.0, **sampling}
        resp = self.post("/generate", {"text": text, "sampling_params": params}, timeout=timeout)
        assert resp.status == 200, f"/generate: {resp.status} {resp.body[:500]!r}"
        return resp.json()

    def server_info(self) -> dict:
        return self.get_json("/server_info")

    def engagement(self) -> dict | None:
        """The probe's report: /server_info -> internal_states[0]["engagement"]."""
        return self.server_info()["internal_states"][0].get("engagement")

    def children_forked(self) -> bool:
        """Whether SGLang forked its scheduler and detokenizer (stand_ins/sitecustomize.py says so in the log)."""
        from tests.real.stand_ins.sitecustomize import FORKED

        return FORKED in self.log_path.read_text(errors="replace")

    def metrics_text(self) -> str:
        resp = self.get("/metrics")
        assert resp.status == 200, f"/metrics: {resp.status} {resp.body[:300]!r}"
        return resp.body.decode()

    def __repr__(self) -> str:
        return f"RealEngine({self.url}, model={self.launch.model_path.name}, running={self.running})"


def start_engine(launch: Launch, run_dir: Path) -> RealEngine:
    """Start and wait until ready; on any failure the process tree is stopped before the error propagates."""
    engine = RealEngine(launch, run_dir)
    try:
        return engine.start().wait_ready()
    except BaseException:
        engine.stop()
        raise


class EngineSlot:
    """At most one running server, reused while tests ask for the same Launch. Asking for another Launch
    stops the running one first, so group tests by launch variation to start each once."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.current: RealEngine | None = None
        self._count = 0
        self._observations: list[tuple[Launch, object]] = []  # (launch, Observation); Launch holds a dict

    def observation(self, launch: Launch):
        """What `launch` printed and served right after its first start (tests/real/observe.py); starts it only
        if no earlier test started it."""
        for known, recorded in self._observations:
            if known == launch:
                return recorded
        self.get(launch)
        recorded = [seen for known, seen in self._observations if known == launch]
        assert recorded, f"{launch} runs but its outputs were never recorded"
        return recorded[0]

    def get(self, launch: Launch) -> RealEngine:
        if self.current is not None and self.current.launch == launch and self.current.running:
            return self.current
        return self.fresh(launch)

    def fresh(self, launch: Launch) -> RealEngine:
        """A newly started server for `launch`, even if an equal one is running."""
        self.stop()
        self._count += 1
        name = launch.served_model_name or launch.model_path.name
        run_dir = self.base_dir / f"{self._count:02d}-{name}"
        self.current = start_engine(launch, run_dir)
        if not any(known == launch for known, _ in self._observations):
            from tests.real.observe import observe

            self._observations.append((launch, observe(self.current)))
        return self.current

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None
