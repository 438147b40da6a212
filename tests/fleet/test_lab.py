"""The fleet lab: N hosts Ansible reaches over SSH (key only) on 127.0.0.1, each with its own ports,
project and a state directory the Docker daemon sees at the same path."""

from __future__ import annotations

import subprocess

import pytest

from tests.fleet.conftest import adhoc

pytestmark = [pytest.mark.fleet, pytest.mark.docker]


def test_inventory_gives_each_host_its_own_ports_project_and_root(fleet_lab):
    hostvars = fleet_lab.hostvars
    assert sorted(hostvars) == ["host1", "host2", "host3"]
    ports = [v["ansible_port"] for v in hostvars.values()] + [v["sparkgate_gateway_port"] for v in hostvars.values()]
    assert len(set(ports)) == 6, ports
    projects = [v["sparkgate_project"] for v in hostvars.values()]
    assert len(set(projects)) == 3 and all(p.startswith(f"sparkgate-{fleet_lab.name}-") for p in projects)
    assert all(v["ansible_host"] == "127.0.0.1" and v["sparkgate_target"] == "sim" for v in hostvars.values())


def test_ansible_reaches_every_host_and_its_docker_compose(fleet_lab):
    done = adhoc(fleet_lab, "sparks", "ansible.builtin.command", "docker compose version --short")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(line.split(" | ")[0] for line in done.stdout.splitlines() if " | CHANGED" in line) == \
        ["host1", "host2", "host3"], done.stdout


def test_state_directory_is_the_same_path_inside(fleet_lab):
    root = fleet_lab.hostvars["host2"]["sparkgate_root"]
    (fleet_lab.directory / "hosts" / "host2" / "probe.txt").write_text("seen\n")
    done = adhoc(fleet_lab, "host2", "ansible.builtin.command", f"cat {root}/probe.txt")
    assert done.returncode == 0 and "seen" in done.stdout, done.stdout + done.stderr


def test_host_vars_files_reach_the_host(fleet_lab):
    fleet_lab.set_host_vars("host3", "sparkgate_sim_faults: [draft-lm-head-unshared]\n")
    try:
        assert fleet_lab.hostvars["host3"]["sparkgate_sim_faults"] == ["draft-lm-head-unshared"]
        assert "sparkgate_sim_faults" not in fleet_lab.hostvars["host1"]
    finally:
        fleet_lab.clear_host_vars()


def test_ssh_refuses_passwords(fleet_lab):
    port = fleet_lab.hostvars["host1"]["ansible_port"]
    argv = ["ssh", "-p", str(port), "-o", "BatchMode=yes", "-o", "PreferredAuthentications=password,keyboard-interactive",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "root@127.0.0.1", "true"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 255 and "Permission denied" in done.stderr, done.stderr
