"""The gate's verdict on a real SGLang engine: the product's own `verify` (sparkgate/evidence/verify.py) with a
shipped profile's expectations, pointed at the tiny checkpoint the engine serves.

Only the identity the tiny model cannot share with Ling-3.0-flash is rewritten (model path, served name, the DSpark
drafter's path); every other expectation is the profile's own, so each check judges the real engine exactly as it
would judge a Spark.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

from sparkgate.bundle import expectations as expectations_mod
from sparkgate.evidence import answers, logs
from sparkgate.evidence.recording import Recording, RecordingClient, ReplayMismatch, replay
from sparkgate.evidence.results import CheckResult, Verdict
from sparkgate.evidence.verify import verify
from sparkgate.profile import loading as profiles
from sparkgate.sglang import flags as F
from tests.real.engine import REQUEST_TIMEOUT_S, RealEngine


def expectations_for(profile: str, engine: RealEngine, **engine_fields: Any) -> dict:
    """The profile's expectations with the engine identity of `engine`'s launch (or `engine_fields`)."""
    expectations = expectations_mod.build(profiles.load(profile), "spark", 1.0)
    expectations["engine"]["model_path"] = str(engine.launch.model_path)
    expectations["engine"]["served_model_name"] = engine.launch.served_model_name or str(engine.launch.model_path)
    expectations["engine"].update(engine_fields)
    args = engine.launch.extra_args
    dspark = expectations["optimizations"].get("dspark")
    if dspark and dspark["requested"] and F.SPECULATIVE_DRAFT_MODEL_PATH in args:
        # The drafter lives where the test built it, as the checkpoint does: the profile's path is the container's.
        dspark["draft_model_path"] = args[args.index(F.SPECULATIVE_DRAFT_MODEL_PATH) + 1]
    return expectations


# Every verdict's recording, by the verdict's id (session fixtures keep the verdicts alive): the capture test
# (test_gate_verdicts.py) turns each into a capture file and replays it.
RECORDINGS: dict[int, tuple[str, Recording, list[str], dict[str, str]]] = {}
# The last live verification's recording per running server (its run directory and pid).
EVIDENCE: dict[tuple[str, int], Recording] = {}
# The ids of verdicts judged on an earlier verification's evidence: the capture test replays only the live ones.
REPLAYED: set[int] = set()


def cpu_answer_bound():
    """The gate's answers bounded as the lane bounds its own requests, not by a Spark's 30 s: a tiny CPU engine's cold
    answer (over 600 tokens with the retry's room, NEXTN verifying on CPU) shares CI's two cores with two other lanes,
    and once ran past 30 s (CI, 2026-12-07). No figure a check judges changes (they are the engine's own accounting)."""
    return mock.patch.object(answers, "REQUEST_TIMEOUT_S", REQUEST_TIMEOUT_S)


def verdict(engine: RealEngine, profile: str, *, calibrate: bool = True, live: bool = False,
            **engine_fields: Any) -> Verdict:
    """The product's verify on `engine` with `profile`'s expectations. Unless `live`, a second profile on the same
    running server is judged on the evidence the server gave the first verification (the product's replay, as
    `sparkgate verify --replay`): the verdict that profile gets when it verifies the server first. Verify is gather
    (every request) then checks (pure), so a profile that asks other requests (ReplayMismatch) is verified live. A
    live verification costs 30-40 s on CPU; `live` verifies a server that has served one already."""
    expectations = expectations_for(profile, engine, **engine_fields)
    key = (str(engine.run_dir), engine.proc.pid if engine.proc else 0)
    earlier = None if live or not engine.running else EVIDENCE.get(key)
    if earlier is not None and earlier.calibrate == calibrate:
        asked = earlier.model_copy(update={"expectations": expectations})
        try:
            result = replay(asked)
        except ReplayMismatch:
            pass
        else:
            REPLAYED.add(id(result))
            return _kept(engine, profile, asked.model_copy(update={"verdict": result.as_dict()}), result)
    log = logs.from_file(str(engine.log_path))
    client = RecordingClient(engine.url)
    with cpu_answer_bound():
        result = verify(engine.url, expectations, log, calibrate=calibrate, client=client)
    EVIDENCE[key] = Recording.of(client, expectations, log, result, calibrate=calibrate)
    return _kept(engine, profile, EVIDENCE[key], result)


def _kept(engine: RealEngine, profile: str, recording: Recording, result: Verdict) -> Verdict:
    # The launch's own env only: the engine process also inherits the test runner's, which is not the launch's.
    env = {**engine.launch.env, "SGLANG_PLUGINS": engine.env.get("SGLANG_PLUGINS", "")}
    RECORDINGS[id(result)] = (profile, recording, engine.argv[1:], env)
    return result


def by_name(result: Verdict) -> dict[str, CheckResult]:
    names = [c.name for c in result.checks]
    assert len(names) == len(set(names)), f"a check reported twice: {names}"
    return {c.name: c for c in result.checks}


def failing(result: Verdict) -> set[str]:
    return {c.name for c in result.checks if not c.passed}


def flipped(reference: Verdict, variation: Verdict) -> dict[str, tuple[bool, bool]]:
    """check -> (passed on the reference, passed on the variation), for every check whose outcome differs."""
    before, after = by_name(reference), by_name(variation)
    assert before.keys() == after.keys(), f"different checks ran: {sorted(before.keys() ^ after.keys())}"
    return {name: (before[name].passed, after[name].passed) for name in before
            if before[name].passed != after[name].passed}
