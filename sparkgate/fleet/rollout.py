"""`invoke fleet.deploy` and `invoke fleet.status`: run the Ansible playbooks under ansible/ (argv lists,
never a shell string), then read what they recorded into one fleet report.

The play does the work and stays playable without invoke; this module only picks the hosts, passes the
variables, and turns the per-host records into the table and the JSON report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sparkgate import atomic
from sparkgate.errors import Refusal
from sparkgate.fleet import outcomes
from sparkgate.paths import build_dir, repo_root
from sparkgate.profile import loading as profiles

GROUP = "sparks"


class FleetError(Refusal):
    """The rollout could not run, or did not admit every host it was asked to."""


@dataclass(frozen=True)
class FleetOptions:
    inventory: Path
    profile: str | None = None
    limit: str | None = None
    report: Path | None = None
    run_dir: Path | None = None
    # An `invoke bundle.export` directory: images and bundle come from it (verified on each host).
    airgap: Path | None = None
    # Ansible's `serial` (e.g. [1, "50%"]); None keeps the playbook's canary-then-halves.
    serial: list | None = None
    extra_vars: dict = field(default_factory=dict)
    # Ansible Vault's password file, for an inventory holding `sparkgate_api_key` encrypted (passed to Ansible as
    # a path: the key itself never reaches the controller's command line).
    vault_password_file: Path | None = None


def ansible_dir() -> Path:
    return repo_root() / "ansible"


def _tool(name: str) -> str:
    beside = Path(sys.executable).parent / name  # the venv's own, with the pinned ansible-core
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        raise FleetError(f"controller: {name} not found. Fix: `bash scripts/bootstrap` installs the pinned ansible-core "
                         "(requirements/test.txt) into .venv")
    return found


def _env() -> dict[str, str]:
    return {**os.environ, "ANSIBLE_CONFIG": str(ansible_dir() / "ansible.cfg")}


def run_dir(options: FleetOptions) -> Path:
    return (options.run_dir or build_dir() / "fleet").resolve()


def hosts(inventory: Path, limit: str | None = None, vault_password_file: Path | None = None) -> list[str]:
    """The inventory's hosts in group `sparks` (after --limit), in inventory order."""
    if vault_password_file is not None and not vault_password_file.is_file():
        raise FleetError(f"--vault-password-file: {vault_password_file} not found. Fix: the file holding the Ansible "
                         "Vault password the inventory's sparkgate_api_key was encrypted with")
    if not inventory.is_file():
        raise FleetError(f"--inventory: {inventory} not found. Fix: `invoke fleet.lab --hosts 3` writes "
                         "build/fleet-lab/inventory.yaml; ansible/inventories/example/ shows one for real Sparks")
    argv = [_tool("ansible-inventory"), "-i", str(inventory), "--list"] + (["--limit", limit] if limit else [])
    if vault_password_file:  # an inventory with vault-encrypted values does not list without it
        argv += ["--vault-password-file", str(vault_password_file)]
    done = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=120)
    if done.returncode != 0:
        raise FleetError(f"inventory {inventory}: ansible-inventory exited {done.returncode}: "
                         f"{done.stderr.strip()[-300:]}. Fix: check its YAML")
    data = json.loads(done.stdout)

    def members(group: str) -> list[str]:
        node = data.get(group) or {}
        found = list(node.get("hosts", []))
        for child in node.get("children", []):
            found += [h for h in members(child) if h not in found]
        return found

    found = members(GROUP)
    if not found:
        raise FleetError(f"inventory {inventory}: group {GROUP!r} has no hosts{' within --limit ' + limit if limit else ''}. "
                         f"Fix: list the Sparks under `{GROUP}:` (see ansible/inventories/example/)")
    return found


def playbook_argv(playbook: str, options: FleetOptions, vars_file: Path) -> list[str]:
    argv = [_tool("ansible-playbook"), "-i", str(options.inventory), str(ansible_dir() / "playbooks" / playbook),
            "-e", f"@{vars_file}"]
    if options.limit:
        argv += ["--limit", options.limit]
    if options.vault_password_file:
        argv += ["--vault-password-file", str(options.vault_password_file)]
    return argv


def _play(playbook: str, options: FleetOptions, variables: dict, say: Callable[[str], None]) -> int:
    directory = run_dir(options)
    vars_file = directory / f"{Path(playbook).stem}-vars.json"
    atomic.write_text_atomically(vars_file, json.dumps(variables, indent=1) + "\n")
    argv = playbook_argv(playbook, options, vars_file)
    say("$ " + " ".join(argv))
    return subprocess.call(argv, env=_env(), cwd=repo_root())


def _base_vars(options: FleetOptions) -> dict:
    return {"sparkgate_controller_dir": str(run_dir(options)), "sparkgate_controller_python": sys.executable,
            **options.extra_vars}


def status(options: FleetOptions, say: Callable[[str], None] = print) -> dict:
    """Read every host; the report's outcome column is each host's last recorded rollout outcome."""
    names = hosts(options.inventory, options.limit, options.vault_password_file)
    directory = run_dir(options)
    shutil.rmtree(directory / "status", ignore_errors=True)
    code = _play("status.yml", options, _base_vars(options), say)
    if code != 0:
        say(f"status.yml exited {code}; hosts it could not read show as not reached")
    return outcomes.build(names, directory, profile=None, host_outcomes=True)


def deploy(options: FleetOptions, say: Callable[[str], None] = print) -> dict:
    """Roll out, read the fleet back, write the report; FleetError unless every host was admitted."""
    if not options.profile:
        raise FleetError("--profile is required, e.g. `invoke fleet.deploy --inventory build/fleet-lab/inventory.yaml "
                         "--profile baseline`")
    # Bad input stops here, before any host is contacted: the profile is validated at the boundary (one line
    # naming its file and field), exactly as a single-host deploy does.
    profiles.load(options.profile)
    names = hosts(options.inventory, options.limit, options.vault_password_file)
    directory = run_dir(options)
    for stale in ("outcomes", "status"):  # this run's records only
        shutil.rmtree(directory / stale, ignore_errors=True)
    variables = {**_base_vars(options), "sparkgate_profile": options.profile}
    if options.airgap:
        export = options.airgap.resolve()
        if not (export / "release.json").is_file():
            raise FleetError(f"--airgap: {export}/release.json missing. Fix: `invoke bundle.export --profile P --out {export}`")
        variables |= {"sparkgate_image_source": "airgap", "sparkgate_airgap_export": str(export)}
    if options.serial:
        variables["sparkgate_serial"] = options.serial
    code = _play("rollout.yml", options, variables, say)
    _play("status.yml", options, _base_vars(options), say)
    report = outcomes.build(names, directory, profile=options.profile)
    report["ansible_exit_code"] = code
    outcomes.write(report, options.report or directory / "report.json")
    return report


def _rollback_failure(row: dict) -> str:
    """Why a refused host's last-good release did not come back, as the role recorded it (after "rollback")."""
    refusal = row.get("refusal") or ""
    at = refusal.find("rollback")
    return f" ({refusal[at:]})" if row["outcome"] == "refused" and at >= 0 else ""


def verdict_line(report: dict, path: Path) -> str:
    """One line for the exit: every host that is not admitted, with its outcome and failing checks."""
    bad = [r for r in report["hosts"] if r["outcome"] != "admitted"]
    parts = [f"{r['host']} {r['outcome']}" + (f" ({', '.join(r['failing_checks'])})" if r["failing_checks"] else "")
             + (f", serving {r['profile']}" if r["profile"] else ", serving nothing") + _rollback_failure(r) for r in bad]
    return (f"rollout of {report['profile']} stopped: " + "; ".join(parts) + f". Report: {path}. Fix: read the failing "
            "checks (docs/checks/), fix the profile or host, roll out again")
