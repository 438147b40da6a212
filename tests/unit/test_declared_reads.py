"""Every check's READS (beside its CHECKS) is proven on the recorded captures in tests/fixtures/captures.

For each SGLang fact a check can read, a fresh child process changes it and re-judges every capture
(capture.rejudge, with expectations rebuilt from the capture's profile where it still loads):

- a conformance-fixture entry `section.key`: the fixture the gate imports says "SGMUT" + its text (set before the
  checks are imported: their module constants are built from it); a log format is also tried with one rendering of
  it appended to each capture's log, so that a check that counts an absent line is seen to read it;
- a probe report field `probe.<field>`: the field is removed from the recorded `/server_info` engagement report.

The checks whose (passed, observed, expected) differ from the unchanged run are the checks that read the fact; they
must be exactly its declared readers among the checks the captures exercise. A fact whose readers no capture can
show (re-check-only checks, a string the gate only sends) is named in UNEXERCISED with why, and that list has no
stale entry. `python -m tests.unit.test_declared_reads FACT...` prints what moves (JSON), for a new declaration.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import string
import subprocess
import sys
from pathlib import Path

import pytest

from sparkgate.sglang import conformance  # builds nothing from the fixture at import

REPO = Path(__file__).resolve().parents[2]
CAPTURES = REPO / "tests" / "fixtures" / "captures"
MUTATION = "SGMUT"
BASELINE = "-"

# Facts a check declares but no recorded capture can show moving, each with why. Each must still move nothing (a string
# the gate sends breaks the replay instead): one that moves a check belongs to the proof, not here.
_RECHECK = "read only by re-check-only checks (the sentinel's); no capture records a re-check round"
UNEXERCISED: dict[str, str] = {
    **{fact: _RECHECK for fact in (
        "metrics.generation_tokens", "metrics.spec_verify_calls", "metrics.num_queue_reqs", "metrics.num_running_reqs",
        "metrics.realtime_tokens", "strings.realtime_mode_decode", "log_formats.decode_batch",
        "log_formats.decode_accept", "log_formats.decode_token_part", "log_formats.decode_full_token_part")},
    # The gate sends it (answers.RAW_ANSWER): a changed key is another request, which a replay refuses.
    "strings.chat_enable_thinking": "sent, not read back: the replay refuses the changed request",
    "strings.think_start": "no capture's answers hold a thinking block",
    "strings.think_end": "no capture's answers hold a thinking block",
    "log_formats.capture_failed": "engine.health reads it from a refused start's log (evidence/startup.py); no capture "
                                  "holds a refused start",
    "strings.gemm_indexed": "part of the expected line only when the log cannot be read; every capture has its log",
    "classes.dspark_draft": "the shipped DSpark profile names the class itself (a rule refuses any other)",
    # Spelled for the launch by sparkgate/sglang/flags.py (the variables the gate sets); a replay launches nothing.
    "env.plugins": "engine.probe_report has a report only when SGLang loads the probe through this variable",
    "fork_only.fp8_lm_head_env": "fp8_lm_head.env_declared looks for flags.FP8_LM_HEAD_ENV, the variable the gate sets",
    # Absent from a report, these read as "none": removing them moves nothing; no capture holds a probe error.
    "probe.errors": "no capture's probe report holds an error",
    "probe.hooks_attached": "a report without it is not judged on it; every capture's hooks attached",
}


# What the real lane's captures expect of the tiny model instead of the profile's (tests/real/gate.py and the identity
# its verdicts pass): kept from the recording, so that a rebuilt real capture still replays.
LANE_IDENTITY = ("model_path", "served_model_name", "sglang_version", "architecture")


# --- the worker: runs in a fresh interpreter that has imported nothing of the checks yet ----------------------------


def _rendering(fmt: str) -> str | None:
    holes = {field for _, field, _, _ in string.Formatter().parse(fmt) if field}
    for value in ("1", 1):
        try:
            return fmt.format(**{h: value for h in holes})
        except (ValueError, TypeError, KeyError, IndexError):
            continue
    return None


def _judge(captured: list, mutate: str, lines: list[str]) -> list[dict]:
    """In a child: change `mutate` (a fact, or BASELINE), import the checks, re-judge every capture as recorded, then
    once more per line of `lines` appended to each capture's log: [as recorded, *with each line]."""
    if mutate != BASELINE and not mutate.startswith("probe."):
        section, key = mutate.split(".", 1)
        changed = copy.deepcopy(conformance.fixture())
        changed[section][key]["text"] = MUTATION + changed[section][key]["text"]
        conformance.fixture = lambda: changed  # the accessors call fixture() through the module global
    from sparkgate.bundle import expectations
    from sparkgate.profile import loading

    profiles: dict = {}
    recordings = []
    for name, one in captured:
        recording = one.recording
        try:
            if one.manifest.profile not in profiles:
                profiles[one.manifest.profile] = loading.load(one.manifest.profile)
            rebuilt = expectations.build(profiles[one.manifest.profile], recording.expectations["target"],
                                         recording.expectations["time_scale"])
            if one.manifest.written_by == "lane":  # a tiny real checkpoint: its identity, as tests/real/gate.py sets it
                recorded = recording.expectations
                rebuilt["engine"].update({k: recorded["engine"][k] for k in LANE_IDENTITY if k in recorded["engine"]})
                drafter = (recorded["optimizations"].get("dspark") or {}).get("draft_model_path")
                if drafter is not None:
                    rebuilt["optimizations"]["dspark"]["draft_model_path"] = drafter
            recording = recording.model_copy(update={"expectations": rebuilt})
        except Exception:  # a profile this checkout no longer ships (or refuses): its recorded expectations stand
            pass
        if mutate.startswith("probe."):
            recording = recording.model_copy(update={"exchanges": [_without_field(e, mutate[6:])
                                                                   for e in recording.exchanges]})
        recordings.append((name, one, recording))
    # A line changes only the log, and what a replay gathers does not depend on the log (gather keeps it, the checks
    # read it): with many lines, each replay gathers once, and each line re-runs the checks on that evidence with the
    # line in its log. The first and the last line are judged by whole replays too, which must agree, else this
    # shortcut would be wrong (the last: after every other line's checks ran on the same evidence). With two lines or
    # fewer the shortcut would save no whole replay: each line is replayed whole.
    shortcut = len(lines) > 2
    evidence: dict = {}
    results = [_verdicts(recordings, None, keep=evidence if shortcut else None)]
    for at, line in enumerate(lines):
        whole = _verdicts(recordings, line) if at in (0, len(lines) - 1) or not shortcut else None
        if shortcut:
            quick = _verdicts(recordings, line, evidence=evidence)
            assert whole is None or quick == whole, "a line in the log changed what a replay gathers"
            whole = quick
        results.append(whole)
    return results


def _verdicts(recordings: list, line: str | None, *, keep: dict | None = None, evidence: dict | None = None) -> dict:
    """capture -> {check: its (passed, observed, expected)}, None where the replay refuses. `keep`: filled with each
    replay's evidence; `evidence`: such evidence, whose checks run again (a capture without any is replayed whole)."""
    from sparkgate.evidence import capture
    from sparkgate.evidence import verify as verify_mod
    from sparkgate.evidence.recording import ReplayMismatch

    out: dict = {}
    gathered: list = []
    real_gather = verify_mod.gather
    if keep is not None:
        verify_mod.gather = lambda *a, **k: gathered.append(real_gather(*a, **k)) or gathered[-1]
    try:
        for name, one, recording in recordings:
            if line is not None:
                recording = recording.model_copy(update={"log_text": (recording.log_text or "")
                                                         + f"\n[2025-01-01 00:00:00] {line}\n"})
            if evidence is not None and name in evidence:
                checks = verify_mod.run_checks(dataclasses.replace(evidence[name], log=recording.log()))
                out[name] = _outcomes([c.as_dict() for c in checks])
                continue
            gathered.clear()
            try:
                verdict = capture.rejudge(one.model_copy(update={"recording": recording}))
            except ReplayMismatch:
                out[name] = None
                continue
            out[name] = _outcomes(verdict.as_dict()["checks"])
            if keep is not None and len(gathered) == 1:
                keep[name] = gathered[0]
    finally:
        verify_mod.gather = real_gather
    return out


def _outcomes(checks: list[dict]) -> dict[str, str]:
    return {c["name"]: json.dumps([c["passed"], c["observed"], c["expected"]], sort_keys=True, default=str)
            for c in checks}


def _without_field(exchange, field: str):
    if exchange.path != "/server_info" or not exchange.text:
        return exchange
    info = json.loads(exchange.text)
    for state in info.get("internal_states") or ():
        report = state.get("engagement") if isinstance(state, dict) else None
        if isinstance(report, dict):
            report.pop(field, None)
    return exchange.model_copy(update={"text": json.dumps(info)})


def _in_child(captured: list, mutate: str, lines: list[str]) -> list[dict]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            data = json.dumps(_judge(captured, mutate, lines)).encode()
        except BaseException as exc:  # noqa: BLE001 - any failure goes back to the parent as data
            data = json.dumps({"__error__": f"{type(exc).__name__}: {exc}"}).encode()
        with os.fdopen(write, "wb") as pipe:
            pipe.write(data)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    result = json.loads(data)
    if isinstance(result, dict) and "__error__" in result:
        raise RuntimeError(f"{mutate}: {result['__error__']}")
    return result


def _moved(before: dict, after: dict) -> tuple[set[str], bool]:
    moved, mismatch = set(), False
    for name, checks in before.items():
        now = after.get(name)
        if now is None or checks is None:
            mismatch |= now is None and checks is not None
            continue
        moved |= {c for c in checks.keys() | now.keys() if checks.get(c) != now.get(c)}
    return moved, mismatch


class _DecodedOnce:
    """The json module for evidence/client.py, with every recorded answer decoded once here, before the children fork
    (a third of a child's replay). Each child takes a decoded answer at most once and decodes a second read afresh,
    so no two reads share an object, as with json.loads itself."""

    def __init__(self, texts) -> None:
        self._decoded: dict[str, object] = {}
        for text in texts:
            try:
                self._decoded[text] = json.loads(text)
            except (ValueError, RecursionError):  # left to json.loads in the child, as client.py reads it
                continue

    def __getattr__(self, name: str):
        return getattr(json, name)

    def loads(self, text, *args, **kwargs):
        decoded = self._decoded.pop(text, None) if isinstance(text, str) and not (args or kwargs) else None
        return decoded if decoded is not None else json.loads(text, *args, **kwargs)


def worker(facts: list[str]) -> dict:
    """{fact: {"moved": [...], "mismatch": bool}, "__exercised__": [...]}, every fact judged in its own child."""
    from sparkgate.evidence import capture, client  # read no fixture at import

    captured = [(p.name, capture.read(p)) for p in sorted(CAPTURES.glob("*.capture.tar.gz"))]
    client.json = _DecodedOnce(e.text for _, one in captured for e in one.recording.exchanges if e.text)
    # A log format is also judged with one rendering of it in each log: a check that counts an absent line reads it
    # too. Always, not only when the change moved nothing: one check may match the line while another counts its absence.
    lines = {fact: line for fact in facts if fact.startswith("log_formats.")
             and (line := _rendering(conformance.log_format(fact.partition(".")[2]))) is not None}
    base, *injected = _in_child(captured, BASELINE, list(lines.values()))  # the unchanged checks, in one child
    injected_base = dict(zip(lines, injected, strict=True))
    result: dict = {"__exercised__": sorted({c for checks in base.values() if checks for c in checks})}
    for fact in facts:
        line = lines.get(fact)
        plain, *with_line = _in_child(captured, fact, [] if line is None else [line])
        moved, mismatch = _moved(base, plain)
        if with_line:
            moved |= _moved(injected_base[fact], with_line[0])[0]
        result[fact] = {"moved": sorted(moved), "mismatch": mismatch}
    return result


def judge(facts: list[str]) -> dict:
    """The worker in a fresh interpreter: the test process has imported the checks already."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "tests.unit.test_declared_reads", *facts], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def unproven(judged: dict, readers: dict[str, tuple[str, ...]]) -> list[str]:
    """Each way the judged facts disagree with the declared `readers` (fact -> checks), one line each."""
    exercised = set(judged["__exercised__"])
    problems = []
    for fact, seen in judged.items():
        if fact == "__exercised__":
            continue
        moved, declared = set(seen["moved"]), set(readers.get(fact, ()))
        if fact in UNEXERCISED:
            if moved or not declared:
                problems.append(f"UNEXERCISED[{fact!r}] is stale: it moves {sorted(moved)}, declared by "
                                f"{sorted(declared)}")
            continue
        if seen["mismatch"]:
            problems.append(f"changing {fact} breaks the replay (the gate sends it): name it in UNEXERCISED")
        for check in sorted(moved - declared):
            problems.append(f"{check} reads {fact} but does not declare it (add it to the check's READS)")
        for check in sorted((declared & exercised) - moved):
            problems.append(f"{check} declares {fact}, but changing it does not move {check} on any capture")
        if declared and not declared & exercised:
            problems.append(f"no capture exercises a reader of {fact} ({sorted(declared)}): name it in UNEXERCISED")
    return problems


def _facts_of(section: str) -> list[str]:
    from sparkgate.evidence.probe_report import REPORT_FIELDS

    if section == "probe":
        return [f"probe.{field}" for field in REPORT_FIELDS]
    return [f"{section}.{key}" for key in conformance.fixture()[section]]


# A section in parts of at most this many facts, so that xdist spreads the long ones.
PART = 24


@pytest.mark.parametrize("section,part", [(section, part) for section in (*conformance.SECTIONS, "probe")
                                          for part in range(-(-len(_facts_of(section)) // PART))])
def test_every_declared_read_moves_exactly_its_checks(section, part):
    from sparkgate.evidence import catalog

    assert unproven(judge(_facts_of(section)[part * PART:(part + 1) * PART]), catalog.readers()) == []


def test_an_undeclared_read_is_found_and_a_declared_one_that_moves_nothing_too():
    from sparkgate.evidence import catalog

    judged = judge(["log_formats.capture_begin"])
    readers = dict(catalog.readers())
    assert unproven(judged, readers) == []
    without = {**readers, "log_formats.capture_begin": ()}
    assert unproven(judged, without) == [
        "engine.cuda_graph_capture_log reads log_formats.capture_begin but does not declare it (add it to the "
        "check's READS)"]
    extra = {**readers, "log_formats.capture_begin": ("engine.cuda_graph_capture_log", "engine.log")}
    assert unproven(judged, extra) == [
        "engine.log declares log_formats.capture_begin, but changing it does not move engine.log on any capture"]


def test_unexercised_names_only_declared_facts():
    from sparkgate.evidence import catalog

    assert set(UNEXERCISED) <= set(catalog.readers()), set(UNEXERCISED) - set(catalog.readers())



def test_a_module_whose_reads_do_not_match_its_checks_or_name_an_unknown_fact_is_refused(monkeypatch):
    from sparkgate.evidence import catalog, stall

    monkeypatch.setattr(stall, "READS", {})
    with pytest.raises(catalog.BadReads, match=r"READS and CHECKS differ in \['engine.stalled'\]"):
        catalog.declared()
    monkeypatch.setattr(stall, "READS", {"engine.stalled": ("metrics.no_such_metric", "probe.no_such_field")})
    with pytest.raises(catalog.BadReads, match="no fixture entry or probe field"):
        catalog.declared()


def test_the_probe_declares_what_it_reads_in_the_fields_its_report_has():
    from sparkgate.evidence.probe_report import REPORT_FIELDS
    from sparkgate_probe import hooks
    from sparkgate_probe.report import EngagementReport

    assert set(EngagementReport().snapshot()) | {"errors_dropped"} == set(REPORT_FIELDS)
    assert set(hooks.HOOK_TARGETS) <= set(hooks.HOOK_READS)
    assert all(set(fields) <= set(REPORT_FIELDS) for fields in hooks.HOOK_READS.values())
    # Each name it declares is one the fixture proves against SGLang (a hook target, class or attribute).
    fixture = conformance.fixture()
    named = {e["text"] for s in ("hook_targets", "attributes", "fork_only") for e in fixture[s].values()}
    named |= {e["source"].removesuffix(".py").replace("/", ".") + "." + e["text"] for e in fixture["classes"].values()}
    assert set(hooks.HOOK_READS) <= named, set(hooks.HOOK_READS) - named


def test_every_rule_read_names_something_sglang_has():
    """RULE_READS feed sglang.diff's rule column: a typo would silently drop a rule module from it."""
    import re

    from sparkgate.optimizations import REGISTRY
    from sparkgate.profile import rules
    from sparkgate.sglang import parser

    fixture, options = conformance.fixture(), parser.option_table()
    for module in (rules, *REGISTRY.values()):
        for read in module.RULE_READS:
            section, _, key = read.partition(".")
            known = (read in options or key in fixture.get(section, {})
                     or re.fullmatch(r"[A-Z][A-Z0-9_]*\*?", read) is not None)
            assert known, f"{module.__name__}.RULE_READS: {read!r} is no SGLang option, fixture entry or variable"


def test_the_probe_these_tests_and_sglang_diff_read_is_the_checkouts():
    """sglang.diff and the test above read HOOK_READS from the installed probe: a stale install would agree with itself."""
    from sparkgate_probe import hooks

    assert Path(hooks.__file__).read_bytes() == (REPO / "probe" / "src" / "sparkgate_probe" / "hooks.py").read_bytes(), (
        "the installed probe is not this checkout's: reinstall it (`bash scripts/bootstrap`)")


if __name__ == "__main__":
    print(json.dumps(worker(sys.argv[1:])))
