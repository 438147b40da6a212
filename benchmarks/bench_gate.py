#!/usr/bin/env python3
"""Benchmark the gate on the simulator (prints numbers; not a test):

1. time from "engine healthy" to "gate open" (verification + testinfra + smoke), from the sentinel's own
   transition timestamps, over several fresh deploys;
   with the engine time of the answers stage and of calibration, from the verdict;
2. the gateway's added latency on streaming responses against talking to the engine directly, measured in
   the same run from the same client (inside the sentinel container, which sits on the engine network),
   requests alternating between the two paths.

3. with `--answers-only`: the answers stage alone (engine time, and the thinking retries it made), against an
   all-three simulator started without Docker, once per `--faults` set (repeatable; e.g. `--faults thinks-anyway`,
   a model that reasons 48 words before each answer, `--faults thinks-anyway:200`, one whose reasoning forces the
   stage's retry with more tokens on every question).

Usage: python benchmarks/bench_gate.py [--deploys 3] [--requests 40] [--time-scale 0.01] [--faults F,G]
       python benchmarks/bench_gate.py --answers-only [--faults ""] [--faults thinks-anyway] [--time-scale 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devtasks.ports import free_port  # noqa: E402
from sparkgate.deploy import deploy as deploy_mod  # noqa: E402
from sparkgate.deploy import docker_cli  # noqa: E402

CLIENT = r'''
import json, sys, time, urllib.request
def stream(base, n_tokens):
    body = {"model": "ling-v3-flash-fp4", "messages": [{"role": "user", "content": "Count to ten."}],
            "temperature": 0, "max_tokens": n_tokens, "stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter(); first = None
    with urllib.request.urlopen(req, timeout=60) as r:
        for line in r:
            if line.startswith(b"data:") and first is None:
                first = time.perf_counter()
    return first - t0, time.perf_counter() - t0
n = int(sys.argv[1]); tokens = int(sys.argv[2])
out = {"direct": [], "gateway": []}
for i in range(n):
    for name, base in (("direct", "http://engine:30000"), ("gateway", "http://gateway:8080")) if i % 2 == 0 else \
                      (("gateway", "http://gateway:8080"), ("direct", "http://engine:30000")):
        out[name].append(stream(base, tokens))
print(json.dumps(out))
'''


def transitions_to_open(verdict: dict) -> float | None:
    moves = verdict.get("transitions", [])
    start = next((m["at"] for m in moves if m["to"] == "verifying"), None)
    opened = next((m["at"] for m in moves if m["to"] == "open"), None)
    return None if start is None or opened is None else opened - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deploys", type=int, default=3)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--time-scale", type=float, default=0.01, help="0.01: TPOT ~0.19 ms wall for all-three")
    parser.add_argument("--faults", action="append", default=None,
                        help="simulator faults (comma-separated); repeat with --answers-only for one row each")
    parser.add_argument("--answers-only", action="store_true",
                        help="only the answers stage, in-process against a simulator (no Docker)")
    args = parser.parse_args()
    if args.answers_only:
        return answers_only(args.faults or [""], args.time_scale, args.deploys)
    if args.faults and len(args.faults) > 1:
        parser.error("one --faults set per deploy benchmark")
    faults = tuple(f for f in (args.faults or [""])[0].split(",") if f)

    healthy_to_open, verify_s, answers_s, calibration_s = [], [], [], []
    latency = None
    with tempfile.TemporaryDirectory() as scratch:
        for index in range(args.deploys):
            project = f"sparkgate-bench-{os.getpid()}-{index}"
            options = deploy_mod.DeployOptions(
                profile="all-three", target="sim", project=project, out=Path(scratch) / project, port=free_port(),
                sim_time_scale=args.time_scale, sim_startup_s=60.0, recheck_period_s=1.0, post_smoke=False,
                sim_faults=faults,
            )
            stack = docker_cli.Project(project, options.out / "compose.yaml")
            try:
                result = deploy_mod.deploy(options, say=lambda _line: None)
                if not result.admitted:
                    print(f"deploy {index}: refused ({result.reason})", file=sys.stderr)
                    return 1
                healthy_to_open.append(result.timings["gate_open"] - result.timings.get("engine_healthy", result.timings["gate_open"]))
                verify_s.append(transitions_to_open(result.verdict))
                verification = (result.verdict.get("full") or {}).get("verification") or {}
                answers_s.append((verification.get("answers") or {}).get("elapsed_s"))
                calibration_s.append((verification.get("calibration") or {}).get("elapsed_s"))
                if index == args.deploys - 1:
                    sentinel = stack.container("sentinel")
                    out = subprocess.run(["docker", "exec", "-i", sentinel, "python3", "-", str(args.requests), str(args.tokens)],
                                         input=CLIENT, capture_output=True, text=True, check=True, timeout=600).stdout
                    latency = json.loads(out)
            finally:
                stack.compose("down", "--remove-orphans", "--volumes", "-t", "3", check=False)

    print(f"gate: engine healthy -> gate open (deploy's view, 1 s polling): "
          f"median {statistics.median(healthy_to_open):.2f} s over {len(healthy_to_open)} deploys {healthy_to_open}")
    print(f"gate: sentinel verifying -> open (verification + testinfra + smoke): "
          f"median {statistics.median(verify_s):.2f} s {[round(v, 2) for v in verify_s]}")
    print(f"gate: answers stage {statistics.median(answers_s):.2f} s, calibration {statistics.median(calibration_s):.2f} s "
          f"(engine time, the simulator's model of a Spark; medians of {answers_s} and {calibration_s})")
    for what, index in (("TTFT", 0), ("full stream", 1)):
        direct = statistics.median(r[index] for r in latency["direct"]) * 1000
        gateway = statistics.median(r[index] for r in latency["gateway"]) * 1000
        print(f"gateway {what}: direct {direct:.2f} ms, via gateway {gateway:.2f} ms, ratio {gateway / direct:.3f}, "
              f"added {gateway - direct:.2f} ms (median of {args.requests} alternating requests, {args.tokens} tokens)")
    return 0


def answers_only(fault_sets: list[str], time_scale: float, runs: int) -> int:
    """The answers stage's engine time per fault set, `runs` times each on a fresh all-three simulator."""
    from sparkgate.evidence import answers
    from sparkgate.evidence.client import EngineClient
    from tests.plugins.simproc import Sim, profile_launch

    want = {"engine": {"served_model_name": "ling-v3-flash-fp4"}, "time_scale": time_scale,
            "requested": ["humming", "fp8_lm_head", "mtp"],
            "answers": {"set_version": answers.answer_set_mod.SET_VERSION, "baseline": None}}
    print(f"answers stage, all-three on the simulator (engine time: the simulator's model of a Spark; "
          f"time scale {time_scale}, {runs} fresh engine(s) per row)")
    with tempfile.TemporaryDirectory() as scratch:
        for faults in fault_sets:
            elapsed, passed, thinking, tokens = [], True, {}, 0
            for run in range(runs):
                argv, env = profile_launch("all-three")
                sim = Sim(argv, {**env, "SPARKGATE_SIM_FAULTS": faults}, Path(scratch) / f"sim-{len(faults)}-{run}",
                          scale=time_scale)
                sim.start().wait_ready(timeout=120)
                try:
                    result = answers.run(EngineClient(sim.base_url), want, time_scale)
                finally:
                    sim.stop()
                elapsed.append(round(result.elapsed_s, 2))
                passed = passed and all(c.passed for c in answers.checks(result, want))
                thinking, tokens = result.thinking(), result.completion_tokens()
            print(f"  faults {faults or '(none)':<22} median {statistics.median(elapsed):7.2f} s {elapsed}  "
                  f"{'admitted' if passed else 'REFUSED'}; replies that thought {thinking['thought']}/{thinking['of']}, "
                  f"asked again {thinking['retried']} ({thinking['retry_completion_tokens']} tokens in the retries, "
                  f"{tokens} in all), "
                  f"cut after the retry {thinking['cut_after_retry']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
