"""The gateway allow-list: one Python list, rendered into haproxy.cfg, and the rendered config decides
exactly like the list (parsed back from the file, not compared as text)."""

from __future__ import annotations

import json
import re

import pytest

from sparkgate.bundle import render
from sparkgate.profile import loading as profiles
from sparkgate.runtime import gateway_routes as R

ADMIN_AND_TRICKS = [
    ("GET", "/server_info"), ("GET", "/get_server_info"), ("GET", "/model_info"), ("GET", "/get_model_info"),
    ("POST", "/update_weights_from_disk"), ("POST", "/set_internal_state"), ("POST", "/pause_generation"),
    ("POST", "/continue_generation"), ("POST", "/flush_cache"), ("GET", "/flush_cache"),
    ("POST", "/start_profile"), ("GET", "/metrics"), ("POST", "/weights_checker"), ("GET", "/health_generate"),
    ("POST", "/abort_request"), ("POST", "/update_weight_version"), ("POST", "/release_memory_occupation"),
    ("GET", "//server_info"), ("GET", "/v1/../server_info"), ("GET", "/%2e%2e/server_info"),
    ("GET", "/v1/models/../../server_info"), ("GET", "/v1/models/.."), ("GET", "/v1/models/."),
    ("GET", "/v1/models/a%2F..%2Fserver_info"), ("GET", "/v1/models/a/b"), ("GET", "/v1/models/"),
    ("GET", "/V1/models"), ("POST", "/Generate"), ("POST", "//generate"), ("POST", "/generate/"),
    ("POST", "/v1/chat/completions/"), ("POST", "/v1/chat/completions;x"), ("GET", "/sparkgate/../server_info"),
    ("GET", "/admin/stats"), ("POST", "/admin/faults"), ("GET", "/"), ("GET", ""),
    # Around the status page: only its two exact paths reach the sentinel.
    ("GET", "/sparkgate/x"), ("GET", "/sparkgate//"), ("GET", "/sparkgate/.."), ("GET", "/sparkgate/%2e%2e/server_info"),
    ("GET", "/sparkgate/%2E%2E%2Fserver_info"), ("GET", "//sparkgate/"), ("GET", "/SPARKGATE/"), ("GET", "/sparkgate/ready/"),
    ("GET", "/sparkgate/./"), ("GET", "/sparkgate%2F"), ("GET", "/sparkgate/\\..\\server_info"), ("POST", "/sparkgate/"),
    ("PUT", "/sparkgate"), ("GET", "/sparkgate/healthz"), ("GET", "/healthz"),
]
CLIENT = [
    ("POST", "/v1/chat/completions", R.ENGINE), ("POST", "/v1/completions", R.ENGINE), ("GET", "/v1/models", R.ENGINE),
    ("GET", "/v1/models/ling-v3-flash-fp4", R.ENGINE), ("POST", "/generate", R.ENGINE), ("GET", "/health", R.ENGINE),
    ("GET", "/sparkgate/ready", R.STATUS), ("GET", "/sparkgate/verdict", R.STATUS), ("GET", "/sparkgate/metrics", R.STATUS),
    ("GET", "/sparkgate/", R.STATUS), ("HEAD", "/sparkgate/", R.STATUS), ("GET", "/sparkgate", R.STATUS),
    ("HEAD", "/sparkgate", R.STATUS),
]
WRONG_METHOD = [("GET", "/v1/chat/completions"), ("DELETE", "/v1/models"), ("GET", "/generate"), ("POST", "/health")]


@pytest.fixture(scope="module")
def config() -> str:
    return render.render_files(profiles.load("all-three"), render.RenderOptions(target="sim"))["haproxy.cfg"]


def _haproxy_string(token: str) -> str:
    """Undo haproxy's double-quote escaping (what its parser hands the action)."""
    assert token.startswith('"') and token.endswith('"'), token
    return re.sub(r"\\(.)", r"\1", token[1:-1])


SET_VAR = re.compile(
    r"""^\s*http-request set-var\(txn\.sparkgate_route\) str\("(?P<backend>\w+)"\) """
    r"""if \{ "(?P<fetch>path|path_reg)" (?P<path>"(?:[^"\\]|\\.)*") \} \{ method(?P<methods>( "[A-Z]+")+) \}$"""
)


def _rendered_routes(config: str) -> list[tuple[str, str, str, tuple[str, ...]]]:
    routes = []
    for line in config.splitlines():
        match = SET_VAR.match(line)
        if match:
            methods = tuple(m.strip('"') for m in match["methods"].split())
            routes.append((match["backend"], match["fetch"], _haproxy_string(match["path"]), methods))
    return routes


def _rendered_decision(config: str, method: str, path: str) -> str | None:
    """What the rendered frontend does: the last matching set-var wins (haproxy runs them in order)."""
    decision = None
    for backend, fetch, value, methods in _rendered_routes(config):
        hit = re.search(value, path) is not None if fetch == "path_reg" else path == value
        if hit and method in methods:
            decision = backend
    return decision


def test_every_listed_route_is_rendered_once(config):
    rendered = _rendered_routes(config)
    assert len(rendered) == len(R.ROUTES)
    assert {(r.backend, r.fetch, r.path, r.methods) for r in R.ROUTES} == set(rendered)


@pytest.mark.parametrize(("method", "path", "backend"), CLIENT)
def test_client_routes_pass(config, method, path, backend):
    assert R.allowed(method, path).backend == backend
    assert _rendered_decision(config, method, path) == backend


@pytest.mark.parametrize(("method", "path"), ADMIN_AND_TRICKS)
def test_admin_routes_and_path_tricks_are_answered_by_the_gateway(config, method, path):
    assert R.allowed(method, path) is None
    assert _rendered_decision(config, method, path) is None


@pytest.mark.parametrize(("method", "path"), WRONG_METHOD)
def test_wrong_method_is_refused_but_known(config, method, path):
    assert R.allowed(method, path) is None and R.known_path(path)
    assert _rendered_decision(config, method, path) is None


def test_refusals_come_before_any_backend_and_fail_closed(config):
    lines = [line.strip() for line in config.splitlines()]
    frontend = lines[lines.index("frontend api"):lines.index("backend engine")]
    last_set_var = max(i for i, line in enumerate(frontend) if line.startswith("http-request set-var"))
    refuse_404 = next(i for i, line in enumerate(frontend) if line.startswith("http-request return status 404"))
    refuse_405 = next(i for i, line in enumerate(frontend) if line.startswith("http-request return status 405"))
    first_backend = min(i for i, line in enumerate(frontend) if line.startswith(("use_backend", "default_backend")))
    assert last_set_var < refuse_405 < refuse_404 < first_backend
    assert frontend[refuse_404].endswith("unless { var(txn.sparkgate_route) -m found }")
    # Every use_backend requires the route variable: nothing unlisted can reach the engine or the sentinel.
    for line in frontend:
        if line.startswith("use_backend"):
            assert "{ var(txn.sparkgate_route) -m str " in line, line
    engine_line = next(line for line in frontend if line.startswith("use_backend engine "))
    assert "{ lua.sparkgate_gate_open -m bool }" in engine_line and "{ nbsrv(engine) gt 0 }" in engine_line
    assert "default_backend gate_closed" in frontend
    # Absolute-form targets are forwarded in origin form (the engine routes on the path judged here).
    assert "http-request set-uri %[pathq] unless { url_beg / }" in frontend


def test_gateway_answers_are_json_naming_sparkgate(config):
    for status in (404, 405):
        line = next(l for l in config.splitlines() if l.strip().startswith(f"http-request return status {status}"))
        token = re.search(r'string ("(?:[^"\\]|\\.)*")', line).group(1)
        body = json.loads(_haproxy_string(token))
        assert body["error"].startswith("sparkgate gateway: ")
        assert "POST /v1/chat/completions" in body["client_routes"]
    assert "admin and introspection routes" in json.loads(_haproxy_string(
        re.search(r'string ("(?:[^"\\]|\\.)*")', next(l for l in config.splitlines() if "status 404" in l)).group(1)
    ))["error"]


@pytest.mark.parametrize("bad", [
    R.Route("x", "/a'b", ("GET",), R.ENGINE, ""),
    R.Route("x", "/a b", ("GET",), R.ENGINE, ""),
    R.Route("x", "relative", ("GET",), R.ENGINE, ""),
    R.Route("x", "^/unanchored", ("GET",), R.ENGINE, "", pattern=True),
    R.Route("x", "^/dollar$", ("GET",), R.ENGINE, "", pattern=True),
    R.Route("x", "^/a\\d\\Z", ("GET",), R.ENGINE, "", pattern=True),
    R.Route("x", "/a", ("get",), R.ENGINE, ""),
    R.Route("x", "/a", ("GET",), "elsewhere", ""),
    R.Route("X-1", "/a", ("GET",), R.ENGINE, ""),
])
def test_values_that_would_change_the_config_are_refused(bad):
    with pytest.raises(ValueError):
        R.validate((bad,))


def test_streams_are_forwarded_without_delay(config):
    """`option http-no-delay` in defaults: without it the first SSE chunk waited (MSG_MORE), +4.4 ms TTFT."""
    lines = [line.strip() for line in config.splitlines()]
    defaults = lines[lines.index("defaults"):lines.index("resolvers docker")]
    assert "option http-no-delay" in defaults
