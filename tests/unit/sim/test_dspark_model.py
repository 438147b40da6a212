"""DSpark in the simulator, without a process: resolution as SGLang's `_handle_dspark` does it, the workload
classifier, the per-workload timing model against its anchors, and what engages."""

from __future__ import annotations

import pytest

from sparkgate_sim import cli, faults, timing, workload
from sparkgate_sim.engagement import decide, probe_report
from sparkgate_sim.image import IMAGES
from sparkgate_sim.resolve import ResolutionError, requested, resolve, resolve_logged, ring_error

DSPARK_FLAGS = [
    "--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", "/models/Ling-3.0-flash-dspark",
    "--speculative-dspark-block-size", "8", "--speculative-num-draft-tokens", "9", "--enable-linear-replayssm-spec",
    "--linear-replayssm-cache-len", "32", "--linear-attn-decode-backend", "triton", "--max-running-requests", "1",
]
BASE = ["--model-path", "/models/Ling-3.0-flash-fp4", "--moe-runner-backend", "humming"]
FP8_ENV = {"SGLANG_ENABLE_FP8_LM_HEAD": "1", "SGLANG_PLUGINS": "engagement_probe"}


def args(*extra: str, flags: list[str] = DSPARK_FLAGS):
    return cli.parse_engine_argv([*BASE, *flags, *extra])


def without(*flags: str) -> list[str]:
    """DSPARK_FLAGS minus these valued flags."""
    out, i = [], 0
    while i < len(DSPARK_FLAGS):
        if DSPARK_FLAGS[i] in flags:
            i += 2
            continue
        out.append(DSPARK_FLAGS[i])
        i += 1
    return out


# ------------------------------------------------------------------ resolution
def test_the_dspark_launch_resolves_as_sglang_reports_it():
    resolved, logged = resolve_logged(args())
    assert resolved["speculative_algorithm"] == "DSPARK"  # not aliased to EAGLE
    assert (resolved["speculative_num_steps"], resolved["speculative_eagle_topk"]) == (1, 1)
    assert (resolved["speculative_dspark_block_size"], resolved["speculative_num_draft_tokens"]) == (8, 9)
    assert resolved["speculative_draft_model_path"] == "/models/Ling-3.0-flash-dspark"
    assert (resolved["enable_linear_replayssm_spec"], resolved["linear_replayssm_cache_len"]) == (True, 32)
    assert resolved["mamba_ssm_dtype"] == "float32"
    assert resolved["max_running_requests"] == 1
    assert logged == ["--enable-linear-replayssm-spec: setting --mamba-ssm-dtype float32 (cached replay uses "
                      "compensated checkpoint projection and materialization)."]
    assert ring_error(resolved) is None


def test_steps_and_topk_are_forced_to_one_with_sglangs_warning():
    resolved, logged = resolve_logged(args("--speculative-num-steps", "3", "--speculative-eagle-topk", "4"))
    assert (resolved["speculative_num_steps"], resolved["speculative_eagle_topk"]) == (1, 1)
    assert "DSpark only supports speculative_num_steps == 1; overriding speculative_num_steps=3 to 1." in logged
    assert "DSpark only supports speculative_eagle_topk == 1; overriding speculative_eagle_topk=4 to 1." in logged


def test_gamma_comes_from_the_drafter_config_without_a_block_size():
    resolved = resolve(args(flags=without("--speculative-num-draft-tokens", "--speculative-dspark-block-size")))
    assert resolved["speculative_dspark_block_size"] is None
    assert resolved["speculative_num_draft_tokens"] == 9  # block_size 8 in the drafter's config.json


def test_a_window_other_than_block_size_plus_one_is_sglangs_value_error():
    i = DSPARK_FLAGS.index("--speculative-num-draft-tokens")
    flags = DSPARK_FLAGS[:i + 1] + ["8"] + DSPARK_FLAGS[i + 2:]
    with pytest.raises(ResolutionError) as err:
        resolve(args(flags=flags))
    assert str(err.value) == ("DSpark speculative_num_draft_tokens must equal gamma + 1 (= 9 for gamma=8), but got "
                              "speculative_num_draft_tokens=8.")


def test_the_draft_path_is_required():
    with pytest.raises(ResolutionError, match=r"^DSpark dense speculative decoding requires setting "
                                              r"--speculative-draft-model-path\.$"):
        resolve(args(flags=without("--speculative-draft-model-path")))


def test_max_running_requests_defaults_to_48_with_a_warning():
    resolved, logged = resolve_logged(args(flags=without("--max-running-requests")))
    assert resolved["max_running_requests"] == 48
    assert logged[0].startswith("Max running requests is reset to 48 for speculative decoding.")


def test_an_unreadable_drafter_config_is_logged_and_gamma_falls_back_to_7():
    flags = without("--speculative-dspark-block-size", "--speculative-num-draft-tokens")
    resolved, logged = resolve_logged(args(flags=flags), draft_config_readable=False)
    assert logged[0] == ("Failed to read DSpark draft config; preserving explicit/default gamma resolution. Error: "
                         "/models/Ling-3.0-flash-dspark does not appear to have a file named config.json. Checkout "
                         "'https://huggingface.co//models/Ling-3.0-flash-dspark/tree/None' for available files.")
    assert "DSpark gamma is not set; defaulting to 7." in logged
    assert resolved["speculative_num_draft_tokens"] == 8
    # With the block size given, gamma needs no config: only the warning differs.
    assert resolve(args(), draft_config_readable=False)["speculative_num_draft_tokens"] == 9


@pytest.mark.parametrize("order", [("NEXTN", "DSPARK"), ("DSPARK", "NEXTN")])
def test_nextn_and_dspark_together_the_last_one_wins(order):
    first, last = order  # argparse keeps the last value of a repeated flag: there is never both
    parsed = args("--speculative-algorithm", first, "--speculative-algorithm", last,
                  flags=without("--speculative-algorithm"))
    assert requested(parsed, {}).dspark is (last == "DSPARK")
    assert requested(parsed, {}).mtp is (last == "NEXTN")
    assert resolve(parsed)["speculative_algorithm"] == ("DSPARK" if last == "DSPARK" else "EAGLE")


def test_replayssm_spec_rules_at_resolution():
    with pytest.raises(ResolutionError, match="mutually exclusive"):
        resolve(args("--enable-linear-replayssm"))
    with pytest.raises(ResolutionError) as err:
        resolve(args("--linear-attn-decode-backend", "cutedsl"))
    assert str(err.value) == ("--enable-linear-replayssm-spec requires the triton or flashinfer linear-attn decode "
                              "backend, got --linear-attn-decode-backend='cutedsl'.")
    assert resolve(args("--mamba-ssm-dtype", "bfloat16"))["mamba_ssm_dtype"] == "bfloat16"


@pytest.mark.parametrize(("length", "message"), [
    ("16", "spec-verify ring too small: 16 < 2 * 9 (early-flush margin)"),
    ("24", "spec-verify ring length must be a power of two, got 24"),
    ("32", None),
    ("64", None),
])
def test_the_ring_is_checked_as_memory_pool_setup_checks_it(length, message):
    assert ring_error(resolve(args("--linear-replayssm-cache-len", length))) == message


def test_the_nextn_resolution_is_unchanged():
    resolved, logged = resolve_logged(cli.parse_engine_argv([*BASE, "--speculative-algorithm", "NEXTN"]))
    assert resolved["speculative_algorithm"] == "EAGLE"
    assert (resolved["speculative_num_steps"], resolved["speculative_eagle_topk"],
            resolved["speculative_num_draft_tokens"]) == (3, 1, 4)
    assert logged == []
    assert ring_error(resolved) is None


# ------------------------------------------------------------------ workloads
@pytest.mark.parametrize(("prompt", "kind"), [
    ("Complete the Python function.\ndef is_palindrome(s: str) -> bool:\n    ", workload.CODE),
    ("Fix this:\n```python\nprint(x)\n```", workload.CODE),
    ("Solve the math problem. Reason step by step, then give the final answer as '#### <number>'.", workload.ARITH),
    ("Question: what is 17 times 23? Answer step by step.", workload.ARITH),
    ("Question: Tom has three times as many marbles as Ann. Together they have 48. How many has Tom?", workload.ARITH),
    ("Write a short essay on why rivers meander.", workload.PROSE),
    ("Write a letter to a friend about your trip to Lisbon in 2019.", workload.PROSE),
    ("Explain how a define statement differs from a macro.", workload.PROSE),  # "def" inside a word is no code
])
def test_workloads_are_read_from_the_prompt_text(prompt, kind):
    assert workload.classify(prompt) == kind


# ------------------------------------------------------------------ timing
def _rate(dspark: bool, kind: str, **degraded: bool) -> float:
    model = timing.SpeedModel(humming=True, fp8_lm_head=True, speculative=True, cuda_graph=True, dspark=dspark, **degraded)
    return model.decode_tok_s(timing.nominal_accept_length(dspark, kind))


@pytest.mark.parametrize(("dspark", "kind", "anchor"), [
    (False, workload.CODE, 55.2), (False, workload.PROSE, 45.0), (False, workload.ARITH, 53.89),
    (True, workload.CODE, 68.4), (True, workload.PROSE, 43.4), (True, workload.ARITH, 62.0),
])
def test_each_stack_lands_on_its_per_workload_anchor(dspark, kind, anchor):
    assert _rate(dspark, kind) == pytest.approx(anchor, rel=0.02)


def test_code_favours_dspark_and_prose_favours_nextn():
    assert _rate(True, workload.CODE) > _rate(False, workload.CODE) * 1.2
    assert _rate(True, workload.PROSE) < _rate(False, workload.PROSE)
    assert _rate(True, workload.ARITH) > 53.89 * 1.1  # clears the gate's speed floor with margin


def test_accept_lengths_follow_the_published_drafter_and_the_nextn_anchor():
    assert timing.nominal_accept_length(False, workload.ARITH) == 2.68  # unchanged
    assert timing.nominal_accept_length(True, workload.CODE) == 6.57  # HumanEval
    assert timing.nominal_accept_length(True, workload.PROSE) == 3.51  # Alpaca
    assert 5.0 <= timing.nominal_accept_length(True, workload.ARITH) <= 6.0  # the gate's floor is 3.0
    # The per-emitted-token cost fitted from DSpark's anchors sits next to the NEXTN one (same target work).
    assert pytest.approx(timing.VERIFY_COST_PER_TOKEN, rel=0.05) == timing.DSPARK_COST_PER_TOKEN
    assert timing.SpeedModel(True, True, True, True).decode_tok_s() == pytest.approx(53.89, abs=1e-9)


def test_degraded_drafters_are_slower_and_a_broken_one_collapses():
    healthy = _rate(True, workload.ARITH)
    eager_proposal = _rate(True, workload.ARITH, dspark_proposal_folded=False)
    no_draft_graph = _rate(True, workload.ARITH, dspark_draft_graph=False)
    assert no_draft_graph < eager_proposal < healthy
    assert no_draft_graph < 53.89  # below the all-three floor: an eager drafter loses DSpark's edge
    assert healthy / eager_proposal == pytest.approx(1.04, abs=0.02)
    broken = timing.SpeedModel(True, True, True, True, dspark=True).decode_tok_s(1.0)
    assert broken < 37.81 / 2


def test_request_accept_lengths_jitter_around_the_workload_nominal():
    values = [timing.accept_length_for(seed, max_len=9, broken=False, degraded=False,
                                       nominal=timing.nominal_accept_length(True, workload.CODE))
              for seed in range(0, 5000, 7)]
    assert min(values) >= 6.57 - 0.05 and max(values) <= 6.57 + 0.05 and max(values) - min(values) > 0.08


# ------------------------------------------------------------------ engagement
def _engaged(*names: str, extra: tuple[str, ...] = (), env=FP8_ENV):
    parsed = args(*extra)
    board = faults.FaultBoard(faults.parse_faults(list(names)))
    board.latch_load_time()
    return decide(requested(parsed, env), IMAGES["fork"], board, env, "humming")


def test_the_probe_report_of_a_healthy_dspark_engine():
    report = probe_report(_engaged())
    fp8_head = report["target"]["lm_head"]
    assert fp8_head["weight_dtype"] == "torch.float8_e4m3fn" and fp8_head["has_weight_scale"] is True
    assert report["draft"] == {"model_class": "LingDSparkModel", "lm_head": fp8_head, "moe_layers": {}}
    assert report["lm_head_sharing"] == {"module_shared": True, "weight_shared": True}
    assert report["hooks_called"] == ["load_model/target", "load_model/draft", "dspark_worker_init", "get_internal_state"]
    assert "sglang.srt.speculative.dspark_components.dspark_worker_v2.DSparkWorkerV2.__init__" in report["hooks_registered"]
    assert all(report["hooks_attached"].values()) and report["errors"] == []


def test_own_vocab_modules_break_the_drafter():
    engaged = _engaged(faults.DRAFT_LM_HEAD_UNSHARED)
    report = probe_report(engaged)
    assert report["lm_head_sharing"] == {"module_shared": False, "weight_shared": False}
    assert report["draft"]["lm_head"]["weight_dtype"] == "torch.bfloat16"
    assert engaged.draft_broken


def test_dspark_faults_touch_only_dspark_and_nextn_faults_only_nextn():
    engaged = _engaged(faults.DSPARK_DRAFT_GRAPH_DISABLED)
    assert (engaged.dspark_draft_graph, engaged.dspark_proposal_folded) == (False, False)
    engaged = _engaged(faults.DSPARK_PROPOSAL_EAGER)
    assert (engaged.dspark_draft_graph, engaged.dspark_proposal_folded) == (True, False)
    assert _engaged(faults.MTP_DRAFT_MISSING).draft_loaded  # a NEXTN fault: the drafter still loads
    nextn = cli.parse_engine_argv([*BASE, "--speculative-algorithm", "NEXTN"])
    board = faults.FaultBoard(faults.parse_faults([faults.DSPARK_DRAFT_GRAPH_DISABLED, faults.DSPARK_PROPOSAL_EAGER]))
    board.latch_load_time()
    engaged = decide(requested(nextn, FP8_ENV), IMAGES["fork"], board, FP8_ENV, "humming")
    assert engaged.draft_loaded and not engaged.dspark and engaged.module_shared
    assert probe_report(engaged)["hooks_called"][2] == "init_lm_head"


def test_code_prompts_are_answered_in_code_tokens_the_tokenizer_knows():
    from sparkgate_sim import textgen, tokenizer_files

    assert len(set(textgen.CODE_VOCAB)) == len(textgen.CODE_VOCAB)
    assert not set(textgen.CODE_VOCAB) & set(textgen.VOCAB) and all(" " not in w for w in textgen.CODE_VOCAB)
    tokens = [textgen.output_token(7, i, code=True) for i in range(50)]
    assert {w for w, _ in tokens} <= set(textgen.CODE_VOCAB)
    vocab = tokenizer_files.tokenizer_json()["model"]["vocab"]
    assert all(vocab[w] == token_id for w, token_id in tokens)
    assert textgen.output_token(7, 3) == (textgen.word(7, 3), textgen.token_id(7, 3))  # prose is unchanged
