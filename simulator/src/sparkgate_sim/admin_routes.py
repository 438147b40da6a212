"""SGLang 0.5.23's admin routes and its key rule, as the simulator serves them.

The key rule follows `decide_request_auth` in sglang/srt/utils/auth.py: routes marked
`@auth_level(AuthLevel.ADMIN_OPTIONAL)` in sglang/srt/entrypoints/http_server.py need the admin key when
one is configured (the plain API key is then not accepted), the plain key when only that is configured,
and nothing otherwise; normal routes need the plain key only when one is configured; `/health*`,
`/ready*` and `/metrics*` are always open. Shapes follow the same http_server.py handlers.
"""

from __future__ import annotations

import secrets
import threading
from typing import Any

NORMAL = "normal"
ADMIN_OPTIONAL = "admin_optional"
ALWAYS_OPEN = ("/health", "/ready", "/metrics")

# The ADMIN_OPTIONAL routes the simulator serves (http_server.py marks these with @auth_level).
ADMIN_OPTIONAL_ROUTES = frozenset({
    "/flush_cache", "/update_weights_from_disk", "/set_internal_state", "/pause_generation",
    "/continue_generation", "/hicache/storage-backend",
})
# GET /hicache/storage-backend reports these config values (their ServerArgs defaults when not given).
HICACHE_FIELDS = {
    "hicache_storage_backend": None,
    "hicache_storage_backend_extra_config": None,
    "hicache_storage_prefetch_policy": "timeout",
    "hicache_write_policy": "write_through",
}

_lock = threading.Lock()


def auth_level(path: str) -> str:
    return ADMIN_OPTIONAL if path in ADMIN_OPTIONAL_ROUTES else NORMAL


def _bearer(header: str | None, expected: str) -> bool:
    """`Bearer <expected>` (`expected` is never empty)."""
    scheme, _, token = (header or "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(token, expected)


def decide(method: str, path: str, header: str | None, api_key: str | None, admin_api_key: str | None) -> int:
    """0 when allowed, else the HTTP status SGLang answers with (401)."""
    if method == "OPTIONS" or path.startswith(ALWAYS_OPEN):
        return 0
    key = (admin_api_key or api_key) if auth_level(path) == ADMIN_OPTIONAL else api_key
    return 0 if not key or _bearer(header, key) else 401


def update_weights_from_disk(resolved: dict[str, Any], body: dict) -> tuple[int, dict]:
    """POST /update_weights_from_disk: the served model path moves, and the weight version with it when
    given (tokenizer_manager: "Weight version updated to ..."); /model_info and meta_info report both."""
    model_path = body.get("model_path")
    if not isinstance(model_path, str) or not model_path:
        return 400, {"success": False, "message": "model_path is required", "num_paused_requests": 0}
    message = "Succeeded to update model weights."
    with _lock:
        resolved["model_path"] = model_path
        version = body.get("weight_version")
        if version is not None:
            resolved["weight_version"] = str(version)
            message += f" Weight version updated to {version}."
    return 200, {"success": True, "message": message, "num_paused_requests": 0}


def set_internal_state(resolved: dict[str, Any], body: dict) -> tuple[int, list]:
    """POST/PUT /set_internal_state: one reply per DP rank, {updated, server_args}."""
    changes = body.get("server_args") if isinstance(body.get("server_args"), dict) else {}
    with _lock:
        resolved.update(changes)
    return 200, [{"updated": bool(changes), "server_args": dict(changes)}]


def hicache_storage_backend(resolved: dict[str, Any]) -> tuple[int, dict]:
    """GET /hicache/storage-backend: read-only; without a configured admin key SGLang refuses it (400)
    even though its auth level lets the request through."""
    if not resolved.get("admin_api_key"):
        return 400, {"error": "This endpoint requires admin API key, but this server was started without one "
                              "(admin-api-key). Restart with --admin-api-key to enable."}
    return 200, {name: resolved.get(name, default) for name, default in HICACHE_FIELDS.items()}


def pause_generation() -> tuple[int, dict]:
    return 200, {"message": "Generation paused successfully.", "status": "ok"}


def continue_generation() -> tuple[int, dict]:
    return 200, {"message": "Generation continued successfully.", "status": "ok"}
