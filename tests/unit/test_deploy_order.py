"""Deploy ordering, against a recording fake of the docker CLI: nothing running is touched (no `compose down`)
until the profile, the preflight and the render have all succeeded, so a refused redeploy leaves the admitted
stack serving."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from sparkgate.bundle import render
from sparkgate.deploy import deploy as deploy_mod
from sparkgate.deploy import docker_cli, preflight

PROJECT = "sparkgate-t-order"


class FakeDocker:
    """Answers the docker CLI calls deploy makes; records every call that changes something, in order."""

    def __init__(self, gateway_port: int | None, running: bool = True):
        self.gateway_port = gateway_port
        self.running = running
        self.calls: list[str] = []

    def __call__(self, argv, *, check=True, timeout=600, env=None):
        def done(stdout="", returncode=0):
            return subprocess.CompletedProcess(argv, returncode, stdout, "")

        if argv[:1] == ["version"]:
            return done("28.2.2\n")
        if argv[:2] == ["compose", "version"]:
            return done("2.40.3\n")
        if argv[:2] == ["image", "inspect"]:
            return done("sha256:" + "0" * 64 + "\n")
        if argv[:1] == ["ps"]:
            return done("c-gateway\n" if self.running else "")
        if argv[:1] == ["inspect"]:
            ports = {"8080/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(self.gateway_port)}]} if self.running else {}
            return done(json.dumps([{"NetworkSettings": {"Ports": ports}, "State": {"Status": "running"}}]))
        if argv[:1] == ["info"]:
            return done('{"nvidia": {}}')
        if argv[:1] == ["compose"]:
            action = argv[argv.index("-f") + 2]
            self.calls.append(f"compose {action}")
            if action == "down":
                self.running = False
            return done()
        raise AssertionError(f"unexpected docker call {argv}")


@pytest.fixture
def held_port():
    """A port held on 127.0.0.1, as the running gateway's docker-proxy holds its published port."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.fixture
def harness(monkeypatch, tmp_path):
    """Installs a FakeDocker, records render calls in the same order list, and stops a deploy right after `up`."""

    def install(fake: FakeDocker) -> FakeDocker:
        monkeypatch.setattr(docker_cli, "run", fake)
        real_render = render.render

        def recording_render(*args, **kwargs):
            out = real_render(*args, **kwargs)
            fake.calls.append("render")
            return out

        monkeypatch.setattr(render, "render", recording_render)

        def proved(options, project, loaded, url, started, timings, say):
            fake.calls.append("prove")
            return deploy_mod.DeployResult(True, project.name, project.compose_file.parent, url, "admitted")

        monkeypatch.setattr(deploy_mod, "_wait_and_prove", proved)
        monkeypatch.setattr(deploy_mod, "_write_record", lambda *a, **k: None)
        return fake

    return install


def options(tmp_path: Path, port: int, **extra) -> deploy_mod.DeployOptions:
    return deploy_mod.DeployOptions(**{"profile": "baseline", "target": "sim", "project": PROJECT,
                                       "out": tmp_path / "bundle", "port": port, **extra})


def previous_bundle(tmp_path: Path) -> dict[str, bytes]:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "compose.yaml").write_text("# the running stack's bundle\n")
    return {"compose.yaml": (bundle / "compose.yaml").read_bytes()}


def test_redeploy_stops_the_old_stack_only_after_preflight_and_render(tmp_path, held_port, harness):
    fake = harness(FakeDocker(gateway_port=held_port))
    lines: list[str] = []
    result = deploy_mod.deploy(options(tmp_path, held_port), say=lines.append)
    assert result.admitted
    assert fake.calls == ["render", "compose down", "compose up", "prove"]
    port_line = next(line for line in lines if "gateway port" in line)
    assert port_line.strip().startswith("[ok]") and f"held by {PROJECT}'s own gateway" in port_line
    assert atomic_leftovers(tmp_path) == [], "the retired bundle is removed once the old stack is down"


def test_refused_preflight_never_touches_the_running_stack(tmp_path, held_port, harness):
    fake = harness(FakeDocker(gateway_port=held_port))
    before = previous_bundle(tmp_path)
    with pytest.raises(deploy_mod.DeployRefused) as refused:
        deploy_mod.deploy(options(tmp_path, held_port, bind="0.0.0.0"), say=lambda _: None)  # no API key file
    message = str(refused.value)
    assert "api key" in message and "--api-key-file" in message and f"{PROJECT} was not touched" in message
    assert "\n" not in message
    assert fake.calls == [], "a refused redeploy must not render, stop or start anything"
    assert {p.name: p.read_bytes() for p in (tmp_path / "bundle").iterdir()} == before


def test_port_held_by_something_else_is_still_refused(tmp_path, held_port, harness):
    fake = harness(FakeDocker(gateway_port=held_port + 1))  # this project's gateway publishes another port
    with pytest.raises(deploy_mod.DeployRefused) as refused:
        deploy_mod.deploy(options(tmp_path, held_port), say=lambda _: None)
    assert f"127.0.0.1:{held_port} is in use" in str(refused.value)
    assert fake.calls == []


def test_refused_render_never_touches_the_running_stack(tmp_path, held_port, harness, monkeypatch):
    fake = harness(FakeDocker(gateway_port=held_port))
    before = previous_bundle(tmp_path)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(render, "write_atomically", disk_full)
    with pytest.raises(deploy_mod.DeployRefused) as refused:
        deploy_mod.deploy(options(tmp_path, held_port), say=lambda _: None)
    assert "No space left on device" in str(refused.value) and "was not touched" in str(refused.value)
    assert fake.calls == []
    assert {p.name: p.read_bytes() for p in (tmp_path / "bundle").iterdir()} == before


def test_dry_run_touches_nothing(tmp_path, held_port, harness):
    fake = harness(FakeDocker(gateway_port=held_port))
    lines: list[str] = []
    result = deploy_mod.deploy(options(tmp_path, held_port, dry_run=True), say=lines.append)
    assert not result.admitted and result.reason.startswith("dry run")
    assert fake.calls == []
    assert not (tmp_path / "bundle").exists()
    assert any("would stop the running stack" in line for line in lines)


def test_first_deploy_clears_stale_containers_before_up(tmp_path, harness):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    fake = harness(FakeDocker(gateway_port=None, running=False))
    assert deploy_mod.deploy(options(tmp_path, port), say=lambda _: None).admitted
    assert fake.calls == ["render", "compose down", "compose up", "prove"]


def test_spark_redeploy_defers_memory_until_the_old_engine_stopped(tmp_path, held_port, harness, monkeypatch):
    fake = harness(FakeDocker(gateway_port=held_port))
    seen = {}

    def host(model_dir, cache_dir, mem_min_gib, memory_held_by_own_engine=False, mem_why=""):
        seen["deferred"] = memory_held_by_own_engine
        return []

    def wait(say, mem_min_gib, why):
        fake.calls.append("wait for memory")
        return preflight.PreflightFinding("memory", False, "MemAvailable 40.0 GiB < 85 GiB")

    monkeypatch.setattr(preflight, "spark_host", host)
    monkeypatch.setattr(deploy_mod, "_wait_for_memory", wait)
    with pytest.raises(deploy_mod.DeployRefused) as refused:
        deploy_mod.deploy(options(tmp_path, held_port, target="spark"), say=lambda _: None)
    assert seen["deferred"] is True
    assert fake.calls == ["render", "compose down", "wait for memory"], "never up without the memory"
    assert "40.0 GiB < 85 GiB" in str(refused.value) and "was stopped" in str(refused.value)


def atomic_leftovers(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
