"""Preflight findings: each refusal is one line with a fix, and a dry run touches nothing."""

from __future__ import annotations

import socket

from sparkgate.deploy import preflight


def test_port_in_use_is_refused_with_a_fix():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        finding = preflight.port_free("127.0.0.1", port)
    assert not finding.ok and "in use" in finding.detail and "Fix:" in finding.detail


def test_free_port_passes():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert preflight.port_free("127.0.0.1", port).ok


def test_exposed_gateway_needs_a_key(tmp_path):
    assert preflight.api_key("127.0.0.1", None).ok
    refused = preflight.api_key("0.0.0.0", None)
    assert not refused.ok and "--api-key-file" in refused.detail
    key = tmp_path / "key"
    key.write_text("k\n")
    assert preflight.api_key("0.0.0.0", str(key)).ok


def test_spark_host_on_the_wrong_machine(monkeypatch, tmp_path):
    monkeypatch.setattr(preflight.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(preflight, "mem_available_gib", lambda: 22.5)
    monkeypatch.setattr(preflight.docker_cli, "run", lambda *a, **k: type("R", (), {"stdout": "{}", "returncode": 0})())
    cache = tmp_path / "cache"
    findings = {f.check: f for f in preflight.spark_host(tmp_path / "model", cache)}
    assert not findings["arch"].ok and "--target sim" in findings["arch"].detail
    assert not findings["nvidia runtime"].ok
    assert not findings["model"].ok and "SPARKGATE_MODEL_DIR" in findings["model"].detail
    assert not findings["memory"].ok and "22.5 GiB < 85 GiB" in findings["memory"].detail
    assert findings["humming cache"].ok and not cache.exists(), "preflight must not create directories"


def test_unreadable_meminfo_fails_closed(monkeypatch):
    monkeypatch.setattr(preflight, "mem_available_gib", lambda: None)
    finding = preflight.memory()
    assert not finding.ok and "cannot read MemAvailable" in finding.detail


def test_redeploy_defers_the_memory_check_to_after_the_old_engine_stops(monkeypatch, tmp_path):
    """The running engine holds the memory the new one needs; checking it first would refuse every redeploy."""
    monkeypatch.setattr(preflight, "mem_available_gib", lambda: 22.5)
    monkeypatch.setattr(preflight.docker_cli, "run", lambda *a, **k: type("R", (), {"stdout": "{}", "returncode": 0})())
    deferred = {f.check: f for f in preflight.spark_host(tmp_path, tmp_path, memory_held_by_own_engine=True)}
    assert deferred["memory"].ok and "deferred" in deferred["memory"].detail
    first = {f.check: f for f in preflight.spark_host(tmp_path, tmp_path)}
    assert not first["memory"].ok


def test_port_held_by_another_project_is_refused(monkeypatch):
    class FakeProject:
        name = "sparkgate-other"

        def published_ports(self, service):
            return {1}  # publishes some other port, not the one in use

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        refused = preflight.gateway_port("127.0.0.1", port, FakeProject())
        FakeProject.published_ports = lambda self, service: {port}
        ours = preflight.gateway_port("127.0.0.1", port, FakeProject())
    assert not refused.ok and "in use" in refused.detail
    assert ours.ok and "own gateway" in ours.detail


def _time_wait_port() -> int:
    """A loopback port whose only trace is a server-side TIME_WAIT connection (the server closed first)."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    served.close()  # the side that closes first keeps TIME_WAIT on 127.0.0.1:port
    client.recv(1)
    client.close()
    listener.close()
    return port


def test_port_with_only_time_wait_connections_is_free():
    port = _time_wait_port()
    finding = preflight.port_free("127.0.0.1", port)
    assert finding.ok, finding.detail


def test_port_with_a_listener_is_in_use():
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        finding = preflight.port_free("127.0.0.1", listener.getsockname()[1])
    assert not finding.ok and "is in use" in finding.detail
