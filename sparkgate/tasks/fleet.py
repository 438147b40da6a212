"""Fleet tasks: `invoke fleet.lab`. The work is in sparkgate.fleet.*
and in the Ansible content under ansible/; these only parse flags and print."""

from __future__ import annotations

from pathlib import Path

from invoke import Collection

from sparkgate.tasks.common import require, sparkgate_task


@sparkgate_task("fleet.lab", help={
    "hosts": "how many lab hosts to start (host1..hostN)",
    "down": "remove the lab: its hosts, their stacks and state",
    "directory": "lab directory (default build/fleet-lab)",
    "name": "lab name: containers sparkgate-<name>-<host>-ssh, projects sparkgate-<name>-<host> (default lab)",
})
def lab(c, hosts=0, down=False, directory=None, name="lab"):
    """Start N local test hosts reachable by Ansible over SSH on 127.0.0.1, and write their inventory.

    Each host runs its simulator stack on its own gateway port. Per-host variables (e.g.
    `sparkgate_sim_faults: [draft-lm-head-unshared]`) go in <dir>/host_vars/<host>.yaml.
    """
    from sparkgate.fleet import lab as lab_mod

    directory = Path(directory) if directory else None
    if down:
        lab_mod.down(directory, name=name if name != "lab" else None)
        return
    lab_mod.up(int(require(int(hosts) or None, "hosts", "invoke fleet.lab --hosts 3")), directory, name=name)


ns = Collection("fleet", lab)
bundle_ns = Collection("bundle")
