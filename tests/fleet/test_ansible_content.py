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


def test_host_role_only_asserts_and_reads():
    tasks = yaml.safe_load((ANSIBLE / "roles" / "spark_host" / "tasks" / "main.yml").read_text())
    assert _modules(tasks) == {"ansible.builtin.assert", "ansible.builtin.command", "ansible.builtin.slurp",
                               "ansible.builtin.stat", "ansible.builtin.debug"}
    flat = tasks + [t for task in tasks for t in task.get("block", [])]
    assert not [t["name"] for t in flat if "become" in t]  # nothing runs as root


def test_every_host_assertion_names_host_fact_and_fix():
    tasks = yaml.safe_load((ANSIBLE / "roles" / "spark_host" / "tasks" / "main.yml").read_text())
    flat = tasks + [t for task in tasks for t in task.get("block", [])]
    asserts = [t["ansible.builtin.assert"] for t in flat if "ansible.builtin.assert" in t]
    assert len(asserts) == 8
    for spec in asserts:
        assert spec["fail_msg"].startswith("{{ inventory_hostname }}: ") and "Fix:" in spec["fail_msg"], spec
