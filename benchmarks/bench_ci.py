#!/usr/bin/env python3
"""Benchmark what a new user and CI wait for (prints numbers; not a test):

1. Quickstart command 1 on a fresh checkout: `bash scripts/quickstart` in a fresh clone of this checkout's HEAD
   with its own fresh venv, until it prints `admitted:`; the bootstrap's phase times and the deploy's own timings are
   split out. Docker's image cache is the machine's (a first-ever run also builds the local Debian base, about
   a minute). The stack is removed afterwards.
2. A test run's lanes: the busy seconds per worker and lane, and the slowest tests, read from a saved
   `bash scripts/test` (or `invoke test`) output.
3. CI's total: the step timings the last `bash .ci/run` on this machine wrote to .ci/state/step-timings.txt.

Usage: python benchmarks/bench_ci.py [--quickstart] [--test-log FILE] [--port 18090]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PHASE = re.compile(r"^   (?P<what>.+) \((?P<seconds>\d+)s\)$")
BUSY_HEADER = "busy seconds per worker"
WORKER = re.compile(r"^(?P<worker>gw\d+): (?P<total>\d+) s \((?P<lanes>.*)\)$")
DURATION = re.compile(r"^(?P<seconds>\d+\.\d+)s (?P<when>call|setup|teardown)\s+(?P<test>\S+)")


def quickstart(port: int) -> None:
    with tempfile.TemporaryDirectory(prefix="sparkgate-bench-quickstart-") as scratch:
        clone = Path(scratch) / "sparkgate"
        subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "SPARKGATE_VENV")}
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "/.venv/" not in p + "/")
        started = time.perf_counter()
        done = subprocess.run(["bash", "scripts/quickstart", "--port", str(port)], cwd=clone, env=env,
                              capture_output=True, text=True)
        wall = time.perf_counter() - started
        phases = [(m["what"], int(m["seconds"])) for m in map(PHASE.match, done.stdout.splitlines()) if m]
        admitted = next((line for line in done.stdout.splitlines() if line.startswith("admitted:")), None)
        print(f"quickstart (command 1), fresh clone and venv: {wall:.0f} s, exit {done.returncode}")
        for what, seconds in phases:
            print(f"   {seconds:4d} s  bootstrap: {what}")
        print(f"   {admitted or 'NOT admitted: ' + (done.stdout + done.stderr)[-600:]}")
        subprocess.run([str(clone / ".venv" / "bin" / "invoke"), "down", "--profile", "all-three"], cwd=clone,
                       env=env, capture_output=True)


def test_log(path: Path) -> None:
    lines = path.read_text(errors="replace").splitlines()
    start = next((i for i, line in enumerate(lines) if BUSY_HEADER in line), None)
    if start is None:
        print(f"{path}: no '{BUSY_HEADER}' block (not a finished `invoke test` run?)")
    else:
        lanes: dict[str, float] = {}
        for line in lines[start + 1:]:
            match = WORKER.match(line.strip())
            if not match:
                break
            print(f"   {line.strip()}")
            for part in match["lanes"].split(", "):
                lane, _, seconds = part.rpartition(" ")
                lanes[lane] = lanes.get(lane, 0.0) + float(seconds)
        print("busy seconds by lane: " + ", ".join(f"{lane} {s:.0f}" for lane, s in sorted(lanes.items(), key=lambda x: -x[1])))
    slow = [m for m in map(DURATION.match, lines) if m][:20]
    if slow:
        print("slowest 20:")
        for match in slow:
            print(f"   {float(match['seconds']):7.1f} s  {match['when']:<8} {match['test']}")
    summary = next((line for line in reversed(lines) if re.search(r"\d+ (passed|failed)", line)), None)
    print(f"result: {summary}")


def ci_steps() -> None:
    path = REPO / ".ci" / "state" / "step-timings.txt"
    if not path.is_file():
        print(f"no {path.relative_to(REPO)}: run `bash .ci/run` (as root) first")
        return
    print("last `bash .ci/run` on this machine:")
    print(path.read_text().rstrip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quickstart", action="store_true", help="time Quickstart command 1 on a fresh clone")
    parser.add_argument("--test-log", type=Path, help="a saved `bash scripts/test` output to read lanes from")
    parser.add_argument("--port", type=int, default=18090, help="the gateway port of the quickstart's stack")
    args = parser.parse_args()
    if args.quickstart:
        quickstart(args.port)
    if args.test_log:
        test_log(args.test_log)
    ci_steps()
    return 0


if __name__ == "__main__":
    sys.exit(main())
