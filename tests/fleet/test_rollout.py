"""Rollouts on the 3-host lab, through `invoke fleet.deploy` as a user runs it: (1) baseline to every
host; (2) all-three behind a gateway key from Ansible Vault, with host2 faulted through its inventory: the
canary is admitted behind the key, host2 is refused by its sentinel's checks and rolled back to baseline, host3 is
never touched, the command fails, the report names the refusing checks and the key shows nowhere; (3) an air-gapped
export with one corrupted file is refused on its checksum before anything stops."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from sparkgate.paths import repo_root
from tests.fleet.hostchecks import check_serving, gateway_get, host

pytestmark = [pytest.mark.fleet, pytest.mark.docker, pytest.mark.compose]


def invoke(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    argv = [str(Path(sys.executable).parent / "invoke"), *args]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=repo_root(), timeout=timeout)
    print(done.stdout[-6000:], done.stderr[-3000:])  # shown on failure: the play and the fleet table
    return done


def show_table(request, done: subprocess.CompletedProcess) -> None:
    """The fleet table and the final line go to the test log even when the test passes."""
    terminal = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    lines = done.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if "fleet rollout:" in line), len(lines))
    with capture.global_and_fixture_disabled():  # what capsys.disabled() does, usable from a module fixture
        terminal.write_line("")
        for line in lines[start:] + done.stderr.strip().splitlines()[-1:]:
            terminal.write_line(line)


def rollout(request, lab, profile: str, report: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    done = invoke("fleet.deploy", "--inventory", str(lab.inventory), "--profile", profile, "--report", str(report),
                  "--work-dir", str(lab.directory / "controller"), *extra)
    show_table(request, done)
    return done, json.loads(report.read_text())


def rows(report: dict) -> dict[str, dict]:
    return {row["host"]: row for row in report["hosts"]}


def containers(project: str) -> list[str]:
    done = subprocess.run(["docker", "ps", "-q", "--no-trunc", "--filter", f"label=com.docker.compose.project={project}"],
                          capture_output=True, text=True, check=True)
    return sorted(done.stdout.split())


@pytest.fixture(scope="module")
def baseline(request, fleet_lab, tmp_path_factory):
    fleet_lab.clear_host_vars()
    done, report = rollout(request, fleet_lab, "baseline", tmp_path_factory.mktemp("reports") / "baseline.json")
    return done, report


def test_baseline_to_every_host_is_admitted(fleet_lab, baseline):
    done, report = baseline
    assert done.returncode == 0, done.stderr
    assert "fleet rollout: baseline" in done.stdout and "admitted" in done.stdout  # the table is printed
    by_host = rows(report)
    assert [by_host[h]["outcome"] for h in ("host1", "host2", "host3")] == ["admitted"] * 3
    for row in report["hosts"]:
        assert row["profile"] == "baseline" and row["gate"] == "open" and row["failing_checks"] == []
        assert row["time_to_admit_s"] is not None and row["time_to_admit_s"] > 0
        assert row["decode_tok_s"] is not None
        check_serving(str(fleet_lab.inventory), row)


def vault_encrypted(name: str, value: str, password_file: Path) -> str:
    """`name: !vault |...` as `ansible-vault encrypt_string` writes it (the value given on stdin, not argv)."""
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-vault"), "encrypt_string", "--vault-password-file",
                           str(password_file), "--stdin-name", name], input=value, capture_output=True, text=True,
                          check=True)
    return done.stdout


def test_keyed_rollout_with_a_faulted_host_stops_rolls_back_and_never_shows_the_key(request, fleet_lab, baseline,
                                                                                     tmp_path):
    """all-three with the gateway key from Ansible Vault: host1 (canary) is admitted behind the key, host2 (faulted
    through its inventory) is refused by its sentinel's checks and rolled back, host3 is never touched; the key is
    in no output, report, controller file or plaintext inventory."""
    assert baseline[0].returncode == 0
    untouched = containers(rows(baseline[1])["host3"]["project"])
    password = tmp_path / "vault-password"
    password.write_text(secrets.token_urlsafe(16) + "\n")
    password.chmod(0o600)
    key = "sk-fleet-" + secrets.token_urlsafe(24)
    keyed = vault_encrypted("sparkgate_api_key", key, password)
    fleet_lab.set_host_vars("host1", keyed)
    # Written as an operator writes one fault: a plain string, not a list (the role once iterated its characters).
    fleet_lab.set_host_vars("host2", "sparkgate_sim_faults: draft-lm-head-unshared\n" + keyed)
    try:
        done, report = rollout(request, fleet_lab, "all-three", tmp_path / "all-three.json",
                               "--vault-password-file", str(password))
        inventory_text = "\n".join(p.read_text() for p in fleet_lab.directory.rglob("*.yaml"))
    finally:
        fleet_lab.clear_host_vars()
    assert key not in done.stdout + done.stderr and key not in (tmp_path / "all-three.json").read_text()
    assert key not in inventory_text and "$ANSIBLE_VAULT" in inventory_text
    leaked = [str(p) for p in (fleet_lab.directory / "controller").rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert leaked == [], leaked
    keyed_gateway(fleet_lab, rows(report)["host1"], key)
    assert done.returncode != 0
    assert "fleet rollout: all-three" in done.stdout
    assert "host2 rolled_back" in done.stderr and "host3 not_reached" in done.stderr, done.stderr
    by_host = rows(report)
    assert {h: (r["outcome"], r["profile"]) for h, r in by_host.items()} == {
        "host1": ("admitted", "all-three"), "host2": ("rolled_back", "baseline"), "host3": ("not_reached", "baseline"),
    }
    assert by_host["host2"]["requested_profile"] == "all-three"
    # The outcome comes from host2's sentinel verdict: the checks that refused it, named in the report and the exit.
    assert {"mtp.lm_head_module_shared", "mtp.accept_length"} <= set(by_host["host2"]["failing_checks"]), by_host["host2"]
    assert "fleet.start_budget" not in by_host["host2"]["failing_checks"]
    assert "mtp.lm_head_module_shared" in done.stderr
    assert by_host["host1"]["failing_checks"] == [] and by_host["host3"]["failing_checks"] == []
    assert by_host["host1"]["accept_length"] > 1.5  # MTP engaged on the canary
    assert containers(by_host["host3"]["project"]) == untouched  # never stopped, same containers
    assert all(row["gate"] == "open" for row in report["hosts"])
    # testinfra (ansible:// backend) on every host, run as a user runs it against an inventory and a report.
    env_run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/fleet/check_fleet.py"],
                             capture_output=True, text=True, cwd=repo_root(), timeout=300,
                             env={**os.environ, "SPARKGATE_FLEET_INVENTORY": str(fleet_lab.inventory),
                                  "SPARKGATE_FLEET_REPORT": str(tmp_path / "all-three.json")})
    assert env_run.returncode == 0 and "3 passed" in env_run.stdout, env_run.stdout[-2000:]


def keyed_gateway(lab, row: dict, key: str) -> None:
    """On the host: its gateway refuses a client without the key (401) and admits one with it; the key file the
    role wrote is the host's secret, 0600."""
    target = host(str(lab.inventory), row["host"])
    port = row["gateway"].rsplit(":", 1)[1]
    root = json.loads(target.check_output("cat " + target.ansible.get_variables()["sparkgate_root"] + "/current.json"))
    key_file = root["api_key_file"]
    assert target.file(key_file).mode == 0o600 and target.file(key_file).content_string.strip() == key
    probe = (f"import urllib.request, urllib.error\ntry:\n    urllib.request.urlopen('http://127.0.0.1:{port}/v1/models')"
             "\n    print(200)\nexcept urllib.error.HTTPError as e:\n    print(e.code)\n")
    assert target.check_output(f"python3 -c {shlex.quote(probe)}") == "401"
    models = json.loads(target.check_output(gateway_get(port, "/v1/models", key_file)))
    assert [m["id"] for m in models["data"]] == ["ling-v3-flash-fp4"]


def test_corrupted_airgap_export_is_refused_before_anything_stops(request, fleet_lab, baseline, tmp_path):
    assert baseline[0].returncode == 0
    export = tmp_path / "export"
    made = invoke("bundle.export", "--profile", "baseline", "--target", "sim", "--out", str(export),
                  "--sim-time-scale", "0.1", "--sim-startup-s", "20", "--recheck-period-s", "5")
    assert made.returncode == 0, made.stderr
    sums = (export / "SHA256SUMS").read_text().splitlines()
    assert {line.split("  ", 1)[1] for line in sums} >= {"images.tar", "bundle/compose.yaml", "release.json",
                                                           "image-ids.json"}
    with (export / "bundle" / "compose.yaml").open("a") as handle:
        handle.write("# changed in transit\n")
    before = {h: containers(r["project"]) for h, r in rows(baseline[1]).items()}
    serving = {h: r["profile"] for h, r in rows(json.loads(invoke_status(fleet_lab, tmp_path))).items()}
    done, report = rollout(request, fleet_lab, "baseline", tmp_path / "airgap.json", "--airgap", str(export))
    assert done.returncode != 0
    by_host = rows(report)
    assert by_host["host1"]["outcome"] == "refused" and by_host["host1"]["failing_checks"] == ["airgap.sha256"]
    assert "bundle/compose.yaml: FAILED" in by_host["host1"]["refusal"]
    assert [by_host[h]["outcome"] for h in ("host2", "host3")] == ["not_reached", "not_reached"]
    for name, row in by_host.items():
        assert containers(row["project"]) == before[name]  # nothing stopped, nothing restarted
        assert row["profile"] == serving[name] and row["gate"] == "open"


def invoke_status(lab, tmp_path: Path) -> str:
    path = tmp_path / "status.json"
    done = invoke("fleet.status", "--inventory", str(lab.inventory), "--report", str(path),
                  "--work-dir", str(lab.directory / "controller"))
    assert done.returncode == 0, done.stderr
    return path.read_text()
