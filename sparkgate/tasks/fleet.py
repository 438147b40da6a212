"""Fleet tasks: `invoke fleet.deploy|status` and `invoke bundle.export` (`fleet.lab` is a developer task:
devtasks/fleet_lab.py). The work is in sparkgate.fleet.*
and in the Ansible content under ansible/; these only parse flags and print."""

from __future__ import annotations

import json
from pathlib import Path

from invoke import Collection

from sparkgate.tasks.common import require, sparkgate_task


@sparkgate_task("fleet.deploy", help={
    "inventory": "Ansible inventory (hosts in group `sparks`), e.g. build/fleet-lab/inventory.yaml",
    "profile": "profile name or YAML path to roll out",
    "limit": "Ansible host pattern to roll out to (the rest are not touched)",
    "report": "where to write the JSON report (default build/fleet/report.json)",
    "airgap": "an `invoke bundle.export` directory: images and bundle come from it, verified on each host",
    "serial": "batch sizes as JSON, e.g. '[1, \"50%\"]' (default: the playbook's canary, then halves)",
    "work_dir": "where rendered releases and per-host records go on the controller (default build/fleet)",
    "vault_password_file": "Ansible Vault password file, when the inventory holds sparkgate_api_key encrypted",
})
def deploy(c, inventory=None, profile=None, limit=None, report=None, airgap=None, serial=None, work_dir=None,
           vault_password_file=None):
    """Roll a profile across a fleet with Ansible: canary first, stop at the first refused gate, roll the
    refused host back to its last-good release; print the fleet table and write the report.

    Exits 0 only when every host was admitted.
    """
    from sparkgate import display
    from sparkgate.fleet import outcomes, rollout

    options = rollout.FleetOptions(
        inventory=Path(require(inventory, "inventory", "invoke fleet.deploy --inventory build/fleet-lab/inventory.yaml "
                                                      "--profile baseline")),
        profile=require(profile, "profile", "invoke fleet.deploy --inventory INV --profile baseline"),
        limit=limit, report=Path(report) if report else None, airgap=Path(airgap) if airgap else None,
        serial=json.loads(serial) if serial else None, run_dir=Path(work_dir) if work_dir else None,
        vault_password_file=Path(vault_password_file) if vault_password_file else None,
    )
    result = rollout.deploy(options)
    path = options.report or rollout.run_dir(options) / "report.json"
    display.console().print(outcomes.table(result, f"fleet rollout: {options.profile}"))
    print(f"report: {path}")
    if any(row["outcome"] != "admitted" for row in result["hosts"]):
        raise rollout.FleetError(rollout.verdict_line(result, path))


@sparkgate_task("fleet.status", help={
    "inventory": "Ansible inventory (hosts in group `sparks`)",
    "limit": "Ansible host pattern",
    "report": "also write the JSON report here",
    "work_dir": "where per-host records go on the controller (default build/fleet)",
    "vault_password_file": "Ansible Vault password file, when the inventory holds sparkgate_api_key encrypted",
})
def status(c, inventory=None, limit=None, report=None, work_dir=None, vault_password_file=None):
    """What every host serves now: release, gate, last rollout outcome (changes nothing)."""
    from sparkgate import display
    from sparkgate.fleet import outcomes, rollout

    options = rollout.FleetOptions(inventory=Path(require(inventory, "inventory", "invoke fleet.status --inventory INV")),
                                   limit=limit, run_dir=Path(work_dir) if work_dir else None,
                                   vault_password_file=Path(vault_password_file) if vault_password_file else None)
    result = rollout.status(options)
    display.console().print(outcomes.table(result, "fleet status"))
    if report:
        outcomes.write(result, Path(report))
        print(f"report: {report}")


@sparkgate_task("bundle.export", help={
    "profile": "profile name or YAML path",
    "target": "spark (default) or sim",
    "out": "export directory (default build/export/<profile>-<target>)",
    "sim_time_scale": "simulator speed-up (sim target)",
    "sim_startup_s": "simulated startup length in engine seconds (sim target)",
    "recheck_period_s": "sentinel re-check period",
})
def export(c, profile=None, target="spark", out=None, sim_time_scale=None, sim_startup_s=None, recheck_period_s=5.0):
    """Write an air-gap export: images (docker save), rendered bundle, image IDs and SHA256SUMS."""
    from sparkgate.fleet import export as export_mod
    from sparkgate.fleet import release
    from sparkgate.paths import build_dir

    name = require(profile, "profile", "invoke bundle.export --profile baseline --target spark")
    export_mod.export(release.ReleaseOptions(
        profile=name, target=target, out=Path(out) if out else build_dir() / "export" / f"{Path(name).stem}-{target}",
        sim_time_scale=float(sim_time_scale or c.config.sparkgate.sim_time_scale),
        sim_startup_s=float(sim_startup_s) if sim_startup_s else None, recheck_period_s=float(recheck_period_s),
    ))


ns = Collection("fleet", deploy, status)
bundle_ns = Collection("bundle", export)
