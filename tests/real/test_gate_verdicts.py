"""The gate against the real SGLang 0.5.23: each check a CPU engine can exercise reports what the engine is.

One real engine per launch variation, each judged by the product's own `verify` with a shipped profile's
expectations (tests/real/gate.py). A variation differs from its reference in one launch setting and must flip
exactly the checks that read that setting, showing the real observed value; checks that need a GPU refuse the
CPU engine by name, with what it really runs. And the three silent failures sparkgate exists for, live: Humming
asked for and Triton running, the fork's FP8 variable ignored by stock SGLang, and the all-three profile (FP8 head +
NEXTN) against stock NEXTN is refused by the module-sharing check with `module_shared: false` observed.

Speed and the calibration time budget depend on this machine's load, not on the launch, and a tiny CPU model's
tok/s says nothing about a Spark; they are left out of the exact flip sets (the simulator e2e tests prove them).
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import sglang

from sparkgate.evidence.results import Verdict
from tests.real import gate
from tests.real.engine import Launch, RealEngine

pytestmark = pytest.mark.real

TIMING = {"engine.speed_floor", "engine.speed_vs_baseline", "engine.calibration"}
DENSE_PROFILE = "fp8-lm-head"  # the baseline's checks plus the FP8 head's: fp32 on/off has a check to flip
MTP_PROFILE = "mtp"


def identity(launch: Launch, architecture: str) -> dict:
    """What the engine must be (the reference launch's identity, the installed SGLang's version)."""
    return {"model_path": str(launch.model_path), "served_model_name": launch.served_model_name,
            "sglang_version": sglang.__version__, "architecture": architecture}


def judged(engine: RealEngine, profile: str, expected_identity: dict) -> Verdict:
    result = gate.verdict(engine, profile, **expected_identity)
    json.dumps(result.as_dict())  # the verdict is what the sentinel publishes: it must serialize, whatever it saw
    return result


def exact_flips(reference: Verdict, variation: Verdict) -> dict[str, tuple[bool, bool]]:
    return {name: flip for name, flip in gate.flipped(reference, variation).items() if name not in TIMING}


# --- the dense tiny llama: one setting at a time ---------------------------------------------------------


@pytest.fixture(scope="module")
def dense_verdicts(real_engines, dense_launch, tmp_path_factory) -> dict[str, Verdict]:
    """variation -> verdict; the reference is batch 1 with the probe and metrics on."""
    reference = dataclasses.replace(dense_launch, max_running_requests=1)
    alias = tmp_path_factory.mktemp("alias") / "tiny-llama-elsewhere"
    alias.symlink_to(dense_launch.model_path, target_is_directory=True)  # same weights, another model path
    variations = {
        "reference": reference,
        "batch 8": dataclasses.replace(reference, max_running_requests=8),
        "fp32 lm head": dataclasses.replace(reference, extra_args=("--enable-fp32-lm-head",)),
        "probe absent": dataclasses.replace(reference, probe=False),
        "metrics off": dataclasses.replace(reference, metrics=False),
        "another served name": dataclasses.replace(reference, served_model_name="not-the-expected-model"),
        "another model path": dataclasses.replace(reference, model_path=alias),
    }
    expected = identity(reference, "LlamaForCausalLM")
    return {name: judged(real_engines.get(launch), DENSE_PROFILE, expected) for name, launch in variations.items()}


def test_the_reference_passes_every_configuration_and_probe_check(dense_verdicts):
    checks = gate.by_name(dense_verdicts["reference"])
    for name in ("engine.health", "engine.identity", "engine.architecture", "engine.batch1", "engine.probe_report",
                 "fp8_lm_head.config_echo", "engine.log"):
        assert checks[name].passed, (name, checks[name].observed)
    assert checks["engine.batch1"].observed == 1 and checks["fp8_lm_head.config_echo"].observed is False


@pytest.mark.parametrize(("variation", "check", "observed"), [
    ("batch 8", "engine.batch1", 8),
    ("fp32 lm head", "fp8_lm_head.config_echo", True),
    ("probe absent", "engine.probe_report", "absent"),
])
def test_one_launch_setting_flips_exactly_its_check(dense_verdicts, variation, check, observed):
    flips = exact_flips(dense_verdicts["reference"], dense_verdicts[variation])
    assert flips == {check: (True, False)}, flips
    assert gate.by_name(dense_verdicts[variation])[check].observed == observed


@pytest.mark.parametrize(("variation", "field", "value"), [
    ("another served name", "served_model_name", "not-the-expected-model"),
    ("another model path", "model_path", "tiny-llama-elsewhere"),
])
def test_the_wrong_model_is_refused_by_identity_with_what_it_serves(dense_verdicts, variation, field, value):
    assert exact_flips(dense_verdicts["reference"], dense_verdicts[variation]) == {"engine.identity": (True, False)}
    observed = gate.by_name(dense_verdicts[variation])["engine.identity"].observed
    assert str(observed[field]).endswith(value) and observed["version"] == sglang.__version__


def test_metrics_off_changes_what_the_metrics_check_saw_not_the_outcome(dense_verdicts):
    """On CPU the CUDA-graph pass counter fails either way; with metrics on it shows the real eager passes, with
    metrics off the missing endpoint: the check reports what the engine is, in both directions."""
    assert exact_flips(dense_verdicts["reference"], dense_verdicts["metrics off"]) == {}
    on = gate.by_name(dense_verdicts["reference"])["engine.cuda_graph_passes"]
    off = gate.by_name(dense_verdicts["metrics off"])["engine.cuda_graph_passes"]
    assert not on.passed and on.observed["decode_cuda_graph_delta"] is None and on.observed["decode_none_delta"] > 0
    assert not off.passed and "/metrics" in str(off.observed) and "404" in str(off.observed)


# --- the tiny BailingMoeV2: NEXTN off and on ------------------------------------------------------------


@pytest.fixture(scope="module")
def nextn_verdicts(real_engines, bailing_launch, nextn_launch) -> dict[str, Verdict]:
    expected = identity(bailing_launch, "BailingMoeV2ForCausalLM")
    verdicts = {}
    # Humming asked for on an engine that cannot run it (no humming-kernels, no GPU): SGLang takes the flag.
    humming = dataclasses.replace(bailing_launch, extra_args=(*bailing_launch.extra_args, "--moe-runner-backend",
                                                               "humming"))
    verdicts["humming requested / humming-fp8"] = judged(real_engines.get(humming), "humming-fp8", expected)
    for name, launch in (("nextn off", bailing_launch), ("nextn on", nextn_launch)):
        engine = real_engines.get(launch)
        # The first speculative request on CPU builds torch inductor's C++ (seconds): not the gate's to time.
        engine.generate("warm up", max_new_tokens=8)
        verdicts[f"{name} / {MTP_PROFILE}"] = judged(engine, MTP_PROFILE, expected)
        verdicts[f"{name} / all-three"] = judged(engine, "all-three", expected)
        verdicts[f"{name} / humming-fp8"] = judged(engine, "humming-fp8", expected)
        # The profile as shipped: only the served name and path of the tiny checkpoint are rewritten.
        verdicts[f"{name} / all-three as shipped"] = gate.verdict(engine, "all-three")
    return verdicts


def test_nextn_on_flips_exactly_the_draft_checks(nextn_verdicts):
    off, on = nextn_verdicts[f"nextn off / {MTP_PROFILE}"], nextn_verdicts[f"nextn on / {MTP_PROFILE}"]
    assert exact_flips(off, on) == {name: (False, True) for name in (
        "mtp.config_echo", "mtp.draft_loaded", "mtp.log_draft_loaded", "engine.probe_report")}
    checks = gate.by_name(on)
    assert checks["mtp.config_echo"].observed == {"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1,
                                                  "num_draft_tokens": 4}
    assert checks["mtp.draft_loaded"].observed == "BailingMoeForCausalLMNextN"
    assert gate.by_name(off)["mtp.config_echo"].observed["algorithm"] is None


def test_a_random_mtp_layer_is_refused_by_accept_length_with_the_real_value(nextn_verdicts):
    off = gate.by_name(nextn_verdicts[f"nextn off / {MTP_PROFILE}"])["mtp.accept_length"]
    on = gate.by_name(nextn_verdicts[f"nextn on / {MTP_PROFILE}"])["mtp.accept_length"]
    assert not off.passed and off.observed is None  # no speculation: nothing was accepted or measured
    # The tiny model's MTP layer is random: every draft is rejected, each verify yields one token.
    assert not on.passed and 1.0 <= on.observed < 2.0 and on.expected == ">= 2.0"


def test_fp8_head_with_stock_nextn_is_refused_by_module_sharing_observed_live(nextn_verdicts):
    """Stock 0.5.23's BailingMoeForCausalLMNextN takes the target's head tensor, not its module: with an FP8
    head the draft would project through its own unquantized head (the accept-length-1.00 trap)."""
    sharing = gate.by_name(nextn_verdicts["nextn on / all-three"])["mtp.lm_head_module_shared"]
    assert not sharing.passed
    assert sharing.observed == {"module_shared": False, "weight_shared": True}
    # Without the FP8 head, sharing the tensor is enough and the check is not asked for: the refusal is the
    # FP8 + NEXTN combination, not NEXTN.
    assert "mtp.lm_head_module_shared" not in gate.by_name(nextn_verdicts[f"nextn on / {MTP_PROFILE}"])


def test_humming_asked_for_runs_triton_and_is_refused_by_the_census_not_the_flag(nextn_verdicts):
    """'The flag is on' is not evidence: SGLang echoes humming, the MoE layers run the unquantized Triton method."""
    asked = nextn_verdicts["humming requested / humming-fp8"]
    flips = exact_flips(nextn_verdicts["nextn off / humming-fp8"], asked)
    assert flips == {"humming.config_echo": (False, True)}, flips
    checks = gate.by_name(asked)
    assert checks["humming.config_echo"].observed == "humming"
    census = checks["humming.moe_layers_target"]
    assert not census.passed and census.observed == {"UnquantizedFusedMoEMethod/triton": 1}
    assert not checks["humming.log_signature"].passed and checks["humming.log_signature"].observed == "0x"
    assert not asked.passed


def test_stock_sglang_ignores_the_fp8_head_variable_and_the_gate_sees_it(nextn_verdicts):
    """Launched with SGLANG_ENABLE_FP8_LM_HEAD=1 and SGLANG_EXPOSE_OWN_ENV_VARS=1 as a bundle does: stock 0.5.23
    lists the variables it declares, and this one is not among them."""
    check = gate.by_name(nextn_verdicts["nextn off / humming-fp8"])["fp8_lm_head.env_declared"]
    assert not check.passed and check.observed is None and check.expected == "1"
    head = gate.by_name(nextn_verdicts["nextn off / humming-fp8"])["fp8_lm_head.target_head"]
    assert not head.passed and head.observed["weight_dtype"] == "torch.bfloat16"  # the head stayed BF16


GPU_ONLY = {
    "humming.moe_layers_target": {"UnquantizedFusedMoEMethod/triton": 1},
    "humming.moe_layers_draft": {"UnquantizedFusedMoEMethod/triton": 1},
    "humming.log_signature": "0x",
    "fp8_lm_head.log_signature": "0x",
    "engine.cuda_graph_capture_log": "0 capture line(s)",
}


def test_checks_that_need_a_gpu_refuse_the_cpu_engine_by_name_with_what_it_runs(nextn_verdicts):
    checks = gate.by_name(nextn_verdicts["nextn on / all-three"])
    for name, observed in GPU_ONLY.items():
        assert not checks[name].passed and checks[name].observed == observed, (name, checks[name].observed)
        assert checks[name].hint, name  # every refusal says why and what to do
    head = checks["fp8_lm_head.target_head"]
    assert not head.passed and head.observed["weight_dtype"] == "torch.bfloat16"
    assert head.observed["has_weight_scale"] is False
    passes = checks["engine.cuda_graph_passes"]
    assert not passes.passed and passes.observed["decode_none_delta"] > 0  # eager decode, counted by the engine


def test_the_shipped_profile_refuses_the_tiny_model_as_not_ling_3(nextn_verdicts):
    checks = gate.by_name(nextn_verdicts["nextn on / all-three as shipped"])
    assert not checks["engine.architecture"].passed
    assert checks["engine.architecture"].observed == ["BailingMoeV2ForCausalLM"]
    assert not checks["engine.identity"].passed  # 0.5.23, not the fork's version
    assert checks["engine.identity"].observed["version"] == sglang.__version__
    assert not nextn_verdicts["nextn on / all-three as shipped"].passed
