#!/usr/bin/env python3
"""Benchmark the real-SGLang lane (prints numbers; not a test):

1. the lane's wall time: `pytest tests/real` as `bash scripts/test` runs it;
2. the real engine's ready -> verdict time: one real SGLang 0.5.23 on CPU (the tiny dense checkpoint of
   tests/real), process start -> ready, then the product's `verify` with a shipped profile's expectations
   (calibration on), several times on the same engine;
3. CI's total: the step timings the last `bash .ci/run` on this machine wrote to .ci/state/step-timings.txt.

Usage: python benchmarks/bench_real_lane.py [--skip-lane] [--verdicts 3] [--profile fp8-lm-head]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.real import gate  # noqa: E402
from tests.real.checkpoints import build_tiny_llama  # noqa: E402
from tests.real.engine import Launch, start_engine  # noqa: E402


def lane_wall_time() -> tuple[float, int]:
    start = time.perf_counter()
    code = subprocess.call([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/real"], cwd=REPO)
    return time.perf_counter() - start, code


def ready_to_verdict(verdicts: int, profile: str) -> None:
    with tempfile.TemporaryDirectory(prefix="sparkgate-bench-real-") as scratch:
        checkpoint = build_tiny_llama(Path(scratch) / "tiny-llama")
        launch = Launch(model_path=checkpoint, served_model_name="tiny-llama", max_running_requests=1)
        started = time.perf_counter()
        engine = start_engine(launch, Path(scratch) / "run")
        ready = time.perf_counter() - started
        times, failing = [], set()
        try:
            for _ in range(verdicts):
                t0 = time.perf_counter()
                result = gate.verdict(engine, profile)
                times.append(time.perf_counter() - t0)
                failing = gate.failing(result)
        finally:
            engine.stop()
        print(f"real engine: process start -> ready {ready:.1f} s (SGLang's own /model_info 200 at "
              f"{engine.startup_s:.1f} s, first /health +{engine.first_health_s:.1f} s)")
        print(f"ready -> verdict ({profile}, calibration on, {verdicts} runs): median {statistics.median(times):.1f} s, "
              f"min {min(times):.1f} s, max {max(times):.1f} s; {len(result.checks)} checks, "
              f"{len(failing)} refused on this CPU engine")


def ci_total() -> None:
    timings = REPO / ".ci" / "state" / "step-timings.txt"
    if not timings.is_file():
        print("CI total: no .ci/state/step-timings.txt on this machine (run `bash .ci/run` as root first)")
        return
    print("CI (last `bash .ci/run` here):")
    for line in timings.read_text(encoding="utf-8").splitlines():
        print(f"  {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-lane", action="store_true", help="do not run pytest tests/real")
    parser.add_argument("--verdicts", type=int, default=3, choices=range(1, 51), metavar="1..50")
    parser.add_argument("--profile", default="fp8-lm-head")
    args = parser.parse_args()
    code = 0
    if not args.skip_lane:
        seconds, code = lane_wall_time()
        print(f"real lane: pytest tests/real took {seconds:.0f} s wall (exit {code})")
    ready_to_verdict(args.verdicts, args.profile)
    ci_total()
    return 1 if code else 0


if __name__ == "__main__":
    sys.exit(main())
