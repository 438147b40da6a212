"""The differential of tests/real/test_differential.py: the simulator started like a real SGLang engine (its argv
and SGLang env), the same requests sent to both, and the comparison of what they answer, both ways.

    sim = SimEngine.like(engine, run_dir).start()    # the real engine's argv on a 127.0.0.1 port of its own
    seen = observe(sim)                                # tests/real/observe.py: the requests the real one got
    problems = compare("GET /server_info", real_info, sim_info, selected=READ_KEYS)

What is compared, each function returning one line per difference (`<where> <path>: ...`):

- `compare`: field names and JSON types, recursively, both ways; a list or dict empty on one side only; list
  elements pairwise; the keys of a census (moe_layers) as sets.
- `compare_values` / `compare_resolved`: values, both ways, except what MAY_DIFFER lists (with the reason each).
- `compare_metrics`: per family, presence both ways, `# TYPE`, label names, and the label-VALUE combinations of
  the labels that enumerate something (INSTANCE_LABELS are left out, each with its reason).
- `compare_logs`: every fixture log format printed by one side is printed by the other (counts reported).
- `simulator_only`: what the simulator emitted that the CPU engine cannot (UNPROVEN_ON_CPU): listed, not failed.

The simulator is a Ling-3.0-flash on a DGX Spark whatever `--model-path` and `--device` say (SIMULATED_LING_ON_SPARK
says which values that decides, and why); the lane's real engine runs tiny checkpoints on CPU.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkgate.evidence import logs, metrics
from sparkgate.sglang import conformance as C
from tests.plugins.simproc import Sim, with_address
from tests.real.engine import Launch, RealEngine, Response
from tests.real.observe import Observation, sse_events

# -- what may differ, in one place ------------------------------------------------------------------------

# The simulator models one deployment: Ling-3.0-flash (BailingMoeV3ForCausalLM, a mixed FP8/MXFP4 checkpoint) on a
# DGX Spark (CUDA SM121), whatever `--model-path` and `--device` say, because that is the only deployment sparkgate
# gates. The lane's real engine serves a tiny llama and a tiny BailingMoeV2 on `--device cpu`. Every value that
# follows from the checkpoint or the device therefore differs by design: field path (list indices dropped;
# a suffix after a `.`) -> the SGLang source that decides it.
SIMULATED_LING_ON_SPARK: dict[str, str] = {
    "moe_runner_backend": (
        "sglang/srt/arg_groups/model_overrides/bailing_moe_v3.py: `auto` becomes flashinfer_mxfp4 only for a "
        "BailingMoeV3 mixed FP8/MXFP4 checkpoint on CUDA SM90/100/120; the tiny checkpoints on --device cpu keep auto"),
    "speculative_draft_model_path": (
        "sglang/srt/arg_groups/speculative_hook.py _handle_eagle_family: NEXTN defaults the draft to --model-path "
        "only for the architectures it lists (BailingMoeV2ForCausalLM is listed, BailingMoeV3ForCausalLM is not)"),
    "target.model_class": "the checkpoint's architectures[0] (sglang/srt/models/registry.py)",
    "lm_head.weight_shape": (
        "vocab x hidden of the checkpoint (sglang/srt/layers/vocab_parallel_embedding.py ParallelLMHead): "
        "512x64 for the tiny ones, 157184x2560 for Ling"),
    "moe_layers": (
        "the census keys are <quant method>/<runner backend> of the checkpoint's FusedMoE layers and the counts its "
        "MoE layer count: the tiny llama has none (sglang/srt/models/llama.py builds no FusedMoE), the unquantized "
        "tiny BailingMoeV2 gets UnquantizedFusedMoEMethod/triton on CPU (sglang/srt/layers/quantization/unquant.py), "
        "Ling's 31 MXFP4 expert layers Mxfp4FlashinferCutlassMoEMethod/flashinfer_mxfp4 on SM12x "
        "(sglang/srt/layers/quantization/fp8.py get_quant_method)"),
}

# Values that depend on the machine or the moment, not on what SGLang resolves: field path -> why. Not listed,
# because both processes get the same argv and so must agree: model_path, served_model_name, random_seed,
# mem_fraction_static (given); max_total_num_tokens (profiled from device memory by sglang/srt/mem_cache/
# kv_cache_configurator.py, but --max-total-tokens caps it on both); launch_command (compared with each process's
# own --host/--port masked: NORMALISED).
MACHINE_SPECIFIC: dict[str, str] = {
    "startup_time": ("seconds each startup phase took (sglang/srt/observability/startup_time.py): measured on this "
                     "CPU, modelled for a Spark by the simulator; its keys are compared"),
    "internal_states": "per-rank runtime state, not a server arg: compared field by field in its own test",
}

MAY_DIFFER: dict[str, str] = {**SIMULATED_LING_ON_SPARK, **MACHINE_SPECIFIC}


def _own_address_masked(launch_command: str) -> str:
    """SGLang's launch_command with the values of --host and --port masked: each process listens on its own."""
    tokens = launch_command.split(" ")
    return " ".join("<own>" if i and tokens[i - 1] in ("--host", "--port") else t for i, t in enumerate(tokens))


# Values compared after a normalisation that drops what is the process's own: field path -> the normalisation.
NORMALISED: dict[str, Callable[[Any], Any]] = {
    "launch_command": lambda value: _own_address_masked(value) if isinstance(value, str) else value,
}

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


# Censuses: dicts whose keys are data, not field names. sparkgate_probe/facts.py count_moe_layers:
# "<QuantMethodClass>/<runner_backend>" -> the number of FusedMoE layers; which keys appear is what engaged, so the
# key sets are compared (both ways) and every count must be an int. The counts themselves are the checkpoint's
# layer counts: compared by compare_values unless MAY_DIFFER lists the census.
CENSUSES = ("moe_layers",)


def _bare(path: str) -> str:
    return re.sub(r"\[[^\]]*\]", "", path)


def _matches(path: str, suffix: str) -> bool:
    bare = _bare(path)
    return bare == suffix or bare.endswith("." + suffix)


def _listed(path: str, table: Iterable[str]) -> bool:
    return any(_matches(path, suffix) for suffix in table)


def _union_for(path: str) -> frozenset[str] | None:
    return next((allowed for suffix, allowed in UNIONS.items() if _matches(path, suffix)), None)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _size(value: list | dict) -> str:
    kind = json_type(value)
    if not value:
        return f"an empty {kind}"
    return f"{len(value)} element(s)" if kind == "list" else f"{len(value)} key(s)"


def compare(where: str, real: Any, sim: Any, path: str = "", selected: Iterable[str] | None = None,
            may_differ: Mapping[str, str] | None = None) -> list[str]:
    """Every difference of `sim` from `real` in names and types, as `<where> <path>: ...` lines.

    Dicts must have the same keys, recursively. With `selected` (for objects of hundreds of fields, such as
    /server_info), the top level compares only the selected keys the real engine has (missing from the
    simulator fails) and every key the simulator sends (one the real engine lacks fails). A list or dict empty on
    one side only fails; lists compare the sets of their elements' types and, pairwise, the structure of the
    elements both have. A census (CENSUSES) compares its key sets both ways and the counts' type; `may_differ`
    (paths -> reasons) lets a census's keys differ where the reason says they must."""
    rt, st = json_type(real), json_type(sim)
    if rt != st:
        allowed = _union_for(path)
        if allowed is not None and {rt, st} <= allowed:
            return []
        return [f"{where} {path or '<root>'}: real {rt}, simulator {st} (real {_short(real)}, simulator {_short(sim)})"]
    if rt == "dict" and _matches(path, FINISH_REASON) and real.get("type") != sim.get("type"):
        return _finish_reason_problems(where, path, real, "real") + _finish_reason_problems(where, path, sim, "simulator")
    if rt == "dict" and _listed(path, CENSUSES):
        return _census_problems(where, path, real, sim, keys_may_differ=_listed(path, may_differ or {}))
    if rt in ("list", "dict") and bool(real) != bool(sim):
        return [f"{where} {path or '<root>'}: real {_size(real)}, simulator {_size(sim)} "
                f"(real {_short(real)}, simulator {_short(sim)})"]
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
                problems += compare(where, real[key], sim[key], sub, may_differ=may_differ)
        return problems
    if rt == "list" and real:
        real_types, sim_types = sorted({json_type(v) for v in real}), sorted({json_type(v) for v in sim})
        if real_types != sim_types:
            return [f"{where} {path}[]: real elements {real_types}, simulator elements {sim_types}"]
        problems = []
        for index in range(max(len(real), len(sim))):
            # Pairwise where both have the element; a tail either side has alone is held to the other's first
            # element (lengths differ with the generated text; shapes must not).
            want = real[index] if index < len(real) else real[0]
            got = sim[index] if index < len(sim) else sim[0]
            if json_type(want) in ("dict", "list") and json_type(want) == json_type(got):
                problems += compare(where, want, got, f"{path}[{index}]", may_differ=may_differ)
        return problems
    return []


def _census_problems(where: str, path: str, real: dict, sim: dict, keys_may_differ: bool) -> list[str]:
    problems = [f"{where} {path}[{key!r}]: {side} count {_short(count)} is not an int"
                for side, census in (("real", real), ("simulator", sim))
                for key, count in census.items() if json_type(count) != "int"]
    if not keys_may_differ and set(real) != set(sim):
        problems.append(f"{where} {path}: census keys differ: real only {sorted(set(real) - set(sim))}, simulator only "
                        f"{sorted(set(sim) - set(real))} (real {_short(real)}, simulator {_short(sim)})")
    return problems


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- values ---------------------------------------------------------------------------------------------


def _same(real: Any, sim: Any) -> bool:
    """Equal as JSON: the same type (1 and 1.0, 0 and false differ) and the same value."""
    return json_type(real) == json_type(sim) and real == sim


def _differences(real: Any, sim: Any, path: str, may_differ: Mapping[str, str]) -> list[tuple[str, Any, Any, bool]]:
    """(path, real, simulator, excused) of every differing value; an excused path (in `may_differ`) is one entry for
    its whole subtree. Dicts recurse into the keys both have, lists of one length pairwise."""
    excused = _listed(path, may_differ)
    normalise = next((f for suffix, f in NORMALISED.items() if _matches(path, suffix)), None)
    if normalise is not None:
        real, sim = normalise(real), normalise(sim)
    rt, st = json_type(real), json_type(sim)
    if not excused and rt == st == "dict":
        return [d for key in sorted(set(real) & set(sim))
                for d in _differences(real[key], sim[key], _join(path, key), may_differ)]
    if not excused and rt == st == "list" and len(real) == len(sim):
        return [d for index, (want, got) in enumerate(zip(real, sim, strict=True))
                for d in _differences(want, got, f"{path}[{index}]", may_differ)]
    return [] if _same(real, sim) else [(path, real, sim, excused)]


def compare_values(where: str, real: Any, sim: Any, path: str = "",
                   may_differ: Mapping[str, str] | None = None) -> list[str]:
    """Every value of `sim` that differs from `real`, recursively, except at the paths `may_differ` lists (each
    with its reason). Fields one side lacks and type changes are compare()'s to report; lists compare their
    lengths and then pairwise."""
    return [f"{where} {at or '<root>'}: real {_short(want)}, simulator {_short(got)}"
            for at, want, got, excused in _differences(real, sim, path, may_differ or {}) if not excused]


def excused_differences(where: str, real: Any, sim: Any, path: str = "",
                        may_differ: Mapping[str, str] | None = None) -> list[str]:
    """The differences compare_values lets pass because `may_differ` lists their path: for the summary."""
    return [f"{where} {at}: real {_short(want)}, simulator {_short(got)}"
            for at, want, got, excused in _differences(real, sim, path, may_differ or {}) if excused]


def compare_resolved(where: str, real: dict, sim: dict, fields: Iterable[str], given: Iterable[str] = (),
                     may_differ: Mapping[str, str] | None = None) -> list[str]:
    """The simulator's resolved server args against the real engine's, field by field, for every field in `fields`
    (given on the argv or not: an ungiven one is the resolved default), except those `may_differ` lists. A field
    one side lacks fails here too."""
    given = set(given)
    problems = []
    for field in sorted(fields):
        how = "given on the argv" if field in given else "not given on the argv"
        if (field in real) != (field in sim):
            side = "the simulator" if field in real else "the real engine"
            problems.append(f"{where} {field} ({how}): {side} does not report it")
        elif field in real:
            problems += [f"{line} ({how})" for line in compare_values(where, real[field], sim[field], field, may_differ)]
    return problems


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
            for index, event in enumerate(real_kinds[name][1:], start=1):  # and every real event of the kind too
                problems += compare(f"{where} [real {name} event {index}]", event, events[0])
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


# -- what the CPU engine cannot show ----------------------------------------------------------------------

CUDA_GRAPHS = ("CUDA graphs: the lane's engine runs --device cpu --disable-cuda-graph "
               "(sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py captures on CUDA only)")
# What the simulator can emit and the real CPU engine cannot, so this lane never proves it: key -> why. Keys are
# the fixture's `<section>.<key>`, a metric label value `metrics.<key>{<label>=<value>}` (tests/fixtures/gpu/
# records of a real CUDA engine can hold them; see simulator_only).
UNPROVEN_ON_CPU: dict[str, str] = {
    **{f"log_formats.{key}": CUDA_GRAPHS for key in (
        "capture_begin", "capture_end", "capture_draft_decode_begin", "capture_draft_decode_end",
        "capture_draft_extend_begin", "capture_draft_extend_end", "capture_failed")},
    "metrics.cuda_graph_passes{mode=decode_cuda_graph}": CUDA_GRAPHS,
    "metrics.cuda_graph_passes{mode=prefill_cuda_graph}": CUDA_GRAPHS,
    "log_formats.humming_gemm": ("Humming MoE kernels (sglang/srt/layers/moe/moe_runner/humming.py) are CUDA "
                                 "kernels; the CPU engine cannot run --moe-runner-backend humming"),
    "fork_only.fp8_lm_head_log": ("the FP8 LM head is the inclusionAI fork's (its bailing_moe_v3.py patch) on CUDA; "
                                  "the lane's engine is stock SGLang on CPU"),
}


# -- metrics --------------------------------------------------------------------------------------------

# Labels whose value names this instance rather than a kind of sample: left out of the label-value comparison
# (their label NAMES are still compared). sglang/srt/observability/metrics_collector.py builds them from the
# process: the scheduler collector's `labels` and tokenizer_metric_labels().
INSTANCE_LABELS: dict[str, str] = {
    "model_name": "the served model name (--served-model-name, else the model path): a name, not an enumeration",
    "tp_rank": "the tensor-parallel rank of the scheduler process that exports the series: one series per process",
    "pp_rank": "the pipeline-parallel rank of the exporting scheduler process",
    "moe_ep_rank": "the MoE expert-parallel rank of the exporting scheduler process",
    "dp_rank": "the data-parallel rank of the exporting scheduler process (with --dp-size > 1)",
}
# Kept: `engine_type` enumerates the disaggregation mode (unified/prefill/decode/dynamic; sglang/srt/disaggregation/
# utils.py DisaggregationMode.to_engine_type), `le` SGLang's fixed histogram bounds, `mode`/`phase`/`is_streaming`
# what a sample counts.

# Label values the real engine exports and the simulator cannot: `metrics.<key>{<label>=<value>}` -> why.
REAL_ONLY_LABEL_VALUES: dict[str, str] = {
    "metrics.realtime_tokens{mode=prefill_cache}": (
        "prefix-cache hits: the real radix cache (sglang/srt/mem_cache/radix_cache.py) hits on a repeated prompt "
        "prefix, and increment_realtime_tokens (metrics_collector.py) adds a prefill_cache child only for a hit; "
        "the simulator models no prefix cache (as meta_info.cached_tokens_details in UNIONS)"),
}

_METRIC_KEYS = {entry["text"]: key for key, entry in C.fixture()["metrics"].items()}


def metric_key(family: str) -> str:
    """`metrics.<fixture key>` of a family the fixture names, else `metrics.<family>`."""
    return f"metrics.{_METRIC_KEYS.get(family, family)}"


@dataclass(frozen=True)
class Exposition:
    """A Prometheus text exposition: `# TYPE` per family, and the label sets of each sample name's series."""

    types: dict[str, str]
    label_names: dict[str, set[frozenset[str]]]
    series: dict[str, list[dict[str, str]]]

    @classmethod
    def parse(cls, text: str) -> Exposition:
        types = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[:2] == ["#", "TYPE"]:
                types[parts[2]] = parts[3]
        label_names: dict[str, set[frozenset[str]]] = {}
        series: dict[str, list[dict[str, str]]] = {}
        for name, labels, _value in metrics.parse(text):  # the gate's own parser
            label_names.setdefault(name, set()).add(frozenset(labels))
            series.setdefault(name, []).append(labels)
        return cls(types, label_names, series)

    def sample_names(self, family: str) -> list[str]:
        if self.types.get(family) == "histogram":
            return [f"{family}_bucket", f"{family}_sum", f"{family}_count"]
        return [family]

    def label_values(self, sample: str) -> Counter[str]:
        """`{label=value,...}` over the enumerating labels (INSTANCE_LABELS left out) -> how many series have it."""
        return Counter("{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in INSTANCE_LABELS) + "}"
                       for labels in self.series.get(sample, []))


def _pairs(combination: str) -> list[str]:
    return [pair for pair in combination.strip("{}").split(",") if pair]


def _new_label_values(family: str, combination: str, other: Counter[str]) -> set[str]:
    """The `metrics.<key>{<label>=<value>}` of each label value in `combination` that no series of the other
    side's has (REAL_ONLY_LABEL_VALUES and UNPROVEN_ON_CPU name single label values)."""
    seen = {pair for theirs in other for pair in _pairs(theirs)}
    return {f"{metric_key(family)}{{{pair}}}" for pair in _pairs(combination) if pair not in seen}


def _accounted(family: str, combination: str, other: Counter[str], allowed: Mapping[str, str]) -> bool:
    """Whether a combination one side alone has is explained: it carries label values the other side never has,
    and `allowed` lists each of them (a new combination of values both sides use is never explained)."""
    new = _new_label_values(family, combination, other)
    return bool(new) and new <= set(allowed)


def metric_scope(real: Exposition, sim: Exposition, families: Iterable[str]) -> list[str]:
    """The families compared: the ones the gate reads (`families`) and every family either side exports that the
    simulator models (one it exports); the real engine's others are listed by real_only_families."""
    wanted = list(families)
    return wanted + sorted(set(sim.types) - set(wanted))


def real_only_families(real: Exposition, sim: Exposition, families: Iterable[str]) -> list[str]:
    """Families only the real engine exports, outside what the gate reads: the simulator does not model them."""
    return sorted(set(real.types) - set(metric_scope(real, sim, families)))


def compare_metrics(where: str, real: Exposition, sim: Exposition, families: Iterable[str]) -> list[str]:
    """For each family in metric_scope: exported by both or by neither; the same `# TYPE`; per sample name, the
    same sets of label names, and the same label-value combinations of the enumerating labels, both ways (a
    combination one side lacks fails, with its series count; REAL_ONLY_LABEL_VALUES and UNPROVEN_ON_CPU name the
    values one side alone may have)."""
    problems = []
    for family in metric_scope(real, sim, families):
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
                continue
            real_values, sim_values = real.label_values(sample), sim.label_values(sample)
            for combination in sorted(set(real_values) - set(sim_values)):
                if not _accounted(family, combination, sim_values, REAL_ONLY_LABEL_VALUES):
                    problems.append(f"{where} {sample}{combination}: real exports it ({real_values[combination]} "
                                    "series), the simulator none")
            for combination in sorted(set(sim_values) - set(real_values)):
                if not _accounted(family, combination, real_values, UNPROVEN_ON_CPU):
                    problems.append(f"{where} {sample}{combination}: the simulator exports it ({sim_values[combination]}"
                                    " series), the real engine none")
    return problems


def _label_sets(sets: set[frozenset[str]]) -> list[list[str]]:
    return sorted(sorted(s) for s in sets)


# -- logs -----------------------------------------------------------------------------------------------

# Every log format the fixture names (its `log_formats`, and the fork's log lines): `<section>.<key>` -> the text.
LOG_FORMATS: dict[str, str] = {
    **{f"log_formats.{key}": entry["text"] for key, entry in C.fixture()["log_formats"].items()},
    **{f"fork_only.{key}": entry["text"] for key, entry in C.fixture()["fork_only"].items() if entry["kind"] == "log"},
}


def _log_pattern(key: str) -> tuple[re.Pattern[str], str]:
    """(a regex matching every rendering of the format, its longest literal part). The literal is looked for first:
    a pattern of several `.*?` holes searched through a long message (server_args=...) backtracks for minutes."""
    section, _, name = key.partition(".")
    parts = list(string.Formatter().parse(LOG_FORMATS[key]))
    pattern = C.log_pattern(name) if section == "log_formats" else re.compile(re.escape(LOG_FORMATS[key]))
    return pattern, max((literal for literal, *_ in parts), key=len, default="")


def log_counts(log: logs.EngineLog) -> dict[str, int]:
    """`<section>.<key>` -> the number of log records holding a rendering of that format (a record format from its
    message start, one SGLang appends to a record (decode_accept, ...) inside it), read by the gate's log reader."""
    messages = log.messages()
    counts = {}
    for key in LOG_FORMATS:
        pattern, literal = _log_pattern(key)
        counts[key] = sum(1 for m in messages if literal in m and pattern.search(m))
    return counts


# Log formats whose presence follows from the checkpoint's layers: the simulator's Ling-3.0-flash is a hybrid model
# (KDA layers with a recurrent-state pool, MLA layers with a KV pool), the CPU launches' tiny llama and BailingMoeV2
# are not. Compared both ways on a launch of Ling's own class (HYBRID_CLASSES), where the real engine prints them too.
HYBRID_CLASSES = frozenset({"BailingMoeV3ForCausalLM"})
BY_LAYERS: dict[str, str] = {
    "log_formats.kv_cache_allocated": "the MLA pool's line, one KV size (mem_cache/memory_pool.py); an MHA pool "
                                      "prints K and V sizes",
    "log_formats.mamba_cache_allocated": "the recurrent-state pool of a hybrid model's linear-attention layers "
                                         "(mem_cache/memory_pool.py)",
    "log_formats.decode_full_token_part": "a hybrid model's decode usage (scheduler_components/pool_stats_observer.py "
                                          "get_decode_usage_msg_parts)",
    "log_formats.decode_token_part": "the decode usage of a model without hybrid pools (the same function)",
}


def compare_logs(real: logs.EngineLog, sim: logs.EngineLog, *, hybrid: bool = True) -> list[str]:
    """Every fixture log format either side printed, the other printed too (counts may differ: a count table is
    log_count_lines'); a format only the simulator printed passes only if UNPROVEN_ON_CPU lists it. `hybrid`: the
    real launch is of a hybrid class, as the simulator's Ling is; otherwise BY_LAYERS' formats are not compared."""
    real_counts, sim_counts = log_counts(real), log_counts(sim)
    problems = []
    for key in LOG_FORMATS if hybrid else (key for key in LOG_FORMATS if key not in BY_LAYERS):
        if real_counts[key] and not sim_counts[key]:
            problems.append(f"engine log {key}: real printed it {real_counts[key]}x (e.g. "
                            f"'{_example(real, key)[:160]}'), the simulator never")
        elif sim_counts[key] and not real_counts[key] and key not in UNPROVEN_ON_CPU:
            problems.append(f"engine log {key}: the simulator printed it {sim_counts[key]}x (e.g. "
                            f"'{_example(sim, key)[:160]}'), the real engine never")
    return problems


def _example(log: logs.EngineLog, key: str) -> str:
    pattern, literal = _log_pattern(key)
    return next(m for m in log.messages() if literal in m and pattern.search(m))


def log_count_lines(real: logs.EngineLog, sim: logs.EngineLog) -> list[str]:
    """`<key>: real N, simulator M` for every format either side printed."""
    real_counts, sim_counts = log_counts(real), log_counts(sim)
    return [f"{key}: real {real_counts[key]}, simulator {sim_counts[key]}" for key in LOG_FORMATS
            if real_counts[key] or sim_counts[key]]


# -- simulator only -------------------------------------------------------------------------------------


def emitted_keys(side: Side) -> set[str]:
    """Every `<section>.<key>` log format the side printed and every `metrics.<key>{<label>=<value>}` label value
    it exported (INSTANCE_LABELS left out): what simulator_only's keys are looked up in (a real CUDA engine's
    records, built into a Side, answer the same question)."""
    found = {key for key, count in log_counts(side.log).items() if count}
    for family in side.metrics.types:
        for sample in side.metrics.sample_names(family):
            found |= {f"{metric_key(family)}{{{pair}}}" for combination in side.metrics.label_values(sample)
                      for pair in _pairs(combination)}
    return found


def simulator_only(real_side: Side, sim_side: Side) -> list[str]:
    """The UNPROVEN_ON_CPU keys the simulator emitted in this launch and the real engine did not: what this lane
    lets pass unproven (a GPU lane can hold each to a real CUDA engine's records: `key in emitted_keys(gpu_side)`)."""
    return sorted((emitted_keys(sim_side) - emitted_keys(real_side)) & set(UNPROVEN_ON_CPU))


def real_only(real_side: Side, sim_side: Side) -> list[str]:
    """The REAL_ONLY_LABEL_VALUES keys the real engine exported in this launch and the simulator did not."""
    return sorted((emitted_keys(real_side) - emitted_keys(sim_side)) & set(REAL_ONLY_LABEL_VALUES))


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
