"""Every invoke task answers a user mistake with one line and a non-zero exit, never a traceback; every
option is a flag (`--help` is help, never a profile name); operating tasks take deploy's options."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


def invoke(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *argv], capture_output=True, text=True, cwd=REPO, timeout=120)


def _tasks() -> dict[str, set[str]]:
    """task name -> its option names, from the collection `invoke` loads (tasks.py), read in this process: running
    `invoke NAME --help` for each of ~30 tasks at collection cost a minute on every pytest-xdist worker."""
    import tasks as root  # the repo's tasks.py

    return {name: {flag for argument in root.ns[name].get_arguments() for flag in argument.names}
            for name in root.ns.task_names}


TASKS = _tasks()
WITH_PROFILE = sorted(name for name, options in TASKS.items() if "profile" in options)


def test_tasks_were_found():
    assert {"deploy", "status", "logs", "smoke", "infra", "down", "validate", "render", "bench"} <= set(WITH_PROFILE)


def test_the_collection_read_here_is_the_one_invoke_lists():
    listed = json.loads(invoke("--list", "--list-format", "json").stdout)
    names = [t["name"] for t in listed["tasks"]]
    names += [f"{c['name']}.{t['name']}" for c in listed["collections"] for t in c["tasks"]]
    assert sorted(names) == sorted(TASKS)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_help_is_help(name):
    result = invoke(name, "--help")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr and "Usage:" in result.stdout


@pytest.mark.parametrize("name", WITH_PROFILE)
def test_missing_profile_is_one_line(name):
    # Other required options get harmless values, so the profile is what is refused (before anything runs).
    required = {"verify": ["--engine-url", "http://127.0.0.1:9"],
                "fleet.deploy": ["--inventory", "/nonexistent/inventory.yaml"]}.get(name, [])
    result = invoke(name, "--profile", "no-such-profile", *required)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no such profile file" in lines[0] and "Fix:" in lines[0], result.stderr


@pytest.mark.parametrize("name", WITH_PROFILE)
def test_profile_left_out_is_one_line(name):
    result = invoke(name)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sparkgate {name}: --") and "is required, e.g. `invoke " in lines[0]


@pytest.mark.parametrize("name", ["status", "logs", "smoke", "infra", "down"])
def test_operating_tasks_take_the_deploy_options(name):
    result = invoke(name, "--profile", "no-such-profile", "--target", "sim", "--port", "18001", "--project", "x")
    assert "No idea what" not in result.stderr
    assert "no such profile file" in result.stderr
