"""DSpark's gate checks on hand-built evidence: a healthy bundle passes every check, and each fault fails
exactly the check named for it, fail-closed when evidence is missing."""

from __future__ import annotations

import copy

import pytest

from sparkgate.bundle import expectations as expectations_mod
from sparkgate.evidence import activity, catalog
from sparkgate.evidence.calibration import CalibrationResult, RequestResult
from sparkgate.evidence.gather import Evidence
from sparkgate.evidence.logs import EngineLog
from sparkgate.evidence.recheck import RecheckContext
from sparkgate.evidence.stages import Stage
from sparkgate.optimizations import dspark, mtp_recheck
from sparkgate.profile import loading as profiles
from sparkgate.sglang import conformance as C

HEAD = {"module_class": "ParallelLMHead", "quant_method": "Fp8LinearMethod", "weight_dtype": "torch.float8_e4m3fn",
        "has_weight_scale": True}
RUNNER = C.log_line("dspark_runner_initialized", attention_backend="flashinfer", model="LingDSparkModel", gamma=8,
                    verify_num_draft_tokens=9, query_token_num=9, sample_from_anchor=True, mask_token_id=156895,
                    markov_head="none")
NAMES = [name for name, stage in dspark.CHECKS.items() if stage is not Stage.RECHECK_ONLY]


def record(message: str) -> str:
    """A log line as SGLang's logger writes it (scheduler process)."""
    return f"[2026-12-01 12:00:00 TP0] {message}"


@pytest.fixture(scope="module")
def want() -> dict:
    return expectations_mod.build(profiles.load("dspark"), "spark", 1.0)


def healthy(want: dict) -> Evidence:
    engagement = {
        "probe_version": 1, "hooks_called": ["load_model", "dspark_worker_init"],
        "target": {"model_class": "BailingMoeV3ForCausalLM", "lm_head": dict(HEAD), "moe_layers": {"x": 1}},
        "draft": {"model_class": "LingDSparkModel", "lm_head": dict(HEAD), "moe_layers": {}},
        "lm_head_sharing": {"module_shared": True, "weight_shared": True},
    }
    server_info = {
        "speculative_algorithm": "DSPARK", "speculative_num_draft_tokens": 9, "speculative_dspark_block_size": 8,
        "speculative_num_steps": 1, "speculative_eagle_topk": 1,
        "speculative_draft_model_path": "/models/Ling-3.0-flash-dspark", "enable_linear_replayssm_spec": True,
        "linear_replayssm_cache_len": 32,
        "internal_states": [{"avg_spec_accept_length": 5.1, "dspark_info_record": {}, "engagement": engagement}],
    }
    log = "\n".join(map(record, [
        "Load weight end. elapsed=300.1 s, type=BailingMoeV3ForCausalLM, dtype=torch.bfloat16",
        "Load weight end. elapsed=4.2 s, type=LingDSparkModel, dtype=torch.bfloat16",
        RUNNER,
        "Decode batch, #running-req: 1, accept len: 5.10, accept rate: 0.57, block accept len: 5.10, ",
    ]))
    requests = [RequestResult(i, completion_tokens=128, decode_s=2.0, client_decode_wall_s=2.1, spec_verify_ct=25,
                              spec_accept_length=5.12, finish_reason="length") for i in range(3)]
    return Evidence(expectations=copy.deepcopy(want), health_status=200, server_info=server_info,
                    log=EngineLog("file test.log", log), calibration=CalibrationResult(requests))


def failing(ev: Evidence) -> set[str]:
    return {c.name for c in dspark.checks(ev) if not c.passed}


def test_the_healthy_bundle_passes_every_check(want):
    results = dspark.checks(healthy(want))
    assert [c.name for c in results] == NAMES
    assert [c for c in results if not c.passed] == []
    assert dspark.probe_report_problems(healthy(want).engagement()) == []


def test_every_emitted_check_is_declared_with_its_stage(want):
    for check in dspark.checks(Evidence(expectations=copy.deepcopy(want))):
        assert catalog.stage_of(check.name) is dspark.CHECKS[check.name]


def server(ev: Evidence, **changes) -> Evidence:
    ev.server_info.update(changes)
    return ev


def engagement(ev: Evidence) -> dict:
    return ev.server_info["internal_states"][0]["engagement"]


def with_log(ev: Evidence, *lines: str, drop_runner: bool = False) -> Evidence:
    text = ev.log.text if not drop_runner else ev.log.text.replace(record(RUNNER), "")
    ev.log = EngineLog(ev.log.source, "\n".join([text, *map(record, lines)]))
    return ev


def slower(ev: Evidence) -> Evidence:
    for request in ev.calibration.requests:
        request.decode_s = 3.0  # 127 tokens in 3 s: 42.3 tok/s
    return ev


def accepting(ev: Evidence, verify_ct: int | None) -> Evidence:
    for request in ev.calibration.requests:
        request.spec_verify_ct = verify_ct
    return ev


FAULTS = {
    "nextn engine": (lambda ev: server(ev, speculative_algorithm="EAGLE"), {"dspark.config_echo"}),
    "other block size": (lambda ev: server(ev, speculative_dspark_block_size=7), {"dspark.config_echo"}),
    "ring off": (lambda ev: server(ev, enable_linear_replayssm_spec=False), {"dspark.config_echo"}),
    "other ring": (lambda ev: server(ev, linear_replayssm_cache_len=16), {"dspark.config_echo"}),
    "other drafter path": (lambda ev: server(ev, speculative_draft_model_path="/models/x"), {"dspark.config_echo"}),
    "other drafter class": (lambda ev: engagement(ev)["draft"].update(model_class="Qwen3DSparkModel") or ev,
                            {"dspark.draft_loaded"}),
    "own head": (lambda ev: engagement(ev).update(lm_head_sharing={"module_shared": False, "weight_shared": False})
                 or ev, {"dspark.lm_head_module_shared"}),
    "worker hook never ran": (lambda ev: engagement(ev).update(hooks_called=["load_model"]) or ev,
                              {"dspark.lm_head_module_shared"}),
    "no runner line": (lambda ev: with_log(ev, drop_runner=True), {"dspark.log_runner_initialized"}),
    "two starts in one log": (lambda ev: with_log(ev, RUNNER), {"dspark.log_runner_initialized"}),
    "runner with another gamma": (lambda ev: with_log(ev, RUNNER.replace("gamma=8", "gamma=7"), drop_runner=True),
                                  {"dspark.log_runner_initialized"}),
    "drafter config unreadable": (lambda ev: with_log(ev, C.log_line(
        "dspark_draft_config_unreadable", error="[Errno 2] No such file or directory: 'config.json'")),
        {"dspark.drafter_config_read"}),
    "draft graph disabled": (lambda ev: with_log(ev, C.log_line("dspark_draft_graph_disabled", available=1.5)),
                             {"dspark.draft_cuda_graph"}),
    "proposal eager": (lambda ev: with_log(ev, C.log_line("dspark_proposal_eager", reason="sampling")),
                       {"dspark.proposal_not_eager"}),
    "low acceptance": (lambda ev: accepting(ev, 64), {"dspark.accept_length"}),  # 2.0
    "no speculative fields": (lambda ev: accepting(ev, None), {"dspark.accept_length"}),
    "slower than nextn": (slower, {"dspark.speed_over_nextn"}),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_fails_its_check_only(want, fault):
    inject, expected = FAULTS[fault]
    ev = inject(healthy(want))
    assert failing(ev) == expected
    for check in dspark.checks(ev):
        if not check.passed:
            assert check.observed is not None or check.name.endswith(("accept_length", "draft_loaded"))
            assert check.expected is not None and check.source and len(check.hint) > 40


def test_missing_evidence_fails_closed(want):
    assert failing(Evidence(expectations=copy.deepcopy(want))) == set(NAMES)


def test_no_log_fails_every_log_check_with_the_reason(want):
    ev = healthy(want)
    ev.log = EngineLog("none", None, "no log source given (--log-file or --container)")
    results = {c.name: c for c in dspark.checks(ev)}
    logged = [n for n in NAMES if dspark.CHECKS[n] is Stage.ENGINE_LOG]
    assert failing(ev) == set(logged) and len(logged) == 4
    assert all(results[n].observed == "no log source given (--log-file or --container)" for n in logged)


def test_a_ring_that_is_off_is_not_compared_by_length(want):
    want = copy.deepcopy(want)
    want["optimizations"]["dspark"]["ring"] = {"enable": False, "cache_len": 32}
    ev = server(healthy(want), enable_linear_replayssm_spec=False, linear_replayssm_cache_len=16)
    assert failing(ev) == set()


def test_the_speed_floor_is_the_profiles(want):
    ev = healthy(want)
    ev.expectations["optimizations"]["dspark"]["min_decode_tok_s"] = 70.0
    [speed] = [c for c in dspark.checks(ev) if c.name == "dspark.speed_over_nextn"]
    assert not speed.passed and speed.observed == 63.5 and speed.expected.startswith(">= 70.0 tok/s")


def test_probe_report_problems_name_the_missing_parts():
    report = {"hooks_called": ["load_model"], "draft": {"model_class": "LingDSparkModel"}}
    problems = dspark.probe_report_problems(report)
    assert any("dspark_worker_init hook never ran" in p for p in problems)
    assert "draft.lm_head missing" in problems and "lm_head_sharing missing" in problems


# --- after admission -----------------------------------------------------------------------------------------


def recheck_context(want: dict) -> RecheckContext:
    return RecheckContext(key="dspark", client=None, period_s=5.0, expectations=copy.deepcopy(want))


def test_rechecks_are_mtps_under_dspark_names(want, monkeypatch):
    monkeypatch.setattr(mtp_recheck, "read_engine_counters", lambda client: None)
    ctx = recheck_context(want)
    ctx.scrape = lambda: []  # this period's /metrics holds no counter
    [missing] = dspark.rechecks(ctx)
    assert missing.name == "sentinel.dspark_accept_counters" and not missing.passed
    assert catalog.stage_of(missing.name) is Stage.RECHECK_ONLY


def test_the_probe_is_judged_against_dsparks_floor(want, monkeypatch):
    counters = mtp_recheck.Counters(tokens=1000.0, verifies=200.0)
    monkeypatch.setattr(mtp_recheck, "read_engine_counters", lambda client: counters)
    monkeypatch.setattr(mtp_recheck, "run_probe", lambda client, timeout_s: mtp_recheck.ProbeResult(2.5, 48, 19))
    monkeypatch.setattr(activity, "fresh", lambda client: None)  # no engine behind this context
    ctx = recheck_context(want)
    dspark.start_rechecks(ctx)
    ctx.state["last_probe_at"] = 0.0  # a periodic probe is due
    samples = [("sglang:generation_tokens_total", {}, 1000.0), ("sglang:spec_verify_calls_total", {}, 200.0),
               ("sglang:realtime_tokens_total", {"mode": "decode"}, 1000.0), ("sglang:num_running_reqs", {}, 0.0),
               ("sglang:num_queue_reqs", {}, 0.0)]
    ctx.scrape = lambda: samples
    ctx.state["previous_activity"] = activity.read(samples)  # and the engine was idle over the last period
    results = {c.name: c for c in dspark.rechecks(ctx)}
    assert set(results) == {"sentinel.dspark_accept_counters", "sentinel.dspark_accept_probe",
                            "sentinel.dspark_accept_window"}
    assert results["sentinel.dspark_accept_counters"].passed  # the counters were read
    probe = results["sentinel.dspark_accept_probe"]
    assert not probe.passed and probe.expected.startswith(">= 3.0")  # 2.5 passes NEXTN's 2.0, not DSpark's 3.0


def test_client_text_echoed_into_the_log_is_never_evidence(want):
    """--log-requests echoes a prompt inside a message (as a repr): a client must not be able to fake a runner line
    or a degraded-mode line, or push an exactly-once check to two."""
    echoed = [f"Receive: obj=GenerateReqInput(text={line!r}, sampling_params={{}})" for line in (
        C.log_line("dspark_draft_graph_disabled", available=0.5), C.log_line("dspark_proposal_eager", reason="x"),
        RUNNER, C.log_line("dspark_draft_config_unreadable", error="boom"),
    )]
    assert failing(with_log(healthy(want), *echoed)) == set()
    assert failing(with_log(healthy(want), *echoed, drop_runner=True)) == {"dspark.log_runner_initialized"}
