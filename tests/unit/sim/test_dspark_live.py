"""The DSpark launch (Humming + FP8 head + DSpark, the dspark profile's argv/env) through the running simulator:
/server_info, the probe report, the startup log in SGLang's order, per-request and Prometheus spec fields,
each DSpark fault, the ring and the drafter directory failing as SGLang fails, and the per-workload speeds."""

from __future__ import annotations

import json
import re

import pytest

from sparkgate_sim import faults, textgen, timing, workload
from tests.plugins.simproc import decode_speed, metric_total, profile_launch

DSPARK_FLAGS = [
    "--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", "/models/Ling-3.0-flash-dspark",
    "--speculative-dspark-block-size", "8", "--speculative-num-draft-tokens", "9", "--enable-linear-replayssm-spec",
    "--linear-replayssm-cache-len", "32", "--linear-attn-decode-backend", "triton",
]
ARITH = "Question: A train travels 180 km in 2.5 hours. How far in 4 hours? Answer step by step."
CODE = "Complete the Python function.\ndef running_max(values: list[int]) -> list[int]:\n    "
PROSE = "Write a short essay on why the sea is salty."
SPEED_SCALE = 0.04
RUNNER = ("Initialized DSpark draft runner. attention_backend=flashinfer, model=LingDSparkModel, gamma=8, "
          "verify_num_draft_tokens=9, query_token_num=9, sample_from_anchor=False, mask_token_id=")
GRAPH_DISABLED = "Disable DSpark draft cuda graph because only"
PROPOSAL_EAGER = "DSpark draft proposal kept eager (reason="
PROPOSAL_FOLDED = "DSpark draft proposal (sampling) folded into the draft cuda graph."
DRAFT_CAPTURE = "Capture draft verify CUDA graph begin. backend=full, num_tokens_per_req=9"
UNREADABLE = "Failed to read DSpark draft config; preserving explicit/default gamma resolution. Error: "


def dspark_launch(*replace: str) -> tuple[list[str], dict[str, str]]:
    """Humming + FP8 head (the humming-fp8 profile) plus the DSpark flags; `replace` swaps flag values."""
    argv, env = profile_launch("humming-fp8")
    flags = list(DSPARK_FLAGS)
    for flag, value in zip(replace[::2], replace[1::2], strict=True):
        flags[flags.index(flag) + 1] = value
    return argv + flags, env


def rate(kind: str, **degraded: bool) -> float:
    model = timing.SpeedModel(humming=True, fp8_lm_head=True, speculative=True, cuda_graph=True, dspark=True, **degraded)
    return model.decode_tok_s(timing.nominal_accept_length(True, kind))


def assert_no_giveaway(sim, *surfaces: str) -> None:
    text = sim.log() + sim.stderr() + "".join(surfaces)
    for name in faults.ALL:
        assert name not in text, name


@pytest.fixture
def start_dspark(start_sim):
    def start(extra_env: dict[str, str] | None = None, *replace: str, **kw):
        argv, env = dspark_launch(*replace)
        return start_sim(argv, {**env, **(extra_env or {})}, **kw)

    return start


def test_a_healthy_dspark_engine(start_dspark):
    sim = start_dspark(scale=SPEED_SCALE)
    speed, _ = decode_speed(sim, ARITH, 240)
    assert speed == pytest.approx(rate(workload.ARITH), rel=0.05)
    before = sim.metrics()
    meta = sim.post("/generate", {"text": ARITH, "sampling_params": {"max_new_tokens": 200, "temperature": 0}}).json()["meta_info"]
    assert meta["spec_accept_length"] == pytest.approx(meta["completion_tokens"] / meta["spec_verify_ct"])
    assert meta["spec_num_proposed_drafts"] == meta["spec_verify_ct"] * 8
    assert meta["spec_accept_length"] >= 5.0

    info = sim.server_info()
    assert (info["speculative_algorithm"], info["speculative_num_draft_tokens"], info["speculative_dspark_block_size"],
            info["speculative_num_steps"], info["speculative_eagle_topk"]) == ("DSPARK", 9, 8, 1, 1)
    assert info["speculative_draft_model_path"] == "/models/Ling-3.0-flash-dspark"
    assert (info["enable_linear_replayssm_spec"], info["linear_replayssm_cache_len"]) == (True, 32)
    state = info["internal_states"][0]
    assert state["avg_spec_accept_length"] >= 5.0
    assert "dspark_info_record" not in state  # SGLang dumps records only when asked to (dspark_records.py)
    report = state["engagement"]
    assert report["draft"] == {"model_class": "LingDSparkModel", "lm_head": report["target"]["lm_head"], "moe_layers": {}}
    assert report["target"]["lm_head"]["quant_method"] == "Fp8LinearMethod"
    assert report["lm_head_sharing"] == {"module_shared": True, "weight_shared": True}
    assert "dspark_worker_init" in report["hooks_called"] and "init_lm_head" not in report["hooks_called"]

    log = sim.log()
    assert log.count(RUNNER) == 1
    order = ["type=BailingMoeV3ForCausalLM", "type=LingDSparkModel", RUNNER, "Memory pool end",
             "Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=9", PROPOSAL_FOLDED,
             DRAFT_CAPTURE, "The server is fired up and ready to roll!"]
    positions = [log.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert "type=LingDSparkModel, avail mem=" in log  # a BF16 drafter: no quantization part
    for absent in (GRAPH_DISABLED, PROPOSAL_EAGER, UNREADABLE, "checkpoint-local", "Capture draft decode"):
        assert absent not in log
    decode_lines = [line for line in log.splitlines() if "Decode batch" in line]
    assert decode_lines and all("accept len:" in line and "block accept len" not in line for line in decode_lines)

    after = sim.metrics()
    assert metric_total(after, "sglang:spec_num_draft_tokens") == 9
    assert metric_total(after, "sglang:spec_num_steps") == 1
    assert metric_total(after, "sglang:spec_block_accept_length") == 0  # static verify mode: not measured
    verify_calls = metric_total(after, "sglang:spec_verify_calls_total") - (metric_total(before, "sglang:spec_verify_calls_total") or 0)
    assert verify_calls == meta["spec_verify_ct"]


def test_code_favours_dspark_and_prose_nextn_through_http(start_dspark, start_profile):
    dspark = start_dspark(scale=SPEED_SCALE)
    nextn = start_profile("all-three", scale=SPEED_SCALE)
    measured = {}
    for name, sim, is_dspark in (("dspark", dspark, True), ("nextn", nextn, False)):
        model = timing.SpeedModel(True, True, True, True, dspark=is_dspark)
        for kind, prompt in ((workload.CODE, CODE), (workload.PROSE, PROSE)):
            want = model.decode_tok_s(timing.nominal_accept_length(is_dspark, kind))
            measured[name, kind] = decode_speed(sim, prompt, 240)[0]
            assert measured[name, kind] == pytest.approx(want, rel=0.05), (name, kind)
    answer = dspark.post("/generate", {"text": CODE, "sampling_params": {"max_new_tokens": 30, "temperature": 0}}).json()
    assert set(answer["text"].split()) <= set(textgen.CODE_VOCAB)  # code is answered in code tokens
    assert measured["dspark", workload.CODE] > measured["nextn", workload.CODE]
    assert measured["dspark", workload.PROSE] < measured["nextn", workload.PROSE]


def test_cap_accept_mode_logs_and_exports_the_block_accept_length(start_dspark):
    sim = start_dspark({"SGLANG_RAGGED_VERIFY_MODE": "cap-accept"})
    decode_speed(sim, CODE, 400)
    lines = [line for line in sim.log().splitlines() if "Decode batch" in line]
    assert lines
    for line in lines:
        accept = float(re.search(r"accept len: ([0-9.]+)", line).group(1))
        block = float(re.search(r"block accept len: ([0-9.]+)", line).group(1))
        assert "cap len: 9.00, " in line
        assert block == accept  # batch 1: nothing is trimmed
    assert metric_total(sim.metrics(), "sglang:spec_block_accept_length") > 5


def test_the_sps_record_switch_adds_dspark_info_records(start_dspark):
    sim = start_dspark({"SGLANG_DSPARK_ENABLE_SPS_RECORD": "1"})
    meta = decode_speed(sim, ARITH, 120)[1]
    record = sim.server_info()["internal_states"][0]["dspark_info_record"]
    assert (record["mode"], record["gamma"], record["verify_num_draft_tokens"]) == ("static", 8, 9)
    assert record["components"] == ["core", "step_cpu_time"]
    steps = record["records"]
    assert len(steps) == meta["spec_verify_ct"]
    assert steps[0]["num_verify_tokens"] == 9 and "step_cpu_ms" not in steps[0]  # first step after a prefill
    assert all(s["step_cpu_ms"] > 0 for s in steps[1:])


def test_draft_graph_disabled(start_dspark):
    sim = start_dspark({"SPARKGATE_SIM_FAULTS": faults.DSPARK_DRAFT_GRAPH_DISABLED}, scale=SPEED_SCALE)
    speed, _ = decode_speed(sim, ARITH, 240)
    assert speed == pytest.approx(rate(workload.ARITH, dspark_draft_graph=False), rel=0.05)
    assert speed < rate(workload.ARITH) * 0.92  # an eager drafter loses most of DSpark's edge
    log = sim.log()
    line = next(line for line in log.splitlines() if GRAPH_DISABLED in line)
    available = float(re.search(r"only ([0-9.]+) GB", line).group(1))
    assert available < 1.0
    assert line.endswith("GB GPU memory is available after target backend initialization.")
    assert DRAFT_CAPTURE not in log and PROPOSAL_FOLDED not in log and PROPOSAL_EAGER not in log
    assert "Capture target verify CUDA graph end" in log  # the target still runs from its graph
    assert log.count(RUNNER) == 1
    info = sim.server_info()
    assert info["internal_states"][0]["memory_usage"]["graph"]["draft_decode"] == 0.0
    assert_no_giveaway(sim, json.dumps(info))


def test_proposal_kept_eager(start_dspark):
    sim = start_dspark({"SPARKGATE_SIM_FAULTS": faults.DSPARK_PROPOSAL_EAGER}, scale=SPEED_SCALE)
    speed, _ = decode_speed(sim, ARITH, 240)
    assert speed == pytest.approx(rate(workload.ARITH, dspark_proposal_folded=False), rel=0.05)
    log = sim.log()
    assert "DSpark draft proposal kept eager (reason=no markov head)." in log
    assert PROPOSAL_FOLDED not in log and GRAPH_DISABLED not in log
    assert log.index(PROPOSAL_EAGER) < log.index(DRAFT_CAPTURE)  # the draft graph is still captured
    assert_no_giveaway(sim, json.dumps(sim.server_info()))


def test_drafter_missing_exits_1_before_ready(start_dspark):
    sim = start_dspark({"SPARKGATE_SIM_FAULTS": faults.DSPARK_DRAFTER_MISSING}, ready=False)
    assert sim.wait_exit() == 1
    log, err = sim.log(), sim.stderr()
    assert UNREADABLE + "/models/Ling-3.0-flash-dspark does not appear to have a file named config.json." in log
    assert log.index(UNREADABLE) < log.index("server_args=")  # logged while resolving
    assert "fired up" not in log and "Load weight begin" not in log and RUNNER not in log
    assert "Traceback (most recent call last)" in err
    assert err.strip().splitlines()[-2].startswith("OSError: /models/Ling-3.0-flash-dspark does not appear to have a "
                                                   "file named config.json")
    assert_no_giveaway(sim)


def test_drafter_on_its_own_vocab_modules_collapses(start_dspark):
    sim = start_dspark({"SPARKGATE_SIM_FAULTS": faults.DRAFT_LM_HEAD_UNSHARED}, scale=SPEED_SCALE)
    meta = decode_speed(sim, CODE, 120)[1]
    assert meta["spec_accept_length"] == pytest.approx(1.0, abs=0.02)
    assert meta["spec_num_correct_drafts"] == 0
    log = sim.log()
    assert log.count("DSpark draft uses its checkpoint-local embedding and LM head.") == 1
    assert log.index(RUNNER) < log.index("checkpoint-local")
    report = sim.engagement()
    assert report["lm_head_sharing"] == {"module_shared": False, "weight_shared": False}
    assert report["draft"]["lm_head"]["weight_dtype"] == "torch.bfloat16"
    assert_no_giveaway(sim)


def test_dspark_faults_do_nothing_to_nextn(start_profile):
    names = ",".join((faults.DSPARK_DRAFT_GRAPH_DISABLED, faults.DSPARK_PROPOSAL_EAGER, faults.DSPARK_DRAFTER_MISSING))
    sim = start_profile("all-three", {"SPARKGATE_SIM_FAULTS": names})
    meta = decode_speed(sim, ARITH, 60)[1]
    assert meta["spec_accept_length"] > 2.4
    log = sim.log()
    assert "DSpark" not in log and "Capture draft decode CUDA graph begin" in log


@pytest.mark.parametrize(("length", "message"), [
    ("16", "ValueError: spec-verify ring too small: 16 < 2 * 9 (early-flush margin)"),
    ("24", "ValueError: spec-verify ring length must be a power of two, got 24"),
])
def test_a_bad_ring_fails_late_at_memory_pool_setup(start_dspark, length, message):
    sim = start_dspark(None, "--linear-replayssm-cache-len", length, ready=False)
    assert sim.wait_exit() == 1
    assert message in sim.stderr()
    log = sim.log()
    assert "type=LingDSparkModel" in log and RUNNER in log  # both models loaded first
    assert "Memory pool end" not in log and "fired up" not in log


def test_replayssm_and_its_spec_variant_are_refused_at_resolution(start_sim):
    argv, env = dspark_launch()
    sim = start_sim(argv + ["--enable-linear-replayssm"], env, ready=False)
    assert sim.wait_exit() == 1
    assert "--enable-linear-replayssm-spec and --enable-linear-replayssm are mutually exclusive" in sim.stderr()
    assert "Load weight begin" not in sim.log()


def test_a_window_mismatch_is_sglangs_error_before_anything_loads(start_dspark):
    sim = start_dspark(None, "--speculative-num-draft-tokens", "4", ready=False)
    assert sim.wait_exit() == 1
    assert ("ValueError: DSpark speculative_num_draft_tokens must equal gamma + 1 (= 9 for gamma=8), but got "
            "speculative_num_draft_tokens=4.") in sim.stderr()


def test_nextn_then_dspark_runs_dspark(start_sim):
    argv, env = dspark_launch()
    i = argv.index("--speculative-algorithm")
    sim = start_sim(argv[:i] + ["--speculative-algorithm", "NEXTN"] + argv[i:], env)
    assert sim.server_info()["speculative_algorithm"] == "DSPARK"
    assert sim.log().count(RUNNER) == 1


def test_the_admin_endpoint_knows_the_dspark_faults(start_dspark):
    sim = start_dspark({"SPARKGATE_SIM_ADMIN": "1", "SPARKGATE_SIM_FAULTS": faults.DSPARK_PROPOSAL_EAGER})
    described = sim.get("/admin/faults").json()
    assert {faults.DSPARK_DRAFT_GRAPH_DISABLED, faults.DSPARK_PROPOSAL_EAGER, faults.DSPARK_DRAFTER_MISSING} <= set(described["known"])
    assert described["in_effect_since_start"] == [faults.DSPARK_PROPOSAL_EAGER]


def test_a_proposal_kept_out_of_the_graph_by_env_is_silent_but_slower(start_dspark):
    # SGLANG_DSPARK_FOLDED_PROPOSAL=0: SGLang never builds the sampler, so it logs neither line.
    sim = start_dspark({"SGLANG_DSPARK_FOLDED_PROPOSAL": "0"}, scale=SPEED_SCALE)
    speed, _ = decode_speed(sim, ARITH, 240)
    assert speed == pytest.approx(rate(workload.ARITH, dspark_proposal_folded=False), rel=0.05)
    log = sim.log()
    assert "DSpark draft proposal" not in log and DRAFT_CAPTURE in log


def test_a_greedy_draft_folds_a_greedy_proposal(start_dspark):
    sim = start_dspark({"SGLANG_DSPARK_USE_GREEDY_DRAFT": "1"})
    assert "DSpark draft proposal (greedy draft) folded into the draft cuda graph." in sim.log()
