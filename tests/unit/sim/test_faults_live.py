"""Every fault changes the evidence its real failure changes (and gives nothing away about itself)."""

from __future__ import annotations

import json
import time

import pytest

from sparkgate_sim import faults, timing
from tests.plugins.simproc import decode_speed, metric_total

PROMPT = "Question: A train travels 180 km in 2.5 hours. How far in 4 hours?"
SPEED_SCALE = 0.04


def _model(humming: bool, fp8: bool, mtp: bool, graphs: bool = True, accept: float = timing.HEALTHY_ACCEPT_LENGTH) -> float:
    return timing.SpeedModel(humming=humming, fp8_lm_head=fp8, speculative=mtp, cuda_graph=graphs).decode_tok_s(accept)


def assert_no_giveaway(sim, *surfaces: str) -> None:
    """No fault name may appear in the log, stderr or any API answer (only /admin shows them)."""
    text = sim.log() + sim.stderr() + "".join(surfaces)
    for name in faults.ALL:
        assert name not in text, name


def test_fp8_env_ignored_keeps_the_head_bf16(start_profile):
    sim = start_profile("all-three", {"SPARKGATE_SIM_FAULTS": faults.FP8_ENV_IGNORED}, scale=SPEED_SCALE)
    speed, meta = decode_speed(sim, PROMPT, 160)
    info = sim.server_info()
    state = info["internal_states"][0]
    head = state["engagement"]["target"]["lm_head"]
    assert (head["quant_method"], head["weight_dtype"], head["has_weight_scale"]) == (
        "UnquantizedEmbeddingMethod", "torch.bfloat16", False)
    assert "SGLANG_ENABLE_FP8_LM_HEAD" not in state["env_vars"]
    assert "Online FP8 quantization enabled for lm_head." not in sim.log()
    assert state["engagement"]["lm_head_sharing"]["module_shared"] is True  # still the fork's draft
    assert meta["spec_accept_length"] > 2.4  # a BF16 head is no trap
    assert speed == pytest.approx(_model(True, False, True), rel=0.05)
    assert_no_giveaway(sim, json.dumps(info))


def test_draft_lm_head_unshared_with_fp8_head_is_the_trap(start_profile):
    sim = start_profile("all-three", {"SPARKGATE_SIM_FAULTS": faults.DRAFT_LM_HEAD_UNSHARED}, scale=SPEED_SCALE)
    speed, meta = decode_speed(sim, PROMPT, 120)
    assert meta["spec_accept_length"] == pytest.approx(1.0, abs=0.02)  # the prefill token counts too
    assert meta["spec_num_correct_drafts"] == 0 and meta["spec_accept_rate"] == 0
    assert speed == pytest.approx(24.0, rel=0.05)
    assert speed < 37.81  # slower than the baseline it was meant to beat
    info = sim.server_info()
    report = info["internal_states"][0]["engagement"]
    assert report["lm_head_sharing"] == {"module_shared": False, "weight_shared": True}
    draft_head = report["draft"]["lm_head"]
    assert (draft_head["quant_method"], draft_head["weight_dtype"], draft_head["has_weight_scale"]) == (
        "UnquantizedEmbeddingMethod", "torch.float8_e4m3fn", False)
    log = sim.log()
    assert log.count("Online FP8 quantization enabled for lm_head.") == 1
    assert "type=BailingMoeForCausalLMNextN" in log  # the draft did load: only acceptance tells
    assert "accept len: 1.00" in log
    assert_no_giveaway(sim, json.dumps(info))


def test_draft_lm_head_unshared_is_harmless_with_a_bf16_head(start_profile):
    sim = start_profile("mtp", {"SPARKGATE_SIM_FAULTS": faults.DRAFT_LM_HEAD_UNSHARED})
    _, meta = decode_speed(sim, PROMPT, 60)
    assert sim.engagement()["lm_head_sharing"]["module_shared"] is False
    assert meta["spec_accept_length"] > 2.4


def test_humming_fallback_runs_triton_but_still_says_humming(start_profile):
    sim = start_profile("all-three", {"SPARKGATE_SIM_FAULTS": faults.HUMMING_FALLBACK}, scale=SPEED_SCALE)
    speed, _ = decode_speed(sim, PROMPT, 160)
    info = sim.server_info()
    assert info["moe_runner_backend"] == "humming"
    assert info["speculative_moe_runner_backend"] == "humming"
    report = info["internal_states"][0]["engagement"]
    assert report["target"]["moe_layers"] == {"UnquantizedFusedMoEMethod/triton": 31}
    assert report["draft"]["moe_layers"] == {"UnquantizedFusedMoEMethod/triton": 1}
    log = sim.log()
    assert "Using indexed gemm for humming moe" not in log
    assert "'moe_runner_backend': 'humming'" in log
    assert speed == pytest.approx(_model(False, True, True), rel=0.05)
    assert_no_giveaway(sim, json.dumps(info))


def test_mtp_draft_missing_turns_speculation_off_silently(start_profile):
    sim = start_profile("all-three", {"SPARKGATE_SIM_FAULTS": faults.MTP_DRAFT_MISSING}, scale=SPEED_SCALE)
    speed, meta = decode_speed(sim, PROMPT, 160)
    assert not any(k.startswith("spec_") for k in meta)
    info = sim.server_info()
    assert info["speculative_algorithm"] == "EAGLE"  # config echo unchanged
    state = info["internal_states"][0]
    assert state["engagement"]["draft"] is None and state["engagement"]["lm_head_sharing"] is None
    assert "avg_spec_accept_length" not in state
    log = sim.log()
    assert "type=BailingMoeForCausalLMNextN" not in log
    assert "Capture draft" not in log
    assert "accept len" not in log
    assert metric_total(sim.metrics(), "sglang:spec_verify_calls_total") is None
    assert speed == pytest.approx(41.0, rel=0.05)  # the humming + FP8 head speed, without MTP
    assert_no_giveaway(sim, json.dumps(info))


def test_cuda_graph_off(start_profile):
    sim = start_profile("baseline", {"SPARKGATE_SIM_FAULTS": faults.CUDA_GRAPH_OFF}, scale=SPEED_SCALE * 1.5)
    speed, _ = decode_speed(sim, PROMPT, 90)
    log = sim.log()
    assert "CUDA graph begin" not in log and "CUDA graph end" not in log
    decode_lines = [l for l in log.splitlines() if "Decode batch" in l]
    assert decode_lines and all("cuda graph: False" in l for l in decode_lines)
    text = sim.metrics()
    assert metric_total(text, "sglang:cuda_graph_passes_total", mode="decode_cuda_graph") is None
    passes = metric_total(text, "sglang:cuda_graph_passes_total", mode="decode_none")
    assert passes == metric_total(text, "sglang:generation_tokens_total") - metric_total(text, "sglang:num_requests_total")
    assert speed == pytest.approx(37.81 * 0.45, rel=0.05)
    assert sim.server_info()["cuda_graph_config"]["decode"]["backend"] == "full"
    assert_no_giveaway(sim)


@pytest.mark.parametrize("argv_extra", [["--disable-cuda-graph"], ["--cuda-graph-backend-decode", "disabled"]])
def test_cuda_graphs_disabled_by_argv(start_sim, argv_extra):
    from tests.plugins.simproc import profile_launch

    argv, env = profile_launch("baseline")
    if "--cuda-graph-backend-decode" in argv_extra:
        i = argv.index("--cuda-graph-backend-decode")
        argv = argv[:i] + argv[i + 2 :]
    sim = start_sim(argv + argv_extra, env)
    decode_speed(sim, PROMPT, 45)
    assert "CUDA graph begin" not in sim.log()
    assert sim.server_info()["cuda_graph_config"]["decode"]["backend"] == "disabled"
    assert metric_total(sim.metrics(), "sglang:cuda_graph_passes_total", mode="decode_cuda_graph") is None


def test_crash_at_load_exits_1_with_a_traceback(start_profile):
    sim = start_profile("all-three", {"SPARKGATE_SIM_FAULTS": faults.CRASH_AT_LOAD}, ready=False)
    assert sim.wait_exit() == 1
    assert "Load weight begin" in sim.log() and "Load weight end" not in sim.log()
    assert "Traceback (most recent call last)" in sim.stderr()
    assert_no_giveaway(sim)


def test_hang_at_load_stays_starting(start_profile):
    sim = start_profile("baseline", {"SPARKGATE_SIM_FAULTS": faults.HANG_AT_LOAD}, ready=False)
    sim.wait_listening()
    deadline = time.monotonic() + 1.0  # 5x the whole configured startup at this scale
    while time.monotonic() < deadline:
        resp = sim.get("/health")
        assert (resp.status, resp.body) == (503, b"")
        time.sleep(0.1)
    assert sim.get("/server_info").status == 503
    assert sim.proc.poll() is None
    assert "Load weight begin" in sim.log() and "Load weight end" not in sim.log()
    assert_no_giveaway(sim)


def test_slow_start_takes_ten_times_longer(start_profile):
    normal = start_profile("baseline")
    slow = start_profile("baseline", {"SPARKGATE_SIM_FAULTS": faults.SLOW_START})
    fast_total = normal.server_info()["startup_time"]["tokenizer_e2e"]
    slow_total = slow.server_info()["startup_time"]["tokenizer_e2e"]
    # Measured like a real engine measures it, so a busy machine can only add to these figures.
    assert 19.0 <= fast_total < 60.0
    assert slow_total >= 190.0
    assert slow_total > 4 * fast_total
    assert_no_giveaway(slow)


def test_crash_after_ready_after_n_requests(start_profile):
    sim = start_profile("baseline", {"SPARKGATE_SIM_FAULTS": f"{faults.CRASH_AFTER_READY}:2"})
    for _ in range(2):
        resp = sim.post("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 4}})
        assert resp.status == 200
    assert sim.wait_exit() != 0
    assert "Traceback" in sim.stderr()
    assert_no_giveaway(sim)


def test_crash_after_ready_after_simulated_seconds(start_profile):
    sim = start_profile("baseline", {"SPARKGATE_SIM_FAULTS": f"{faults.CRASH_AFTER_READY}:30s"})
    assert sim.get("/health").status == 200
    assert sim.wait_exit(timeout=10) != 0


def test_degrade_after_n_requests(start_profile):
    sim = start_profile("all-three", {"SPARKGATE_SIM_FAULTS": f"{faults.DEGRADE_AFTER}:2"}, scale=SPEED_SCALE)
    accepts = [decode_speed(sim, f"{PROMPT} #{i}", 100)[1]["spec_accept_length"] for i in range(2)]
    speed, meta = decode_speed(sim, PROMPT, 100)
    assert all(a > 2.4 for a in accepts)
    assert meta["spec_accept_length"] == pytest.approx(1.2, abs=0.05)
    assert speed == pytest.approx(_model(True, True, True, accept=1.2), rel=0.06)
    assert_no_giveaway(sim)


def test_probe_missing_drops_only_the_engagement_report(start_profile):
    sim = start_profile("all-three", {"SPARKGATE_SIM_FAULTS": faults.PROBE_MISSING})
    state = sim.server_info()["internal_states"][0]
    assert "engagement" not in state
    assert "env_vars" in state
    assert_no_giveaway(sim, json.dumps(state))


def test_probe_needs_the_plugin_whitelisted(start_profile):
    sim = start_profile("baseline", {"SGLANG_PLUGINS": "something_else"})
    assert "engagement" not in sim.server_info()["internal_states"][0]


def test_accept_decay_falls_below_break_even_past_its_context_length(start_profile):
    """accept-decay:N: acceptance healthy while the context is at most N tokens, 1.5 past it (below the 2.26 a
    verify step costs), in the final meta_info and in the decode log lines the sentinel reads per band."""
    from sparkgate.evidence import context_bands

    sim = start_profile("all-three", {"SPARKGATE_SIM_FAULTS": f"{faults.ACCEPT_DECAY}:600"}, scale=SPEED_SCALE)
    story = "Explain step by step how a lighthouse lens focuses light."  # arith-like text, no question: decodes it all
    _speed, short = decode_speed(sim, story, 400)
    _speed, long = decode_speed(sim, " ".join(["lighthouse"] * 1200) + " " + story, 400)
    assert short["spec_accept_length"] > 2.4
    assert long["spec_accept_length"] == pytest.approx(timing.DECAYED_ACCEPT_LENGTH, abs=0.05)
    bands = context_bands.Bands()
    bands.add_text(sim.log())
    judged = bands.judged(2.26)
    assert judged["1k-4k"]["lines"] >= 3 and judged["1k-4k"]["pays"] is False, judged
    assert judged["0-1k"]["lines"] >= 3 and judged["0-1k"]["pays"] is True, judged
    assert faults.parse_fault(faults.ACCEPT_DECAY).count() == 4096  # alone: past 4096 tokens
    assert_no_giveaway(sim)
