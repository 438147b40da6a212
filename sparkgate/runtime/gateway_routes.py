"""The gateway's allow-list: the only routes a client may reach through the published port.

One place, read by the renderer (haproxy.cfg) and by the tests. Everything not listed here - every SGLang
admin or introspection route (`/server_info`, `/update_weights_from_disk`, `/set_internal_state`,
`/pause_generation`, the engine's own `/metrics`, ...) - is answered by the gateway itself and never
reaches the engine. Paths are compared after HAProxy's URI normalization (percent-decoding of
unreserved characters, merged slashes, `.`/`..` segments resolved), exactly and case-sensitively, so
`//server_info`, `/v1/../server_info`, `/%2e%2e/server_info` and `/V1/models` all fall outside the list.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

ENGINE = "engine"  # forwarded to the engine while the gate is open (else the closed-gate 503)
STATUS = "status"  # forwarded to the sentinel's read-only status port, whatever the gate state

# OpenAI model ids as clients send them for this deployment: one path segment of safe characters, not
# starting with a dot (no `.`/`..` segments). SGLang's route takes `{model:path}`, but a served name with
# a slash or a percent sign is not ours.
# `\Z` (end of subject in both PCRE2 and Python), not `$`: haproxy expands `$` inside the double quotes
# every template value arrives in.
MODEL_ID_PATTERN = r"^/v1/models/[A-Za-z0-9_:-][A-Za-z0-9._:-]*\Z"

END = "\\Z"
_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")
_METHOD = re.compile(r"^[A-Z]+$")


@dataclass(frozen=True)
class Route:
    name: str
    path: str  # the exact normalized path, or an anchored regex when `pattern`
    methods: tuple[str, ...]
    backend: str
    why: str
    pattern: bool = False

    @property
    def fetch(self) -> str:
        """The HAProxy sample fetch that matches this route's path."""
        return "path_reg" if self.pattern else "path"

    def matches(self, method: str, path: str) -> bool:
        """Does a normalized (method, path) fall on this route? (for tests and docs)"""
        hit = re.fullmatch(self.path, path) is not None if self.pattern else path == self.path
        return hit and method in self.methods


ROUTES: tuple[Route, ...] = (
    Route("chat", "/v1/chat/completions", ("POST",), ENGINE, "OpenAI chat completions"),
    Route("completions", "/v1/completions", ("POST",), ENGINE, "OpenAI completions"),
    Route("models", "/v1/models", ("GET",), ENGINE, "OpenAI model list"),
    Route("model_card", MODEL_ID_PATTERN, ("GET",), ENGINE, "OpenAI model card", pattern=True),
    Route("generate", "/generate", ("POST",), ENGINE, "SGLang native generation"),
    # /health (not /health_generate, which is the same probe under a second name): while the gate is
    # closed it is the closed-gate 503, so a load balancer in front reads admission, not liveness.
    Route("health", "/health", ("GET",), ENGINE, "health for load balancers (503 while the gate is closed)"),
    Route("sparkgate_ready", "/sparkgate/ready", ("GET",), STATUS, "sparkgate admission flag"),
    Route("sparkgate_verdict", "/sparkgate/verdict", ("GET",), STATUS, "sparkgate latest verdict"),
    Route("sparkgate_metrics", "/sparkgate/metrics", ("GET",), STATUS, "sparkgate Prometheus metrics"),
    # The status page (sentinel/page.py, read-only HTML); the bare path is the sentinel's redirect to it.
    Route("sparkgate_page", "/sparkgate/", ("GET", "HEAD"), STATUS, "sparkgate status page"),
    Route("sparkgate_page_bare", "/sparkgate", ("GET", "HEAD"), STATUS, "redirect to the sparkgate status page"),
)


def allowed(method: str, path: str) -> Route | None:
    """The route a normalized request falls on, or None (the gateway answers it itself)."""
    return next((route for route in ROUTES if route.matches(method, path)), None)


def known_path(path: str) -> bool:
    """A listed path asked with another method (answered 405 rather than 404)."""
    return any(route.matches(route.methods[0], path) for route in ROUTES)


def validate(routes: tuple[Route, ...] = ROUTES) -> None:
    """The values land in haproxy.cfg: refuse anything that could change its meaning."""
    names = [route.name for route in routes]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate gateway route names: {names}")
    for route in routes:
        if not _IDENTIFIER.match(route.name) or route.backend not in (ENGINE, STATUS):
            raise ValueError(f"gateway route {route.name!r}: bad name or backend {route.backend!r}")
        if not route.methods or not all(_METHOD.match(m) for m in route.methods):
            raise ValueError(f"gateway route {route.name!r}: bad methods {route.methods}")
        text = route.path
        body = text[: -len(END)] if route.pattern and text.endswith(END) else text
        if not (text.startswith("^/") and text.endswith(END)) if route.pattern else not text.startswith("/"):
            raise ValueError(f"gateway route {route.name!r}: path {text!r} must be absolute (anchored ^...\\Z if a regex)")
        if any(ch in body for ch in ' "\'\\#%$<>&'):
            raise ValueError(f"gateway route {route.name!r}: path {text!r} holds a character haproxy.cfg would read")


def _answer(reason: str) -> str:
    """A JSON body the gateway answers with itself, naming sparkgate and why."""
    return json.dumps({"error": f"sparkgate gateway: {reason}", "client_routes": LISTED})


LISTED = [f"{' '.join(r.methods)} {'/v1/models/{id}' if r.pattern else r.path}" for r in ROUTES]


def haproxy_context() -> dict:
    """The allow-list and the gateway's own answers, as plain values for the haproxy.cfg template."""
    validate()
    return {
        "routes": [
            {"name": r.name, "fetch": r.fetch, "path": r.path, "methods": list(r.methods), "backend": r.backend}
            for r in ROUTES
        ],
        "engine_backend": ENGINE,
        "status_backend": STATUS,
        "not_listed_body": _answer(
            "not a client route: admin and introspection routes are reachable only inside the stack"
        ),
        "wrong_method_body": _answer("method not allowed on this route"),
        "unauthorized_body": json.dumps({"error": "sparkgate gateway: missing or wrong API key"}),
        "too_large_body": json.dumps({"error": "sparkgate gateway: request body larger than this deployment takes "
                                               "(the profile's gateway.max_body_mib)"}),
        "length_required_body": json.dumps({"error": "sparkgate gateway: a request body needs a Content-Length "
                                                     "(chunked uploads are not taken)"}),
    }
