#!/usr/bin/env python3
"""Benchmark a refused start's capture (prints numbers; not a test).

A start that died during load, as the simulator's crash-at-load writes it (SGLang's startup lines, then CUDA out of
memory), is run through the real engine entrypoint (its exit record), then the sentinel's step that finds the exit
record, judges the start and writes its capture; then `verify --replay`'s re-judgement of that capture. The same
with the log grown to 4 MiB (a long JIT compile or a chatty fork before the crash): the capture keeps its head
and tail, bounded.

Per case: the capture's size, the time to write it (make + write + read back), the sentinel step that does it,
and the replay (read + rejudge). Median of --repeat runs.

Usage: python benchmarks/bench_refused_start.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sparkgate.bundle import render  # noqa: E402
from sparkgate.evidence import capture, logs, startup  # noqa: E402
from sparkgate.evidence.recording import Recording, RecordingClient  # noqa: E402
from sparkgate.profile import loading as profiles  # noqa: E402
from sparkgate.runtime import engine_entrypoint, engine_run  # noqa: E402
from sparkgate.sentinel.captures import CaptureStore  # noqa: E402
from sparkgate.sentinel.service import Sentinel, SentinelConfig  # noqa: E402
from sparkgate.sglang import conformance as C  # noqa: E402

MIB = 1024 * 1024


def sim_log(pad_bytes: int) -> list[str]:
    """The simulator's crash-at-load log (sparkgate_sim/startup.py), optionally padded with compile lines."""
    stamp = "[2026-12-05 07:00:00 TP0]"
    lines = [f"{stamp} {C.log_line('server_args', args='ServerArgs(model_path=/models/Ling-3.0-flash-fp4, ...)')}",
             f"{stamp} {C.log_line('attention_backend_default', backend='triton')}",
             f"{stamp} {C.log_line('load_weight_begin', avail=119.5)}"]
    n = 0
    while sum(len(line) + 1 for line in lines) < pad_bytes:
        n += 1
        lines.append(f"{stamp} [jit] compiling humming kernel {n:06d}: nvcc -O3 -arch=sm_121 -o /cache/k{n}.so ...")
    return [*lines, f"{stamp} Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/sgl-workspace/sglang/python/sglang/srt/model_loader/loader.py", line 612, in load_weights',
            "RuntimeError: CUDA error: out of memory",
            "[rank0]: Received sigquit from a child process. It usually means the child failed."]


def one_case(name: str, pad_bytes: int, repeat: int, root: Path) -> None:
    name_dir = root / name.replace(" ", "-")  # no space: the mountinfo stand-in below names the path as is
    bundle = render.render(profiles.load("all-three"), render.RenderOptions(target="sim"), name_dir / "bundle")
    log_dir = name_dir / "logs"
    log_dir.mkdir(parents=True)
    meminfo = name_dir / "meminfo"
    meminfo.write_text("MemTotal: 128000000 kB\nMemAvailable: 3500000 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n")
    lines = sim_log(pad_bytes)
    script = name_dir / "engine.py"
    script.write_text(f"import sys\nsys.stdout.write(open({str(name_dir / 'log.txt')!r}).read())\nsys.exit(1)\n")
    (name_dir / "log.txt").write_text("\n".join(lines) + "\n")
    engine_entrypoint.LAUNCHERS["sim"] = [str(script)]
    admin = name_dir / "admin"
    os.environ.pop("SGLANG_ENABLE_FP8_LM_HEAD", None)
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # the entrypoint echoes the engine
        # the bundle's argv: the sentinel takes only a record of its bundle's argv (engine_run.bundle_argv_sha256)
        argv = json.loads((bundle / "argv.json").read_text())
        engine_entrypoint.run("sim", log_dir / "engine.log", argv, admin_dir=admin,
                              mountinfo=f"1 0 0:1 / {admin} rw - tmpfs tmpfs rw\n")
    record = engine_run.read(log_dir / engine_run.EXIT_FILE)
    assert record is not None and record.exit_code == 1, record

    steps, writes, replays, sizes = [], [], [], []
    for i in range(repeat):
        sentinel = Sentinel(SentinelConfig("http://127.0.0.1:9", bundle, str(log_dir / "engine.log"), root,
                                           period_s=5.0, meminfo_path=str(meminfo),
                                           captures_dir=str(name_dir / f"captures-{i}")))
        sentinel.client = type("Dead", (), {"status": staticmethod(lambda path: 0)})()
        started = time.perf_counter()
        sentinel.step()
        steps.append(time.perf_counter() - started)
        last = Path(sentinel.state.captures["last"])
        sizes.append(last.stat().st_size)

        # The capture alone (as CaptureStore.save does it, with the read-back), without the judging and log read.
        log = logs.from_file(str(log_dir / "engine.log"))
        verdict = startup.start_verdict(sentinel.expectations, log, "http://127.0.0.1:9", record)
        recording = Recording.of(RecordingClient("http://127.0.0.1:9"), sentinel.expectations, log, verdict,
                                 calibrate=False)
        facts = capture.read(last).context.start
        store = CaptureStore(name_dir / f"store-{i}", bundle, str(meminfo))
        started = time.perf_counter()
        store.save(recording, sentinel.expectations, {"gate": {"passed": False}}, (), of=sentinel.deploy_of(),
                   start=facts)
        writes.append(time.perf_counter() - started)

        started = time.perf_counter()
        again = capture.rejudge(capture.read(last))
        replays.append(time.perf_counter() - started)
        assert not again.passed
    log_size = (log_dir / "engine.log").stat().st_size
    kept = capture.read(last)
    print(f"{name}: engine log {log_size / 1024:.1f} KiB, capture {statistics.median(sizes) / 1000:.1f} KB "
          f"(log kept {len(kept.recording.log_text or '') / 1024:.1f} KiB, {kept.manifest.log_cut_bytes} bytes cut), "
          f"capture write {statistics.median(writes) * 1000:.1f} ms, sentinel step {statistics.median(steps) * 1000:.1f} "
          f"ms, replay {statistics.median(replays) * 1000:.1f} ms (median of {repeat})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the sentinel's "gate CLOSED" line, once per run
    with tempfile.TemporaryDirectory(prefix="sparkgate-bench-start-") as scratch:
        root = Path(scratch)
        one_case("sim crash-at-load", 0, args.repeat, root)
        one_case("4 MiB log", 4 * MIB, args.repeat, root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
