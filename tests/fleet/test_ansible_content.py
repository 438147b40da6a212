"""The Ansible content is valid and lint-clean, and the roles keep their promises in the text itself:
the host role only asserts, the rollout is a canary that stops at the first failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from sparkgate.paths import repo_root

ANSIBLE = repo_root() / "ansible"


def _tool(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def test_ansible_lint_passes_on_the_production_profile():
    done = subprocess.run([_tool("ansible-lint"), "--nocolor", "--offline"], capture_output=True, text=True,
                          cwd=ANSIBLE, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "Profile 'production' was required, and it passed" in done.stdout + done.stderr


def test_playbooks_pass_syntax_check_without_invoke():
    env = {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg")}
    for playbook in ("rollout.yml", "status.yml"):
        done = subprocess.run([_tool("ansible-playbook"), "--syntax-check", "-i", str(ANSIBLE / "inventories" / "example"
                                                                                       / "hosts.yaml"),
                               str(ANSIBLE / "playbooks" / playbook)], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr


def test_rollout_is_a_canary_that_stops_at_the_first_failure():
    play = yaml.safe_load((ANSIBLE / "playbooks" / "rollout.yml").read_text())[0]
    assert play["max_fail_percentage"] == 0
    assert play["serial"].startswith("{{") and "[1, '50%']" in play["serial"]
    assert play["order"] == "inventory"


def _modules(tasks: list) -> set[str]:
    found = set()
    for task in tasks:
        for key in ("block", "rescue", "always"):
            found |= _modules(task.get(key, []))
        found |= {k for k in task if "." in k}
    return found


def _host_role_tasks() -> list:
    """spark_host's tasks, its DSpark drafter file included, blocks flattened."""
    tasks = []
    for name in ("main.yml", "drafter.yml"):
        for task in yaml.safe_load((ANSIBLE / "roles" / "spark_host" / "tasks" / name).read_text()):
            tasks += [task, *task.get("block", [])]
    return tasks


def test_host_role_only_asserts_and_reads():
    tasks = _host_role_tasks()
    assert _modules(tasks) == {"ansible.builtin.assert", "ansible.builtin.command", "ansible.builtin.slurp",
                               "ansible.builtin.stat", "ansible.builtin.debug", "ansible.builtin.find",
                               "ansible.builtin.include_tasks"}
    assert not [t["name"] for t in tasks if "become" in t]  # nothing runs as root
    # Commands are argv lists (no shell string) and change nothing.
    commands = [t for t in tasks if "ansible.builtin.command" in t]
    assert all("argv" in t["ansible.builtin.command"] and t["changed_when"] is False for t in commands)


def test_every_host_assertion_names_host_fact_and_fix():
    asserts = [t["ansible.builtin.assert"] for t in _host_role_tasks() if "ansible.builtin.assert" in t]
    assert len(asserts) == 8 + 12  # the host's facts, then the DSpark drafter's
    drafter = yaml.safe_load((ANSIBLE / "roles" / "spark_host" / "tasks" / "drafter.yml").read_text())[0]["vars"]
    fix = drafter["spark_host_dspark_fix"]
    assert fix.startswith("Fix: move the directory aside and re-download: mv -- ") and \
        fix.endswith("&& {{ spark_host_dspark_download }}")
    assert drafter["spark_host_dspark_download"].startswith("hf download {{ sparkgate_dspark_drafter.repo | quote }}")
    for spec in asserts:
        spec = {**spec, "fail_msg": spec["fail_msg"].replace("{{ spark_host_dspark_fix }}", fix)}
        assert spec["fail_msg"].startswith("{{ inventory_hostname }}: ") and "Fix:" in spec["fail_msg"], spec
        assert "\n" not in spec["fail_msg"].strip(), spec  # one line
