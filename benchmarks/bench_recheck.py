#!/usr/bin/env python3
"""Benchmark the sentinel's per-period re-check cost (prints numbers; not a test).

One simulated all-three engine, started once; the same re-check loop is then run by two sparkgate trees in
turn: an earlier revision (a git worktree, `--before`, default the last commit before engine.stalled) and this
checkout. Each child process counts, per period, its CPU time (time.process_time) and the HTTP requests it sent
to the engine by path (urllib, which the evidence client uses, is wrapped), over idle periods and over periods
with a client stream running.

Usage: python benchmarks/bench_recheck.py [--periods 40] [--before 470cd02]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CHILD = r'''
import collections, json, sys, time, urllib.request
from pathlib import Path
import sparkgate.evidence.client as client_mod
from sparkgate.sentinel.service import Sentinel, SentinelConfig

engine_url, bundle, meminfo, periods, period_s = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
counts = collections.Counter()
real_urlopen = urllib.request.urlopen
def counting(request, *args, **kwargs):
    url = request.full_url if hasattr(request, "full_url") else str(request)
    counts[url.split("://", 1)[-1].split("/", 1)[-1].split("?")[0]] += 1
    return real_urlopen(request, *args, **kwargs)
client_mod.urllib.request.urlopen = counting
config = SentinelConfig(engine_url, bundle, "/nonexistent/engine.log", bundle, period_s=period_s, meminfo_path=meminfo,
                        admin_key_file=str(bundle / "no-admin-key"))
sentinel = Sentinel(config)
sentinel.state.engine_startup_time = (sentinel._server_info() or {}).get("startup_time")
sentinel.weights = sentinel._weights()
sentinel.start_module_rechecks()
samples = []
for _ in range(periods):
    counts.clear()
    cpu0, wall0 = time.process_time(), time.monotonic()
    sentinel.recheck()
    samples.append({"cpu_ms": (time.process_time() - cpu0) * 1000, "wall_ms": (time.monotonic() - wall0) * 1000,
                    "requests": dict(counts)})
    time.sleep(max(0.0, period_s - (time.monotonic() - wall0)))
print(json.dumps(samples))
'''


def summary(samples: list[dict]) -> dict:
    by_path: dict[str, float] = {}
    for sample in samples:
        for path, n in sample["requests"].items():
            by_path[path] = by_path.get(path, 0) + n
    return {
        "cpu_ms_mean": statistics.mean(s["cpu_ms"] for s in samples),
        "cpu_ms_p95": sorted(s["cpu_ms"] for s in samples)[int(0.95 * (len(samples) - 1))],
        "wall_ms_mean": statistics.mean(s["wall_ms"] for s in samples),
        "requests_per_period": sum(by_path.values()) / len(samples),
        "by_path": {path: round(n / len(samples), 2) for path, n in sorted(by_path.items())},
    }


def run_child(tree: Path, engine_url: str, bundle: Path, meminfo: Path, periods: int, period_s: float) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CHILD, engine_url, str(bundle), str(meminfo), str(periods), str(period_s)],
                         env=env, cwd=tree, capture_output=True, text=True, timeout=periods * period_s * 4 + 120)
    if out.returncode != 0:
        raise SystemExit(f"child in {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def stream_forever(sim, stop: threading.Event) -> None:
    body = {"text": "Tell a long story.", "sampling_params": {"temperature": 0.7, "max_new_tokens": 400}, "stream": True}
    while not stop.is_set():
        sim.stream("/generate", body)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--periods", type=int, default=40)
    parser.add_argument("--period-s", type=float, default=0.5)
    parser.add_argument("--before", default="470cd02", help="the revision measured as 'before'")
    parser.add_argument("--time-scale", type=float, default=0.1)
    args = parser.parse_args()

    from sparkgate.bundle import expectations
    from sparkgate.profile import loading as profiles
    from tests.plugins.simproc import Sim, profile_launch

    with tempfile.TemporaryDirectory() as scratch:
        scratch_dir = Path(scratch)
        worktree = scratch_dir / "before"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(worktree), args.before], check=True)
        try:
            argv, env = profile_launch("all-three")
            sim = Sim(argv, env, scratch_dir / "sim", scale=args.time_scale)
            sim.start().wait_ready(timeout=60)
            bundle = scratch_dir / "bundle"
            bundle.mkdir()
            want = expectations.build(profiles.load("all-three"), "sim", args.time_scale)
            (bundle / "expectations.json").write_text(json.dumps(want))
            meminfo = scratch_dir / "meminfo"
            meminfo.write_text("MemTotal: 127604736 kB\nMemAvailable: 83886080 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n")
            results = {}
            for phase in ("idle", "client stream"):
                stop = threading.Event()
                streamer = threading.Thread(target=stream_forever, args=(sim, stop), daemon=True)
                if phase == "client stream":
                    streamer.start()
                try:
                    for name, tree in (("before", worktree), ("after", REPO)):
                        samples = run_child(tree, sim.base_url, bundle, meminfo, args.periods, args.period_s)
                        results[(phase, name)] = summary(samples)
                finally:
                    stop.set()
                    if streamer.is_alive():
                        streamer.join(timeout=60)
            sim.stop()
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)], check=False)

    print(f"sentinel re-check cost per period, all-three on the simulator ({args.periods} periods of {args.period_s} s "
          f"each; before = {args.before}, after = this checkout)")
    print(f"{'phase':<14} {'tree':<7} {'CPU ms mean':>11} {'CPU ms p95':>10} {'wall ms':>8} {'requests':>8}  by path")
    for (phase, name), s in results.items():
        paths = ", ".join(f"{p} {n:g}" for p, n in s["by_path"].items())
        print(f"{phase:<14} {name:<7} {s['cpu_ms_mean']:>11.2f} {s['cpu_ms_p95']:>10.2f} {s['wall_ms_mean']:>8.1f} "
              f"{s['requests_per_period']:>8.2f}  {paths}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
