"""The README's two Quickstart commands are the entry points users and CI run: exactly two, each a script
that sets up the checkout first, and CI's test step runs the second one verbatim."""

from __future__ import annotations

import os
import re
import shlex
import subprocess

import pytest


def quickstart_commands(repo) -> list[str]:
    readme = (repo / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quickstart", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def ci_test_command(repo) -> str:
    """The last command of .ci/run's `tests` step."""
    script = (repo / ".ci" / "run").read_text(encoding="utf-8")
    step = script.split('step "tests"', 1)[1]
    commands = [line.strip() for line in step.splitlines() if line.strip() and not line.strip().startswith("#")]
    return commands[-1]


def test_quickstart_is_two_commands_and_ci_runs_the_second(repo):
    commands = quickstart_commands(repo)
    assert commands == ["bash scripts/quickstart", "bash scripts/test"]
    assert ci_test_command(repo) == commands[1]


@pytest.mark.parametrize(("script", "setup", "last"), [
    # Command 1 installs only what a deploy needs; command 2 all the tests need.
    ("scripts/quickstart", "bash scripts/bootstrap --deploy", 'exec invoke deploy --profile all-three --target sim "$@"'),
    ("scripts/test", "bash scripts/bootstrap", 'exec invoke test "$@"'),
])
def test_each_command_sets_up_the_checkout_before_it_runs(repo, script, setup, last):
    path = repo / script
    assert os.access(path, os.X_OK), f"{script} is not executable"
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    lines = [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert lines[:3] == ["set -euo pipefail", 'cd "$(dirname "$0")/.."', setup]
    assert lines[-2:] == [". .venv/bin/activate", last]


def test_quickstart_names_the_endpoint_it_ends_with(repo):
    """The README promises the admitted URL at the default port the deploy task uses."""
    from sparkgate import defaults
    readme = (repo / "README.md").read_text(encoding="utf-8")
    assert f"admitted: http://127.0.0.1:{defaults.GATEWAY_PORT} serves ling-v3-flash-fp4 (all-three, sim)" in readme
    assert shlex.split(quickstart_commands(repo)[0]) == ["bash", "scripts/quickstart"]


def test_ci_prebuilds_the_fleet_lab_host_image_the_lab_uses(repo):
    """CI builds the lab's host image during its set-up; under another tag the lab would build it again mid-tests."""
    from devtasks.fleet_lab import HOST_IMAGE

    script = (repo / ".ci" / "run").read_text(encoding="utf-8")
    (tag,) = re.findall(r"^FLEET_HOST_IMAGE=(\S+)", script, re.M)
    assert tag == HOST_IMAGE
    assert 'bash docker/build-base.sh --fleet-host "$FLEET_HOST_IMAGE"' in script
