"""An engine that exits before it is ready leaves only its log (and the entrypoint's exit record): judge what they
can prove.

Once the process has exited its log is final, so every engine-log check is definitive: a line that must
never appear has appeared (a drafter whose config could not be read, a degraded mode), or a line that must
appear never will. `judge_start` adds `engine.health` for the start itself: the exit code, the startup phases it
reached and those it never reached (sglang/phases.py), and the likely cause read from the log's tail.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from dataclasses import dataclass

from sparkgate.evidence import catalog
from sparkgate.evidence.engine_checks import CAPTURE_FAILED
from sparkgate.evidence.gather import Evidence
from sparkgate.evidence.logs import EngineLog
from sparkgate.evidence.results import CheckResult, Verdict, failed
from sparkgate.evidence.stages import Stage
from sparkgate.evidence.verify import run_checks
from sparkgate.runtime import engine_run
from sparkgate.runtime.engine_run import EngineRun
from sparkgate.sglang import conformance as C
from sparkgate.sglang.phases import PHASES, phases_reached

# The likely cause is read from the log's last bytes only: bounded work on a log of any size or content.
CAUSE_WINDOW_BYTES = 256 * 1024
OOM_MARKERS = ("out of memory", "OutOfMemoryError", "CUDA_ERROR_OUT_OF_MEMORY", "Cannot allocate memory")
JIT_MARKERS = ("nvcc", "ninja", "JIT", "Compiling", "compiling", "torch.compile", "tvm_ffi")
# The last exception a traceback names in the tail (SGLang and its libraries log recovered ones too: only the last
# speaks for the death), and Python's own words when that one is an import that found nothing: the name as Python
# spells a dotted module, bounded.
LAST_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]{0,200}(?:Error|Exception|Interrupt)\b:.*$", re.M)
MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([A-Za-z_][A-Za-z0-9_.]{0,99})'")
# The package that provides a module a launch may ask for (stock SGLang 0.5.23 pins humming-kernels for `humming`).
PACKAGE_OF = {"humming": "humming-kernels"}
SIGKILL_CODE = 137
# SIGTERM and SIGINT as a shell reports them (128 + signal): what `docker stop` (`compose stop -t 10 engine` when the
# deploy's start budget runs out, `invoke down`) and Ctrl-C send. An engine never stops itself with them.
STOPPED_CODES = {143: "SIGTERM", 130: "SIGINT"}


# The engagement probe's fact lines, as SGLang's logger prints them: "ENGAGEMENT {json}" (probe/src/sparkgate_probe/
# report.py log_fact, held to its LOG_PREFIX by tests/unit/evidence/test_refused_start.py). A fact line is untrusted
# log text: bounded, parsed as JSON, kept only as a census of counts.
PROBE_FACT = "ENGAGEMENT {"
MAX_FACT_CHARS = 64 * 1024
MAX_CENSUS_KEY_CHARS = 200
ROLES = ("target", "draft")


def census_at_load(log: EngineLog) -> dict | None:
    """The probe report's MoE census as its load-time facts give it, {role: {"moe_layers": {method/runner: count}}}:
    what ran in an engine that died before /server_info could say. None when the log holds no such fact."""
    report: dict = {}
    for message in log.messages():
        if not message.startswith(PROBE_FACT) or len(message) > MAX_FACT_CHARS:
            continue
        try:
            fact = json.loads(message[len(PROBE_FACT) - 1:])
        except (ValueError, RecursionError):
            continue
        if not isinstance(fact, dict) or fact.get("event") != "load_model" or fact.get("role") not in ROLES:
            continue
        layers = fact.get("moe_layers")
        if isinstance(layers, dict) and layers and all(
                isinstance(k, str) and len(k) <= MAX_CENSUS_KEY_CHARS and type(v) is int and v >= 0
                for k, v in layers.items()):
            report[fact["role"]] = {"moe_layers": layers}
    return report or None


@dataclass(frozen=True)
class Cause:
    name: str
    hint: str


def judge_exited_engine(expectations: dict, log: EngineLog) -> list[CheckResult]:
    """The failing engine-log checks of the profile's expectations, read from the exited engine's log; and where the
    log holds the probe's census at load, the failing census checks (LOAD_CENSUS_CHECKS) on it: what ran instead."""
    from sparkgate.optimizations import REGISTRY, part

    report = census_at_load(log)
    states = {C.string_("server_info_internal_states"): [{"engagement": report}]} if report else None
    evidence = Evidence(expectations=expectations, log=log, server_info=states)
    census = {name for module in REGISTRY.values() for name in part(module, "LOAD_CENSUS_CHECKS")} if report else set()
    source = f"{log.source}: the engagement probe's census at load (the engine never served)"
    return [dataclasses.replace(c, source=source) if c.name in census else c for c in run_checks(evidence)
            if not c.passed and (catalog.stage_of(c.name) is Stage.ENGINE_LOG
                                 or (c.name in census and isinstance(c.observed, dict)))]


def likely_cause(log_text: str | None, reached: list[str], exit_code: int | None, signal: str | None = None) -> Cause:
    """What most likely stopped the start, from the log's tail, the phases reached, the exit code and the signal
    (the entrypoint's exit record names it; the container's exit code alone gives 128 + signal)."""
    tail = (log_text or "").encode("utf-8", "replace")[-CAUSE_WINDOW_BYTES:].decode("utf-8", "ignore")
    loading = "load_weight_begin" in reached and "kv_cache" not in reached
    refused = next((line for line in tail.splitlines() if line.startswith(engine_run.PREFLIGHT_REFUSED)), None)
    if refused is not None and not reached:
        return Cause("the engine's host preflight refused the start", (
            f"nothing was loaded: {refused[len(engine_run.PREFLIGHT_REFUSED) + 2:][:600]}"))
    if exit_code == engine_run.EXIT_REFUSED and not reached:
        said = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "no line")
        return Cause("the engine's entrypoint refused the start", f"SGLang never ran: {said[:600]}")
    if CAPTURE_FAILED in tail:
        return Cause("CUDA graph capture failed", (
            "SGLang's CUDA-graph capture raised (sglang#23386: graph capture of the MoE path on GB10). Fix: lower "
            "--cuda-graph-max-bs or set --disable-cuda-graph in the profile (the speed checks then say what it costs)"))
    # Before the log's guesses: a start stopped from outside was not a crash, whatever its last lines were.
    stopped = signal if signal is not None else STOPPED_CODES.get(exit_code)
    if stopped in STOPPED_CODES.values():
        return Cause("stopped from outside (the deploy's start budget or `invoke down`)", (
            f"the engine got {stopped} before it was ready: `invoke deploy` stops an engine whose start outlasts its "
            "budget (`compose stop`), and `invoke down`, `docker stop` or Ctrl-C send it too. Fix: give a cold start "
            "more time (`invoke deploy --budget SECONDS`; the phase it was in says where the time went)"))
    if any(m in tail for m in OOM_MARKERS) or (exit_code == SIGKILL_CODE and loading):
        return Cause("out of unified memory during load" if loading else "out of memory", (
            "the GB10's 128 GB are shared by CPU and GPU: another process (a second engine, a build) or a too high "
            "--mem-fraction-static leaves the weights no room, and the host can wedge without an OOM kill"
            + ("; a SIGKILL may also be `docker kill` or `docker stop` past its timeout" if exit_code == SIGKILL_CODE
               else "") + ". Fix: stop what else holds memory (`free -g`, `invoke status` shows the host's), then "
            "deploy again"))
    last = LAST_EXCEPTION.findall(tail)
    missing = MISSING_MODULE.match(last[-1]) if last else None
    if missing:
        module = missing.group(1)
        package = PACKAGE_OF.get(module.split(".")[0])
        return Cause(f"a Python module the launch needs is not installed: {module}", (
            f"SGLang imported `{module}` for what the launch asks for and the image has no such module"
            + (f" (the package {package} provides it)" if package else "") + ", so the start died there: nothing fell "
            "back. Fix: build the engine image with its pinned packages (`invoke images.spark`), or deploy a profile "
            "that does not ask for it"))
    if loading and any(m in tail for m in JIT_MARKERS):
        return Cause("JIT compile during weight load", (
            "a kernel was being compiled while the weights loaded (FlashInfer or Humming JIT on a cold cache) and "
            "the start died there. Fix: keep the JIT cache volume between deploys and give the first start its "
            "time (`invoke deploy --budget SECONDS`); read the compiler's error in the log"))
    if tail.strip() and not reached:
        return Cause("no SGLang startup line in the log", (
            "the engine logs none of SGLang 0.5.23's startup lines: a fork or another version that logs other "
            "lines, or a launcher that failed first. Fix: `invoke sglang.diff --image <engine image>`, and read "
            "the log's first lines"))
    return Cause("unknown", "read the engine log's tail (`invoke logs --profile P`) and the capture "
                            "(`invoke capture --refused`)")


def judge_start(expectations: dict, log: EngineLog, record: EngineRun | None = None,
                exit_code: int | None = None) -> list[CheckResult]:
    """A start whose engine died before it was ready: `engine.health` failed with what the start reached and what
    it never did, then the engine-log checks its final log fails. `record` (the entrypoint's exit record) wins over
    `exit_code` (the container's, when no record was left)."""
    reached = phases_reached(log.text)
    if record is not None:
        reached = sorted(set(reached) | {p for p in record.phases if p in PHASES}, key=PHASES.index)
        exit_code = record.exit_code
    never = [p for p in PHASES if p not in reached]
    cause = likely_cause(log.text, reached, exit_code, record.signal if record else None)
    observed = {"exit_code": exit_code, "signal": record.signal if record else None, "phases_reached": reached,
                "never_reached": never, "likely_cause": cause.name}
    health = failed("engine.health", observed, "an engine that reaches ready",
                    "engine exit record and log" if record else f"container exit code and {log.source}",
                    f"the engine exited (code {exit_code}) during startup after {reached[-1] if reached else 'no phase'}"
                    f", never reaching {', '.join(never) or 'ready'}; likely cause: {cause.name}: {cause.hint}")
    return [health, *judge_exited_engine(expectations, log)]


def start_verdict(expectations: dict, log: EngineLog, engine_url: str, record: EngineRun | None = None,
                  exit_code: int | None = None) -> Verdict:
    """judge_start's checks as a verdict (what a refused start's capture records and a replay gives again)."""
    return Verdict(profile=str(expectations.get("profile")), engine_url=engine_url,
                   time=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                   checks=judge_start(expectations, log, record, exit_code))
