"""Each shipped profile, launched with its real argv/env: /server_info, the probe report, the log lines,
the metrics and the engine's own decode speed (meta_info timing) must match what that profile asks for."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from sparkgate_sim import timing
from tests.plugins.simproc import decode_speed, metric_total

# Published anchors (recipe facts 1.4) and the documented model for the combinations in between.
SPEED_TOLERANCE = 0.03  # relative; covers the +-0.05 per-prompt accept jitter (engine time: no host noise)
SPEED_SCALE = 0.02  # any scale reads the same engine-time figures; fast keeps the test short
# Arithmetic (GSM8K-style), the workload of the published anchors; per-workload speeds: test_dspark_timing.py.
PROMPTS = ("Question: what is 17 times 23? Answer step by step.",
           "Question: A shop sells 12 pens a day. How many pens does it sell in 9 days?")
MAX_NEW_TOKENS = 160


@dataclass(frozen=True)
class Want:
    humming: bool
    fp8: bool
    mtp: bool
    tok_s: float


def _model(humming: bool, fp8: bool, mtp: bool) -> float:
    return timing.SpeedModel(humming=humming, fp8_lm_head=fp8, speculative=mtp, cuda_graph=True).decode_tok_s()


WANT = {
    "baseline": Want(False, False, False, 37.81),
    "humming": Want(True, False, False, _model(True, False, False)),
    "fp8-lm-head": Want(False, True, False, _model(False, True, False)),
    "humming-fp8": Want(True, True, False, 41.0),
    "mtp": Want(False, False, True, _model(False, False, True)),
    "all-three": Want(True, True, True, 53.89),
}


def test_intermediate_profiles_sit_between_the_anchors():
    assert 37.81 < WANT["humming"].tok_s < 41.0
    assert 37.81 < WANT["fp8-lm-head"].tok_s < 41.0
    assert 41.0 < WANT["mtp"].tok_s < 53.89


@pytest.mark.parametrize("name", list(WANT))
def test_profile_evidence(start_profile, name):
    want = WANT[name]
    sim = start_profile(name, scale=SPEED_SCALE)

    speeds = [decode_speed(sim, prompt, MAX_NEW_TOKENS)[0] for prompt in PROMPTS]
    measured = sum(speeds) / len(speeds)
    assert measured == pytest.approx(want.tok_s, rel=SPEED_TOLERANCE), (name, speeds)
    # Counters must move by exactly what these (non-streamed) requests report.
    before = sim.metrics()
    body = {"sampling_params": {"max_new_tokens": MAX_NEW_TOKENS, "temperature": 0}}
    metas = [sim.post("/generate", {**body, "text": p}).json()["meta_info"] for p in PROMPTS]

    info = sim.server_info()
    state = info["internal_states"][0]
    assert info["version"] == "0.5.23"
    assert info["max_running_requests"] == 1
    assert info["moe_runner_backend"] == ("humming" if want.humming else "flashinfer_mxfp4")
    assert info["enable_fp32_lm_head"] is (not want.fp8)  # baseline keeps FP32 logits; the FP8 head drops them
    assert info["cuda_graph_config"]["decode"]["backend"] == "full"
    assert info["launch_command"].startswith("--model-path /models/Ling-3.0-flash-fp4")
    if want.mtp:
        assert info["speculative_algorithm"] == "EAGLE"
        assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == (3, 1, 4)
        assert state["avg_spec_accept_length"] == pytest.approx(2.68, abs=0.1)
    else:
        assert info["speculative_algorithm"] is None
        assert "avg_spec_accept_length" not in state
    assert ("SGLANG_ENABLE_FP8_LM_HEAD" in state["env_vars"]) is want.fp8
    assert state["env_vars"]["SGLANG_PLUGINS"] == "engagement_probe"

    report = state["engagement"]
    moe = report["target"]["moe_layers"]
    assert list(moe) == (["Mxfp4HummingMoEMethod/humming"] if want.humming else ["Mxfp4FlashinferCutlassMoEMethod/flashinfer_mxfp4"])
    head = report["target"]["lm_head"]
    assert head["weight_dtype"] == ("torch.float8_e4m3fn" if want.fp8 else "torch.bfloat16")
    assert head["has_weight_scale"] is want.fp8
    if want.mtp:
        assert report["draft"]["model_class"] == "BailingMoeForCausalLMNextN"
        assert report["lm_head_sharing"] == {"module_shared": True, "weight_shared": True}
        assert report["draft"]["lm_head"] == head
    else:
        assert report["draft"] is None and report["lm_head_sharing"] is None

    log = sim.log()
    assert log.count("Online FP8 quantization enabled for lm_head.") == (1 if want.fp8 else 0)
    assert ("Using indexed gemm for humming moe" in log) is want.humming
    assert ("'moe_runner_backend': 'humming'" in log) is want.humming
    assert ("type=BailingMoeForCausalLMNextN" in log) is want.mtp
    assert ("Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4" in log) is want.mtp
    assert ("Capture target decode CUDA graph begin" in log) is (not want.mtp)
    assert ("Capture draft decode CUDA graph begin" in log) is want.mtp
    assert log.index("Load weight end") < log.index("The server is fired up and ready to roll!")
    if want.humming:
        assert log.index("Using indexed gemm for humming moe") < log.index("The server is fired up")
    decode_lines = [l for l in log.splitlines() if "Decode batch, #running-req: 1" in l]
    assert decode_lines, "no periodic decode line after >40 decode iterations"
    for line in decode_lines:
        assert "cuda graph: True" in line
        assert ("accept len:" in line) is want.mtp
        throughput = float(re.search(r"gen throughput \(token/s\): ([0-9.]+)", line).group(1))
        assert throughput == pytest.approx(want.tok_s, rel=SPEED_TOLERANCE)  # simulated time, not wall time

    # Counters agree with the per-request numbers.
    after = sim.metrics()

    def delta(name: str, **labels: str) -> float | None:
        now = metric_total(after, name, **labels)
        return None if now is None else now - (metric_total(before, name, **labels) or 0.0)

    total_tokens = sum(m["completion_tokens"] for m in metas)
    assert delta("sglang:generation_tokens_total", is_streaming="false") == total_tokens
    assert delta("sglang:prompt_tokens_total", is_streaming="false") == sum(m["prompt_tokens"] for m in metas)
    assert delta("sglang:num_requests_total", is_streaming="false") == len(PROMPTS)
    steps = sum(m["spec_verify_ct"] for m in metas) if want.mtp else total_tokens - len(metas)
    assert delta("sglang:cuda_graph_passes_total", mode="decode_cuda_graph") == steps
    assert metric_total(after, "sglang:cuda_graph_passes_total", mode="decode_none") is None
    if want.mtp:
        assert delta("sglang:spec_verify_calls_total") == steps
        for meta in metas:
            assert meta["spec_accept_length"] == pytest.approx(meta["completion_tokens"] / meta["spec_verify_ct"])
            assert meta["spec_num_proposed_drafts"] == meta["spec_verify_ct"] * 3
            assert 2.5 < meta["spec_accept_length"] < 2.85
    else:
        assert not any(k.startswith("spec_") for m in metas for k in m)
        assert metric_total(after, "sglang:spec_verify_calls_total") is None
