"""The running engine is the one the bundle describes: argv, environment, mounts, privileges."""

from __future__ import annotations

import json

import pytest

from sparkgate.runtime import admin_key
from sparkgate.sglang import flags as F
from sparkgate.sglang.parser import resolve_spelling
from sparkgate.suites.infra.conftest import inspect, mounts, proc_environ

pytestmark = pytest.mark.infra

KERNEL_CACHES = ("/root/.humming", "/root/.cache/flashinfer")
FULL_CAPABILITIES = 0x1FFFFFFFFF


def test_engine_argv_equals_bundle(engine_processes, bundle):
    # The entrypoint appends only its admin-key config file (sparkgate.runtime.admin_key), never a key.
    config = ["--config", str(admin_key.ADMIN_DIR / admin_key.CONFIG_FILE_NAME)]
    assert engine_processes.server_argv == json.loads((bundle / "argv.json").read_text()) + config


def test_engine_env_carries_profile_env(engine_host, engine_processes, bundle_env):
    environ = proc_environ(engine_host, engine_processes.supervisor)
    missing = {k: v for k, v in bundle_env.items() if environ.get(k) != v}
    assert not missing, f"engine environment differs from engine-env.json: {missing}"


def test_fp8_env_never_meets_fp32_flag(engine_host, engine_processes):
    for pid in (engine_processes.supervisor, engine_processes.server):
        environ = proc_environ(engine_host, pid)
        fp8 = any(F.canonical_env_name(k) == F.FP8_LM_HEAD_ENV and F.env_is_true(v) for k, v in environ.items())
        fp32 = any(
            (spec := resolve_spelling(token.partition("=")[0])[0]) is not None and spec.option == F.ENABLE_FP32_LM_HEAD
            for token in engine_processes.server_argv if token.startswith("--")
        )
        assert not (fp8 and fp32)


def test_model_mounted_read_only(engine_host, engine_processes, expectations):
    table = mounts(engine_host, engine_processes.server)
    model = expectations["engine"]["model_path"]
    assert model in table, f"{model} is not a mount point"
    assert "ro" in table[model]


def test_dspark_drafter_mounted_read_only_only_when_requested(engine_host, engine_processes, expectations):
    table = mounts(engine_host, engine_processes.server)
    dspark = expectations["optimizations"]["dspark"]
    if dspark["requested"]:
        assert dspark["draft_model_path"] in table, f"{dspark['draft_model_path']} (the drafter) is not a mount point"
        assert "ro" in table[dspark["draft_model_path"]]
    else:
        assert dspark["draft_model_path"] not in table, "a drafter directory is mounted without DSpark"


def test_kernel_caches_mounted_writable(engine_host, engine_processes):
    table = mounts(engine_host, engine_processes.server)
    for path in KERNEL_CACHES:
        assert path in table, f"{path} is not a mount: kernels would recompile on every start"
        assert "rw" in table[path]


def test_engine_runs_without_full_capabilities(engine_host, engine_processes):
    status = engine_host.file(f"/proc/{engine_processes.server}/status").content_string
    cap_eff = int(next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), 16)
    assert cap_eff & FULL_CAPABILITIES != FULL_CAPABILITIES, "engine has every capability (privileged?)"


@pytest.mark.host_only
def test_engine_publishes_nothing(project_containers):
    engine = inspect(project_containers["engine"])
    assert not engine["HostConfig"].get("PortBindings"), engine["HostConfig"].get("PortBindings")
    assert not any(engine["NetworkSettings"].get("Ports", {}).values())


@pytest.mark.host_only
def test_gateway_is_the_only_listener(project_containers):
    import os

    bind = os.environ.get("SPARKGATE_GATEWAY_BIND", "127.0.0.1")
    port = os.environ.get("SPARKGATE_GATEWAY_PORT")
    published = {}
    for service, container in project_containers.items():
        bindings = inspect(container)["HostConfig"].get("PortBindings") or {}
        if bindings:
            published[service] = bindings
    # The opt-in monitoring profile's Prometheus publishes too, on loopback only (docs/monitoring.md).
    prometheus = published.pop("prometheus", {})
    assert all(b["HostIp"] == "127.0.0.1" for ports in prometheus.values() for b in ports), prometheus
    assert list(published) == ["gateway"], published
    addresses = [(b["HostIp"], b["HostPort"]) for ports in published["gateway"].values() for b in ports]
    assert len(addresses) == 1 and addresses[0][0] == bind
    if port:
        assert addresses[0][1] == port


@pytest.mark.host_only
def test_containers_not_privileged(project_containers):
    for service, container in project_containers.items():
        config = inspect(container)["HostConfig"]
        assert config["Privileged"] is False, service
        assert not config.get("CapAdd"), f"{service} adds capabilities {config.get('CapAdd')}"
