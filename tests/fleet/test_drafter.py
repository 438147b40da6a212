"""A dspark rollout checks the DSpark drafter on every host before anything changes: the controller decides
from the validated profile which drafter a host needs (sparkgate/fleet/drafter_pin.py) and the release carries it;
the compose environment mounts the directory that was checked."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from sparkgate.fleet import drafter_pin, release
from sparkgate.paths import repo_root
from sparkgate.profile import loading as profiles

STACK = repo_root() / "ansible" / "roles" / "sparkgate_stack"


def test_dspark_on_a_spark_needs_the_profiles_pinned_drafter():
    profile = profiles.load("dspark").profile
    settings = profile.optimizations.dspark
    assert drafter_pin.pin(profile, "spark") == {
        "repo": settings.drafter_repo, "revision": settings.drafter_revision,
        "architecture": "LingDSparkModel", "block_size": 8, "context_length": profile.sglang.context_length}
    assert len(settings.drafter_revision) == 40


def test_no_drafter_without_dspark_or_on_a_simulator_host():
    assert drafter_pin.pin(profiles.load("all-three").profile, "spark") is None
    assert drafter_pin.pin(profiles.load("baseline").profile, "spark") is None
    assert drafter_pin.pin(profiles.load("dspark").profile, "sim") is None  # the simulator mounts an empty volume


def test_release_carries_the_drafter_the_host_role_asserts(tmp_path):
    spark = release.build(release.ReleaseOptions("dspark", "spark", tmp_path))
    assert spark["dspark_drafter"] == drafter_pin.pin(profiles.load("dspark").profile, "spark")
    assert release.build(release.ReleaseOptions("dspark", "sim", tmp_path))["dspark_drafter"] is None
    assert release.build(release.ReleaseOptions("all-three", "spark", tmp_path))["dspark_drafter"] is None


def test_command_line_prints_the_role_variables_and_refuses_a_bad_profile_in_one_line():
    done = subprocess.run([sys.executable, "-m", "sparkgate.fleet.drafter_pin", "--profile", "dspark"],
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {"sparkgate_dspark_drafter": drafter_pin.pin(profiles.load("dspark").profile, "spark")}
    bad = subprocess.run([sys.executable, "-m", "sparkgate.fleet.drafter_pin", "--profile", "no-such-profile"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "no-such-profile" in bad.stderr


def test_stack_role_passes_the_release_drafter_to_the_host_checks_before_touching_the_stack():
    tasks = yaml.safe_load((STACK / "tasks" / "main.yml").read_text())[0]["block"]
    names = [t["name"] for t in tasks]
    host = tasks[names.index("Assert the host can run it")]
    assert host["vars"]["sparkgate_dspark_drafter"] == "{{ sparkgate_stack_release.dspark_drafter | default(none) }}"
    assert names.index("Assert the host can run it") < names.index("Replace the running stack")


def test_drafter_dir_defaults_to_the_deploys_and_both_roles_agree():
    stack = yaml.safe_load((STACK / "defaults" / "main.yml").read_text())
    host = yaml.safe_load((STACK.parent / "spark_host" / "defaults" / "main.yml").read_text())
    assert stack["sparkgate_dspark_dir"] == host["sparkgate_dspark_dir"] == \
        "{{ ansible_facts['env']['HOME'] }}/models/Ling-3.0-flash-dspark"
    # The same directory a single-host deploy mounts by default (sparkgate/bundle/render.py).
    assert profiles.load("dspark").profile.optimizations.dspark.draft_model_path.endswith("/Ling-3.0-flash-dspark")
    assert host["sparkgate_dspark_drafter"] is None  # nothing to check unless the controller says so


def test_model_dir_default_is_the_same_in_both_roles():
    """spark_host checks sparkgate_model_dir and the stack role's env file makes compose mount it: one default."""
    stack = yaml.safe_load((STACK / "defaults" / "main.yml").read_text())
    host = yaml.safe_load((STACK.parent / "spark_host" / "defaults" / "main.yml").read_text())
    assert stack["sparkgate_model_dir"] == host["sparkgate_model_dir"] == \
        "{{ ansible_facts['env']['HOME'] }}/models/Ling-3.0-flash-fp4"
    stage = (STACK / "tasks" / "stage.yml").read_text()
    assert "SPARKGATE_MODEL_DIR={{ sparkgate_model_dir }}" in stage
