"""Checks every profile gets: health, identity, the admin key, the probe report, CUDA graphs, batch-1
settings, speed."""

from __future__ import annotations

from sparkgate import optimizations
from sparkgate.evidence import admin_probe
from sparkgate.evidence import metrics as metrics_mod
from sparkgate.evidence.calibration import CalibrationResult
from sparkgate.evidence.gather import Evidence, shown
from sparkgate.evidence.probe_report import role_problems
from sparkgate.evidence.results import CheckResult, checked, failed
from sparkgate.evidence.stages import Stage
from sparkgate.optimizations import REGISTRY
from sparkgate.sglang import conformance as C

DOCS = "engine.md"  # the docs/checks/ page of every check declared here
# Every check this module emits, with its stage (see evidence/stages.py); an optimization declares its own.
CHECKS = {
    "engine.health": Stage.HEALTH,
    "engine.identity": Stage.CONFIGURATION,
    "engine.architecture": Stage.CONFIGURATION,
    "engine.batch1": Stage.CONFIGURATION,
    "engine.admin_key_enforced": Stage.CONFIGURATION,
    "engine.probe_report": Stage.PROBE_REPORT,
    "engine.log": Stage.ENGINE_LOG,
    "engine.cuda_graph_capture_log": Stage.ENGINE_LOG,
    "engine.cuda_graph_passes": Stage.CALIBRATION,
    "engine.calibration": Stage.CALIBRATION,
    "engine.speed_floor": Stage.CALIBRATION,
    "engine.speed_vs_baseline": Stage.CALIBRATION,
    "engine.client_timing": Stage.CALIBRATION,
    # Emitted by the sentinel's re-check itself (sentinel/service.py): restart and weight-swap detection.
    "sentinel.engine_unchanged": Stage.RECHECK_ONLY,
    "sentinel.weights_unchanged": Stage.RECHECK_ONLY,
}
# The SGLang facts each check reads: "section.key" (conformance fixture) or "probe.<field>" (the probe report).
# evidence/catalog.py validates them; tests/unit/test_declared_reads.py proves them on the recorded captures.
_CALIBRATION_READS = ('strings.meta_completion_tokens', 'strings.meta_e2e_latency', 'strings.meta_finish_reason',
                      'strings.meta_first_token_latency')
READS = {
    'engine.health': ('log_formats.capture_failed',),
    'engine.identity': ('server_args.model_path', 'server_args.served_model_name', 'strings.server_info_version'),
    'engine.architecture': ('strings.model_info_architectures',),
    'engine.batch1': ('server_args.max_running_requests',),
    'engine.admin_key_enforced': (),
    'engine.probe_report': (
        'env.plugins', 'strings.server_info_internal_states', 'probe.draft', 'probe.errors', 'probe.hooks_attached',
        'probe.hooks_called', 'probe.lm_head_sharing', 'probe.probe_version', 'probe.target',
    ),
    'engine.log': ('log_formats.ready',),
    'engine.cuda_graph_capture_log': ('log_formats.capture_begin', 'strings.graph_backend_cuda'),
    'engine.cuda_graph_passes': (
        'metrics.cuda_graph_passes', 'strings.cuda_graph_mode_eager', 'strings.cuda_graph_mode_graph',
    ),
    'engine.calibration': _CALIBRATION_READS,
    'engine.speed_floor': _CALIBRATION_READS,
    'engine.speed_vs_baseline': _CALIBRATION_READS,
    'engine.client_timing': _CALIBRATION_READS,
    'sentinel.engine_unchanged': (),
    'sentinel.weights_unchanged': (),
}

# engine.client_timing, per request: the client's stopwatch may run behind the engine's own figures (the stream's
# transport, scheduling), but not by more than a quarter plus half a wall second. More is something between them (an
# overloaded host, a proxy buffering the stream), or an engine whose reported timing is not the truth; either way
# its speed cannot be taken on trust.
CLIENT_SLOWDOWN_FACTOR = 1.25
CLIENT_SLACK_WALL_S = 0.5

CUDA_GRAPH_METRIC = C.metric("cuda_graph_passes")
GRAPH_MODE, EAGER_MODE = C.string_("cuda_graph_mode_graph"), C.string_("cuda_graph_mode_eager")
READY_LOG = C.log_format("ready")
# The target's decode (or, with MTP, verify) graph: "Capture target decode CUDA graph begin. ...".
CAPTURE_PATTERN = C.log_pattern("capture_begin", graph=C.string_("graph_backend_cuda"))
CAPTURE_FAILED = C.log_format("capture_failed").partition("{")[0].strip()
HOOKS_FAILED = C.log_format("hooks_failed").partition("{")[0].strip()


def health(ev: Evidence) -> CheckResult:
    return checked(
        "engine.health", ev.health_status == 200, ev.health_status, 200, "GET /health",
        "engine not serving yet or crashed: check `invoke logs` (weights load for minutes on a Spark)",
    )


def identity(ev: Evidence) -> list[CheckResult]:
    want = ev.expectations["engine"]
    if ev.server_info is None:
        return [failed("engine.identity", ev.server_info_error, "a /server_info JSON object", "GET /server_info",
                       "the engine does not answer /server_info: is this SGLang, and is the URL the engine's?")]
    observed = {"version": ev.server_info.get(C.string_("server_info_version")),
                "model_path": ev.server_info.get(C.server_arg("model_path")),
                "served_model_name": ev.server_info.get(C.server_arg("served_model_name"))}
    expected = {"version": want["sglang_version"], "model_path": want["model_path"],
                "served_model_name": want["served_model_name"]}
    results = [checked("engine.identity", observed == expected, observed, expected, "GET /server_info",
                       "a different engine build or launch than the profile renders: redeploy this profile's bundle")]
    architectures = (ev.model_info or {}).get(C.string_("model_info_architectures")) or []
    results.append(checked(
        "engine.architecture", want["architecture"] in architectures, architectures, want["architecture"],
        "GET /model_info", "the checkpoint is not Ling-3.0-flash (wrong model directory mounted?)",
    ))
    return results


ADMIN_REFUSED = (401, 403)  # SGLang's answers to a missing admin key (403: a forced-admin route, no key set)


def admin_key_enforced(ev: Evidence) -> CheckResult:
    """The engine's admin routes open only with the key the sentinel holds (see evidence/admin_probe.py)."""
    probe = ev.admin_key
    if probe is None:
        return failed("engine.admin_key_enforced", "not probed", "a probe with the sentinel's key file",
                      "evidence", "the verifier was given no admin key file")
    observed = {"without_key": probe.without_key, "with_key": probe.with_key}
    expected = {"without_key": "401 or 403", "with_key": 200}
    source = f"GET {admin_probe.PROBE_ROUTE} without and with the key in {probe.key_file}"
    if probe.error:
        return failed("engine.admin_key_enforced", {"key_file": probe.error}, expected, source,
                      "the admin key file is unreadable, so enforcement cannot be proven")
    if probe.without_key not in ADMIN_REFUSED:
        hint = ("the engine serves admin routes (weight updates, cache flush, pause) to anyone inside the stack: "
                "it was started without the entrypoint's --config holding the admin key (a hand-edited "
                "entrypoint or command, or an engine image whose entrypoint is not `sparkgate engine`). Fix: "
                "re-render the bundle and redeploy")
        if not probe.without_key:
            hint = "the engine did not answer the admin-route probe: check `invoke logs`"
    else:
        hint = ("the engine refuses the key the sentinel holds: it enforces another admin key (an "
                "--admin-api-key given some other way overrides the config file's), or the key file is stale "
                "(the volume at /run/sparkgate-admin is not shared with the engine). Fix: re-render and redeploy")
    ok = probe.without_key in ADMIN_REFUSED and probe.with_key == 200
    return checked("engine.admin_key_enforced", ok, observed, expected, source, hint)


def probe_report(ev: Evidence) -> CheckResult:
    """The engagement report must exist and be complete: a hook that failed to attach is only logged by
    SGLang, so absence or partial content is a failure."""
    report = ev.engagement()
    source = "/server_info internal_states[0].engagement"
    hint = ("probe plugin missing or a hook failed to attach: check the image has sparkgate-probe installed, "
            f"{C.env('plugins')}=engagement_probe, and search the log for '{HOOKS_FAILED}'")
    if report is None:
        return failed("engine.probe_report", "absent", "probe_version 1 report", source, hint)
    problems = []
    if report.get("probe_version") != 1:
        problems.append(f"probe_version={report.get('probe_version')!r}")
    if report.get("errors"):
        problems.append(f"probe errors: {report['errors']}")
    attached = report.get("hooks_attached")
    if isinstance(attached, dict):
        problems += [f"hook not attached: {target}" for target, ok in sorted(attached.items()) if ok is not True]
    problems += role_problems(report, "target")
    # An optimization's own parts of the report (MTP: the draft's record, LM-head sharing).
    for key, module in REGISTRY.items():
        if ev.requested(key):
            problems += optimizations.part(module, "probe_report_problems")(report)
    return checked("engine.probe_report", not problems, problems or "complete", "complete report", source, hint)


def batch1(ev: Evidence) -> CheckResult:
    if ev.expectations["batch_size"] != 1:
        return checked("engine.batch1", True, "n/a", "n/a", "expectations", "")
    observed = ev.server_arg(C.server_arg("max_running_requests"))
    return checked(
        "engine.batch1", observed == 1, shown(observed), 1, "GET /server_info max_running_requests",
        "the engine was launched without --max-running-requests 1 (hand-edited launch?): re-render and redeploy",
    )


def cuda_graph(ev: Evidence) -> list[CheckResult]:
    results = []
    if ev.calibration is None or ev.metrics_before is None or ev.metrics_after is None:
        hint = ("metrics unavailable: the engine must run with --enable-metrics (every rendered bundle sets it)"
                if ev.metrics_error else
                "no calibration ran (engine unhealthy, or --no-calibrate): decode CUDA-graph passes were not observed")
        results.append(failed(
            "engine.cuda_graph_passes", ev.metrics_error or "no calibration", "decode CUDA-graph passes increase",
            "GET /metrics", hint,
        ))
    else:
        before = metrics_mod.total(ev.metrics_before, CUDA_GRAPH_METRIC, mode=GRAPH_MODE) or 0.0
        after = metrics_mod.total(ev.metrics_after, CUDA_GRAPH_METRIC, mode=GRAPH_MODE)
        eager_before = metrics_mod.total(ev.metrics_before, CUDA_GRAPH_METRIC, mode=EAGER_MODE) or 0.0
        eager_after = metrics_mod.total(ev.metrics_after, CUDA_GRAPH_METRIC, mode=EAGER_MODE) or 0.0
        delta = None if after is None else after - before
        observed = {"decode_cuda_graph_delta": delta, "decode_none_delta": eager_after - eager_before}
        results.append(checked(
            "engine.cuda_graph_passes", delta is not None and delta > 0, observed, "decode_cuda_graph_delta > 0",
            f"GET /metrics {CUDA_GRAPH_METRIC}",
            f"decode ran without CUDA graphs (capture failed or was disabled): look for '{CAPTURE_FAILED}' "
            "in the log; do not pass --disable-cuda-graph",
        ))
    if ev.log is None or ev.log.text is None:
        results.append(failed("engine.cuda_graph_capture_log", ev.log.error if ev.log else "no log", "capture lines",
                              "engine log", "give the engine log (--log-file/--container) so capture can be checked"))
    else:
        captured = len(ev.log.matching(CAPTURE_PATTERN))
        results.append(checked(
            "engine.cuda_graph_capture_log", captured > 0, f"{captured} capture line(s)", ">= 1", ev.log.source,
            "no CUDA-graph capture in the log: graphs disabled or capture failed",
        ))
    return results


def ready_log(ev: Evidence) -> CheckResult:
    if ev.log is None or ev.log.text is None:
        return failed("engine.log", ev.log.error if ev.log else "no log", "a readable engine log", "engine log",
                      "pass --log-file PATH or --container NAME; without the log, engagement cannot be proven")
    seen = ev.log.count(READY_LOG)
    return checked("engine.log", seen >= 1, f"{seen}x 'fired up'", ">= 1", ev.log.source,
                   "the log does not show a completed startup: is it this engine's current log?")


def speed(ev: Evidence) -> list[CheckResult]:
    want = ev.expectations["speed"]
    cal = ev.calibration
    measured = cal.decode_tok_s() if cal else None
    completed = len(cal.completed) if cal else 0
    wanted = ev.expectations["calibration"]["prompts"]
    results = [checked(
        "engine.calibration", cal is not None and completed == wanted and not cal.budget_exhausted,
        {"completed": completed, "of": wanted, "errors": [r.error for r in cal.requests if r.error] if cal else None,
         "budget_exhausted": cal.budget_exhausted if cal else None},
        f"all {wanted} prompts completed within {ev.expectations['calibration']['time_budget_s']} s",
        "POST /generate (temperature 0)",
        "the engine does not complete requests in time: check /health_generate and the log; a budget overrun "
        "means decode is far slower than expected",
    )]
    floors = []
    if want.get("min_decode_tok_s"):
        floors.append(("engine.speed_floor", want["min_decode_tok_s"], "profile gate.min_decode_tok_s"))
    if want.get("must_beat_baseline") and want.get("baseline_decode_tok_s"):
        floors.append(("engine.speed_vs_baseline", want["baseline_decode_tok_s"], "baseline decode speed"))
    for name, floor, what in floors:
        results.append(checked(
            name, measured is not None and measured >= floor,
            None if measured is None else round(measured, 2), f">= {floor} tok/s ({what})",
            "calibration decode tok/s, engine time (meta_info e2e_latency - first_token_latency)",
            "the stack decodes slower than it should: an optimization fell back or the draft is broken "
            "(see the failing optimization checks); with gate.baseline_decode_tok_s set, a stacked profile slower "
            "than the baseline is never admitted",
        ))
    results.append(client_timing(cal))
    return results


def client_timing(cal: CalibrationResult | None) -> CheckResult:
    """Each completed calibration request: the client's stopwatch against the engine's own decode time."""
    scale = cal.time_scale if cal else 1.0
    rows = []
    for r in cal.completed if cal else []:
        if r.client_decode_wall_s is None or r.decode_s is None:
            continue
        engine_wall = r.decode_s * scale  # the engine's seconds as wall seconds on this target
        rows.append((r.client_decode_wall_s - (CLIENT_SLOWDOWN_FACTOR * engine_wall + CLIENT_SLACK_WALL_S),
                     r.prompt_index, r.client_decode_wall_s, engine_wall))
    worst = max(rows, default=None)
    observed = None if worst is None else {
        "worst_request": worst[1], "client_decode_wall_s": round(worst[2], 3), "engine_decode_wall_s": round(worst[3], 3),
        "client_decode_tok_s": None if cal.client_decode_tok_s() is None else round(cal.client_decode_tok_s(), 2),
        "engine_decode_tok_s": None if cal.decode_tok_s() is None else round(cal.decode_tok_s(), 2),
        "requests": len(rows)}
    return checked(
        "engine.client_timing", worst is not None and worst[0] <= 0, observed,
        f"each request: client decode time <= {CLIENT_SLOWDOWN_FACTOR:g} x the engine's + {CLIENT_SLACK_WALL_S:g} s",
        "calibration: client stopwatch (first to last streamed chunk) vs meta_info engine timing",
        "the engine reports a decode far faster than its stream reached this client: a host or gateway problem "
        "(an overloaded host starving the client, a proxy buffering the stream, swap), or an engine whose reported "
        "timing is not the truth; its speed is not taken on trust. Check `uptime`, memory pressure and what sits "
        "between the sentinel and the engine, then verify again",
    )


def run(ev: Evidence) -> list[CheckResult]:
    results = [health(ev), *identity(ev), probe_report(ev), batch1(ev), ready_log(ev)]
    if ev.admin_key is not None:  # the sentinel always holds the key file; a bare `sparkgate verify` may not
        results.append(admin_key_enforced(ev))
    results += cuda_graph(ev)
    results += speed(ev)
    return results
