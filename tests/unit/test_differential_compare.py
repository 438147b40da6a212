"""The comparison functions of the real-SGLang differential (tests/real/differential.py), fed hand-made real and
simulator answers (no engine): identical answers give no problem, each kind of planted drift is named, and each
documented exception lets through exactly what it documents.
"""

from __future__ import annotations

import copy

from sparkgate.evidence import logs
from sparkgate.sglang import conformance as C
from tests.real import differential as D

# -- hand-made answers ----------------------------------------------------------------------------------

SERVER_INFO = {
    "model_path": "/models/tiny", "served_model_name": "tiny", "chunked_prefill_size": 8192,
    "max_running_requests": 1, "moe_runner_backend": "auto", "speculative_draft_model_path": None,
    "launch_command": "--model-path /models/tiny --host 127.0.0.1 --port 30000 --max-running-requests 1",
    "startup_time": {"load_weight": 0.5, "cuda_graph": {"decode": 0.0}},
    "cuda_graph_config": {"decode": {"backend": "disabled", "bs": [1]}},
}
GIVEN = {"model_path", "max_running_requests"}

REPORT = {
    "probe_version": 1,
    "target": {"model_class": "BailingMoeV2ForCausalLM",
               "lm_head": {"quant_method": "UnquantizedEmbeddingMethod", "weight_shape": [512, 64]},
               "moe_layers": {"UnquantizedFusedMoEMethod/triton": 1}},
    "hooks_called": ["load_model/target", "get_internal_state"],
    "errors": [],
}

LABELS = 'model_name="{model}",engine_type="unified",tp_rank="{rank}",pp_rank="0",moe_ep_rank="0"'


def exposition(model: str = "tiny", rank: str = "0", modes: tuple[str, ...] = ("decode_none", "prefill_none"),
               realtime: tuple[str, ...] = ("decode", "prefill_compute"), phases: tuple[str, ...] = ("load_weight",),
               extra: str = "") -> D.Exposition:
    labels = LABELS.format(model=model, rank=rank)
    lines = ["# TYPE sglang:cuda_graph_passes_total counter" if modes else "",
             *(f'sglang:cuda_graph_passes_total{{{labels},mode="{m}"}} 3.0' for m in modes),
             "# TYPE sglang:realtime_tokens_total counter",
             *(f'sglang:realtime_tokens_total{{{labels},mode="{m}"}} 12.0' for m in realtime),
             "# TYPE sglang:startup_time_seconds gauge",
             *(f'sglang:startup_time_seconds{{model_name="{model}",engine_type="unified",phase="{p}"}} 1.5'
               for p in phases)]
    return D.Exposition.parse("\n".join(lines) + "\n" + extra)


FAMILIES = ["sglang:cuda_graph_passes_total", "sglang:realtime_tokens_total", "sglang:startup_time_seconds"]


def engine_log(*messages: str) -> logs.EngineLog:
    return logs.EngineLog("hand-made", "".join(f"[2026-01-01 00:00:00 TP0] {m}\n" for m in messages))


READY = C.log_line("ready")
PREFILL = C.log_line("prefill_batch", iter="", new_seq=1, new_token=6, cached=0, usage="token usage: 0.00, ",
                     running=0, queue=0, pending=0)
DECODE = (C.log_line("decode_batch", iter="", running=1, usage="#token: 24, token usage: 0.01, ")
          + C.log_line("decode_tail", graph_label="cuda graph", cuda_graph=False, throughput=18.4, queue=0))
CAPTURE = C.log_line("capture_begin", name="target decode", graph="CUDA graph", backend="full", tokens=1, avail=80.0)


def side(server_info=None, exposition_=None, log=None) -> D.Side:
    """Only what the functions under test read: /server_info, /metrics and the log."""
    return D.Side(seen=None, extra={}, server_info=server_info or {}, log=log or engine_log(),
                  metrics=exposition_ or exposition())


# -- identical answers ----------------------------------------------------------------------------------

def test_identical_answers_have_no_problem():
    assert D.compare("GET /server_info", SERVER_INFO, copy.deepcopy(SERVER_INFO)) == []
    assert D.compare_values("GET /server_info", SERVER_INFO, copy.deepcopy(SERVER_INFO)) == []
    assert D.compare_resolved("GET /server_info", SERVER_INFO, copy.deepcopy(SERVER_INFO), SERVER_INFO, GIVEN) == []
    assert D.compare("engagement", REPORT, copy.deepcopy(REPORT)) == []
    assert D.compare_values("engagement", REPORT, copy.deepcopy(REPORT)) == []
    assert D.compare_metrics("GET /metrics", exposition(), exposition(), FAMILIES) == []
    log = engine_log(READY, PREFILL, DECODE)
    assert D.compare_logs(log, engine_log(READY, PREFILL, DECODE)) == []
    assert D.simulator_only(side(log=log), side(log=engine_log(READY, PREFILL, DECODE))) == []


# -- planted drifts -------------------------------------------------------------------------------------

def test_a_collection_empty_on_one_side_only_is_a_difference():
    sim = copy.deepcopy(SERVER_INFO)
    sim["cuda_graph_config"]["decode"]["bs"] = []
    assert D.compare("GET /server_info", SERVER_INFO, sim) == [
        "GET /server_info cuda_graph_config.decode.bs: real 1 element(s), simulator an empty list (real [1], "
        "simulator [])"]
    real = {**REPORT, "target": {**REPORT["target"], "moe_layers": {}}}  # the old `moe_layers {}` against `{key: 31}`
    sim = {**REPORT, "target": {**REPORT["target"], "moe_layers": {"Mxfp4MoEMethod/triton": 31}}}
    assert D.compare("engagement", real, sim) == [
        "engagement target.moe_layers: census keys differ: real only [], simulator only ['Mxfp4MoEMethod/triton'] "
        '(real {}, simulator {"Mxfp4MoEMethod/triton": 31})']
    assert D.compare("x", {"errors": ["boom"]}, {"errors": []}) == [
        'x errors: real 1 element(s), simulator an empty list (real ["boom"], simulator [])']
    assert D.compare("x", {"d": {}}, {"d": {"k": 1}}) == ['x d: real an empty dict, simulator 1 key(s) (real {}, '
                                                          'simulator {"k": 1})']


def test_a_census_key_differing_is_a_difference_and_counts_must_be_ints():
    sim = copy.deepcopy(REPORT)
    sim["target"]["moe_layers"] = {"HummingMoEMethod/humming": 1}
    assert D.compare("engagement", REPORT, sim) == [
        "engagement target.moe_layers: census keys differ: real only ['UnquantizedFusedMoEMethod/triton'], "
        "simulator only ['HummingMoEMethod/humming'] (real {\"UnquantizedFusedMoEMethod/triton\": 1}, simulator "
        "{\"HummingMoEMethod/humming\": 1})"]
    sim["target"]["moe_layers"] = {"UnquantizedFusedMoEMethod/triton": 1.0}
    assert D.compare("engagement", REPORT, sim) == [
        "engagement target.moe_layers['UnquantizedFusedMoEMethod/triton']: simulator count 1.0 is not an int"]
    # same keys, another count: a value difference (the real lane lets it differ: SIMULATED_LING_ON_SPARK)
    sim["target"]["moe_layers"] = {"UnquantizedFusedMoEMethod/triton": 31}
    assert D.compare("engagement", REPORT, sim) == []
    assert D.compare_values("engagement", REPORT, sim) == ["engagement target.moe_layers.UnquantizedFusedMoEMethod/"
                                                           "triton: real 1, simulator 31"]


def test_a_type_change_is_a_difference():
    sim = {**SERVER_INFO, "max_running_requests": 1.0}
    assert D.compare("GET /server_info", SERVER_INFO, sim) == [
        "GET /server_info max_running_requests: real int, simulator float (real 1, simulator 1.0)"]
    assert D.compare_values("GET /server_info", SERVER_INFO, sim) == [
        "GET /server_info max_running_requests: real 1, simulator 1.0"]  # 1 == 1.0 in Python, not in JSON


def test_a_resolved_default_differing_for_an_ungiven_flag_is_a_difference():
    sim = {**SERVER_INFO, "chunked_prefill_size": 4096}
    assert D.compare_resolved("GET /server_info", SERVER_INFO, sim, SERVER_INFO, GIVEN) == [
        "GET /server_info chunked_prefill_size: real 8192, simulator 4096 (not given on the argv)"]
    sim = {**SERVER_INFO, "max_running_requests": 48}
    assert D.compare_resolved("GET /server_info", SERVER_INFO, sim, SERVER_INFO, GIVEN) == [
        "GET /server_info max_running_requests: real 1, simulator 48 (given on the argv)"]
    sim = {k: v for k, v in SERVER_INFO.items() if k != "chunked_prefill_size"}
    assert D.compare_resolved("GET /server_info", SERVER_INFO, sim, SERVER_INFO, GIVEN) == [
        "GET /server_info chunked_prefill_size (not given on the argv): the simulator does not report it"]


def test_a_metric_label_value_missing_on_either_side_is_a_difference():
    real, sim = exposition(), exposition(modes=("decode_none",))
    assert D.compare_metrics("GET /metrics", real, sim, FAMILIES) == [
        "GET /metrics sglang:cuda_graph_passes_total{engine_type=unified,mode=prefill_none}: real exports it "
        "(1 series), the simulator none"]
    sim = exposition(phases=("load_weight", "warmup"))
    assert D.compare_metrics("GET /metrics", real, sim, FAMILIES) == [
        "GET /metrics sglang:startup_time_seconds{engine_type=unified,phase=warmup}: the simulator exports it "
        "(1 series), the real engine none"]
    # an enumerating label the fixture does not name is compared too (engine_type: the disaggregation mode)
    sim = D.Exposition.parse("# TYPE sglang:startup_time_seconds gauge\n"
                             'sglang:startup_time_seconds{model_name="tiny",engine_type="prefill",phase="load_weight"} 1')
    real = D.Exposition.parse("# TYPE sglang:startup_time_seconds gauge\n"
                              'sglang:startup_time_seconds{model_name="tiny",engine_type="unified",phase="load_weight"} 1')
    assert sorted(D.compare_metrics("GET /metrics", real, sim, ["sglang:startup_time_seconds"])) == [
        "GET /metrics sglang:startup_time_seconds{engine_type=prefill,phase=load_weight}: the simulator exports it "
        "(1 series), the real engine none",
        "GET /metrics sglang:startup_time_seconds{engine_type=unified,phase=load_weight}: real exports it "
        "(1 series), the simulator none"]


def test_a_metric_family_exported_by_one_side_only_is_a_difference():
    gauge = '# TYPE sglang:new_gauge gauge\nsglang:new_gauge{model_name="tiny",engine_type="unified"} 1\n'
    # the simulator's families are compared whether or not the gate reads them
    assert D.compare_metrics("GET /metrics", exposition(), exposition(extra=gauge), FAMILIES) == [
        "GET /metrics sglang:new_gauge: exported by the simulator only (simulator # TYPE gauge)"]
    assert D.compare_metrics("GET /metrics", exposition(), exposition(modes=()), FAMILIES) == [
        "GET /metrics sglang:cuda_graph_passes_total: missing from the simulator (real # TYPE counter)"]
    # one only the real engine exports, outside what the gate reads: listed, not compared
    assert D.real_only_families(exposition(extra=gauge), exposition(), FAMILIES) == ["sglang:new_gauge"]


def test_a_log_format_printed_by_the_simulator_only_is_a_difference():
    real, sim = engine_log(READY, PREFILL), engine_log(READY, PREFILL, DECODE)
    assert D.compare_logs(real, sim) == [
        f"engine log log_formats.decode_batch: the simulator printed it 1x (e.g. '{DECODE[:160]}'), the real engine "
        "never",
        f"engine log log_formats.decode_tail: the simulator printed it 1x (e.g. '{DECODE[:160]}'), the real engine "
        "never",
        f"engine log log_formats.decode_token_part: the simulator printed it 1x (e.g. '{DECODE[:160]}'), the real "
        "engine never"]  # token_usage_part: both printed it (inside the Prefill batch record too)


def test_the_formats_a_hybrid_model_prints_are_compared_only_on_a_launch_of_a_hybrid_class():
    hybrid_decode = (C.log_line("decode_batch", iter="", running=1, usage="#full token: 24, full token usage: 0.01, "
                                "mamba num: 1, mamba usage: 0.01, ")
                     + C.log_line("decode_tail", graph_label="cuda graph", cuda_graph=False, throughput=18.4, queue=0))
    real, sim = engine_log(READY, PREFILL, DECODE), engine_log(READY, PREFILL, hybrid_decode)
    assert D.compare_logs(real, sim, hybrid=False) == []
    assert D.compare_logs(real, sim, hybrid=True) == [
        f"engine log log_formats.decode_token_part: real printed it 1x (e.g. '{DECODE[:160]}'), the simulator never",
        f"engine log log_formats.decode_full_token_part: the simulator printed it 1x (e.g. '{hybrid_decode[:160]}'), "
        "the real engine never"]


def test_a_log_format_printed_by_the_real_engine_only_is_a_difference():
    real, sim = engine_log(READY, PREFILL, PREFILL, DECODE), engine_log(READY, DECODE)
    assert D.compare_logs(real, sim) == [
        f"engine log log_formats.prefill_batch: real printed it 2x (e.g. '{PREFILL[:160]}'), the simulator never"]
    assert "log_formats.prefill_batch: real 2, simulator 0" in D.log_count_lines(real, sim)


def test_log_counts_may_differ_and_are_reported():
    real, sim = engine_log(READY, PREFILL, PREFILL, PREFILL, DECODE), engine_log(READY, PREFILL, DECODE)
    assert D.compare_logs(real, sim) == []
    assert D.log_count_lines(real, sim) == [
        "log_formats.ready: real 1, simulator 1", "log_formats.prefill_batch: real 3, simulator 1",
        "log_formats.decode_batch: real 1, simulator 1", "log_formats.decode_tail: real 1, simulator 1",
        "log_formats.token_usage_part: real 4, simulator 2", "log_formats.decode_token_part: real 1, simulator 1"]


def test_a_long_message_does_not_stall_the_log_reader():
    """A format with several holes searched through a server_args= record of thousands of characters backtracks
    for minutes without the literal pre-check."""
    server_args = C.log_line("server_args", args={f"field_{i}": f"value, {i}: x" for i in range(400)})
    assert D.log_counts(engine_log(server_args))["log_formats.decode_tail"] == 0


# -- the documented exceptions let through exactly what they document ---------------------------------------

def test_the_simulated_ling_may_differ_where_documented_and_nowhere_else():
    sim = copy.deepcopy(REPORT)
    sim["target"].update(model_class="BailingMoeV3ForCausalLM",
                         moe_layers={"Mxfp4FlashinferCutlassMoEMethod/flashinfer_mxfp4": 31})
    sim["target"]["lm_head"]["weight_shape"] = [157184, 2560]
    ling = D.SIMULATED_LING_ON_SPARK
    assert D.compare("engagement", REPORT, sim, may_differ=ling) == []
    assert D.compare_values("engagement", REPORT, sim, may_differ=ling) == []
    assert len(D.excused_differences("engagement", REPORT, sim, may_differ=ling)) == 3
    sim["target"]["lm_head"]["quant_method"] = "Fp8LinearMethod"  # not the checkpoint's to decide: compared
    assert D.compare_values("engagement", REPORT, sim, may_differ=ling) == [
        'engagement target.lm_head.quant_method: real "UnquantizedEmbeddingMethod", simulator "Fp8LinearMethod"']
    sim = {**SERVER_INFO, "moe_runner_backend": "flashinfer_mxfp4", "speculative_draft_model_path": None,
           "startup_time": {"load_weight": 14.9, "cuda_graph": {"decode": 0.0}}}
    assert D.compare_resolved("GET /server_info", SERVER_INFO, sim, SERVER_INFO, GIVEN, D.MAY_DIFFER) == []


def test_the_launch_command_is_compared_without_each_process_address():
    sim = {**SERVER_INFO, "launch_command": SERVER_INFO["launch_command"].replace("30000", "41234")}
    assert D.compare_resolved("GET /server_info", SERVER_INFO, sim, {"launch_command"}) == []
    sim["launch_command"] += " --enable-metrics"
    assert len(D.compare_resolved("GET /server_info", SERVER_INFO, sim, {"launch_command"})) == 1


def test_instance_labels_are_left_out_of_the_label_values():
    real, sim = exposition(model="tiny", rank="0"), exposition(model="/models/tiny", rank="1")
    assert D.compare_metrics("GET /metrics", real, sim, FAMILIES) == []


def test_a_real_only_label_value_passes_only_where_documented():
    real = exposition(realtime=("decode", "prefill_compute", "prefill_cache"))
    assert D.compare_metrics("GET /metrics", real, exposition(), FAMILIES) == []  # REAL_ONLY_LABEL_VALUES
    assert D.real_only(side(exposition_=real), side()) == ["metrics.realtime_tokens{mode=prefill_cache}"]
    sim = exposition(realtime=("decode", "prefill_compute", "prefill_cache"))  # not the other way round
    assert D.compare_metrics("GET /metrics", exposition(), sim, FAMILIES) == [
        "GET /metrics sglang:realtime_tokens_total{engine_type=unified,mode=prefill_cache}: the simulator exports "
        "it (1 series), the real engine none"]


def test_what_the_cpu_engine_cannot_show_passes_and_is_listed_as_simulator_only():
    real = side(exposition_=exposition(modes=("decode_none", "prefill_none")), log=engine_log(READY, PREFILL))
    sim = side(exposition_=exposition(modes=("decode_cuda_graph", "prefill_none")),
               log=engine_log(READY, CAPTURE, PREFILL))
    assert D.compare_logs(real.log, sim.log) == []
    assert D.compare_metrics("GET /metrics", real.metrics, sim.metrics, FAMILIES) == [
        # decode_none is a value both sides know: the real engine has it, the simulator does not
        "GET /metrics sglang:cuda_graph_passes_total{engine_type=unified,mode=decode_none}: real exports it "
        "(1 series), the simulator none"]
    assert D.simulator_only(real, sim) == ["log_formats.capture_begin",
                                           "metrics.cuda_graph_passes{mode=decode_cuda_graph}"]
    assert set(D.simulator_only(real, sim)) <= set(D.UNPROVEN_ON_CPU)


# -- names, types and SGLang's own unions -----------------------------------------------------------------

def test_compare_names_the_endpoint_the_path_and_both_types():
    real = {"meta_info": {"a": 1, "b": 2.5, "c": {"d": "x"}, "gone": None}, "n": [1, 2]}
    sim = {"meta_info": {"a": 1.0, "b": 2.5, "c": {"d": "x", "e": True}}, "n": [1], "extra": 0}
    assert sorted(D.compare("POST /generate", real, sim)) == sorted([
        "POST /generate meta_info.a: real int, simulator float (real 1, simulator 1.0)",
        "POST /generate meta_info.c.e: simulator-only field (simulator bool)",
        "POST /generate meta_info.gone: missing from the simulator (real null)",
        "POST /generate extra: simulator-only field (simulator int)",
    ])
    # a selection keeps the top level to what is read plus what the simulator sends
    assert D.compare("GET /x", {"read": 1, "unread": 2, "both": "s"}, {"both": "s"}, selected={"read"}) == [
        "GET /x read: missing from the simulator (real int)"]
    # every element pair of a list is compared, not only the first
    assert D.compare("x", {"l": [{"a": 1}, {"a": 1}]}, {"l": [{"a": 1}, {"a": "1"}]}) == [
        'x l[1].a: real int, simulator str (real 1, simulator "1")']


def test_sglang_unions_and_finish_shapes():
    # a documented union passes, another type does not
    assert D.compare("POST /generate", {"meta_info": {"cached_tokens_details": {"device": 3}}},
                     {"meta_info": {"cached_tokens_details": None}}) == []
    assert D.compare("POST /generate", {"meta_info": {"cached_tokens_details": {}}},
                     {"meta_info": {"cached_tokens_details": 0}}) != []
    # a finish of another kind: each must have its own kind's shape
    length = {"meta_info": {"finish_reason": {"type": "length", "length": 32}}}
    assert D.compare("POST /generate", {"meta_info": {"finish_reason": {"type": "stop", "matched": 2}}}, length) == []
    assert D.compare("POST /generate", {"meta_info": {"finish_reason": {"type": "stop", "matched": 2}}},
                     {"meta_info": {"finish_reason": {"type": "length", "length": 3.0}}}) == [
        "POST /generate meta_info.finish_reason.length: simulator float, SGLang's length finish ['int']"]


def test_a_list_tail_either_side_has_alone_is_compared():
    from tests.real import differential as D

    assert D.compare("x", {"a": [{"k": 1}]}, {"a": [{"k": 1}, {"j": 2}]})
    assert D.compare("x", {"a": [{"k": 1}, {"j": 2}]}, {"a": [{"k": 1}]})
    assert D.compare("x", {"a": [{"k": 1}, {"k": 2}]}, {"a": [{"k": 3}]}) == []


def test_every_real_stream_event_of_a_kind_is_compared():
    from tests.real import differential as D

    real = [{"a": 1}, {"a": 2, "extra": 1}, {"a": 3}, {"done": 1}]
    sim = [{"a": 1}, {"a": 2}, {"a": 3}, {"done": 1}]
    assert D.compare_streams("s", real, sim, D.generate_event_kind)
    assert D.compare_streams("s", sim, sim, D.generate_event_kind) == []
