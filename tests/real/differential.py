"""The differential of tests/real/test_differential.py: the simulator started like a real SGLang engine (its argv
and SGLang env), the same requests sent to both, and the comparison of what they answer by field names and JSON
types (values differ: the simulator is a Ling-3.0-flash on a DGX Spark whatever `--model-path` says).

    sim = SimEngine.like(engine, run_dir).start()    # the real engine's argv on a 127.0.0.1 port of its own
    seen = observe(sim)                                # tests/real/observe.py: the requests the real one got
    problems = compare("GET /server_info", real_info, sim_info, selected=READ_KEYS)

A problem names the endpoint, the field path, the real engine's JSON type and the simulator's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkgate.evidence import logs, metrics
from sparkgate.sglang import conformance as C
from tests.plugins.simproc import Sim, with_address
from tests.real.engine import Launch, RealEngine, Response
from tests.real.observe import Observation, sse_events

# -- JSON types -----------------------------------------------------------------------------------------


def json_type(value: Any) -> str:
    """The JSON type a value was parsed from (int and float stay apart: 1 and 1.0 are different answers)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    for kind, name in ((int, "int"), (float, "float"), (str, "str"), (list, "list"), (dict, "dict")):
        if isinstance(value, kind):
            return name
    raise TypeError(f"not a JSON value: {value!r}")


# Fields whose JSON type SGLang itself varies: field path (list indices dropped) -> the allowed types. A
# mismatch inside the union passes; anything else fails as usual.
UNIONS: dict[str, frozenset[str]] = {
    # sglang/srt/managers/scheduler_components/output_streamer.py get_cached_tokens_details: None without a
    # prefix-cache hit, {"device", "host"} with one. The real engine's radix cache hits on a repeated prompt
    # prefix (the chat template's, or the same prompt twice); the simulator models no prefix cache.
    "meta_info.cached_tokens_details": frozenset({"null", "dict"}),
    # sglang/srt/arg_groups/speculative_hook.py _handle_eagle_family: NEXTN defaults the draft path to
    # --model-path only for the architectures it lists; the tiny checkpoint is a BailingMoeV2ForCausalLM (listed),
    # the simulated Ling-3.0-flash a BailingMoeV3ForCausalLM (not listed), so SGLang reports null for it.
    "speculative_draft_model_path": frozenset({"null", "str"}),
    # sglang/srt/entrypoints/openai/protocol.py (the choice classes): matched_stop: Union[None, int, str], the EOS
    # id or stop string a request stopped at, null when it ran to its limit.
    "choices.matched_stop": frozenset({"null", "int", "str"}),
}


# /generate's finish_reason: one shape per kind of finish (sglang/srt/managers/schedule_batch.py, the to_json of
# FINISH_LENGTH, FINISH_MATCHED_TOKEN (an int or a list of ids), FINISH_MATCHED_STR / FINISHED_MATCHED_REGEX,
# FINISH_ABORT). Two finishes of one kind must have the same shape; a real request that met EOS before the limit
# and a simulated one that ran to it each need only the shape of their kind.
FINISH_REASON = "meta_info.finish_reason"
FINISH_REASON_SHAPES: dict[str, dict[str, frozenset[str]]] = {
    "length": {"type": frozenset({"str"}), "length": frozenset({"int"})},
    "stop": {"type": frozenset({"str"}), "matched": frozenset({"int", "list", "str"})},
    "abort": {"type": frozenset({"str"}), "message": frozenset({"str"}), "status_code": frozenset({"null", "int"}),
              "err_type": frozenset({"null", "str"})},
}


def _finish_reason_problems(where: str, path: str, reason: dict, side: str) -> list[str]:
    shape = FINISH_REASON_SHAPES.get(reason.get("type"))
    if shape is None:
        return [f"{where} {path}.type: {side} finish type {reason.get('type')!r} is not one SGLang sends"]
    problems = [f"{where} {path}: {side} {reason['type']} finish lacks {key}" for key in shape if key not in reason]
    problems += [f"{where} {path}.{key}: {side} {reason['type']} finish has no such field" for key in reason
                 if key not in shape]
    problems += [f"{where} {path}.{key}: {side} {json_type(reason[key])}, SGLang's {reason['type']} finish "
                 f"{sorted(shape[key])}" for key in reason if key in shape and json_type(reason[key]) not in shape[key]]
    return problems


# Dicts whose keys are data, not field names: compared as mappings (the types of their values, not their keys).
MAPPINGS = (
    # sparkgate_probe/facts.py count_moe_layers: "<QuantMethodClass>/<runner_backend>" -> the number of FusedMoE
    # layers; which keys appear is what engaged (none for the dense llama, 31 for the simulated Ling).
    "moe_layers",
)


def _bare(path: str) -> str:
    return re.sub(r"\[[^\]]*\]", "", path)


def _matches(path: str, suffix: str) -> bool:
    bare = _bare(path)
    return bare == suffix or bare.endswith("." + suffix)


def _union_for(path: str) -> frozenset[str] | None:
    return next((allowed for suffix, allowed in UNIONS.items() if _matches(path, suffix)), None)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def compare(where: str, real: Any, sim: Any, path: str = "", selected: Iterable[str] | None = None) -> list[str]:
    """Every difference of `sim` from `real` in names and types, as `<where> <path>: ...` lines.

    Dicts must have the same keys, recursively (a dict in MAPPINGS: the same value types). With `selected` (for objects of hundreds of fields, such as
    /server_info), the top level compares only the selected keys the real engine has (missing from the
    simulator fails) and every key the simulator sends (one the real engine lacks fails). Lists compare the set
    of their elements' types, and the first element's structure when it is a dict or a list."""
    rt, st = json_type(real), json_type(sim)
    if rt != st:
        allowed = _union_for(path)
        if allowed is not None and {rt, st} <= allowed:
            return []
        return [f"{where} {path or '<root>'}: real {rt}, simulator {st} (real {_short(real)}, simulator {_short(sim)})"]
    if rt == "dict" and _matches(path, FINISH_REASON) and real.get("type") != sim.get("type"):
        return _finish_reason_problems(where, path, real, "real") + _finish_reason_problems(where, path, sim, "simulator")
    if rt == "dict" and any(_matches(path, suffix) for suffix in MAPPINGS):
        return compare(where, list(real.values()), list(sim.values()), f"{path}{{}}")
    if rt == "dict":
        if selected is None:
            keys = sorted(set(real) | set(sim))
        else:
            wanted = set(selected)
            keys = sorted((wanted & set(real)) | set(sim))
        problems = []
        for key in keys:
            sub = _join(path, key)
            if key not in sim:
                problems.append(f"{where} {sub}: missing from the simulator (real {json_type(real[key])})")
            elif key not in real:
                problems.append(f"{where} {sub}: simulator-only field (simulator {json_type(sim[key])})")
            else:
                problems += compare(where, real[key], sim[key], sub)
        return problems
    if rt == "list" and real and sim:
        real_types, sim_types = sorted({json_type(v) for v in real}), sorted({json_type(v) for v in sim})
        if real_types != sim_types:
            return [f"{where} {path}[]: real elements {real_types}, simulator elements {sim_types}"]
        if real_types[0] in ("dict", "list"):
            return compare(where, real[0], sim[0], f"{path}[0]")
    return []


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- streams --------------------------------------------------------------------------------------------


def compare_streams(where: str, real: list[dict], sim: list[dict], kind: Callable[[int, list[dict]], str]) -> list[str]:
    """Stream events compared by kind (first chunk, content, finish, usage, ...): every kind either side sends
    must be sent by the other, and each of the simulator's events has the shape of the real engine's first
    event of its kind (the number of content chunks differs: the real engine merges tokens into a chunk)."""
    def by_kind(events: list[dict]) -> dict[str, list[dict]]:
        groups: dict[str, list[dict]] = {}
        for index in range(len(events)):
            groups.setdefault(kind(index, events), []).append(events[index])
        return groups

    real_kinds, sim_kinds = by_kind(real), by_kind(sim)
    problems = [f"{where}: real sends a {name!r} event, the simulator none" for name in real_kinds if name not in sim_kinds]
    problems += [f"{where}: the simulator sends a {name!r} event, the real engine none"
                 for name in sim_kinds if name not in real_kinds]
    for name, events in sim_kinds.items():
        if name in real_kinds:
            for index, event in enumerate(events):
                problems += compare(f"{where} [{name} event {index}]", real_kinds[name][0], event)
    return problems


def generate_event_kind(index: int, events: list[dict]) -> str:
    """A streamed /generate chunk: the first, one in between, or the final one (with the finish reason)."""
    if index == len(events) - 1:
        return "final"
    return "first" if index == 0 else "intermediate"


def openai_event_kind(index: int, events: list[dict]) -> str:
    """A streamed OpenAI chunk: the role chunk (chat's first), text, finish, the sglext chunk, the usage chunk."""
    event = events[index]
    if "sglext" in event:
        return "sglext"
    if not event["choices"]:
        return "usage"
    choice = event["choices"][0]
    if choice.get("finish_reason") is not None:
        return "finish"
    if "delta" in choice and "role" in choice["delta"]:
        return "role"
    return "text"


# -- metrics --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exposition:
    """A Prometheus text exposition: `# TYPE` per family, and the label-name sets of each sample name."""

    types: dict[str, str]
    label_names: dict[str, set[frozenset[str]]]

    @classmethod
    def parse(cls, text: str) -> Exposition:
        types = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[:2] == ["#", "TYPE"]:
                types[parts[2]] = parts[3]
        label_names: dict[str, set[frozenset[str]]] = {}
        for name, labels, _value in metrics.parse(text):  # the gate's own parser
            label_names.setdefault(name, set()).add(frozenset(labels))
        return cls(types, label_names)

    def sample_names(self, family: str) -> list[str]:
        if self.types.get(family) == "histogram":
            return [f"{family}_bucket", f"{family}_sum", f"{family}_count"]
        return [family]


def compare_metrics(where: str, real: Exposition, sim: Exposition, families: Iterable[str]) -> list[str]:
    """For each family: exported by both or by neither; the same `# TYPE`; per sample name, the same sets of
    label names (values differ)."""
    problems = []
    for family in families:
        if family not in real.types:
            if family in sim.types or family in sim.label_names:
                problems.append(f"{where} {family}: exported by the simulator only (simulator # TYPE "
                                f"{sim.types.get(family)})")
            continue
        if family not in sim.types:
            problems.append(f"{where} {family}: missing from the simulator (real # TYPE {real.types[family]})")
            continue
        if real.types[family] != sim.types[family]:
            problems.append(f"{where} {family}: real # TYPE {real.types[family]}, simulator # TYPE {sim.types[family]}")
            continue
        for sample in real.sample_names(family):
            want, got = real.label_names.get(sample, set()), sim.label_names.get(sample, set())
            if want != got:
                problems.append(f"{where} {sample}: real label names {_label_sets(want)}, simulator {_label_sets(got)}")
    return problems


def _label_sets(sets: set[frozenset[str]]) -> list[list[str]]:
    return sorted(sorted(s) for s in sets)


# -- logs -----------------------------------------------------------------------------------------------


def compare_logs(real: logs.EngineLog, sim: logs.EngineLog) -> list[str]:
    """Every fixture log format the real engine printed, the simulator printed too, read by the gate's own log
    reader: a record format from the message start, a format SGLang appends to a record (decode_accept, ...)
    inside a message."""
    problems = []
    for key in C.fixture()["log_formats"]:
        pattern = C.log_pattern(key)
        if real.matching(pattern):
            if not sim.matching(pattern):
                problems.append(f"engine log {key}: real has a record '{real.matching(pattern)[0][:160]}', "
                                "the simulator none")
        elif any(pattern.search(m) for m in real.messages()) and not any(pattern.search(m) for m in sim.messages()):
            example = next(m for m in real.messages() if pattern.search(m))
            problems.append(f"engine log {key}: real has it inside '{example[:160]}', the simulator nowhere")
    return problems


# -- the simulator, started like the real engine ---------------------------------------------------------

SIM_IMAGE = "stock"  # the real engine is upstream SGLang 0.5.23, not the inclusionAI fork


class SimEngine:
    """The simulator behind RealEngine's request methods, so tests/real/observe.py can send it the same requests."""

    def __init__(self, launch: Launch, argv: list[str], env: dict[str, str], run_dir: Path):
        self.launch = launch
        self.sim = Sim(argv, env, run_dir)
        self.argv = [*argv]
        self.log_path = ""

    @classmethod
    def like(cls, engine: RealEngine, run_dir: Path) -> SimEngine:
        """The real engine's own SGLang argv (minus `python -m sglang.launch_server`; Sim sets its own host and
        port) and its SGLang env (SGLANG_PLUGINS, SGLANG_USE_CPU_ENGINE), on the stock image."""
        module = engine.argv.index("sglang.launch_server")
        argv = engine.argv[module + 1 :]
        env = {k: v for k, v in engine.env.items() if k.startswith(("SGLANG_", "SGL_"))}
        return cls(engine.launch, argv, {**env, "SPARKGATE_SIM_IMAGE": SIM_IMAGE}, run_dir)

    def start(self) -> SimEngine:
        self.sim.start().wait_ready()
        self.argv = ["python", "-m", "sparkgate_sim", *with_address(self.sim.argv, self.sim.host, self.sim.port)]
        self.log_path = str(self.sim.log_dir / f"sim-{self.sim.port}.out")
        return self

    def stop(self) -> None:
        self.sim.stop()

    def post(self, path: str, body) -> Response:
        got = self.sim.post(path, body, timeout=120)
        return Response(got.status, got.headers, got.body)

    def get_json(self, path: str):
        resp = self.sim.get(path, timeout=120)
        assert resp.status == 200, f"simulator GET {path}: {resp.status} {resp.body[:300]!r}"
        return resp.json()

    def server_info(self) -> dict:
        return self.get_json("/server_info")

    def metrics_text(self) -> str:
        return self.sim.metrics()

    def log_text(self) -> str:
        return self.sim.log()

    def stderr(self) -> str:
        return self.sim.stderr()


# -- what both get beyond observe.py's requests -----------------------------------------------------------

EXTRA_PROMPT = "Pack my box with five dozen liquor jugs."
EXTRA_MAX_TOKENS = 8


def extra_requests(engine: RealEngine | SimEngine) -> dict[str, Any]:
    """OpenAI completions (plain, streamed with usage) and chat and completions asking for the speculative
    details (`return_spec_tokens_details`, what sparkgate's bench sends): the answers by name."""
    model = engine.launch.served_model_name or str(engine.launch.model_path)
    base = {"model": model, "temperature": 0, "max_tokens": EXTRA_MAX_TOKENS}
    stream = {"stream": True, "stream_options": {"include_usage": True}}
    completion = {**base, "prompt": EXTRA_PROMPT}
    chat = {**base, "messages": [{"role": "user", "content": EXTRA_PROMPT}], "return_spec_tokens_details": True}
    asked = {
        "completions": ("/v1/completions", completion),
        "completions_stream": ("/v1/completions", {**completion, **stream}),
        "completions_spec": ("/v1/completions", {**completion, "return_spec_tokens_details": True}),
        "completions_spec_stream": ("/v1/completions", {**completion, **stream, "return_spec_tokens_details": True}),
        "chat_spec": ("/v1/chat/completions", chat),
        "chat_spec_stream": ("/v1/chat/completions", {**chat, **stream}),
    }
    answers: dict[str, Any] = {}
    for name, (path, body) in asked.items():
        resp = engine.post(path, body)
        assert resp.status == 200, f"{type(engine).__name__} {path} ({name}): {resp.status} {resp.body[:300]!r}"
        answers[name] = sse_events(resp.body) if body.get("stream") else resp.json()
    return answers


@dataclass(frozen=True)
class Side:
    """What one engine answered: observe.py's requests, then the extra ones, then /server_info again."""

    seen: Observation
    extra: dict[str, Any]
    server_info: dict[str, Any]  # read after every request (the decode-log interval has passed)
    log: logs.EngineLog
    metrics: Exposition
