"""`invoke sglang.diff`: an installed SGLang against the facts an engine image pins (sparkgate/sglang/facts.py).

Against the pinned 0.5.23 it reports nothing lost; against a copy with one log format, one metric and one
ServerArgs field changed it names each, with what reads it, and exits 1. `--image` reads the facts inside the
image with no network (a stand-in `docker` on PATH records the call and runs the same reader here).
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sparkgate.images import load_lock
from sparkgate.sglang import conformance, facts, proof
from tests.unit import sglang_copies

pytestmark = pytest.mark.sglang
REPO = Path(__file__).resolve().parents[2]
TAG = load_lock().engine_images["spark-fork"].tag


def _invoke(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "invoke", "sglang.diff", *args], cwd=REPO, capture_output=True,
                          text=True, env=env or dict(os.environ), check=False, timeout=600)


def test_the_pinned_release_loses_nothing():
    proc = _invoke("--site-packages", str(sglang_copies.installed_root()))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "flags: 0 difference(s)" in proc.stdout and "environment variables: 0 difference(s)" in proc.stdout
    count = sum(len(conformance.fixture()[s]) for s in conformance.SECTIONS)
    assert f"evidence fixture: {count} found" in proc.stdout
    assert proc.stdout.rstrip().endswith("no check loses its evidence")


def test_an_altered_copy_is_reported_item_by_item(tmp_path):
    root = sglang_copies.make_copy(tmp_path, altered=True)
    proc = _invoke("--site-packages", str(root))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lost = set(re.findall(r"LOSS missing +(\S+) ", proc.stdout))
    assert lost == sglang_copies.ALTERED_ENTRIES, proc.stdout
    assert re.search(r"added +--decode-log-every", proc.stdout) and re.search(r"removed +--decode-log-interval",
                                                                               proc.stdout)
    # What reads the lost log format: the MTP checks and the simulator that writes it.
    block = proc.stdout.split("log_formats.load_weight_end", 1)[1].split("LOSS", 1)[0]
    assert "sparkgate/optimizations/mtp.py (checks mtp.config_echo" in block and "sparkgate_sim/startup.py" in block
    assert proc.stderr.strip().splitlines()[-1] == (
        "sparkgate sglang.diff: 3 difference(s) would leave checks without their evidence (marked LOSS above); "
        "see docs/upgrade.md")


def test_image_mode_runs_the_reader_inside_the_image_without_network(tmp_path):
    calls = tmp_path / "calls.json"
    fake = tmp_path / "bin" / "docker"
    fake.parent.mkdir()
    # Stands in for `docker run ... TAG python -m sparkgate.sglang.facts observe`: records argv, runs the reader.
    fake.write_text(f"""#!{sys.executable}
import json, subprocess, sys
json.dump(sys.argv[1:], open({str(calls)!r}, "w"))
tail = sys.argv[sys.argv.index({TAG!r}) + 1:]  # docker run ... --entrypoint python TAG <args>
sys.exit(subprocess.call([{sys.executable!r}, *tail]))
""")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    proc = _invoke("--image", TAG, env=env)
    argv = json.loads(calls.read_text())
    assert argv[:8] == ["run", "--rm", "-i", "--pull", "never", "--network", "none", "--entrypoint"]
    assert argv[argv.index(TAG) - 1] == "python" and argv[-1] == "--fork"  # the fork image's facts
    # Stock 0.5.23 read as the fork image: exactly the fork-only entries are lost.
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lost = set(re.findall(r"LOSS missing +(\S+) ", proc.stdout))
    assert lost == {"fork_only.draft_lm_head_module_share", "fork_only.fp8_lm_head_env", "fork_only.fp8_lm_head_log"}
    assert re.search(r"LOSS removed +SGLANG_ENABLE_FP8_LM_HEAD", proc.stdout)


def test_bad_arguments_are_one_line():
    for args in ((), ("--site-packages", "x", "--image", "y")):
        proc = _invoke(*args)
        assert proc.returncode == 1 and proc.stderr.strip() == (
            "sparkgate sglang.diff: give exactly one of --site-packages PATH or --image TAG")
    proc = _invoke("--site-packages", "/nonexistent")
    assert proc.returncode == 1 and "/nonexistent: no sglang package here" in proc.stderr
    assert "Traceback" not in proc.stderr


# --- the difference itself, on made-up facts -------------------------------------------------------------


def _facts(flags=None, env=None, findings=()) -> facts.Facts:
    return facts.Facts(fixture=conformance.fixture(), flags=flags or {}, env=env or {}, findings=tuple(findings))


FLAG = {"dest": "moe_runner_backend", "option_strings": ["--moe-runner-backend"], "kind": "store", "nargs": None,
        "type": "str", "choices": ["auto", "humming"]}


def test_a_flag_a_profile_passes_lost_or_changed_is_a_loss_an_added_one_is_not():
    pinned = _facts(flags={"--moe-runner-backend": FLAG})
    removed = facts.diff(pinned, _facts(), used_flags=frozenset({"--moe-runner-backend"}))
    (item,) = removed.of("flag")
    assert item.change == "removed" and item.loses_evidence
    assert any(r.module == "sparkgate/optimizations/humming.py" for r in item.readers)  # F.MOE_RUNNER_BACKEND
    changed = facts.diff(pinned, _facts(flags={"--moe-runner-backend": {**FLAG, "choices": ["auto"]}}))
    (item,) = changed.of("flag")
    assert item.change == "changed" and item.loses_evidence and "choices" in item.detail
    added = facts.diff(_facts(), _facts(flags={"--moe-runner-backend": FLAG}))
    assert [(i.change, i.loses_evidence) for i in added.of("flag")] == [("added", False)]


def test_env_removed_that_sparkgate_sets_is_a_loss():
    pinned = _facts(env={"SGLANG_HUMMING_COMPILER": "EnvStr", "SGLANG_NEW_THING": "EnvBool"})
    result = facts.diff(pinned, _facts(env={"SGLANG_NEW_THING": "EnvBool"}))
    (item,) = result.of("env")
    assert item.name == "SGLANG_HUMMING_COMPILER" and item.change == "removed"
    assert item.loses_evidence == bool(item.readers)


def test_f_string_keys_find_their_readers():
    readers = facts.readers_of("server_args", "speculative_num_steps")  # mtp.py reads f"speculative_{name}"
    assert "sparkgate/optimizations/mtp.py" in {r.module for r in readers}
    assert facts.readers_of("server_args", "no_such_field") == ()


def test_a_moved_entry_is_a_loss_until_the_fixture_names_its_new_file():
    moved = proof.Finding(section="metrics", key="m", text="sglang:x", source="a.py", status="moved", where="b.py")
    result = facts.diff(_facts(), _facts(findings=[moved]))
    (item,) = [i for i in result.of("fixture") if i.name == "metrics.m"]
    assert item.change == "moved" and item.loses_evidence and "found in b.py" in item.detail


def test_an_entry_the_reader_never_proved_is_a_loss():
    """An older sparkgate inside an image may not know a section: silence must not read as 'found'."""
    result = facts.diff(_facts(), _facts(findings=[]))
    unproven = {i.name for i in result.of("fixture") if i.change == "unproven"}
    expected = {f"{s}.{k}" for s in conformance.SECTIONS for k in conformance.fixture()[s]}
    assert unproven == expected and all(i.loses_evidence for i in result.of("fixture"))


def test_a_finding_with_an_unknown_status_is_refused_at_the_boundary():
    bad = {"section": "metrics", "key": "m", "text": "x", "source": "a.py", "status": "ok"}
    with pytest.raises(facts.ObserveError, match="invalid finding"):
        facts._facts(conformance.fixture(), {"flags": {}, "env": {}, "findings": [bad], "sglang_version": "x",
                                             "origin": "img"})


@pytest.mark.parametrize("tag", ["--privileged", "-it", "a b", ""])
def test_an_image_tag_that_is_not_a_reference_is_refused_before_docker_runs(tag):
    with pytest.raises(facts.ObserveError, match="not an image reference"):
        facts.observe_in_image(tag, fork=False, fixture={})


def test_the_readers_of_fork_only_entries_are_followed_through_fork_constants():
    readers = {r.module for r in facts.readers_of("fork_only", "fp8_lm_head_log", conformance.fixture())}
    assert "sparkgate/optimizations/fp8_lm_head.py" in readers
    calibration = facts.readers_of("strings", "meta_spec_accept_length")
    assert any("mtp.accept_length" in r.checks for r in calibration)
