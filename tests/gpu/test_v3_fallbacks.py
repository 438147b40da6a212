"""Humming's silent fallbacks, for real (issue #32): the same tiny Ling-3.0-flash on stock SGLang 0.5.23 on CUDA
(`bash tests/gpu/run v3-fallbacks`), each judged against the `humming` profile. Whatever stock does (an error at
start or another kernel serving), the gate must not admit it, and its refusal must name what ran instead:

- the `humming` package not importable (an image without humming-kernels);
- another MoE runner stock runs on SM90 for this layout (`--moe-runner-backend marlin`: Mxfp4MarlinMoEMethod);
- a checkpoint Humming cannot take (BF16 experts, no quantization_config) launched with `--moe-runner-backend humming`.

The same set starts Humming itself on the same checkpoint first (cold kernel cache), so that Humming against the runner
that served instead is a ratio of engine-timed decode speeds from one run on one GPU (printed at the end of the run).
"""

from __future__ import annotations

import pytest

from tests.gpu.test_cuda_engine import failures_of
from tests.gpu.test_v3_stack import HUMMING_CENSUS, HUMMING_CHECKS

# What each refusal (or stock's own error, where it does not serve) must name: what ran or what was missing.
# In this order: Marlin, the one launch that may take its whole 400 s start, last.
FALLBACKS = {"v3-humming-unimportable": ("humming",), "v3-bf16-humming": ("Unquantized", "bf16", "BF16", "humming"),
             "v3-marlin": ("Marlin", "marlin")}


def test_humming_on_the_same_checkpoint_is_the_runs_reference(launch_result):
    assert failures_of(launch_result("v3-humming-cold").checks("humming"), HUMMING_CHECKS) == {}


@pytest.mark.parametrize("name", FALLBACKS)
def test_a_fallback_is_never_admitted_and_its_refusal_names_what_ran(launch_result, name):
    result = launch_result(name)
    if result.engine_error is not None:
        # Nothing answers, so the gate's health stage refuses; stock's own error must say why.
        print(f"\n{name}: stock refused to serve: {result.engine_error[-600:]}")
        assert any(word in result.engine_error for word in FALLBACKS[name]), result.engine_error[-3000:]
        return
    checks = result.checks("humming")
    refused = {check: checks[check].observed for check in HUMMING_CHECKS if not checks[check].passed}
    print(f"\n{name}: served; humming checks refused: {refused}")
    assert refused, "a fallback passed every humming check"
    layers = checks["humming.moe_layers_target"].observed
    assert not (isinstance(layers, dict) and set(layers) == {HUMMING_CENSUS}), layers
    assert any(word in repr(refused) for word in FALLBACKS[name]), refused
