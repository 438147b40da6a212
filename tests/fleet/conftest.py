"""Fleet fixtures: a 3-host lab (devtasks/fleet_lab.py) shared by the fleet tests, removed at the end of the
session with every stack its hosts started (SPARKGATE_KEEP_FAILED=1 keeps it after a failure)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devtasks import fleet_lab as lab_mod
from sparkgate.paths import repo_root

ANSIBLE_CFG = repo_root() / "ansible" / "ansible.cfg"


class Lab:
    def __init__(self, directory: Path, name: str, inventory: Path):
        self.directory, self.name, self.inventory = directory, name, inventory
        self.failed = False

    @property
    def hostvars(self) -> dict:
        done = subprocess.run([ansible_tool("ansible-inventory"), "-i", str(self.inventory), "--list"],
                              capture_output=True, text=True, check=True, env=ansible_env())
        return json.loads(done.stdout)["_meta"]["hostvars"]

    def set_host_vars(self, host: str, text: str) -> None:
        (self.directory / "host_vars" / f"{host}.yaml").write_text(text, encoding="utf-8")

    def clear_host_vars(self) -> None:
        for path in (self.directory / "host_vars").glob("*.yaml"):
            path.unlink()


def ansible_tool(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def ansible_env() -> dict[str, str]:
    return {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE_CFG)}


def adhoc(lab: Lab, pattern: str, module: str, args: str) -> subprocess.CompletedProcess:
    """One ad-hoc Ansible module run over the lab's SSH (`ansible PATTERN -m MODULE -a ARGS`)."""
    argv = [ansible_tool("ansible"), "-i", str(lab.inventory), pattern, "-m", module, "-a", args, "--one-line"]
    return subprocess.run(argv, capture_output=True, text=True, env=ansible_env(), timeout=300)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        item.session.sparkgate_fleet_failed = True


@pytest.fixture(scope="session")
def fleet_lab(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp("fleet-lab")
    name = f"t{os.getpid()}"
    inventory = lab_mod.up(3, directory, name=name, say=lambda line: print(line))
    lab = Lab(directory, name, inventory)
    yield lab
    if os.environ.get("SPARKGATE_KEEP_FAILED") and getattr(request.session, "sparkgate_fleet_failed", False):
        print(f"kept fleet lab {name} in {directory} (invoke fleet.lab --down --directory {directory} --name {name})")
        return
    lab_mod.down(directory, name=name, say=lambda line: print(line))
