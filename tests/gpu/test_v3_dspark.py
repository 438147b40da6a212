"""DSpark on CUDA (issue #32): stock SGLang 0.5.23's DSPARK with a tiny LingDSparkModel drafter
(tests/gpu/dspark_drafter.py, block 8 as the dspark profile) for the tiny Ling-3.0-flash that repeats its last token,
launched with the dspark profile's own flags (`bash tests/gpu/run v3-dspark`). The drafter that agrees drafts the
anchor token every step: the `dspark` checks read real values and acceptance passes on real counts; the random
drafter on the same target is refused by acceptance.
"""

from __future__ import annotations

from tests.gpu.test_cuda_engine import failures_of

DSPARK_ENGAGED = ("dspark.config_echo", "dspark.draft_loaded", "dspark.log_runner_initialized",
                  "dspark.drafter_config_read", "dspark.draft_cuda_graph", "dspark.proposal_not_eager")


def test_dspark_with_a_drafter_that_agrees_engages_and_passes_acceptance(launch_result):
    checks = launch_result("v3-dspark-agree").checks("dspark")
    observed = {name: (check.passed, check.observed) for name, check in checks.items() if name.startswith("dspark.")}
    print(f"\nv3-dspark-agree: {observed}")
    assert failures_of(checks, (*DSPARK_ENGAGED, "dspark.accept_length")) == {}


def test_dspark_with_a_random_drafter_is_refused_by_acceptance(launch_result):
    checks = launch_result("v3-dspark-random").checks("dspark")
    assert failures_of(checks, DSPARK_ENGAGED) == {}
    accept = checks["dspark.accept_length"]
    assert not accept.passed and accept.observed is not None, accept.observed  # refused on a count, not a gap
