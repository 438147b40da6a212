"""The gate's suites are product code: they ship in the package with their own pytest configuration, run from
anywhere (not only a checkout), and nothing the gate runs imports from tests/; no image copies a test tree."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from sparkgate import suites

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("sparkgate", "simulator", "probe")


def collected(suite: str, marker: str, env: dict[str, str]) -> list[str]:
    """The tests a run of `suite` selects, run as the product runs it (from the suites' own directory)."""
    result = subprocess.run([*suites.argv(suite, marker), "--collect-only"], cwd=suites.SUITES, capture_output=True,
                            text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return [line for line in result.stdout.splitlines() if "::" in line]


@pytest.mark.parametrize(("suite", "marker"), [("infra", "infra and not host_only"), ("smoke", "smoke")])
def test_each_suite_collects_with_its_own_configuration_and_nothing_else(tmp_path, suite, marker):
    names = collected(suite, marker, {"PATH": "/usr/bin:/bin"})
    assert names and all(name.startswith(f"{suite}/") for name in names)
    # A caller's pytest settings do not reach the gate's run: no test deselected, no plugin slipped in.
    hostile = {"PATH": "/usr/bin:/bin", "PYTEST_ADDOPTS": f"--deselect {names[0]} -o addopts=",
               "PYTEST_PLUGINS": "no_such_plugin_module"}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in hostile.items():
            patch.setenv(key, value)
        assert collected(suite, marker, suites.environment({})) == names


def test_file_inputs_are_absolute_since_the_suites_run_from_their_own_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = suites.environment({"SPARKGATE_BUNDLE": "build/all-three", "SPARKGATE_SMOKE_API_KEY_FILE": "keys/k",
                              "SPARKGATE_SMOKE_URL": "http://127.0.0.1:1"})
    assert env["SPARKGATE_BUNDLE"] == str(tmp_path / "build" / "all-three")
    assert env["SPARKGATE_SMOKE_API_KEY_FILE"] == str(tmp_path / "keys" / "k")
    assert env["SPARKGATE_SMOKE_URL"] == "http://127.0.0.1:1" and env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"


def test_the_suites_configuration_is_shipped_and_strict():
    assert "--strict-markers" in suites.CONFIG.read_text()
    package_data = (REPO / "pyproject.toml").read_text()
    assert '"sparkgate.suites" = ["pytest.ini"]' in package_data


def test_an_unregistered_marker_fails_the_suites_run(tmp_path):
    # The suites' pytest.ini is the one read (strict markers): without its markers, collection refuses.
    result = subprocess.run([*suites.argv("smoke", "smoke"), "--collect-only", "--override-ini", "markers="], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "'smoke' not found in `markers`" in result.stdout + result.stderr


def test_nothing_the_product_runs_imports_from_tests():
    for root in PRODUCT:
        for path in (REPO / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                assert not any(n == "tests" or n.startswith("tests.") for n in names), f"{path} imports {names}"


def test_no_image_copies_a_test_tree():
    for dockerfile in (REPO / "Dockerfile", REPO / "docker" / "runtime.Dockerfile"):
        copies = [line.split() for line in dockerfile.read_text().splitlines() if line.startswith("COPY ")]
        assert not any(part.startswith("tests") for line in copies for part in line[1:-1]), dockerfile
    assert "!tests/" not in (REPO / ".dockerignore").read_text().split()
