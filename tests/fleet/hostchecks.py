"""Host checks after a rollout, through testinfra's `ansible://` backend (the same SSH the play used):
the stack runs, the gate is open, the engine publishes no port, the release on the host is the report's."""

from __future__ import annotations

import json

import testinfra


def host(inventory: str, name: str):
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={inventory}")


def gateway_get(port: str, path: str, key_file: str | None) -> str:
    """A command for the host that GETs `path` from its gateway and prints the body; with a key file, the key is
    read from it on the host, so it is never on a command line."""
    header = f"{{'Authorization': 'Bearer ' + open({key_file!r}).read().strip()}}" if key_file else "{}"
    code = (f"import urllib.request; print(urllib.request.urlopen(urllib.request.Request("
            f"'http://127.0.0.1:{port}{path}', headers={header})).read().decode())")
    return f"python3 -c \"{code}\""


def check_serving(inventory: str, row: dict) -> None:
    """`row` is the host's line of the fleet report; the host must serve exactly what it says."""
    target = host(inventory, row["host"])
    project = row["project"]
    ps = [json.loads(line) for line in target.check_output(f"docker compose -p {project} ps --format json").splitlines()]
    states = {c["Service"]: c["State"] for c in ps}
    assert states == {"engine": "running", "sentinel": "running", "gateway": "running"}, (row["host"], states)

    port = row["gateway"].rsplit(":", 1)[1]
    root = json.loads(target.check_output("cat " + target.ansible.get_variables()["sparkgate_root"] + "/current.json"))
    verdict = json.loads(target.check_output(gateway_get(port, "/sparkgate/verdict", root.get("api_key_file"))))
    assert verdict["state"] == "open" and verdict["profile"] == row["profile"], (row["host"], verdict["state"])

    engine = next(c for c in ps if c["Service"] == "engine")
    inspect = json.loads(target.check_output(f"docker inspect {engine['Name']}"))[0]
    assert not any(inspect["NetworkSettings"]["Ports"].values() or [None]), inspect["NetworkSettings"]["Ports"]
    assert not inspect["HostConfig"]["PortBindings"], inspect["HostConfig"]["PortBindings"]

    assert (root["release"], root["profile"]) == (row["release"], row["profile"]), (row["host"], root["release"])
    images = {ref: target.check_output(f"docker image inspect --format '{{{{.Id}}}}' {ref}") for ref in root["image_ids"]}
    assert images == root["image_ids"], (row["host"], images)
