"""Real SGLang 0.5.23 against the simulator: started with the same argv and sent the same requests, the simulator
answers with the same field names and JSON types.

Two launches: the dense tiny llama, and NEXTN on the tiny BailingMoeV2 (the speculative fields: meta_info
`spec_*`, `avg_spec_accept_length`, `sglext.spec_tokens_details`, `sglang:spec_*`). The simulator gets the real
engine's own argv (host and port its own) and SGLang env, on the stock image (the real engine is upstream
0.5.23). Both get tests/real/observe.py's requests (greedy /generate plain and streamed, chat plain and
streamed with usage) and differential.extra_requests (OpenAI completions, the speculative details the bench
asks for); then /server_info, /metrics and the log are compared:

- `/server_info`: every field the gate, the sentinel or the bench reads, and every field the simulator sends
  (one the real engine lacks fails); `internal_states[0]`: those, plus every field it adds to the server args;
  the probe report `engagement` in full, recursively.
- `/generate` (plain, and each kind of streamed chunk), `/v1/chat/completions`, `/v1/completions` (plain, and
  each kind of streamed chunk: role, text, finish, sglext, usage): the whole objects, recursively.
- `/metrics`: each fixture metric exported by both or neither, with the same `# TYPE` and label-name sets.
- the engine log: each fixture log format the real engine printed, the simulator printed too.
- `/model_info`: what the gate reads, and every field the simulator sends.

Values differ (the simulator is a Ling-3.0-flash on a Spark whatever `--model-path` says); a field whose type
SGLang itself varies is listed in differential.UNIONS with the SGLang source that varies it.

Each launch starts once, here (dense, then NEXTN, in one module fixture); the slot is stopped at the end, so the
next module finds no server running.
"""

from __future__ import annotations

import pytest

from sparkgate.bench.envfacts import SERVER_INFO_KEYS as BENCH_SERVER_INFO_KEYS
from sparkgate.evidence import logs
from sparkgate.evidence.verify import verified_config_keys
from sparkgate.runtime.admin_key import SECRET_FIELDS
from sparkgate.sglang import conformance as C
from sparkgate.sglang.parser import parse_argv
from tests.real import differential as D
from tests.real.engine import Launch
from tests.real.observe import observe

pytestmark = pytest.mark.real

LAUNCHES = ("dense", "nextn")

# What sparkgate reads from /server_info: the fixture's server args and server_info fields, the fields each verdict
# records (COMMON_CONFIG_KEYS and every optimization's CONFIG_KEYS), the bench's, the secrets the sentinel redacts.
FIXTURE = C.fixture()
SERVER_INFO_READ = (
    {entry["text"] for entry in FIXTURE["server_args"].values()}
    | {entry["text"] for key, entry in FIXTURE["strings"].items() if key.startswith("server_info_")}
    | set(verified_config_keys()) | set(BENCH_SERVER_INFO_KEYS) | set(SECRET_FIELDS)
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


def _failures(problems: list[str]) -> str:
    return f"{len(problems)} difference(s) of the simulator from the real SGLang 0.5.23:\n" + "\n".join(problems)


def _sides(real_engines, launch: Launch, sim_dir) -> tuple[D.Side, D.Side, str]:
    """What the real engine answered, what the simulator started like it answered, the simulator's stderr."""
    engine = real_engines.get(launch)
    real_seen = real_engines.observation(launch)  # recorded when the launch first started
    real_extra = D.extra_requests(engine)
    real = D.Side(real_seen, real_extra, engine.server_info(),
                  logs.EngineLog(f"file {engine.log_path}", engine.log_text()),
                  D.Exposition.parse(engine.metrics_text()))
    sim = D.SimEngine.like(engine, sim_dir).start()
    try:
        sim_seen = observe(sim)
        sim_extra = D.extra_requests(sim)
        simulated = D.Side(sim_seen, sim_extra, sim.server_info(),
                           logs.EngineLog(f"file {sim.log_path}", sim.log_text()),
                           D.Exposition.parse(sim.metrics_text()))
        stderr = sim.stderr()
    finally:
        sim.stop()
    return real, simulated, stderr


# Session-scoped and one per launch: the lane runs tests grouped by launch (conftest.py), so this module's
# tests of the dense launch and of the NEXTN launch run in different blocks.
@pytest.fixture(scope="session")
def sides_dense(real_engines, dense_launch, tmp_path_factory):
    return _sides(real_engines, dense_launch, tmp_path_factory.mktemp("sim-dense"))


@pytest.fixture(scope="session")
def sides_nextn(real_engines, nextn_launch, tmp_path_factory):
    return _sides(real_engines, nextn_launch, tmp_path_factory.mktemp("sim-nextn"))


@pytest.fixture
def side(request, launch) -> tuple[D.Side, D.Side, str]:
    """The parametrized launch's (real, simulator, simulator stderr)."""
    return request.getfixturevalue(f"sides_{launch}")


# -- the comparison itself (no engine) ------------------------------------------------------------------

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
    # a mapping keyed by data compares its values' types, not its keys
    assert D.compare("GET /server_info", {"moe_layers": {"A/triton": 1}}, {"moe_layers": {"B/humming": 31}}) == []
    assert D.compare("GET /server_info", {"moe_layers": {"A/triton": 1}}, {"moe_layers": {"B/humming": 1.0}}) == [
        "GET /server_info moe_layers{}[]: real elements ['int'], simulator elements ['float']"]


# -- argv -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("launch", LAUNCHES)
def test_the_simulator_takes_the_real_argv(side, launch):
    """It started on the real engine's argv, warned about nothing, and echoes every flag given as the real
    engine does (host and port are its own)."""
    real, sim, stderr = side
    assert stderr == "", f"simulator stderr: {stderr}"
    argv = real.seen.argv[real.seen.argv.index("sglang.launch_server") + 1 :]
    given = {o.spec.dest for o in parse_argv(argv) if o.spec is not None} - {"host", "port"}
    echoed = {dest: (real.server_info[dest], sim.server_info.get(dest, "<absent>")) for dest in sorted(given)}
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
    # env_vars (with SGLANG_EXPOSE_OWN_ENV_VARS=1): on the variables the simulator models
    real_env, sim_env = real_state.get(ENV_VARS), sim_state.get(ENV_VARS)
    if isinstance(real_env, dict) and isinstance(sim_env, dict):
        problems += D.compare(where, real_env, sim_env, ENV_VARS, selected=MODELLED_ENV)
    else:
        problems += D.compare(where, _only(real_state, ENV_VARS), _only(sim_state, ENV_VARS))
    assert not problems, _failures(problems)


@pytest.mark.parametrize("launch", LAUNCHES)
def test_probe_report(side, launch):
    """The probe report the simulator fakes has the real probe's shape, recursively."""
    real, sim, _ = side
    real_report = real.server_info[INTERNAL_STATES][0].get(ENGAGEMENT)
    assert isinstance(real_report, dict), "the real engine has no probe report: is the probe installed?"
    problems = D.compare(f"GET /server_info {INTERNAL_STATES}[0].{ENGAGEMENT}", real_report,
                         sim.server_info[INTERNAL_STATES][0].get(ENGAGEMENT), "")
    assert not problems, _failures(problems)


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
    problems = D.compare_logs(real.log, sim.log)
    assert not problems, _failures(problems)


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
