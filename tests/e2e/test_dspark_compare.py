"""Which drafter to run, measured: all-three (NEXTN) and dspark are deployed on the simulator one after the
other, each benched on the code and prose workloads through its gateway, and `invoke compare all-three,dspark`
(the positional form, run as a user runs it) must recommend dspark for code and all-three for prose, each
significantly, from nothing but the stored runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sparkgate.bench import run as bench_run
from sparkgate.bench import workloads
from tests.conftest import REPO

pytestmark = [pytest.mark.docker, pytest.mark.e2e, pytest.mark.usefixtures("isolated_bench")]

# 8 prompts of each workload, 256 tokens each, through `/generate`: every speed is the engine's own meta_info
# timing, which the simulator computes from its timing model, so the 3.6 % prose difference is measured exactly
# (up to the model's per-prompt accept jitter) at any time scale and on any host load; 8 pairs carry a paired
# test of that size well below 0.05.
ITEMS, MAX_TOKENS = 8, 256
TIME_SCALE = 0.05
ALPHA = 0.05


def bench_then_stop(deploy_stack, profile: str, root) -> list[dict]:
    stack = deploy_stack(profile, sim_time_scale=TIME_SCALE)
    assert stack.result.admitted, stack.result.reason
    options = bench_run.BenchOptions(profile=profile, limit=ITEMS, max_tokens=MAX_TOKENS, bundle=stack.result.bundle,
                                     out_root=root, progress=False, api="generate")
    results = bench_run.bench_each(options, workloads.expand("code,prose"), say=print)
    # one stack at a time, as on a Spark that holds one model
    stack.project.compose("down", "--remove-orphans", "--volumes", "-t", "3", check=False)
    return [result.summary for result in results]


EXPECTED = {"code": "dspark", "prose": "all-three"}


def measure_and_compare(deploy_stack, root, out) -> tuple[subprocess.CompletedProcess, dict]:
    for profile in ("all-three", "dspark"):
        for summary in bench_then_stop(deploy_stack, profile, root):
            assert summary["complete"] and summary["results"]["errors"] == 0, summary["stopped_early"]
            assert summary["environment"]["target"] == "sim"
            assert summary["protocol"]["sampling"]["name"] == "greedy"
    argv = [sys.executable, "-m", "invoke", "compare", "all-three,dspark", "--root", str(root), "--out", str(out),
            "--alpha", str(ALPHA)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)
    print(done.stdout)
    assert done.returncode == 0, done.stderr
    assert "Recommendation" in done.stdout
    return done, json.loads((out / "compare.json").read_text())


def test_compare_recommends_dspark_for_code_and_all_three_for_prose(deploy_stack, tmp_path):
    root = tmp_path / "runs"
    done, data = measure_and_compare(deploy_stack, root, tmp_path / "compare")
    assert data["recommendations"] == EXPECTED, data["recommendations"]
    code, prose = data["workloads"]["code"], data["workloads"]["prose"]
    for workload in (code, prose):
        assert workload["status"] == "compared" and workload["paired"]["n"] == ITEMS
        assert workload["paired"]["p_value"] < ALPHA
    assert code["paired"]["ci_low"] > 0 and prose["paired"]["ci_high"] < 0
    # the measured speeds are the simulator's configured per-workload figures, read back through the gateway
    results = {(name, who): w["results"][who] for name, w in (("code", code), ("prose", prose))
               for who in ("all-three", "dspark")}
    for (name, who), want in {("code", "all-three"): 55.2, ("code", "dspark"): 68.4,
                              ("prose", "all-three"): 45.0, ("prose", "dspark"): 43.4}.items():
        assert results[name, who]["decode_tok_s"] == pytest.approx(want, rel=0.03), (name, who)
    # the drafter accepts far longer blocks on code than on prose, and longer than NEXTN on both
    assert results["code", "dspark"]["accept_length"] > results["prose", "dspark"]["accept_length"]
    assert results["prose", "dspark"]["accept_length"] > results["prose", "all-three"]["accept_length"]
