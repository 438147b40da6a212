"""The GPU lane's recorded evidence (tests/fixtures/gpu, from `bash tests/gpu/run` on an NVIDIA H200), held on CPU.

Each launch's verifications replay, with the current code and no engine, to the verdict the real CUDA engine got;
and what the gate reads is in the real output: the capture lines, the graph-pass counter's modes, the speculative
counters. A change to a check that would refuse these real, healthy engines fails here, in CI, without a GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkgate.evidence import answers, logs, metrics
from sparkgate.evidence.recording import ReplayMismatch, replay
from sparkgate.sglang import conformance as C
from tests.gpu import records
from tests.gpu.conftest import launches as lane_launches

LANE = lane_launches({"llama": Path("llama"), "llama-other-seed": Path("other"), "bailing": Path("bailing")})
RECORDED = records.launches()
CASES = [(name, profile) for name in RECORDED for profile in records.recordings(name)]
GRAPH_CHECKS = ("engine.cuda_graph_capture_log", "engine.cuda_graph_passes")


def outcomes(verdict: dict) -> dict[str, bool]:
    return {check["name"]: check["passed"] for check in verdict["checks"]}


def checks(name: str, profile: str) -> dict[str, dict]:
    return {check["name"]: check for check in records.recordings(name)[profile].verdict["checks"]}


def test_every_launch_of_the_lane_is_recorded():
    assert set(RECORDED) == set(LANE), "re-record with `bash tests/gpu/run` on a CUDA machine (docs/testing-gpu.md)"
    for name in RECORDED:
        info = records.launch_info(name)
        assert info["sglang_version"] == "0.5.23" and "H200" in info["gpu"], info
        # One whole run of the lane: every launch kept its recordings and its server log.
        assert set(records.recordings(name)) == set(LANE[name].profiles), name
        assert records.server_log(name), name
    assert len({records.launch_info(name)["run"] for name in RECORDED}) == 1, "records of different runs mixed"


@pytest.mark.parametrize(("name", "profile"), CASES)
def test_the_recorded_real_engine_replays_to_the_same_verdict(name, profile):
    recording = records.recordings(name)[profile]
    assert outcomes(replay(recording).as_dict()) == outcomes(recording.verdict)


def test_a_recording_replays_only_as_its_repeated_question_was_asked():
    # Recorded before the repeated question got the retry's room: asked that way now, the bodies differ.
    recording = records.recordings("dense-eager")["baseline"]
    assert recording.repeat_room == "own"
    with pytest.raises(ReplayMismatch, match="another body"):
        replay(recording.model_copy(update={"repeat_room": "retry"}))


def test_decode_graphs_captured_and_used_pass_the_graph_checks():
    dense = checks("dense-graphs", "baseline")
    assert all(dense[name]["passed"] for name in GRAPH_CHECKS), {n: dense[n]["observed"] for n in GRAPH_CHECKS}
    assert dense["engine.cuda_graph_passes"]["observed"]["decode_cuda_graph_delta"] > 0


def test_decode_graphs_disabled_fail_exactly_the_graph_checks_with_what_ran():
    eager = checks("dense-eager", "baseline")
    assert not any(eager[name]["passed"] for name in GRAPH_CHECKS)
    assert eager["engine.cuda_graph_passes"]["observed"]["decode_none_delta"] > 0


def test_the_real_capture_line_is_what_the_gate_matches():
    log = logs.EngineLog("gpu record", records.server_log("dense-graphs"))
    captured = log.matching(C.log_pattern("capture_end"))
    assert captured, "no capture line of the fixture's format in the real CUDA log"
    eager = logs.EngineLog("gpu record", records.server_log("dense-eager"))
    assert not eager.matching(C.log_pattern("capture_end"))


def test_the_graph_pass_counter_modes_are_the_ones_the_gate_reads():
    family = C.metric("cuda_graph_passes")
    samples = metrics.parse(records.after("dense-graphs")["metrics"])
    modes = {labels.get("mode") for name, labels, _ in samples if name == family}
    assert {"decode_cuda_graph"} <= modes, modes


def test_self_drafting_passes_acceptance_and_the_sentinel_on_real_counts():
    result = checks("standalone-self", "mtp")
    assert result["mtp.accept_length"]["passed"], result["mtp.accept_length"]["observed"]
    after = {c["name"]: c for c in records.rechecks("standalone-self")}
    assert after["sentinel.accept_counters"]["passed"] and after["sentinel.accept_probe"]["passed"], after


def test_every_speculative_graph_was_captured_on_cuda():
    """Target verify, draft decode and draft extend, in the fixture's formats, for both kinds of draft."""
    for name in ("standalone-self", "moe-nextn"):
        log = logs.EngineLog(name, records.side(name)["log_text"])
        for key in ("capture_end", "capture_draft_decode_end", "capture_draft_extend_end"):
            assert log.matching(C.log_pattern(key)), (name, key)


def test_stock_nextn_on_moe_shows_its_real_census_and_head_sharing():
    """The tiny BailingMoeV2 with NEXTN on CUDA: Triton fused MoE in target and draft, and stock SGLang's draft
    sharing the target's LM-head weight tensor but not its module (the trap the FP8 head falls into)."""
    report = records.side("moe-nextn")["server_info"]["internal_states"][0]["engagement"]
    assert report["target"]["moe_layers"] == {"UnquantizedFusedMoEMethod/triton": 1}
    assert report["draft"]["moe_layers"] == {"UnquantizedFusedMoEMethod/triton": 1}
    assert report["draft"]["model_class"] == "BailingMoeForCausalLMNextN"
    assert report["lm_head_sharing"] == {"module_shared": False, "weight_shared": True}


def test_a_nextn_draft_that_never_agrees_on_moe_is_caught_on_client_traffic():
    """The tiny MoE's NEXTN layer has random weights, so its draft never agrees: the admission verdict refuses it and,
    after admission, the sentinel's window over client traffic sees the collapse and its probe confirms it."""
    assert not checks("moe-nextn", "mtp")["mtp.accept_length"]["passed"]
    after = records.rechecks("moe-nextn")
    windows = [c for c in after if c["name"] == "sentinel.accept_window" and c["observed"]["collapsed"]]
    assert windows and windows[0]["observed"]["accept_length"] < 1.5, after
    probes = [c for c in after if c["name"] == "sentinel.accept_probe"]
    assert probes and not probes[0]["passed"], probes
    assert probes[0]["observed"]["trigger"] == "collapse on client traffic", probes[0]


def recorded_tokens(name: str, profile: str) -> dict[str, list]:
    """Each reply's tokens and log-probabilities as the real CUDA engine returned them, read by the current code
    (a replay of the recorded answers), by question."""
    shown = replay(records.recordings(name)[profile]).as_dict()["answers"]
    return {reply["id"]: reply["tokens"] for reply in [shown["cold"], *shown["replies"], shown["warm"]]}


@pytest.mark.parametrize(("name", "profile"), [("dense-eager", "baseline"), ("standalone-self", "mtp"),
                                              ("dense-fp8", "baseline")])
def test_healthy_cuda_variations_agree_with_the_graph_baseline_by_log_probability(name, profile):
    """The baseline-agreement tolerance, held to real CUDA evidence: eager decode, self-drafting speculation and FP8
    linear layers give the decode-graph engine's tokens with log-probabilities within TOKEN_TOLERANCE_NATS, leaving
    them only for the baseline's runner-up at a near-tie (docs/checks/answers.md). The replies count as right here:
    the weights are random, and what is held is the numerics, not the answers."""
    baseline, ours = recorded_tokens("dense-graphs", "baseline"), recorded_tokens(name, profile)
    assert set(ours) == set(baseline) and all(baseline.values())
    for qid in baseline:
        verdict = answers.agreement(ours[qid], baseline[qid], right=True)
        assert verdict["agrees"], (qid, verdict)


def test_fp8_linear_layers_on_cuda_leave_the_lm_head_unquantized():
    """What stock `--quantization fp8` looks like to the probe: FP8 linear layers, a bf16 LM head (the FP8 head is
    the fork's)."""
    info = records.after("dense-fp8")["server_info"]
    assert info["quantization"] == "fp8"
    head = info["internal_states"][0]["engagement"]["target"]["lm_head"]
    assert head["weight_dtype"] == "torch.bfloat16" and head["quant_method"] == "UnquantizedEmbeddingMethod", head


def test_a_draft_with_other_weights_is_refused_on_real_counts():
    result = checks("standalone-other-seed", "mtp")
    assert not result["mtp.accept_length"]["passed"], result["mtp.accept_length"]["observed"]
    after = {c["name"]: c for c in records.rechecks("standalone-other-seed")}
    assert after["sentinel.accept_counters"]["passed"] and not after["sentinel.accept_probe"]["passed"], after


# -- importing a records archive from the GPU machine --------------------------------------------------------------

def _archive(tmp_path, members: dict[str, bytes], name: str = "records.tar.gz"):
    import io
    import tarfile

    path = tmp_path / name
    with tarfile.open(path, "w:gz") as tar:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("member", ["../escape/launch.json", "/abs/launch.json", "dense-graphs/../../x.log",
                                    "dense-graphs/notes.txt", "Dense/launch.json", "a/b/launch.json"])
def test_an_archive_with_a_foreign_member_is_refused_whole(tmp_path, member):
    dest = tmp_path / "gpu"
    dest.mkdir()
    (dest / "kept").mkdir()
    archive = _archive(tmp_path, {"dense-graphs/launch.json": b"{}", member: b"x"})
    with pytest.raises(records.BadArchive, match="unexpected member"):
        records.import_archive(archive, dest)
    assert [p.name for p in dest.iterdir()] == ["kept"]  # the previous records stay as they were


def test_a_recording_the_cpu_tests_cannot_read_is_refused_at_import(tmp_path):
    dest = tmp_path / "gpu"
    archive = _archive(tmp_path, {"dense-graphs/launch.json": b"{}", "dense-graphs/baseline.recording.json": b"{}"})
    with pytest.raises(ValueError):
        records.import_archive(archive, dest)
    assert not dest.exists()


# The break-even accept length the product uses where it cannot measure it (bench/published.py), held to the cost
# ratio the GPU lane measured on the engine's own clock: a verify step of the self-drafting launch (STANDALONE,
# 3 steps, window 4) against a plain decode step of the same model with CUDA graphs (dense-graphs). 2.256 measured
# against 2.26 published; 5 % either way is the tolerance (another model and GPU: the same order is what matters).
VERIFY_COST_TOLERANCE = 0.05


def test_the_verify_step_cost_the_lane_measured_holds_the_break_even():
    from sparkgate.bench import published
    from sparkgate.evidence import calibration

    def calibration_of(recording) -> calibration.CalibrationResult:
        kept = recording.verdict["calibration"]["requests"]
        return calibration.CalibrationResult(requests=[calibration.RequestResult(**r) for r in kept])

    plain = calibration_of(records.recordings("dense-graphs")["baseline"])
    speculative = calibration_of(records.recordings("standalone-self")["mtp"])
    ratio = calibration.verify_cost_ratio(plain, speculative)
    assert ratio is not None and abs(ratio - 2.256) < 0.001, ratio
    assert abs(published.VERIFY_STEP_COST / ratio - 1) <= VERIFY_COST_TOLERANCE
    assert calibration.break_even(plain, speculative) == (round(ratio, 3), calibration.break_even(plain, speculative)[1])
    assert calibration.break_even()[0] == published.VERIFY_STEP_COST
    # a plain launch measures no verify step, a speculative one no plain step
    assert calibration.verify_cost_ratio(speculative, plain) is None
