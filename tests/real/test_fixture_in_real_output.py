"""Every log format, metric name and field of the evidence fixture that a CPU engine can emit appears in the real
engine's actual output, not only in its source, and the gate's own parsers read it there.

The fixture (sparkgate/sglang/data/sglang-conformance-0.5.23.json) is proven against SGLang's *source* by
tests/unit/test_sglang_conformance.py; this holds it to what a running SGLang really prints and serves. Each
entry is classified here: emitted by the CPU launches (then asserted present), or not emitted on CPU with the
reason (CUDA graphs, Humming, the fork's FP8 head, DSpark, failure paths). A new fixture entry must be
classified before this passes.
"""

from __future__ import annotations

import json

import pytest

from sparkgate.evidence import logs, metrics
from sparkgate.sglang import conformance as C
from sparkgate.sglang import request_timing

pytestmark = pytest.mark.real

# log format -> the launches that print it ("dense", "nextn").
EMITTED_LOG_FORMATS = {
    "ready": {"dense", "nextn"},
    "server_args": {"dense", "nextn"},
    "load_weight_begin": {"dense", "nextn"},
    "load_weight_end": {"dense", "nextn"},
    "memory_pool_end": {"dense", "nextn"},
    "scheduler_sizes": {"dense", "nextn"},
    "prefill_batch": {"dense", "nextn"},
    "decode_batch": {"dense", "nextn"},
    "startup_timings": {"dense", "nextn"},
}
# Formats SGLang appends to a decode or prefill record (sglang/srt/managers/scheduler_components/
# metrics_reporter.py builds one line from parts): found inside those records, never at a message start.
EMITTED_LOG_PARTS = {
    "decode_tail": {"dense", "nextn"},
    "token_usage_part": {"dense", "nextn"},
    "decode_accept": {"nextn"},
    "decode_token_part": {"dense", "nextn"},
}
NOT_ON_CPU_LOG_FORMATS = {
    "attention_backend_default": "printed only when --attention-backend is not given; the CPU launches must give it",
    "capture_begin": "CUDA graph capture", "capture_end": "CUDA graph capture",
    "capture_draft_decode_begin": "CUDA graph capture", "capture_draft_decode_end": "CUDA graph capture",
    "capture_draft_extend_begin": "CUDA graph capture", "capture_draft_extend_end": "CUDA graph capture",
    "capture_failed": "CUDA graph capture", "humming_gemm": "Humming MoE kernels need a GPU",
    "hooks_failed": "printed only when a plugin hook cannot attach (the probe attaches all four here)",
    **{key: "DSpark needs the fork's drafter and a GPU" for key in (
        "dspark_runner_initialized", "dspark_draft_graph_disabled", "dspark_proposal_eager", "dspark_own_vocab_modules",
        "dspark_draft_config_unreadable", "dspark_gamma_default", "dspark_ring_too_small", "dspark_ring_not_power_of_two",
        "decode_block_accept", "decode_cap_len", "dspark_num_steps_override", "dspark_topk_override",
        "dspark_draft_path_required", "dspark_block_size_positive", "dspark_num_draft_tokens_mismatch",
        "dspark_proposal_folded", "replayssm_spec_mamba_float32", "replayssm_spec_exclusive",
        "replayssm_spec_decode_backend")},
    "spec_max_running_requests_reset": "printed only when speculation runs without --max-running-requests",
    "kv_cache_allocated": "the MLA pool's line (one KV size); the CPU launches' MHA pool prints K and V sizes",
    "mamba_cache_allocated": "hybrid linear-attention models only (Ling-3.0-flash's KDA state pool)",
    "decode_full_token_part": "hybrid linear-attention models only (their decode line counts '#full token')",
}
EMITTED_METRICS = {key: {"dense", "nextn"} for key in (
    "cuda_graph_passes", "generation_tokens", "prompt_tokens", "num_requests", "num_running_reqs", "num_queue_reqs",
    "num_used_tokens", "token_usage", "gen_throughput", "spec_accept_length", "spec_accept_rate", "spec_num_steps",
    "spec_num_draft_tokens", "is_cuda_graph", "weight_memory", "startup_time", "ttft", "itl", "e2e",
    "spec_block_accept_length",  # the block gauge is registered for every engine, DSpark or not
    "realtime_tokens")}  # engine.stalled's progress counter: bumped on every forward pass
# The verify-call counter exists only where speculation runs (the spec_* gauges are always exported).
EMITTED_METRICS["spec_verify_calls"] = {"nextn"}
NOT_ON_CPU_METRICS: dict[str, str] = {}
# Fixture strings that are fields of what the engine serves: (endpoint, where) -> keys.
# The scheduler's init info (status, max_total_num_tokens, startup_time) is merged into /server_info's top level.
SERVER_INFO_FIELDS = ("server_info_internal_states", "server_info_version", "server_info_startup_time",
                      "server_info_launch_command", "server_info_max_total_num_tokens", "server_info_status")
INTERNAL_STATE_FIELDS = ("internal_state_memory_usage",)
MODEL_INFO_FIELDS = ("model_info_architectures", "model_info_model_type")
# With --enable-metrics (every launch here, and every sparkgate launch): the engine's own timing the speed checks
# judge (sparkgate/sglang/request_timing.py).
META_FIELDS = ("meta_finish_reason", "meta_prompt_tokens", "meta_completion_tokens", "meta_weight_version",
               "meta_e2e_latency", "meta_first_token_latency", "meta_decode_throughput")
SPEC_META_FIELDS = ("meta_spec_accept_length", "meta_spec_accept_rate", "meta_spec_verify_ct",
                    "meta_spec_num_correct_drafts", "meta_spec_num_proposed_drafts")


# Fixture strings that are values the CPU engine serves (asserted below), and those it cannot, with why.
SERVED_VALUES = ("spec_algorithm_eagle", "moe_backend_auto", "cuda_graph_mode_eager", "cuda_graph_mode_graph",
                 "internal_state_avg_spec_accept_length")
NOT_ON_CPU_STRINGS = {
    "graph_backend_cuda": "CUDA graph capture lines", "graph_label_cuda": "the CPU decode record says 'cpu graph'",
    "available_gpu_mem": "a GPU memory figure", "gemm_indexed": "Humming", "gemm_grouped": "Humming",
    "moe_backend_humming": "Humming (asserted as a requested value in test_gate_verdicts)",
    "moe_backend_triton": "a backend value of GPU launches", "moe_backend_flashinfer_mxfp4": "FlashInfer MXFP4",
    "spec_algorithm_nextn": "what a client asks for; the engine serves the resolved EAGLE (asserted)",
    "internal_state_env_vars": "served only with SGLANG_EXPOSE_OWN_ENV_VARS=1 (asserted in test_gate_verdicts)",
    "meta_reasoning_tokens": "needs a reasoning parser, which the tiny tokenizers lack",
    "model_info_reasoning_parser": "needs a reasoning parser", "reasoning_parser_deepseek_r1": "a parser name",
    "think_start": "reasoning markup", "think_end": "reasoning markup",
    "chat_enable_thinking": "a request field, not a response field",
    "plugin_entry_point_group": "packaging metadata, proven by the probe loading (test_engine_starts)",
    "spec_algorithm_dspark": "DSpark", "internal_state_dspark_info_record": "DSpark",
}


# Fixture strings that are label values of a metric the engine serves: key -> the metric (asserted below).
METRIC_LABEL_VALUES = {"realtime_mode_decode": ("realtime_tokens", "mode")}


def test_every_string_of_the_fixture_is_classified():
    asserted = {*SERVER_INFO_FIELDS, *INTERNAL_STATE_FIELDS, *MODEL_INFO_FIELDS, *META_FIELDS, *SPEC_META_FIELDS,
                *SERVED_VALUES, *METRIC_LABEL_VALUES}
    assert asserted | set(NOT_ON_CPU_STRINGS) == set(C.fixture()["strings"])
    assert not asserted & set(NOT_ON_CPU_STRINGS)


def test_every_log_format_and_metric_of_the_fixture_is_classified():
    fixture = C.fixture()
    classified = [set(EMITTED_LOG_FORMATS), set(EMITTED_LOG_PARTS), set(NOT_ON_CPU_LOG_FORMATS)]
    assert set().union(*classified) == set(fixture["log_formats"])
    assert sum(map(len, classified)) == len(fixture["log_formats"])  # each in exactly one class
    assert set(EMITTED_METRICS) | set(NOT_ON_CPU_METRICS) == set(fixture["metrics"])


@pytest.fixture(scope="session")
def outputs(real_engines, dense_launch, nextn_launch) -> dict[str, dict]:
    """What each launch really printed and served (recorded when it first started: tests/real/observe.py)."""
    collected = {}
    for name, launch in (("nextn", nextn_launch), ("dense", dense_launch)):
        seen = real_engines.observation(launch)
        collected[name] = {
            "log": logs.EngineLog(f"file {seen.log_path}", seen.log_text),
            "metrics": metrics.parse(seen.metrics_text),
            "server_info": seen.server_info,
            "model_info": seen.model_info,
            "meta": [g["meta_info"] for g in seen.generate],
        }
    return collected


@pytest.mark.parametrize("key", sorted(METRIC_LABEL_VALUES))
def test_metric_label_value_is_served_by_the_real_engine(outputs, key):
    metric, label = METRIC_LABEL_VALUES[key]
    values = {labels.get(label) for name, labels, _ in outputs["dense"]["metrics"] if name == C.metric(metric)}
    assert C.string_(key) in values, values


@pytest.mark.parametrize("key", sorted(EMITTED_LOG_FORMATS))
def test_log_format_is_in_the_real_log_and_the_gate_reads_it(outputs, key):
    for launch in sorted(EMITTED_LOG_FORMATS[key]):
        log = outputs[launch]["log"]
        # The gate's own reader: SGLang records ("[time] message"), matched from the message start.
        assert log.matching(C.log_pattern(key)), f"{launch}: no '{C.log_format(key)}' record in {log.source}"


@pytest.mark.parametrize("key", sorted(EMITTED_LOG_PARTS))
def test_log_part_is_inside_the_real_decode_or_prefill_records(outputs, key):
    records = ("decode_batch", "prefill_batch")
    for launch in sorted(EMITTED_LOG_PARTS[key]):
        log = outputs[launch]["log"]
        lines = [m for r in records for m in log.matching(C.log_pattern(r))]
        assert any(C.log_pattern(key).search(m) for m in lines), f"{launch}: no '{C.log_format(key)}' in {records}"


def test_the_draft_load_line_the_mtp_check_reads_names_the_nextn_class(outputs):
    draft = C.log_pattern("load_weight_end", model_class=C.class_name("nextn_draft"))
    assert len(outputs["nextn"]["log"].matching(draft)) == 1
    assert outputs["dense"]["log"].matching(draft) == []


def test_decode_records_carry_the_values_the_gate_parses(outputs):
    """Accept length and decode speed as the real engine prints them: numbers in the holes the fixture names."""
    lines = [m for m in outputs["nextn"]["log"].matching(C.log_pattern("decode_batch"))
             if C.log_pattern("decode_accept").search(m)]
    assert lines
    accept = [float(line.split("accept len: ")[1].split(",")[0]) for line in lines]
    assert all(1.0 <= value <= 4.0 for value in accept)  # a 4-token verify window accepts 1 to 4 per step


@pytest.mark.parametrize("key", sorted(EMITTED_METRICS))
def test_metric_is_exported_and_the_gate_parser_reads_it(outputs, key):
    name = C.metric(key)
    for launch in sorted(EMITTED_METRICS[key]):
        samples = outputs[launch]["metrics"]
        names = {n for n, _labels, _value in samples}
        # Histograms export _count/_sum/_bucket series under the fixture's base name.
        assert name in names or f"{name}_count" in names, f"{launch}: {name} not in /metrics"
        series = name if name in names else f"{name}_count"
        assert metrics.total(samples, series) is not None


def test_the_eager_decode_label_counts_real_passes(outputs):
    samples = outputs["dense"]["metrics"]
    eager = metrics.total(samples, C.metric("cuda_graph_passes"), mode=C.string_("cuda_graph_mode_eager"))
    graph = metrics.total(samples, C.metric("cuda_graph_passes"), mode=C.string_("cuda_graph_mode_graph"))
    assert eager is not None and eager > 0 and not graph  # CPU decodes eagerly, and says so


def test_server_info_and_model_info_fields_are_served(outputs):
    for launch in ("dense", "nextn"):
        info = outputs[launch]["server_info"]
        for key in SERVER_INFO_FIELDS:
            assert C.string_(key) in info, f"{launch}: /server_info has no {C.string_(key)}"
        state = info[C.string_("server_info_internal_states")][0]
        for key in INTERNAL_STATE_FIELDS:
            assert C.string_(key) in state, f"{launch}: internal_states[0] has no {C.string_(key)}"
        for key in C.fixture()["server_args"]:
            assert C.server_arg(key) in info, f"{launch}: /server_info has no server arg {C.server_arg(key)}"
        for key in MODEL_INFO_FIELDS:
            assert C.string_(key) in outputs[launch]["model_info"]
    state = outputs["nextn"]["server_info"]["internal_states"][0]
    assert isinstance(state[C.string_("internal_state_avg_spec_accept_length")], float)
    assert outputs["nextn"]["server_info"][C.server_arg("speculative_algorithm")] == C.string_("spec_algorithm_eagle")
    assert outputs["dense"]["server_info"][C.server_arg("moe_runner_backend")] == C.string_("moe_backend_auto")


def test_generate_meta_info_carries_the_fields_calibration_reads(outputs):
    for launch in ("dense", "nextn"):
        for meta in outputs[launch]["meta"]:
            for key in META_FIELDS:
                assert C.string_(key) in meta, f"{launch}: meta_info has no {C.string_(key)}"
    for meta in outputs["nextn"]["meta"]:
        for key in SPEC_META_FIELDS:
            assert C.string_(key) in meta, f"nextn: meta_info has no {C.string_(key)}"
        # The relations calibration relies on (sparkgate/evidence/calibration.py): tokens per verify step, and the
        # decode speed as tokens after the first over e2e_latency - first_token_latency.
        assert meta[C.string_("meta_spec_accept_length")] == pytest.approx(
            meta[C.string_("meta_completion_tokens")] / meta[C.string_("meta_spec_verify_ct")])
    for meta in outputs["dense"]["meta"] + outputs["nextn"]["meta"]:
        timing = request_timing.from_meta(meta, meta[C.string_("meta_completion_tokens")])
        assert timing.decode_tok_s() == pytest.approx(meta[C.string_("meta_decode_throughput")], rel=1e-6)


def test_the_probe_report_names_the_fixture_classes_and_hooks(outputs):
    report = outputs["nextn"]["server_info"]["internal_states"][0]["engagement"]
    assert report["draft"]["model_class"] == C.class_name("nextn_draft")
    json.dumps(report)  # plain builtins only: it travels through /server_info
