"""The timing model hits the published anchors exactly; the engagement logic and the Prometheus text."""

from __future__ import annotations

import pytest

from sparkgate.bench.published import BROKEN_DRAFT, PUBLISHED, VERIFY_STEP_COST
from sparkgate_sim import engagement, faults, metrics, textgen, timing
from sparkgate_sim.image import IMAGES, engine_environment, exportable_env_vars
from sparkgate_sim.resolve import Requested


def speed(humming=False, fp8=False, mtp=False, graphs=True, accept=timing.HEALTHY_ACCEPT_LENGTH):
    return timing.SpeedModel(humming, fp8, mtp, graphs).decode_tok_s(accept)


def test_published_anchors():
    # The simulator keeps its own copy of the published figures (it borrows nothing from the product): both are
    # held to the published table here, the product's copy (bench/published.py) being the one the gate plans with.
    assert speed() == pytest.approx(PUBLISHED["baseline"].decode_tok_s, abs=1e-9)
    assert speed(humming=True, fp8=True) == pytest.approx(PUBLISHED["humming-fp8"].decode_tok_s, abs=1e-9)
    assert speed(humming=True, fp8=True, mtp=True) == pytest.approx(PUBLISHED["all-three"].decode_tok_s, abs=1e-9)
    assert PUBLISHED["all-three"].accept_length == timing.HEALTHY_ACCEPT_LENGTH
    broken = speed(humming=True, fp8=True, mtp=True, accept=BROKEN_DRAFT.accept_length)
    assert broken == pytest.approx(BROKEN_DRAFT.decode_tok_s, abs=1e-9)


def test_verify_step_costs_2_26_plain_steps_at_the_healthy_accept_length():
    for humming, fp8 in ((False, False), (True, False), (True, True)):
        model = timing.SpeedModel(humming, fp8, True, True)
        assert model.verify_step_s(timing.HEALTHY_ACCEPT_LENGTH) / model.plain_step_s() == pytest.approx(VERIFY_STEP_COST)


def test_gain_split_and_ordering():
    assert pytest.approx(41.0 / 37.81) == timing.HUMMING_GAIN * timing.FP8_HEAD_GAIN
    assert speed() < speed(humming=True) < speed(humming=True, fp8=True) < speed(mtp=True) < speed(humming=True, fp8=True, mtp=True)
    assert speed(graphs=False) == pytest.approx(37.81 * 0.45)
    assert speed(humming=True, fp8=True, mtp=True, accept=1.2) < 37.81


def test_accept_length_spread_and_jitter():
    steps = timing.accepted_per_step(2.68, 100)
    assert set(steps) == {2, 3} and sum(steps) == 268
    shifted = timing.accepted_per_step(2.68, 100, phase=0.9)
    assert shifted != steps and sum(shifted) == 268
    assert sum(timing.accepted_per_step(2.68, 3, phase=0.9)) >= 8  # a short request is not biased low
    values = [timing.accept_length_for(seed, max_len=4, broken=False, degraded=False) for seed in range(0, 5000, 7)]
    assert min(values) >= 2.63 and max(values) <= 2.73 and len(set(values)) > 50
    assert timing.accept_length_for(5, max_len=4, broken=True, degraded=False) == 1.0
    assert timing.accept_length_for(5, max_len=4, broken=False, degraded=True) == 1.2


def _decide(req: Requested, image="fork", active=(), plugins="engagement_probe", backend="humming"):
    board = faults.FaultBoard(faults.parse_faults(list(active)))
    board.latch_load_time()
    return engagement.decide(req, IMAGES[image], board, {"SGLANG_PLUGINS": plugins}, backend)


ALL_THREE = Requested(humming=True, fp8_lm_head=True, mtp=True, cuda_graph=True, fp32_lm_head=False, token_map=False)


def test_engagement_all_three_on_the_fork():
    engaged = _decide(ALL_THREE)
    assert (engaged.humming, engaged.fp8_lm_head, engaged.draft_loaded, engaged.module_shared) == (True, True, True, True)
    assert not engaged.draft_reads_fp8_without_scales
    report = engagement.probe_report(engaged)
    assert report["probe_version"] == 1
    assert report["draft"]["lm_head"] == report["target"]["lm_head"]


@pytest.mark.parametrize(
    ("image", "active", "token_map", "trap"),
    [
        ("stock", (), False, False),  # stock never engages FP8, so its tensor-only share is harmless
        ("fork", ("draft-lm-head-unshared",), False, True),
        ("fork", (), True, True),  # --speculative-token-map skips the module share
    ],
)
def test_the_unshared_head_trap(image, active, token_map, trap):
    req = Requested(True, True, True, True, False, token_map)
    engaged = _decide(req, image, active)
    assert engaged.draft_reads_fp8_without_scales is trap
    sharing = engagement.probe_report(engaged)["lm_head_sharing"]
    assert sharing == {"module_shared": False, "weight_shared": True}


def test_runtime_change_of_a_load_time_fault_waits_for_restart():
    board = faults.FaultBoard(())
    board.latch_load_time()
    board.replace(faults.parse_faults("humming-fallback,degrade-after:4"))
    assert not board.loaded_with(faults.HUMMING_FALLBACK)
    assert board.runtime(faults.DEGRADE_AFTER).count() == 4
    assert board.describe()["pending_restart"] == ["humming-fallback"]
    board.latch_load_time()
    assert board.loaded_with(faults.HUMMING_FALLBACK)


def test_fault_spec_parsing():
    parsed = faults.parse_faults("crash-after-ready:5, probe-missing ,crash-after-ready:10s")
    assert [str(f) for f in parsed] == ["crash-after-ready:10s", "probe-missing"]
    assert parsed[0].in_seconds and parsed[0].count() == 10
    assert faults.parse_fault("crash-after-ready").in_seconds
    for bad in ("nope", "probe-missing:3", "degrade-after:x", "degrade-after:3s"):
        with pytest.raises(faults.FaultSpecError):
            faults.parse_fault(bad)


def test_env_vars_export_only_declared_names():
    env = engine_environment({"SGL_ENABLE_FP8_LM_HEAD": "1", "SGLANG_TYPO_VAR": "1", "SGLANG_PLUGINS": "x", "HOME": "/r"})
    assert exportable_env_vars(IMAGES["fork"], env) == {"SGLANG_ENABLE_FP8_LM_HEAD": "1", "SGLANG_PLUGINS": "x"}
    assert exportable_env_vars(IMAGES["stock"], env) == {"SGLANG_PLUGINS": "x"}


def test_prometheus_text():
    m = metrics.EngineMetrics("ling")
    m.cuda_graph_passes.inc({**m.scheduler_labels, "mode": "decode_cuda_graph"}, 3)
    m.ttft.observe(m.stream_labels(True), 0.21)
    text = m.registry.render()
    assert ('sglang:cuda_graph_passes_total{model_name="ling",engine_type="unified",tp_rank="0",pp_rank="0",'
            'moe_ep_rank="0",mode="decode_cuda_graph"} 3.0') in text
    assert 'sglang:time_to_first_token_seconds_bucket{model_name="ling",engine_type="unified",is_streaming="true",le="0.2"} 0.0' in text
    assert 'sglang:time_to_first_token_seconds_bucket{model_name="ling",engine_type="unified",is_streaming="true",le="0.4"} 1.0' in text
    assert "# TYPE sglang:time_to_first_token_seconds histogram" in text


def test_text_is_whitespace_tokenized_and_seeded_by_the_prompt():
    seed = textgen.request_seed("hello there", {"temperature": 0})
    assert seed == textgen.request_seed("hello there", {"temperature": 0})
    assert seed != textgen.request_seed("hello there!", {"temperature": 0})
    assert textgen.request_seed("p", {"temperature": 0.7, "seed": 3}) == textgen.request_seed("p", {"temperature": 0.7, "seed": 3})
    assert len(set(textgen.VOCAB)) == textgen.VOCAB_SIZE and all(" " not in w for w in textgen.VOCAB)
    assert textgen.count_tokens(textgen.render_chat([{"role": "user", "content": "a b c"}])) == 5
