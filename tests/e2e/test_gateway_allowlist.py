"""The gateway's allow-list on a real stack: SGLang's admin and introspection routes, and every path trick
that could reach them, are answered by the gateway itself - proven by the engine's own counters of
requests that came through the gateway (HAProxy adds X-Forwarded-For)."""

from __future__ import annotations

import json
import socket

import pytest

from sparkgate.runtime import gateway_routes

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

MODEL = "ling-v3-flash-fp4"
ADMIN = [
    ("GET", "/server_info"), ("GET", "/get_server_info"), ("GET", "/model_info"), ("GET", "/metrics"),
    ("POST", "/update_weights_from_disk"), ("POST", "/set_internal_state"), ("POST", "/pause_generation"),
    ("POST", "/continue_generation"), ("POST", "/flush_cache"), ("POST", "/start_profile"),
    ("POST", "/weights_checker"), ("GET", "/health_generate"), ("GET", "/admin/stats"),
]
TRICKS = [
    ("GET", "//server_info"), ("GET", "/v1/../server_info"), ("GET", "/%2e%2e/server_info"),
    ("GET", "/v1/%2e%2e/server_info"), ("GET", "/v1/models/..%2F..%2Fserver_info"), ("GET", "/V1/MODELS"),
    ("GET", "/Server_Info"), ("POST", "/generate/../update_weights_from_disk"), ("GET", "/./server_info"),
    ("GET", "http://127.0.0.1:{port}/server_info"), ("GET", "http://127.0.0.1:{port}//v1/models"),
    ("GET", "/v1/models/../../server_info"), ("POST", "/v1/chat/completions/../../flush_cache"),
    # Around the status page (only /sparkgate/ and /sparkgate reach the sentinel).
    ("GET", "/sparkgate/../server_info"), ("GET", "/sparkgate/%2e%2e/server_info"), ("GET", "//sparkgate/"),
    ("GET", "/SPARKGATE/"), ("GET", "/sparkgate/x"), ("GET", "/sparkgate/healthz"),
]
WRONG_METHOD = [("GET", "/v1/chat/completions"), ("GET", "/generate"), ("DELETE", "/v1/models")]


def raw_request(port: int, method: str, target: str, body: dict | None = None) -> tuple[int, dict]:
    """One HTTP/1.1 request with the target sent byte for byte (no client-side path cleanup)."""
    payload = json.dumps(body).encode() if body is not None else b""
    head = (f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head + payload)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    header, _, rest = data.partition(b"\r\n\r\n")
    status = int(header.split()[1])
    try:
        return status, json.loads(rest or b"null")
    except json.JSONDecodeError:
        return status, {"raw": rest.decode("utf-8", "replace")}


def test_admin_routes_and_tricks_never_reach_the_engine(healthy_all_three):
    stack = healthy_all_three
    assert stack.result.admitted, stack.result.reason
    before = stack.engine_stats()
    for method, target in ADMIN + TRICKS:
        body = {"model_path": "/models/other"} if method == "POST" else None
        status, answer = raw_request(stack.port, method, target.format(port=stack.port), body)
        assert status == 404, (method, target, status, answer)
        assert answer["error"].startswith("sparkgate gateway: not a client route"), (target, answer)
    # An absolute-form target naming another authority than Host: HAProxy itself refuses it (400).
    assert raw_request(stack.port, "GET", "http://engine:30000/server_info")[0] == 400
    for method, target in WRONG_METHOD:
        status, answer = raw_request(stack.port, method, target)
        assert status == 405 and answer["error"].startswith("sparkgate gateway:"), (target, status, answer)
    after = stack.engine_stats()
    assert after["forwarded_requests"] == before["forwarded_requests"], (
        f"requests reached the engine through the gateway: {after['forwarded']} (before: {before['forwarded']})")
    # The weights were never touched either (the engine's own view, asked directly).
    assert after["state"] == before["state"] == "ready"


def test_client_routes_pass_and_absolute_form_is_forwarded_in_origin_form(healthy_all_three):
    stack = healthy_all_three
    assert stack.result.admitted, stack.result.reason
    before = stack.engine_stats()["forwarded"]
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    requests = [
        ("POST", "/v1/chat/completions", chat), ("POST", "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 4}),
        ("GET", "/v1/models", None), ("GET", f"/v1/models/{MODEL}", None), ("GET", "/health", None),
        ("POST", "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 4}}),
        ("GET", f"http://127.0.0.1:{stack.port}/v1/models", None),
    ]
    for method, target, body in requests:
        status, answer = raw_request(stack.port, method, target, body)
        assert status == 200, (target, status, answer)
    for path in ("/sparkgate/ready", "/sparkgate/verdict", "/sparkgate/metrics"):
        assert raw_request(stack.port, "GET", path)[0] == 200
    after = stack.engine_stats()["forwarded"]
    grew = {path: after.get(path, 0) - before.get(path, 0) for path in after}
    assert grew["/v1/models"] == 2, grew  # the absolute-form request arrived as plain /v1/models
    assert all(path.startswith("/") for path in after), after
    engine_routes = {r.path for r in gateway_routes.ROUTES if r.backend == gateway_routes.ENGINE and not r.pattern}
    assert {path for path, n in grew.items() if n} <= engine_routes | {f"/v1/models/{MODEL}"}, grew
    # The body limit: a body over the profile's gateway.max_body_mib (16 MiB) is answered 413 by the gateway and a
    # chunked one 411, before a byte reaches the engine; a 256K-token-sized prompt (about 1.3 MB) passes.
    before = stack.engine_stats()["forwarded_requests"]
    status, answer = raw_bytes(stack.port, "POST", "/v1/chat/completions",
                               {"Content-Length": str(17 * 1024 * 1024)}, b"{" * (17 * 1024 * 1024))
    assert status == 413 and "gateway.max_body_mib" in answer["error"], (status, answer)
    chunked = b"5\r\n{\"a\":\r\n0\r\n\r\n"
    status, answer = raw_bytes(stack.port, "POST", "/v1/chat/completions", {"Transfer-Encoding": "chunked"}, chunked)
    assert status == 411 and "Content-Length" in answer["error"], (status, answer)
    assert stack.engine_stats()["forwarded_requests"] == before
    long_prompt = {"model": MODEL, "messages": [{"role": "user", "content": "word " * 262144}], "max_tokens": 1}
    status, answer = raw_request(stack.port, "POST", "/v1/chat/completions", long_prompt)
    assert status != 413 and stack.engine_stats()["forwarded_requests"] == before + 1, (status, answer)


def raw_bytes(port: int, method: str, target: str, headers: dict[str, str], payload: bytes) -> tuple[int, dict]:
    """A request with exactly these body headers. The gateway judges the headers alone, so its answer comes before
    any body byte is sent; the body follows only if nothing answered within a few seconds."""
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall((f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
                      f"Content-Type: application/json\r\n{head}\r\n").encode())
        try:
            data = conn.recv(65536)
        except TimeoutError:
            conn.settimeout(30)
            conn.sendall(payload)
        while chunk := conn.recv(65536):
            data += chunk
    header, _, rest = data.partition(b"\r\n\r\n")
    return int(header.split()[1]), json.loads(rest)
