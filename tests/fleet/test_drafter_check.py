"""The `spark_host` role's DSpark drafter assertions, run with ansible-playbook: (1) every fault kind at once,
one local-connection host per fixture directory; (2) over the lab's SSH, host1 holding a good drafter, host2
one whose weight was edited after the download, host3 none; (3) the stack role's compose environment names
SPARKGATE_DSPARK_DIR for a dspark release only. Each refused host gets one line naming it, the fact,
observed, expected and the fix."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from sparkgate.fleet import drafter_pin
from sparkgate.paths import repo_root
from sparkgate.profile import loading as profiles
from tests.fleet.conftest import ansible_env, ansible_tool
from tests.fleet.drafter_fixture import fault, make

# fixture -> the fact its one-line refusal names (None: every assertion passes)
FAULTS = {"good": None, "missing": "dspark.drafter_dir", "arch": "dspark.architectures", "block": "dspark.block_size",
          "json": "dspark.config", "norecord": "dspark.revision", "revision": "dspark.revision",
          "corrupt": "dspark.checksums", "symlink": "dspark.symlinks", "gone": "dspark.files", "etag": "dspark.etag",
          "noweights": "dspark.weights", "unrecorded": "dspark.unrecorded"}

PLAY = """\
- name: Check the hosts
  hosts: sparks
  gather_facts: true
  gather_subset: [min]
  tasks:
    - name: Run the host role
      ansible.builtin.include_role:
        name: spark_host
"""


def _failures(stdout: str) -> dict[str, str]:
    """host -> the failed task's message, from the default callback's `fatal: [host]: FAILED! => {json}` lines."""
    return {m.group(1): json.loads(m.group(2))["msg"] for m in re.finditer(r"^fatal: \[(\w+)\]: FAILED! => (\{.*\})$",
                                                                          stdout, re.MULTILINE)}


def _play(inventory, playbook, variables, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([ansible_tool("ansible-playbook"), "-i", str(inventory), str(playbook), "-e", f"@{variables}",
                           "-e", "sparkgate_min_mem_available_gib=0", *extra], capture_output=True, text=True, timeout=600,
                          env={**ansible_env(), "ANSIBLE_ROLES_PATH": str(repo_root() / "ansible" / "roles")})


def test_every_drafter_fault_is_refused_in_one_line_naming_its_fact(tmp_path):
    pin = drafter_pin.pin(profiles.load("dspark").profile, "spark")
    hosts = {name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                    "sparkgate_target": "sim",
                    "sparkgate_dspark_dir": str(fault(tmp_path / name, name, pin["revision"], tmp_path / "outside"))}
             for name in FAULTS}
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"sparks": {"hosts": hosts}}))
    (tmp_path / "check.yml").write_text(PLAY)
    (tmp_path / "drafter.json").write_text(json.dumps(drafter_pin.host_vars("dspark")))
    done = _play(inventory, tmp_path / "check.yml", tmp_path / "drafter.json")
    failed = _failures(done.stdout)
    assert sorted(failed) == sorted(h for h, fact in FAULTS.items() if fact), done.stdout[-3000:]
    for host, fact in FAULTS.items():
        if fact:
            assert failed[host].startswith(f"{host}: {fact}: observed "), failed[host]
            assert "expected" in failed[host] and f"--local-dir {hosts[host]['sparkgate_dspark_dir']}" in failed[host]
    assert re.search(r"good +: ok=\d+ +changed=0 +unreachable=0 +failed=0", done.stdout)


@pytest.mark.fleet
@pytest.mark.docker
def test_drafter_is_asserted_on_each_host_before_anything_runs(fleet_lab, tmp_path):
    pin = drafter_pin.pin(profiles.load("dspark").profile, "spark")
    roots = {h: v["sparkgate_root"] for h, v in fleet_lab.hostvars.items()}
    good = make(fleet_lab.directory / "hosts" / "host1" / "drafter", pin["revision"])
    bad = make(fleet_lab.directory / "hosts" / "host2" / "drafter", pin["revision"])
    (bad / "model.safetensors").write_bytes(b"modified after the download")
    assert str(good) == f"{roots['host1']}/drafter"  # the same path inside the lab host
    fleet_lab.set_host_vars("host1", f"sparkgate_dspark_dir: {roots['host1']}/drafter\n")
    fleet_lab.set_host_vars("host2", f"sparkgate_dspark_dir: {roots['host2']}/drafter\n")
    fleet_lab.set_host_vars("host3", f"sparkgate_dspark_dir: {roots['host3']}/no-drafter\n")
    playbook = tmp_path / "check.yml"
    playbook.write_text(PLAY)
    variables = tmp_path / "drafter.json"
    variables.write_text(subprocess.run([ansible_tool("python"), "-m", "sparkgate.fleet.drafter_pin", "--profile", "dspark"],
                                        capture_output=True, text=True, check=True).stdout)
    try:
        done = _play(fleet_lab.inventory, playbook, variables)
    finally:
        fleet_lab.clear_host_vars()
    print(done.stdout[-4000:])
    assert done.returncode == 2, done.stderr[-2000:]
    failed = _failures(done.stdout)
    assert sorted(failed) == ["host2", "host3"], failed  # host1's good drafter passes every assertion
    assert re.search(r"host1 +: ok=\d+ +changed=0 +unreachable=0 +failed=0", done.stdout)
    download = f"hf download {pin['repo']} --revision {pin['revision']} --local-dir"
    bad_dir = f"{roots['host2']}/drafter"
    assert failed["host2"].startswith("host2: dspark.checksums: observed model.safetensors SHA-256 "), failed["host2"]
    # A download over the faulty directory would keep the edited file (its record matches the Hub): move it aside.
    assert failed["host2"].endswith(f"Fix: move the directory aside and re-download: mv -- {bad_dir} {bad_dir}.refused "
                                    f"&& {download} {bad_dir}"), failed["host2"]
    assert failed["host3"].startswith(f"host3: dspark.drafter_dir: observed {roots['host3']}/no-drafter missing, "
                                      f"expected the drafter {pin['repo']} at {pin['revision'][:12]}"), failed["host3"]
    assert f"Fix: {download} {roots['host3']}/no-drafter" in failed["host3"]


STAGE = """\
- name: Stage a release
  hosts: all
  gather_facts: true
  gather_subset: [min]
  tasks:
    - name: Run the stack role's staging
      ansible.builtin.include_role:
        name: sparkgate_stack
        tasks_from: stage.yml
"""


def test_compose_environment_mounts_the_checked_drafter_dir_only_for_a_dspark_release(tmp_path):
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "compose.yaml").write_text("services: {}\n")
    (tmp_path / "stage.yml").write_text(STAGE)
    envs = {}
    for profile in ("dspark", "all-three"):
        release = {"bundle": str(tmp_path / "bundle"), "host_bundle": str(tmp_path / "root" / profile),
                   "env_file": str(tmp_path / f"{profile}.env"),
                   "dspark_drafter": drafter_pin.pin(profiles.load(profile).profile, "spark")}
        (tmp_path / "vars.json").write_text(json.dumps({
            "sparkgate_stack_release": release, "sparkgate_root": str(tmp_path / "root"),
            "sparkgate_dspark_dir": "/srv/models/Ling-3.0-flash-dspark",
            "sparkgate_model_dir": "/srv/models/Ling-3.0-flash-fp4"}))
        done = subprocess.run([ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local",
                               "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"@{tmp_path / 'vars.json'}",
                               str(tmp_path / "stage.yml")], capture_output=True, text=True, timeout=300,
                              env={**ansible_env(), "ANSIBLE_ROLES_PATH": str(repo_root() / "ansible" / "roles")})
        assert done.returncode == 0, done.stdout[-2000:]
        envs[profile] = (tmp_path / f"{profile}.env").read_text().splitlines()
    # The checkpoint directory spark_host checked is the one compose mounts, whatever the inventory says.
    common = ["SPARKGATE_GATEWAY_PORT=18000", "SPARKGATE_GATEWAY_BIND=127.0.0.1",
              "SPARKGATE_MODEL_DIR=/srv/models/Ling-3.0-flash-fp4"]
    assert envs["dspark"] == [*common, "SPARKGATE_DSPARK_DIR=/srv/models/Ling-3.0-flash-dspark"]
    assert envs["all-three"] == common


def test_a_vault_key_is_written_to_the_host_0600_never_shown_and_named_in_the_compose_environment(tmp_path):
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "compose.yaml").write_text("services: {}\n")
    (tmp_path / "stage.yml").write_text(STAGE)
    key_file = tmp_path / "root" / "secrets" / "gateway-api-key"
    key = "sk-stage-test-0123456789abcdef"
    release = {"bundle": str(tmp_path / "bundle"), "host_bundle": str(tmp_path / "root" / "all-three"),
               "env_file": str(tmp_path / "all-three.env"), "dspark_drafter": None, "api_key_file": str(key_file)}
    (tmp_path / "vars.json").write_text(json.dumps({
        "sparkgate_stack_release": release, "sparkgate_root": str(tmp_path / "root"), "sparkgate_api_key": key,
        "sparkgate_model_dir": "/srv/models/Ling-3.0-flash-fp4"}))
    done = subprocess.run([ansible_tool("ansible-playbook"), "-i", "localhost,", "-c", "local", "-v",
                           "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"@{tmp_path / 'vars.json'}",
                           str(tmp_path / "stage.yml")], capture_output=True, text=True, timeout=300,
                          env={**ansible_env(), "ANSIBLE_ROLES_PATH": str(repo_root() / "ansible" / "roles")})
    assert done.returncode == 0, done.stdout[-2000:]
    assert key not in done.stdout + done.stderr  # even at -v: the tasks that hold it run under no_log
    assert key_file.read_text().strip() == key and (key_file.stat().st_mode & 0o777) == 0o600
    assert (key_file.parent.stat().st_mode & 0o777) == 0o700
    assert f"SPARKGATE_API_KEY_FILE={key_file}" in (tmp_path / "all-three.env").read_text().splitlines()

