"""`invoke bench` against a deployed stack (simulated engine, real sentinel and gateway on Docker): the
harness finds the gateway and the time scale from the deploy record and the bundle, goes only through the
gateway, and records the environment facts."""

from __future__ import annotations

import pytest

from sparkgate.bench import run as bench_run
from sparkgate.bench import runs
from sparkgate.deploy import preflight
from tests.e2e.conftest import E2E_SCALE

pytestmark = [pytest.mark.docker, pytest.mark.e2e, pytest.mark.usefixtures("isolated_bench")]


def test_bench_through_the_gateway_of_a_deployed_stack(healthy_all_three, tmp_path):
    finding = preflight.docker_reachable()
    if not finding.ok:
        pytest.fail(f"needs Docker: {finding.detail}")
    stack = healthy_all_three
    assert stack.result.admitted, stack.result.reason
    before = stack.engine_stats()["forwarded"].get("/generate", 0)

    options = bench_run.BenchOptions(profile="all-three", workload="arith", count=4, sampling="sampled",
                                     max_tokens=64, bundle=stack.result.bundle, out_root=tmp_path / "runs",
                                     progress=False, api="generate")
    result = bench_run.bench(options, say=lambda _line: None)

    summary = runs.load(result.run_dir).summary
    env = summary["environment"]
    assert summary["complete"] and summary["results"]["errors"] == 0
    assert env["gateway_url"] == stack.url and env["target"] == "sim"
    assert summary["protocol"]["time_scale"] == E2E_SCALE  # from the bundle's expectations.json
    assert env["images"] and all(image_id.startswith("sha256:") for image_id in env["images"].values())
    assert env["gate"]["state"] == "open" and env["gate"]["engine"]["version"] == "0.5.23"
    assert env["engine"]["version"] == "0.5.23" and env["engine"]["speculative_algorithm"] == "EAGLE"
    numbers = summary["results"]
    assert numbers["completion_tokens"] == 4 * 64
    # Engine time, not wall time: every duration is the engine's own meta_info timing, so the simulated Spark's
    # 53.89 tok/s (all three, arithmetic) comes back within the model's per-prompt accept jitter, however busy
    # this host is. The client's stopwatch is recorded beside it (its figure moves with the host's load).
    assert numbers["timing"] == "engine"
    assert numbers["decode_tok_s"] == pytest.approx(53.89, rel=0.03), numbers["decode_tok_s"]
    assert numbers["client_decode_tok_s"] is not None
    after = stack.engine_stats()["forwarded"].get("/generate", 0)
    assert after - before == 4  # every request came through the gateway, one each
