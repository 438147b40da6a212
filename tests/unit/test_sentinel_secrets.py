"""engine.admin_key_enforced: the engine's admin routes must refuse a request without the key the sentinel
holds and accept it with that key; the check is re-checked every period and fails closed. The sentinel
keeps no secret in its state: SGLang's /server_info echoes the admin key (field and launch_command)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sparkgate.evidence import admin_probe, engine_checks
from sparkgate.evidence.client import EngineClient
from sparkgate.evidence.gather import Evidence
from sparkgate.evidence.results import CheckResult
from sparkgate.evidence.verify import rechecked, stage_of
from sparkgate.runtime import admin_key
from sparkgate.sentinel import service
from sparkgate.sentinel.service import Sentinel, SentinelConfig

KEY = "the-admin-key-0123456789abcdef"


class AdminRouteEngine:
    """An HTTP engine whose admin route answers per a rule: 'sglang' (SGLang's rule for the configured
    key), 'open' (no key configured: serves anyone), or a fixed other key."""

    def __init__(self, configured_key: str | None):
        self.configured_key = configured_key
        self.seen: list[str | None] = []
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                return

            def do_GET(self):  # noqa: N802
                engine.seen.append(self.headers.get("Authorization"))
                allowed = engine.configured_key is None or \
                    self.headers.get("Authorization") == f"Bearer {engine.configured_key}"
                status = 200 if allowed and self.path == admin_probe.PROBE_ROUTE else 401 if not allowed else 404
                body = b"{}"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def engine_with():
    started = []

    def start(configured_key):
        engine = AdminRouteEngine(configured_key)
        started.append(engine)
        return engine

    yield start
    for engine in started:
        engine.close()


def key_file(tmp_path, key=KEY):
    path = tmp_path / "admin-key"
    path.write_text(key + "\n")
    return str(path)


def check_for(engine, key_path) -> CheckResult:
    ev = Evidence(expectations={})
    # The caller's client may carry the engine's API key: the probe must not reuse it.
    ev.admin_key = admin_probe.probe(EngineClient(engine.url, api_key="user-api-key", timeout=2), key_path)
    return engine_checks.admin_key_enforced(ev)


def test_passes_when_the_engine_enforces_the_sentinels_key(engine_with, tmp_path):
    engine = engine_with(KEY)
    result = check_for(engine, key_file(tmp_path))
    assert result.passed, result
    assert result.observed == {"without_key": 401, "with_key": 200}
    assert engine.seen == [None, f"Bearer {KEY}"]  # exactly one request without any header, one with the key
    assert KEY not in json.dumps(result.as_dict())


def test_fails_when_admin_routes_are_open(engine_with, tmp_path):
    result = check_for(engine_with(None), key_file(tmp_path))
    assert not result.passed and result.observed["without_key"] == 200
    assert "--config" in result.hint and "Fix:" in result.hint


def test_fails_when_the_engine_enforces_another_key(engine_with, tmp_path):
    result = check_for(engine_with("some-other-key"), key_file(tmp_path))
    assert not result.passed and result.observed == {"without_key": 401, "with_key": 401}
    assert "another admin key" in result.hint


def test_fails_closed_without_a_readable_key_file(engine_with, tmp_path):
    engine = engine_with(KEY)
    result = check_for(engine, str(tmp_path / "absent"))
    assert not result.passed and "absent" in json.dumps(result.observed)
    assert engine.seen == []  # nothing to prove with: no request made


def test_fails_when_the_engine_does_not_answer(tmp_path):
    ev = Evidence(expectations={})
    ev.admin_key = admin_probe.probe(EngineClient("http://127.0.0.1:9", timeout=1), key_file(tmp_path))
    result = engine_checks.admin_key_enforced(ev)
    assert not result.passed and result.observed["without_key"] == 0


def test_check_is_reported_only_when_probed_and_rechecked_every_period(tmp_path):
    expectations = {"engine": {"sglang_version": "0.5.23", "model_path": "/m", "served_model_name": "m",
                               "architecture": "A"},
                    "batch_size": 1, "speed": {}, "calibration": {"prompts": 1, "time_budget_s": 1}, "requested": []}
    ev = Evidence(expectations=expectations)
    assert "engine.admin_key_enforced" not in {c.name for c in engine_checks.run(ev)}  # a bare `sparkgate verify`
    ev.admin_key = admin_probe.AdminKeyProbe(key_file(tmp_path), error="unreadable")
    checks = {c.name: c for c in engine_checks.run(ev)}
    assert checks["engine.admin_key_enforced"].passed is False
    assert stage_of(checks["engine.admin_key_enforced"]).title == "identity and configuration"
    assert rechecked(checks["engine.admin_key_enforced"])  # the sentinel's re-check runs it


@pytest.fixture
def sentinel(tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "expectations.json").write_text(json.dumps({"profile": "baseline", "requested": [],
                                                          "engine": {"served_model_name": "m"}}))
    api_key = tmp_path / "api-key"
    api_key.write_text("the-user-api-key\n")
    config = SentinelConfig("http://engine:30000", bundle, "/nonexistent.log", period_s=5.0,
                            api_key_file=str(api_key), admin_key_file=key_file(tmp_path))
    return Sentinel(config)


LEAKY_INFO = {
    "admin_api_key": KEY,
    "api_key": "the-user-api-key",
    "launch_command": f"--admin-api-key {KEY} --model-path /m",
    "startup_time": {"t": 1},
}


def test_sentinel_keeps_no_secret_from_a_full_verification(sentinel, monkeypatch):
    from sparkgate.evidence.results import Verdict, checked

    def fake_verify(url, expectations, log, *, api_key=None, admin_key_file=None, **_):
        assert admin_key_file == sentinel.config.admin_key_file  # the check is always asked for
        return Verdict("baseline", url, "now", [checked("engine.identity", True, LEAKY_INFO, {}, "x", "y")],
                       engine={"launch_command": LEAKY_INFO["launch_command"]})

    suite = service.suites.SuiteResult("s", True, 0, 0.1, [service.suites.TestOutcome("t", "passed")],
                                       output_tail=f"engine argv ... {KEY}")
    monkeypatch.setattr(service, "verify", fake_verify)
    monkeypatch.setattr(service.suites, "run_suite", lambda *a, **k: suite)
    monkeypatch.setattr(sentinel, "_server_info", lambda: dict(LEAKY_INFO))
    monkeypatch.setattr(sentinel, "_weights", lambda: None)
    assert sentinel.full_verification()
    kept = json.dumps(sentinel.state.snapshot(), default=str)
    assert KEY not in kept and "the-user-api-key" not in kept
    assert admin_key.REDACTED in kept


def test_sentinel_redacts_its_reasons(sentinel):
    sentinel.state.set("closed", f"sentinel error: ValueError: bad {KEY}")
    assert KEY not in json.dumps(sentinel.state.snapshot(), default=str)


def test_sentinel_reads_the_key_afresh_after_an_engine_restart(sentinel, tmp_path):
    """A restarted engine container writes a new key: what the sentinel keeps from then on hides that one."""
    (tmp_path / "admin-key").write_text("a-new-key-after-restart\n")
    sentinel.state.set("closed", "saw a-new-key-after-restart")
    assert sentinel.state.snapshot()["reason"] == f"saw {admin_key.REDACTED}"


def sglang_route_levels() -> dict[tuple[str, str], str]:
    """(method, path) -> auth level name for every route in SGLang 0.5.23's http_server.py (AST: the
    `@app.get/post/api_route` decorators and `@auth_level(AuthLevel.X)`; unmarked routes are NORMAL)."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations
    source = Path(next(iter(spec.submodule_search_locations))) / "srt" / "entrypoints" / "http_server.py"
    levels = {}
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        level, routes = "NORMAL", []
        for deco in node.decorator_list:
            if not isinstance(deco, ast.Call):
                continue
            if isinstance(deco.func, ast.Name) and deco.func.id == "auth_level":
                level = deco.args[0].attr
            elif isinstance(deco.func, ast.Attribute) and deco.args and isinstance(deco.args[0], ast.Constant):
                methods = [deco.func.attr.upper()]
                for kw in deco.keywords:
                    if kw.arg == "methods":
                        methods = [m.value for m in kw.value.elts]
                routes += [(m, deco.args[0].value) for m in methods]
        levels.update(dict.fromkeys(routes, level))
    return levels


@pytest.mark.sglang
def test_the_probe_route_is_a_read_only_admin_route_in_sglang():
    levels = sglang_route_levels()
    assert levels[("GET", admin_probe.PROBE_ROUTE)] == "ADMIN_OPTIONAL"
    assert ("POST", admin_probe.PROBE_ROUTE) not in levels  # GET only: it changes nothing
    assert levels[("GET", "/server_info")] == "NORMAL"  # which is why /server_info leaks the key


@pytest.mark.sglang
def test_every_sim_admin_route_is_admin_level_in_sglang():
    from sparkgate_sim import admin_routes

    levels = sglang_route_levels()
    admin_paths = {path for (_method, path), level in levels.items() if level.startswith("ADMIN")}
    assert admin_paths >= admin_routes.ADMIN_OPTIONAL_ROUTES
