"""Real SGLang 0.5.23 against the simulator: started with the same argv and sent the same requests, the simulator
answers with the same fields, metrics and log formats, both ways, and resolves the same server args.

Two launches: the dense tiny llama, and NEXTN on the tiny BailingMoeV2 (the speculative fields: meta_info
`spec_*`, `avg_spec_accept_length`, `sglext.spec_tokens_details`, `sglang:spec_*`). The simulator gets the real
engine's own argv (host and port its own) and SGLang env, on the stock image (the real engine is upstream
0.5.23). Both get tests/real/observe.py's requests (greedy /generate plain and streamed, chat plain and
streamed with usage) and differential.extra_requests (OpenAI completions, the speculative details the bench
asks for); then /server_info, /metrics and the log are compared:

- `/server_info`: every field the gate, the sentinel or the bench reads, and every field the simulator sends
  (one the real engine lacks fails); a list or dict empty on one side only fails. The VALUES of every field the
  gate reads (SERVER_INFO_READ, verified_config_keys()) must be equal, given on the argv or not (the simulator's
  resolved defaults against SGLang's), except differential.MAY_DIFFER (each with its reason). `internal_states[0]`:
  those fields, plus every field it adds to the server args, and the values of the SGLang env vars it models.
- the probe report `engagement`: in full, recursively, values included; its MoE census keys as sets, except where
  the simulator's Ling-3.0-flash decides them (differential.SIMULATED_LING_ON_SPARK).
- `/generate` (plain, and each kind of streamed chunk), `/v1/chat/completions`, `/v1/completions` (plain, and
  each kind of streamed chunk: role, text, finish, sglext, usage): the whole objects, recursively.
- `/metrics`: each fixture metric and each metric the simulator exports, by both or neither, with the same
  `# TYPE`, label names and label-value combinations (differential.INSTANCE_LABELS left out, each with its reason).
- the engine log: each fixture log format either side printed, the other printed too (the counts are in the
  failure message and the summary).
- `/model_info`: what the gate reads, and every field the simulator sends.

What the simulator emitted that the CPU engine cannot (CUDA graph capture, Humming, the FP8 head:
differential.UNPROVEN_ON_CPU) passes, and is listed per launch as "simulator only, unproven on CPU" in the
terminal summary, with the log counts and every value a documented exception let differ.

Each launch starts once, here (dense, then NEXTN, in one module fixture); the slot is stopped at the end, so the
next module finds no server running.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkgate.evidence import logs
from sparkgate.evidence.verify import verified_config_keys
from sparkgate.runtime.admin_key import SECRET_FIELDS
from sparkgate.sglang import conformance as C
from sparkgate.sglang.parser import parse_argv
from tests.gpu import records as gpu_records
from tests.real import differential as D
from tests.real.engine import Launch
from tests.real.observe import Observation, observe

pytestmark = pytest.mark.real

# The real CPU launches, then the real CUDA launches the GPU lane recorded (tests/fixtures/gpu: the real side read
# from the record, the simulator started here on the recorded argv): the capture lines, graph-pass modes and draft
# graphs the CPU engine cannot show are held to a real CUDA engine there.
CPU_LAUNCHES = ("dense", "nextn")
# Decode graphs on a dense model; target-verify and draft graphs, and the MoE census, on NEXTN; Ling-3.0-flash's own
# class with the real Humming, with an agreeing NEXTN draft, and with DSpark (the other GPU launches are variations of
# these, judged by tests/unit/test_gpu_records.py and test_gpu_v3_records.py; the simulator models no STANDALONE
# draft). Launch name -> its record set.
GPU_DIFFERENTIAL = {"dense-graphs": "gpu", "moe-nextn": "gpu", "v3-humming-cold": "gpu-v3", "v3-nextn-agree": "gpu-v3",
                    "v3-dspark-agree": "gpu-v3-dspark"}
GPU_RECORDED = tuple(name for name, set_name in GPU_DIFFERENTIAL.items()
                     if (gpu_records.SETS[set_name] / name / "side.json").is_file())
GPU_PREFIX = "gpu-"
LAUNCHES = CPU_LAUNCHES + tuple(GPU_PREFIX + name for name in GPU_RECORDED)

# What sparkgate reads from /server_info: the fixture's server args and server_info fields, the fields each verdict
# records (COMMON_CONFIG_KEYS and every optimization's CONFIG_KEYS), the bench's, the secrets the sentinel redacts.
FIXTURE = C.fixture()
SERVER_INFO_READ = (
    {entry["text"] for entry in FIXTURE["server_args"].values()}
    | {entry["text"] for key, entry in FIXTURE["strings"].items() if key.startswith("server_info_")}
    | set(verified_config_keys()) | set(SECRET_FIELDS)
)
INTERNAL_STATE_READ = {entry["text"] for key, entry in FIXTURE["strings"].items() if key.startswith("internal_state_")}
MODEL_INFO_READ = {entry["text"] for key, entry in FIXTURE["strings"].items() if key.startswith("model_info_")}
INTERNAL_STATES = C.string_("server_info_internal_states")
ENGAGEMENT = "engagement"
ENV_VARS = C.string_("internal_state_env_vars")
# The SGLang variables the simulator models (the fixture's env section and the fork's): env_vars lists a set one
# iff the image declares it (environ.py exportable_env_vars); others it does not list at all.
MODELLED_ENV = {entry["text"] for entry in FIXTURE["env"].values()} | set(C.fork_only_of_kind("env"))
METRIC_FAMILIES = [entry["text"] for entry in FIXTURE["metrics"].values()]
# The server args whose resolved values are compared: every field the gate reads from /server_info.
RESOLVED_READ = SERVER_INFO_READ | set(verified_config_keys())


def _failures(problems: list[str], *context: str) -> str:
    return (f"{len(problems)} difference(s) of the simulator from the real SGLang 0.5.23:\n" + "\n".join(problems)
            + "".join(f"\n{line}" for line in context))


# -- the summary: what passed unproven, and what the exceptions let differ ----------------------------------

SUMMARY_TITLE = "differential: simulator only, unproven on CPU; log counts; values the exceptions let differ"
SUMMARY: dict[str, list[str]] = {}  # launch -> its lines


class _SummaryPlugin:
    """Prints SUMMARY at the end of the run; on a pytest-xdist worker, hands it to the controller (tests/conftest.py
    prints the workers' `sparkgate_summaries`)."""

    def lines(self) -> list[str]:
        catalogue = ", ".join(D.UNPROVEN_ON_CPU)
        return [f"{launch}: {line}" for launch, lines in SUMMARY.items() for line in lines] + [
            f"unproven on CPU whatever the launch (differential.UNPROVEN_ON_CPU): {catalogue}"]

    def pytest_sessionfinish(self, session):
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None and SUMMARY:
            workeroutput.setdefault("sparkgate_summaries", {})[SUMMARY_TITLE] = self.lines()

    def pytest_terminal_summary(self, terminalreporter):
        if SUMMARY and not hasattr(terminalreporter.config, "workeroutput"):
            terminalreporter.write_sep("-", SUMMARY_TITLE)
            for line in self.lines():
                terminalreporter.write_line(line)


def _summarize(config, launch: str, real: D.Side, sim: D.Side) -> None:
    if not config.pluginmanager.has_plugin(SUMMARY_TITLE):
        config.pluginmanager.register(_SummaryPlugin(), SUMMARY_TITLE)
    unproven = D.simulator_only(real, sim)
    real_state, sim_state = real.server_info[INTERNAL_STATES][0], sim.server_info[INTERNAL_STATES][0]
    read = RESOLVED_READ - {INTERNAL_STATES}  # compared field by field by test_server_info_internal_state
    excused = D.excused_differences("GET /server_info", _only(real.server_info, *read), _only(sim.server_info, *read),
                                    may_differ=D.MAY_DIFFER)
    excused += D.excused_differences(f"{ENGAGEMENT}", real_state.get(ENGAGEMENT), sim_state.get(ENGAGEMENT),
                                     may_differ=D.SIMULATED_LING_ON_SPARK)
    SUMMARY[launch] = [
        "simulator only, unproven on CPU: " + (", ".join(unproven) if unproven else "none in this launch"),
        "log formats printed (counts): " + "; ".join(D.log_count_lines(real.log, sim.log)),
        "real only, the simulator cannot (differential.REAL_ONLY_LABEL_VALUES): "
        + (", ".join(D.real_only(real, sim)) or "none in this launch"),
        f"metric families only the real engine exports (the gate reads none; not modelled; "
        f"differential.real_only_families): {len(D.real_only_families(real.metrics, sim.metrics, METRIC_FAMILIES))}",
        *(f"let differ (differential.MAY_DIFFER): {line}" for line in excused),
    ]


def _sides(request, real_engines, launch: Launch, sim_dir) -> tuple[D.Side, D.Side, str]:
    """What the real engine answered, what the simulator started like it answered, the simulator's stderr."""
    engine = real_engines.get(launch)
    real_seen = real_engines.observation(launch)  # recorded when the launch first started
    real_extra = D.extra_requests(engine)
    real = D.Side(real_seen, real_extra, engine.server_info(),
                  logs.EngineLog(f"file {engine.log_path}", engine.log_text()),
                  D.Exposition.parse(engine.metrics_text()))
    return _simulated_like(request, real, D.SimEngine.like(engine, sim_dir), request.fixturename.removeprefix("sides_"))


# The GPU lane's engine env (tests/real/engine.py RealEngine on CUDA): the probe plugin, no CPU engine switch.
GPU_ENGINE_ENV = {"SGLANG_PLUGINS": "engagement_probe", "SPARKGATE_SIM_IMAGE": D.SIM_IMAGE}


def _recorded_sides(request, name: str, sim_dir) -> tuple[D.Side, D.Side, str]:
    """A GPU record's real side, and the simulator started here on that launch's argv and env."""
    recorded = gpu_records.side(name, gpu_records.SETS[GPU_DIFFERENTIAL[name]])
    seen = Observation(**recorded["seen"])
    real = D.Side(seen, recorded["extra"], recorded["server_info"],
                  logs.EngineLog(f"GPU record {name}", recorded["log_text"]), D.Exposition.parse(recorded["metrics_text"]))
    argv = seen.argv[seen.argv.index("sglang.launch_server") + 1 :]
    launch = Launch(model_path=Path(argv[argv.index("--model-path") + 1]),
                    served_model_name=argv[argv.index("--served-model-name") + 1], device="cuda")
    return _simulated_like(request, real, D.SimEngine(launch, argv, GPU_ENGINE_ENV, sim_dir), GPU_PREFIX + name)


def _simulated_like(request, real: D.Side, sim: D.SimEngine, launch_name: str) -> tuple[D.Side, D.Side, str]:
    sim.start()
    try:
        sim_seen = observe(sim)
        sim_extra = D.extra_requests(sim)
        simulated = D.Side(sim_seen, sim_extra, sim.server_info(),
                           logs.EngineLog(f"file {sim.log_path}", sim.log_text()),
                           D.Exposition.parse(sim.metrics_text()))
        stderr = sim.stderr()
    finally:
        sim.stop()
    _summarize(request.config, launch_name, real, simulated)
    return real, simulated, stderr


# Session-scoped and one per launch: the lane runs tests grouped by launch (conftest.py), so this module's
# tests of the dense launch and of the NEXTN launch run in different blocks.
@pytest.fixture(scope="session")
def sides_dense(request, real_engines, dense_launch, tmp_path_factory):
    return _sides(request, real_engines, dense_launch, tmp_path_factory.mktemp("sim-dense"))


@pytest.fixture(scope="session")
def sides_nextn(request, real_engines, nextn_launch, tmp_path_factory):
    return _sides(request, real_engines, nextn_launch, tmp_path_factory.mktemp("sim-nextn"))


_RECORDED_SIDES: dict[str, tuple[D.Side, D.Side, str]] = {}


@pytest.fixture
def side(request, launch, tmp_path_factory) -> tuple[D.Side, D.Side, str]:
    """The parametrized launch's (real, simulator, simulator stderr)."""
    if not launch.startswith(GPU_PREFIX):
        return request.getfixturevalue(f"sides_{launch}")
    if launch not in _RECORDED_SIDES:  # once per session, like the CPU launches' session fixtures
        name = launch.removeprefix(GPU_PREFIX)
        _RECORDED_SIDES[launch] = _recorded_sides(request, name, tmp_path_factory.mktemp(f"sim-{launch}"))
    return _RECORDED_SIDES[launch]


def _given(side: D.Side) -> set[str]:
    """The server-arg fields the argv sets (host and port are each process's own)."""
    argv = side.seen.argv[side.seen.argv.index("sglang.launch_server") + 1 :]
    return {o.spec.dest for o in parse_argv(argv) if o.spec is not None} - {"host", "port"}


# -- argv -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("launch", LAUNCHES)
def test_the_simulator_takes_the_real_argv(side, launch):
    """It started on the real engine's argv, warned about nothing, and echoes every flag given as the real
    engine does (host and port are its own)."""
    real, sim, stderr = side
    assert stderr == "", f"simulator stderr: {stderr}"
    echoed = {dest: (real.server_info[dest], sim.server_info.get(dest, "<absent>")) for dest in sorted(_given(real))}
    assert {d: v for d, v in echoed.items() if v[0] != v[1]} == {}, "GET /server_info of the given flags: (real, sim)"


# -- /server_info ---------------------------------------------------------------------------------------

def _without(info: dict, *keys: str) -> dict:
    return {k: v for k, v in info.items() if k not in keys}


def _only(info: dict, *keys: str) -> dict:
    return {k: v for k, v in info.items() if k in keys}


@pytest.mark.parametrize("launch", LAUNCHES)
def test_server_info(side, launch):
    real, sim, _ = side
    problems = D.compare("GET /server_info", _without(real.server_info, INTERNAL_STATES),
                         _without(sim.server_info, INTERNAL_STATES), selected=SERVER_INFO_READ)
    real_states, sim_states = real.server_info[INTERNAL_STATES], sim.server_info[INTERNAL_STATES]
    problems += D.compare("GET /server_info", [len(real_states)], [len(sim_states)], INTERNAL_STATES)
    assert len(sim_states) == len(real_states) == 1, "one internal state per DP rank"
    assert not problems, _failures(problems)


@pytest.mark.parametrize("launch", LAUNCHES)
def test_server_info_resolved_values(side, launch):
    """The simulator resolves every field the gate reads as SGLang does, the flags the argv does not give
    included (their defaults), except differential.MAY_DIFFER: what the machine or the simulated Ling decides."""
    real, sim, _ = side
    problems = D.compare_resolved("GET /server_info", real.server_info, sim.server_info, RESOLVED_READ,
                                  given=_given(real), may_differ=D.MAY_DIFFER)
    assert not problems, _failures(problems)


@pytest.mark.parametrize("launch", LAUNCHES)
def test_server_info_internal_state(side, launch):
    """internal_states[0]: the server args read, the fields it adds to them (memory_usage, startup_time,
    last_gen_throughput, avg_spec_accept_length, ...), and every field the simulator sends."""
    real, sim, _ = side
    where = f"GET /server_info {INTERNAL_STATES}[0]"
    real_state, sim_state = real.server_info[INTERNAL_STATES][0], sim.server_info[INTERNAL_STATES][0]
    added = set(real_state) - set(real.server_info)
    selected = SERVER_INFO_READ | INTERNAL_STATE_READ | added | {"startup_time"}
    problems = D.compare(where, _without(real_state, ENGAGEMENT, ENV_VARS), _without(sim_state, ENGAGEMENT, ENV_VARS),
                         selected=selected - {ENGAGEMENT, ENV_VARS})
    # env_vars (with SGLANG_EXPOSE_OWN_ENV_VARS=1): on the variables the simulator models, names and values (the
    # same env went to both; an unset one shows SGLang's default)
    real_env, sim_env = real_state.get(ENV_VARS), sim_state.get(ENV_VARS)
    if isinstance(real_env, dict) and isinstance(sim_env, dict):
        problems += D.compare(where, real_env, sim_env, ENV_VARS, selected=MODELLED_ENV)
        problems += D.compare_values(where, _only(real_env, *MODELLED_ENV), _only(sim_env, *MODELLED_ENV), ENV_VARS)
    else:
        problems += D.compare(where, _only(real_state, ENV_VARS), _only(sim_state, ENV_VARS))
    assert not problems, _failures(problems)


@pytest.mark.parametrize("launch", LAUNCHES)
def test_probe_report(side, launch):
    """The probe report the simulator fakes has the real probe's shape and values, recursively, except what the
    simulated Ling-3.0-flash decides (its model class, head shape and MoE census: SIMULATED_LING_ON_SPARK)."""
    real, sim, _ = side
    where = f"GET /server_info {INTERNAL_STATES}[0].{ENGAGEMENT}"
    real_report = real.server_info[INTERNAL_STATES][0].get(ENGAGEMENT)
    sim_report = sim.server_info[INTERNAL_STATES][0].get(ENGAGEMENT)
    assert isinstance(real_report, dict), "the real engine has no probe report: is the probe installed?"
    problems = D.compare(where, real_report, sim_report, may_differ=D.SIMULATED_LING_ON_SPARK)
    problems += D.compare_values(where, real_report, sim_report, may_differ=D.SIMULATED_LING_ON_SPARK)
    # What the checkpoint cannot change: a draft's MoE layers take the target's runner (the census keys of both
    # are one set) on either side.
    relation = {side_name: _draft_census_is_targets(report)
                for side_name, report in (("real", real_report), ("simulator", sim_report))}
    if relation["real"] != relation["simulator"]:
        problems.append(f"{where} draft.moe_layers keys == target.moe_layers keys: {relation}")
    assert not problems, _failures(problems)


def _draft_census_is_targets(report: dict) -> bool | None:
    """None without a draft; else whether the draft's census keys are the target's."""
    if not isinstance(report.get("draft"), dict):
        return None
    return set(report["draft"]["moe_layers"]) == set(report["target"]["moe_layers"])


@pytest.mark.parametrize("launch", LAUNCHES)
def test_model_info(side, launch):
    real, sim, _ = side
    problems = D.compare("GET /model_info", real.seen.model_info, sim.seen.model_info, selected=MODEL_INFO_READ)
    assert not problems, _failures(problems)


# -- /generate ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("launch", LAUNCHES)
def test_generate(side, launch):
    real, sim, _ = side
    assert len(sim.seen.generate) == len(real.seen.generate)
    problems = []
    for index, (want, got) in enumerate(zip(real.seen.generate, sim.seen.generate, strict=True)):
        problems += D.compare(f"POST /generate (request {index})", want, got)
    assert not problems, _failures(problems)


@pytest.mark.parametrize("launch", LAUNCHES)
def test_generate_streamed(side, launch):
    real, sim, _ = side
    problems = D.compare_streams("POST /generate stream", real.seen.generate_stream, sim.seen.generate_stream,
                                 D.generate_event_kind)
    assert not problems, _failures(problems)


# -- OpenAI ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("launch", LAUNCHES)
def test_chat_completions(side, launch):
    real, sim, _ = side
    problems = D.compare("POST /v1/chat/completions", real.seen.chat, sim.seen.chat)
    problems += D.compare("POST /v1/chat/completions (return_spec_tokens_details)", real.extra["chat_spec"],
                          sim.extra["chat_spec"])
    assert not problems, _failures(problems)


@pytest.mark.parametrize("launch", LAUNCHES)
def test_chat_completions_streamed(side, launch):
    real, sim, _ = side
    problems = D.compare_streams("POST /v1/chat/completions stream (include_usage)", real.seen.chat_stream,
                                 sim.seen.chat_stream, D.openai_event_kind)
    problems += D.compare_streams("POST /v1/chat/completions stream (include_usage, return_spec_tokens_details)",
                                  real.extra["chat_spec_stream"], sim.extra["chat_spec_stream"], D.openai_event_kind)
    assert not problems, _failures(problems)


@pytest.mark.parametrize("launch", LAUNCHES)
def test_completions(side, launch):
    real, sim, _ = side
    problems = []
    for name in ("completions", "completions_spec"):
        problems += D.compare(f"POST /v1/completions ({name})", real.extra[name], sim.extra[name])
    for name in ("completions_stream", "completions_spec_stream"):
        problems += D.compare_streams(f"POST /v1/completions ({name})", real.extra[name], sim.extra[name],
                                      D.openai_event_kind)
    assert not problems, _failures(problems)


# -- /metrics and the log -------------------------------------------------------------------------------

@pytest.mark.parametrize("launch", LAUNCHES)
def test_metrics(side, launch):
    real, sim, _ = side
    problems = D.compare_metrics("GET /metrics", real.metrics, sim.metrics, METRIC_FAMILIES)
    assert not problems, _failures(problems)


@pytest.mark.parametrize("launch", LAUNCHES)
def test_log(side, launch):
    real, sim, _ = side
    model_class = real.server_info[INTERNAL_STATES][0][ENGAGEMENT]["target"]["model_class"]
    problems = D.compare_logs(real.log, sim.log, hybrid=model_class in D.HYBRID_CLASSES)
    assert not problems, _failures(problems, "log formats printed (counts may differ):",
                                   *D.log_count_lines(real.log, sim.log))


# -- the comparison covers what it is for ---------------------------------------------------------------

def test_the_speculative_fields_are_compared(sides_nextn, sides_dense):
    """NEXTN's real answers hold the speculative fields, so the tests above compared them (and the dense
    launch's lack them in both)."""
    real, sim, _ = sides_nextn
    final_meta = real.seen.generate[0]["meta_info"]
    for key in ("meta_spec_verify_ct", "meta_spec_accept_length", "meta_spec_accept_rate",
                "meta_spec_num_correct_drafts", "meta_spec_num_proposed_drafts"):
        assert C.string_(key) in final_meta
    assert "spec_correct_drafts_histogram" in final_meta
    assert C.string_("meta_spec_verify_ct") in real.seen.generate_stream[-1]["meta_info"]
    assert C.string_("internal_state_avg_spec_accept_length") in real.server_info[INTERNAL_STATES][0]
    assert "spec_tokens_details" in real.extra["chat_spec"]["sglext"]
    assert any("sglext" in event for event in real.extra["chat_spec_stream"])
    assert real.metrics.label_names.get(C.metric("spec_verify_calls"))
    assert real.server_info[C.server_arg("speculative_algorithm")] == C.string_("spec_algorithm_eagle")
    dense_real, dense_sim, _ = sides_dense
    for side in (dense_real, dense_sim):
        assert C.string_("meta_spec_verify_ct") not in side.seen.generate[0]["meta_info"]
        assert "sglext" not in side.extra["chat_spec"]


@pytest.mark.parametrize("launch", LAUNCHES[len(CPU_LAUNCHES):])
def test_what_only_the_simulator_shows_on_cpu_a_real_cuda_engine_shows_too(side, launch):
    """The capture lines and graph-pass modes the CPU engine cannot print, held to the GPU lane's real CUDA engine:
    nothing the simulator emits for this launch is missing from the real record."""
    real, sim, _ = side
    assert D.simulator_only(real, sim) == [], "the simulator emits these for a CUDA launch; the real CUDA engine did not"
    # Not vacuous: each of these launches captured decode graphs, and both sides say so.
    captured = {"log_formats.capture_end", "metrics.cuda_graph_passes{mode=decode_cuda_graph}"}
    if GPU_DIFFERENTIAL[launch.removeprefix(GPU_PREFIX)] != "gpu":  # Ling's own class, with the real Humming
        captured.add("log_formats.humming_gemm")
    assert captured <= D.emitted_keys(real) & D.emitted_keys(sim)


def test_the_gpu_records_are_part_of_the_differential():
    assert tuple(GPU_DIFFERENTIAL) == GPU_RECORDED, "a GPU launch of the differential has no record (tests/fixtures/gpu*)"
