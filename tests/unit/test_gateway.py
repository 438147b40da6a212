"""Gateway entrypoint: API-key handling without writing the key anywhere but the runtime pattern file."""

from __future__ import annotations

from sparkgate import gateway


def test_loopback_without_key_needs_no_auth(tmp_path):
    require, refusal = gateway.prepare(tmp_path / "missing", tmp_path / "run" / "auth.lst", "127.0.0.1")
    assert (require, refusal) == (False, None)
    assert not (tmp_path / "run").exists()


def test_exposed_without_key_is_refused(tmp_path):
    empty = tmp_path / "key"
    empty.write_text("\n")
    require, refusal = gateway.prepare(empty, tmp_path / "auth.lst", "0.0.0.0")
    assert require is False and "refusing to publish on 0.0.0.0 without an API key" in refusal
    assert "Fix:" in refusal


def test_key_becomes_bearer_pattern(tmp_path):
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    authorized = tmp_path / "run" / "auth.lst"
    require, refusal = gateway.prepare(key, authorized, "0.0.0.0")
    assert (require, refusal) == (True, None)
    assert authorized.read_text() == "Bearer s3cret\n"
    assert oct(authorized.stat().st_mode)[-3:] == "600"


def test_rendered_gateway_config_never_contains_a_key(tmp_path, monkeypatch):
    from sparkgate import profiles, render

    monkeypatch.setenv("SPARKGATE_API_KEY_FILE", str(tmp_path / "key"))
    files = render.render_files(profiles.load("all-three"), render.RenderOptions(target="sim"))
    assert "s3cret" not in "".join(files.values())
    assert "${SPARKGATE_API_KEY_FILE:-/dev/null}" in files["compose.yaml"]
    assert "check addr sentinel port 8081" in files["haproxy.cfg"]
    assert "check_force_down" in files["gateway-gate.lua"]
