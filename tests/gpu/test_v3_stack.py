"""The recipe's stack engaged for real (issue #32): Ling-3.0-flash's own class and checkpoint layout on CUDA.

A tiny BailingMoeV3ForCausalLM in the Ling-3.0-flash-fp4 layout with real weight files (tests/gpu/v3_checkpoints.py:
FP8 block-128 linears, MXFP4 routed experts) on stock SGLang 0.5.23 with the real Humming (humming-kernels 0.1.12)
and decode graphs, judged by the product's own `verify` (`bash tests/gpu/run v3`):

- Humming engaged: every `humming` check passes on real output; the first start JIT-compiles into the
  HUMMING_CACHE_DIR the product sets, the second start with the same directory reuses it (both timed).
- SGLANG_ENABLE_FP8_LM_HEAD=1 on stock: the FP8-head checks refuse (the variable is the fork's; the head stays BF16).
- A NEXTN draft that agrees (the checkpoint repeats its last token and so does its NEXTN layer): every engagement
  check of Humming and MTP passes at once, acceptance on real counts included; the same target with a random NEXTN
  layer is refused by acceptance, before admission and by the sentinel after it.
"""

from __future__ import annotations

from tests.gpu import records
from tests.gpu.test_cuda_engine import ANSWERS, ENGINE_CHECKS, TIMING, censuses, failures_of, rechecked

HUMMING_CHECKS = ("humming.config_echo", "humming.moe_layers_target", "humming.log_signature")
MTP_ENGAGED = ("mtp.config_echo", "mtp.draft_loaded", "mtp.log_draft_loaded", "mtp.accept_length")
FP8_HEAD_REFUSED = ("fp8_lm_head.env_declared", "fp8_lm_head.target_head", "fp8_lm_head.log_signature")
# Stock's NEXTN draft shares the target's head tensor, not its module (the FP8-head hazard): all-three requires it.
STOCK_MISSES = {*FP8_HEAD_REFUSED, "mtp.lm_head_module_shared"}
HUMMING_CENSUS = "Mxfp4HummingMoEMethod/humming"


def test_humming_engages_on_the_fp4_layout_and_every_humming_check_passes(launch_result):
    result = launch_result("v3-humming-cold")
    checks = result.checks("humming")
    assert failures_of(checks, HUMMING_CHECKS) == {}
    assert failures_of(checks, ENGINE_CHECKS) == {}
    census = list(censuses(result.after["server_info"]["internal_states"][0]["engagement"]))
    assert census and all(set(layers) == {HUMMING_CENSUS} for layers in census), census


def test_the_first_start_fills_the_kernel_cache_the_product_points_humming_at(launch_result):
    assert launch_result("v3-humming-cold").engine_error is None
    cache = records.launch_info("v3-humming-cold", records.record_dir())["humming_cache"]
    assert cache["before"]["files"] == 0, cache
    assert cache["after"] and cache["after"]["files"] > 0, cache


def test_a_second_start_reuses_the_kernel_cache_and_the_fork_head_variable_is_refused_on_stock(launch_result):
    launch_result("v3-humming-cold")  # the first start, which fills the cache (also under -k)
    result = launch_result("v3-humming-warm-fp8-env")
    assert failures_of(result.checks("humming"), HUMMING_CHECKS) == {}
    cache = records.launch_info("v3-humming-warm-fp8-env", records.record_dir())["humming_cache"]
    assert cache["before"]["files"] > 0 and cache["after"]["digest"] == cache["before"]["digest"], cache
    fp8 = result.checks("fp8-lm-head")
    assert {name for name in FP8_HEAD_REFUSED if not fp8[name].passed} == set(FP8_HEAD_REFUSED), {
        name: fp8[name].observed for name in FP8_HEAD_REFUSED}


def test_the_nextn_draft_that_agrees_passes_every_engagement_check_of_humming_and_mtp(launch_result):
    result = launch_result("v3-nextn-agree")
    checks = result.checks("all-three")
    assert failures_of(checks, (*HUMMING_CHECKS, "humming.moe_layers_draft", *MTP_ENGAGED)) == {}
    assert failures_of(checks, ENGINE_CHECKS) == {}
    assert {name for name, check in checks.items() if not check.passed} - ANSWERS - TIMING <= STOCK_MISSES
    after = rechecked(result)
    assert after["sentinel.accept_counters"]["passed"], after
    assert after["sentinel.accept_probe"]["passed"], after["sentinel.accept_probe"]


def test_a_random_nextn_draft_on_the_same_target_is_refused_by_acceptance(launch_result):
    result = launch_result("v3-nextn-random")
    checks = result.checks("mtp")
    accept = checks["mtp.accept_length"]
    assert not accept.passed and accept.observed is not None, accept.observed  # refused on a count, not a gap
    assert failures_of(checks, ("mtp.config_echo", "mtp.draft_loaded", "mtp.log_draft_loaded")) == {}
    after = rechecked(result)
    assert not after["sentinel.accept_probe"]["passed"], after["sentinel.accept_probe"]
