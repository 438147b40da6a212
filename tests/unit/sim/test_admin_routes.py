"""The simulator's key rule is SGLang's: differential against sglang.srt.utils.auth.decide_request_auth."""

from __future__ import annotations

import itertools

from sglang.srt.utils.auth import AuthLevel, decide_request_auth

from sparkgate_sim import admin_routes

PATHS = ["/generate", "/v1/chat/completions", "/server_info", "/model_info", "/health", "/health_generate",
         "/metrics", "/update_weights_from_disk", "/set_internal_state", "/pause_generation", "/flush_cache"]
HEADERS = [None, "Bearer user-key", "Bearer admin-key", "bearer admin-key", "Basic admin-key", "Bearer", "Bearer  admin-key"]
KEYS = [None, "user-key"]
ADMIN_KEYS = [None, "admin-key"]


def test_decisions_match_sglang():
    for path, header, key, admin, method in itertools.product(PATHS, HEADERS, KEYS, ADMIN_KEYS, ("GET", "POST", "OPTIONS")):
        level = AuthLevel.ADMIN_OPTIONAL if admin_routes.auth_level(path) == admin_routes.ADMIN_OPTIONAL else AuthLevel.NORMAL
        want = decide_request_auth(method=method, path=path, authorization_header=header, api_key=key,
                                   admin_api_key=admin, auth_level=level)
        got = admin_routes.decide(method, path, header, key, admin)
        assert (got == 0) == want.allowed, (method, path, header, key, admin)
        if not want.allowed:
            assert got == want.error_status_code


def test_weight_update_moves_version_and_path():
    resolved = {"model_path": "/models/a", "weight_version": "default"}
    status, body = admin_routes.update_weights_from_disk(resolved, {"model_path": "/models/b", "weight_version": "v2"})
    assert status == 200 and body == {"success": True, "num_paused_requests": 0,
                                      "message": "Succeeded to update model weights. Weight version updated to v2."}
    assert resolved == {"model_path": "/models/b", "weight_version": "v2"}
    assert admin_routes.update_weights_from_disk(resolved, {})[0] == 400
