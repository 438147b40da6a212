"""Gateway entrypoint: API-key handling without writing the key anywhere but the tmpfs pattern file."""

from __future__ import annotations

import os
import stat

import pytest

from sparkgate.runtime import gateway, secret_files


def _tmpfs_at(path) -> str:
    """A mountinfo that puts `path` on tmpfs (the rendered compose's /run/sparkgate)."""
    return (
        "22 1 0:21 / / rw,relatime - overlay overlay rw\n"
        f"40 22 0:40 / {path} rw,nosuid,nodev,noexec - tmpfs tmpfs rw,mode=700\n"
    )


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


def test_key_becomes_bearer_pattern_created_0600(tmp_path, monkeypatch):
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    run = tmp_path / "run"
    authorized = run / "auth.lst"
    modes = []
    real_open = os.open

    def spy_open(path, flags, mode=0o777, *args, **kwargs):
        modes.append((str(path), flags, mode))
        return real_open(path, flags, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy_open)
    monkeypatch.setattr(os, "chmod", lambda *a, **k: pytest.fail("the secret was chmod-ed after creation"))
    require, refusal = gateway.prepare(key, authorized, "0.0.0.0", mountinfo=_tmpfs_at(run))
    assert (require, refusal) == (True, None)
    assert authorized.read_text() == "Bearer s3cret\n"
    assert stat.S_IMODE(authorized.stat().st_mode) == 0o600
    # Created with 0600 and O_EXCL in the open call itself: never readable by others, not even briefly.
    created = [m for m in modes if m[1] & os.O_CREAT]
    assert created and all(m[2] == 0o600 and m[1] & os.O_EXCL for m in created), created
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    assert not [p for p in run.iterdir() if p.name != "auth.lst"], "a temp copy of the secret was left behind"


def test_pattern_file_refused_off_tmpfs(tmp_path):
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    authorized = tmp_path / "run" / "auth.lst"
    disk = "22 1 0:21 / / rw,relatime - overlay overlay rw\n"
    require, refusal = gateway.prepare(key, authorized, "0.0.0.0", mountinfo=disk)
    assert require is False
    assert "not tmpfs" in refusal and "overlay" in refusal and "Fix:" in refusal
    assert not authorized.exists()


def test_filesystem_type_picks_the_longest_mount():
    info = _tmpfs_at("/run/sparkgate") + "41 22 0:41 / /run rw - ext4 /dev/sda1 rw\n"
    assert secret_files.filesystem_type("/run/sparkgate/authorized.lst", info) == "tmpfs"
    assert secret_files.filesystem_type("/run/other", info) == "ext4"
    assert secret_files.filesystem_type("/run/sparkgatex", info) == "ext4"
    assert secret_files.filesystem_type("/etc/x", info) == "overlay"


def test_rendered_bundle_never_contains_the_key(tmp_path, monkeypatch):
    """The key file exists and holds a key: nothing rendered may carry it (only the file's path, as a
    compose variable reference)."""
    from sparkgate.bundle import render
    from sparkgate.profile import loading as profiles
    key = tmp_path / "key"
    key.write_text("s3cret-never-rendered\n")
    monkeypatch.setenv("SPARKGATE_API_KEY_FILE", str(key))
    monkeypatch.setenv("SPARKGATE_GATEWAY_BIND", "0.0.0.0")
    for target in ("sim", "spark"):
        files = render.render_files(profiles.load("all-three"), render.RenderOptions(target=target))
        assert "s3cret-never-rendered" not in "".join(files.values())
        assert str(key) not in "".join(files.values())  # not even the path: compose reads the variable
        assert "${SPARKGATE_API_KEY_FILE:-/dev/null}" in files["compose.yaml"]
