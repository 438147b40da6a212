"""`invoke sglang.diff`: an installed SGLang against the facts an engine image pins (sparkgate/sglang/facts.py).

Against the pinned 0.5.23 it reports nothing lost; against a copy with one log format, one metric and one
ServerArgs field changed it names each, with the checks that read it, and exits 1. `--image` reads the facts inside
the image with no network (a stand-in `docker` on PATH records the call and runs the same reader here).

Which checks read an entry is what the checks declare (READS beside CHECKS, proven by test_declared_reads.py), the
rules (RULE_READS) and the probe (HOOK_READS): a copy with the CUDA-graph capture line, the CUDA-graph pass counter, a
hooked method and a flag's default changed names exactly the checks that read each, and every fixture entry is read
by a check, a rule or the simulator, or is named here as read by none.
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

from sparkgate.evidence import catalog
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
    # What reads the lost log format: the one MTP check that matches it, and the simulator that writes it.
    block = proc.stdout.split("log_formats.load_weight_end", 1)[1].split("LOSS", 1)[0]
    assert "affects mtp.log_draft_loaded; the simulator writes it (simulator/src/sparkgate_sim/startup.py)" in block
    assert "mtp.config_echo" not in block
    assert proc.stderr.strip().splitlines()[-1] == (
        # The three lost entries, and the removed --decode-log-interval the decode-log reads need (LAUNCH_PREREQUISITES).
        "sparkgate sglang.diff: 4 difference(s) would leave checks without their evidence (marked LOSS above); "
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
    assert "sparkgate/optimizations/humming.py" in item.readers.modules  # F.MOE_RUNNER_BACKEND
    # The flag sets the ServerArgs field humming.config_echo reads back from /server_info.
    assert item.readers.checks == ("humming.config_echo",)
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
    fixture = conformance.fixture()
    readers = facts.readers_of_entry("server_args", "speculative_num_steps", fixture)  # f"speculative_{name}"
    assert "sparkgate/optimizations/mtp.py" in readers.modules and readers.checks == ("mtp.config_echo",)
    # The f-string runs over a tuple of literals: a field outside it is not read.
    assert facts.readers_of_entry("server_args", "speculative_token_map", fixture).checks == ()
    assert not facts.readers_of_entry("server_args", "no_such_field", fixture)


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
    readers = facts.readers_of_entry("fork_only", "fp8_lm_head_log", conformance.fixture())
    assert "sparkgate/optimizations/fp8_lm_head.py" in readers.modules
    assert readers.checks == ("fp8_lm_head.log_signature",)
    # Through the calibration's result, stored in Evidence.calibration, to the check the accept length feeds.
    calibration = facts.readers_of_entry("strings", "meta_spec_verify_ct", conformance.fixture())
    assert "mtp.accept_length" in calibration.checks and "engine.health" not in calibration.checks


# --- which checks read what: the declarations (READS, RULE_READS, HOOK_READS) ---------------------------------------

# Fixture entries that no check, no profile rule and no simulator module reads, each named with why. Everything
# else in the fixture must reach a check or a rule through the code, or be written by the simulator.
READ_BY_NONE = {
    # Read by sparkgate, but by no check: the build guard proves it, or a constant nothing uses yet.
    "fork_only.draft_lm_head_module_share",  # build guard (sglang/fork.py); the probe sees the share, not the method
    "strings.meta_decode_throughput",  # request_timing.DECODE_THROUGHPUT: the gate computes the rate itself
    "log_formats.hooks_failed",  # named in engine.probe_report's hint only (where to look in the log)
    # Spelled as literals outside the fixture (sentinel/service.py, evidence/verify.py) or not read at all.
    "strings.server_info_startup_time", "strings.server_info_launch_command", "strings.server_info_status",
    "strings.server_info_max_total_num_tokens", "strings.internal_state_avg_spec_accept_length",
    "strings.internal_state_memory_usage", "strings.model_info_model_type", "strings.model_info_reasoning_parser",
    "server_args.reasoning_parser",
    # Proven for the tests (the probe's unit tests, the simulator's DSpark model), read by no product code.
    "log_formats.dspark_num_steps_override", "log_formats.dspark_topk_override", "strings.moe_backend_triton",
    "strings.plugin_entry_point_group", "classes.mxfp4_flashinfer_cutlass_moe_method",
    "classes.unquantized_fused_moe_method",
    # SGLang variables a profile may not set, refused by the SGLANG_ prefix rule rather than by name.
    "env.humming_use_f16_accum", "env.enable_health_endpoint_generation",
}


def test_every_fixture_entry_is_read_by_a_check_a_rule_or_the_simulator_or_named_as_read_by_none():
    fixture, flags = conformance.fixture(), facts.pinned("sglang-stock").flags
    declared = set(catalog.declared())
    table = {f"{s}.{k}": facts.readers_of_entry(s, k, fixture, flags)
             for s in conformance.SECTIONS for k in fixture[s]}
    for name, readers in table.items():
        assert set(readers.checks) <= declared, name  # only checks a module declares
    unread = {name for name, r in table.items() if not (r.checks or r.rules or r.simulator)}
    assert unread == READ_BY_NONE
    assert len(READ_BY_NONE) <= len(table) // 8  # a short list, every entry named above
    # 78 of 187 entries reach 47 of the 52 declared checks (the admin key, host memory and the sentinel's restart and
    # weight checks read no SGLang string through the fixture).
    with_checks = {name for name, r in table.items() if r.checks}
    assert len(with_checks) >= 70 and len({c for r in table.values() for c in r.checks}) >= 40


def test_an_entry_names_the_checks_that_read_it_not_every_check_of_its_module():
    fixture = conformance.fixture()
    capture = facts.readers_of_entry("log_formats", "capture_begin", fixture)
    assert capture.checks == ("engine.cuda_graph_capture_log",)  # engine_checks.py declares 13 more
    assert facts.readers_of_entry("metrics", "cuda_graph_passes", fixture).checks == ("engine.cuda_graph_passes",)
    # A helper in another module (evidence/activity.py) used by several checks: exactly those checks, DSpark's
    # re-emitted names of MTP's re-checks included.
    running = facts.readers_of_entry("metrics", "num_running_reqs", fixture).checks
    assert set(running) == {"engine.stalled", "sentinel.answer_probe",
                            *[f"sentinel.{p}accept_{w}" for p in ("", "dspark_") for w in ("counters", "probe", "window")]}
    # A profile setting's default (DSpark's drafter class) reaches the checks through expectations.json.
    drafter = facts.readers_of_entry("classes", "dspark_draft", fixture)
    assert drafter.checks == ("dspark.draft_loaded", "dspark.log_runner_initialized")
    assert drafter.rules == ("sparkgate/optimizations/dspark.py",)


def test_a_probe_hook_target_names_the_checks_that_read_the_report_fields_its_hook_writes():
    fixture = conformance.fixture()
    report_readers = {c for f in ("draft", "target", "lm_head_sharing", "hooks_called", "errors", "hooks_attached")
                      for c in catalog.readers().get(f"probe.{f}", ())}
    load_model = facts.readers_of_entry("hook_targets", "load_model", fixture)
    # after_load_model records the target's and the draft's model, not the LM-head share.
    assert set(load_model.checks) <= report_readers and "mtp.lm_head_module_shared" not in load_model.checks
    assert {"engine.probe_report", "mtp.draft_loaded", "fp8_lm_head.target_head"} <= set(load_model.checks)
    assert load_model.probe == ("probe/src/sparkgate_probe/hooks.py",)
    init_lm_head = facts.readers_of_entry("hook_targets", "init_lm_head", fixture)
    assert "mtp.lm_head_module_shared" in init_lm_head.checks
    # An SGLang attribute a hook's helper reads feeds what that hook writes (the role records).
    role = facts.readers_of_entry("attributes", "is_draft_worker", fixture).checks
    assert set(role) <= set(load_model.checks) and {"mtp.draft_loaded", "fp8_lm_head.target_head"} <= set(role)


def test_a_changed_default_of_a_read_flag_is_reported_with_old_and_new_and_the_checks():
    read = {"dest": "max_running_requests", "option_strings": ["--max-running-requests"], "kind": "store",
            "nargs": None, "type": "int", "choices": None, "default": None}
    unread = {**read, "dest": "no_reader", "option_strings": ["--no-reader"], "default": 1}
    pinned = _facts(flags={"--max-running-requests": read, "--no-reader": unread})
    result = facts.diff(pinned, _facts(flags={"--max-running-requests": {**read, "default": 48},
                                              "--no-reader": {**unread, "default": 2}}))
    assert result.of("flag") == []  # a default is not a change of the flag itself
    (item,) = result.of("default")
    assert (item.name, item.detail, item.loses_evidence) == ("--max-running-requests", "None -> 48", False)
    assert item.readers.checks == ("engine.batch1",)
    older = facts.diff(pinned, _facts(flags={"--max-running-requests": {k: v for k, v in read.items() if k != "default"},
                                             "--no-reader": unread}))
    assert [(i.change, i.loses_evidence) for i in older.of("default")] == [("unproven", False)]


def test_a_copy_with_attributed_changes_names_each_changes_checks(tmp_path):
    root = sglang_copies.make_copy(tmp_path, alterations=sglang_copies.READER_ALTERATIONS)
    pinned = facts.pinned("sglang-stock")
    result = facts.diff(pinned, facts.observe(root, fork=False, fixture=pinned.fixture),
                        used_flags=facts.profile_flags())
    lost = {i.name: i for i in result.losses}
    assert set(lost) == sglang_copies.READER_ENTRIES
    report = facts.render(result)
    capture = report.split("log_formats.capture_begin", 1)[1].splitlines()[1]
    assert capture == ("           affects engine.cuda_graph_capture_log; "
                       "the simulator writes it (simulator/src/sparkgate_sim/startup.py)")
    metric = report.split("metrics.cuda_graph_passes", 1)[1].splitlines()[1]
    assert metric.startswith("           affects engine.cuda_graph_passes;")
    hook = lost["hook_targets.init_lm_head"].readers
    assert {"engine.probe_report", "mtp.lm_head_module_shared"} <= set(hook.checks)
    assert not {"engine.health", "engine.speed_vs_baseline", "engine.cuda_graph_capture_log"} & set(hook.checks)
    assert "       changed  --max-running-requests: None -> 48\n           affects engine.batch1; profile rules in " \
           "sparkgate/profile/rules.py" in report


def test_a_launch_setting_every_metrics_and_decode_log_read_needs_names_those_checks():
    """--enable-metrics, --decode-log-interval, SGLANG_EXPOSE_OWN_ENV_VARS: no check reads them back, but a renamed
    one leaves whole families of reads with nothing (facts.LAUNCH_PREREQUISITES)."""
    fixture = conformance.fixture()
    metrics = facts.readers_of_entry("server_args", "enable_metrics", fixture).checks
    assert {"engine.cuda_graph_passes", "engine.stalled", "sentinel.accept_probe"} <= set(metrics)
    assert "sentinel.accept_by_context" in facts.readers_of_entry("server_args", "decode_log_interval", fixture).checks
    assert "fp8_lm_head.env_declared" in facts.readers_of_entry("env", "expose_own_env_vars", fixture).checks
