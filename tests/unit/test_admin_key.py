"""The engine's admin key: made by the engine entrypoint on tmpfs only, 0600 from creation, handed to the
engine as `--config FILE` (never on the argv), redacted from every forwarded log line; the compose files
share it with the sentinel only, read-only."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import yaml

from sparkgate.bundle import render
from sparkgate.paths import repo_root
from sparkgate.profile import loading as profiles
from sparkgate.runtime import admin_key, engine_entrypoint, engine_run
from sparkgate.runtime.secret_files import SecretFileError


def tmpfs_at(directory: Path) -> str:
    """/proc/self/mountinfo text with a tmpfs mounted at `directory` (and ext4 at /)."""
    return f"20 1 8:1 / / rw - ext4 /dev/sda1 rw\n30 20 0:40 / {directory} rw,nosuid - tmpfs tmpfs rw,mode=700\n"


# A stand-in engine: records its real argv (unredacted, to a file beside the config) and prints the key
# the way SGLang does in its startup line `server_args=ServerArgs(... admin_api_key='...' ...)`.
FAKE_ENGINE = """
import json, sys, yaml
config = sys.argv[sys.argv.index('--config') + 1]
key = yaml.safe_load(open(config))['admin-api-key']
open(config + '.argv.json', 'w').write(json.dumps(sys.argv[1:]))
print(f"server_args={{'admin_api_key': {key!r}, 'port': 30000}}")
print('launch_command: sglang serve --admin-api-key ' + key)
print('fired up')
"""


@pytest.fixture
def fake_engine(monkeypatch):
    monkeypatch.delenv("SGLANG_ENABLE_FP8_LM_HEAD", raising=False)
    monkeypatch.setitem(engine_entrypoint.LAUNCHERS, "sim", ["-c", FAKE_ENGINE])


def test_install_writes_key_and_config_0600_on_tmpfs(tmp_path):
    directory = tmp_path / "admin"
    key, config = admin_key.install(directory, tmpfs_at(directory))
    key_file = directory / admin_key.KEY_FILE_NAME
    assert len(key) >= 40 and key_file.read_text() == key + "\n"
    assert config.suffix == ".yaml"  # SGLang refuses any other suffix for --config
    assert yaml.safe_load(config.read_text()) == {"admin-api-key": key}
    for path in (key_file, config):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert admin_key.read_key(key_file) == key
    # A restart makes a different key (the old one is replaced, never reused).
    again, _ = admin_key.install(directory, tmpfs_at(directory))
    assert again != key and admin_key.read_key(key_file) == again


def test_install_creates_files_0600_whatever_the_umask(tmp_path):
    directory = tmp_path / "admin"
    old = os.umask(0)
    try:
        admin_key.install(directory, tmpfs_at(directory))
    finally:
        os.umask(old)
    assert {stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()} == {0o600}


def test_install_refuses_a_directory_that_is_not_tmpfs(tmp_path):
    directory = tmp_path / "admin"
    with pytest.raises(SecretFileError) as refused:
        admin_key.install(directory, "20 1 8:1 / / rw - ext4 /dev/sda1 rw\n")
    assert "not tmpfs" in str(refused.value) and "\n" not in str(refused.value)
    assert not directory.exists() or not any(directory.iterdir())


def test_read_key_missing_is_one_line_with_a_fix(tmp_path):
    with pytest.raises(admin_key.AdminKeyError) as missing:
        admin_key.read_key(tmp_path / "absent")
    assert "Fix:" in str(missing.value) and "\n" not in str(missing.value)


def test_entrypoint_passes_only_the_config_path_and_redacts_every_line(fake_engine, tmp_path, capfd):
    directory = tmp_path / "admin"
    log = tmp_path / "logs" / "engine.log"
    argv = ["--model-path", "/models/m", "--port", "30000"]
    code = engine_entrypoint.run("sim", log, argv, admin_dir=directory, mountinfo=tmpfs_at(directory))
    assert code == 0
    key = admin_key.read_key(directory / admin_key.KEY_FILE_NAME)
    config = directory / admin_key.CONFIG_FILE_NAME
    child_argv = json.loads((directory / (admin_key.CONFIG_FILE_NAME + ".argv.json")).read_text())
    assert child_argv == [*argv, "--config", str(config)]
    assert not any(key in token for token in child_argv)
    out = capfd.readouterr().out
    for text in (out, log.read_text()):
        assert key not in text
        assert f"'admin_api_key': '{admin_key.REDACTED}'" in text
        assert f"--admin-api-key {admin_key.REDACTED}" in text
        assert "fired up" in text


def test_entrypoint_without_log_file_still_redacts(fake_engine, tmp_path, capfd):
    directory = tmp_path / "admin"
    assert engine_entrypoint.run("sim", None, ["--model-path", "/m"], admin_dir=directory,
                                 mountinfo=tmpfs_at(directory)) == 0
    key = admin_key.read_key(directory / admin_key.KEY_FILE_NAME)
    out = capfd.readouterr().out
    assert "fired up" in out and key not in out


def test_entrypoint_refuses_when_the_key_directory_is_not_tmpfs(fake_engine, tmp_path, capfd, monkeypatch):
    launched = []
    monkeypatch.setattr(engine_entrypoint.subprocess, "Popen", lambda *a, **k: launched.append(a))
    directory = tmp_path / "admin"
    code = engine_entrypoint.run("sim", tmp_path / "engine.log", ["--model-path", "/m"], admin_dir=directory,
                                 mountinfo="20 1 8:1 / / rw - overlay overlay rw\n")
    err = capfd.readouterr().err
    assert code == engine_run.EXIT_REFUSED and launched == []
    assert err.count("\n") == 1 and "not tmpfs" in err and "Fix:" in err
    assert not (directory / admin_key.KEY_FILE_NAME).exists()


@pytest.mark.parametrize("argv", [
    ["--admin-api-key", "s3cret-value"], ["--admin-api-key=s3cret-value"], ["--admin-api", "s3cret-value"],
    ["--api-key", "s3cret-value"], ["--api=s3cret-value"], ["--config", "/tmp/x.yaml"], ["--conf", "/tmp/x.yaml"],
    ["--ssl-keyfile-password", "s3cret-value"],
])
def test_entrypoint_refuses_secrets_and_config_on_the_argv(argv, tmp_path, capfd, monkeypatch):
    launched = []
    monkeypatch.setattr(engine_entrypoint.subprocess, "Popen", lambda *a, **k: launched.append(a))
    directory = tmp_path / "admin"
    code = engine_entrypoint.run("sim", None, ["--model-path", "/m", *argv], admin_dir=directory,
                                 mountinfo=tmpfs_at(directory))
    err = capfd.readouterr().err
    assert code == engine_run.EXIT_REFUSED and launched == []
    assert err.count("\n") == 1 and "Fix:" in err
    assert "s3cret-value" not in err  # the value is never echoed
    assert not directory.exists()  # refused before any key was made


def test_redact_removes_fields_flag_values_and_known_keys():
    key = "k3y-AbC_123"
    info = {
        "admin_api_key": key, "api_key": "user-key", "ssl_keyfile_password": None,
        "launch_command": f"sglang serve --admin-api-key {key} --api-key=user-key --port 30000",
        "nested": [{"note": f"prefix {key} suffix"}, 3, None],
    }
    clean = admin_key.redact(info, (key,))
    text = json.dumps(clean)
    assert key not in text and "user-key" not in text
    assert clean["admin_api_key"] == clean["api_key"] == admin_key.REDACTED
    assert clean["ssl_keyfile_password"] is None  # nothing to hide
    assert clean["launch_command"] == (f"sglang serve --admin-api-key {admin_key.REDACTED} "
                                       f"--api-key={admin_key.REDACTED} --port 30000")
    assert clean["nested"] == [{"note": f"prefix {admin_key.REDACTED} suffix"}, 3, None]
    assert info["admin_api_key"] == key  # a copy: the input is untouched


@pytest.mark.parametrize("text", [
    "--api-key <redacted>hunter2", "--api-key=<redacted>hunter2", "--admin-api-key\t<redacted>x --port 1",
    "ServerArgs(api_key='<redacted>hunter2', port=1)", 'ServerArgs(ssl_keyfile_password="<redacted>x")',
])
def test_a_value_that_starts_like_the_marker_is_still_redacted(text):
    from sparkgate.evidence.recording import scrub

    clean = scrub(text, ())  # the flag form (admin_key.redact_text), then the printed-assignment form
    assert "hunter2" not in clean and "<redacted>x" not in clean and admin_key.REDACTED in clean, clean


def test_redact_line_keeps_non_utf8_bytes():
    line = b"\xff caf\xc3\xa9 KEY\n"
    assert engine_entrypoint.redact_line(line, "KEY") == b"\xff caf\xc3\xa9 <redacted>\n"


@pytest.mark.parametrize("target", render.TARGETS)
def test_compose_shares_the_key_volume_with_engine_rw_and_sentinel_ro_only(target):
    files = render.render_files(profiles.load("all-three"), render.RenderOptions(target=target))
    compose = yaml.safe_load(files["compose.yaml"])
    volume = compose["volumes"][render.ADMIN_KEY_VOLUME]
    assert volume["driver_opts"]["type"] == "tmpfs" and volume["driver_opts"]["device"] == "tmpfs"
    assert "mode=0700" in volume["driver_opts"]["o"].split(",")
    mounts = {name: [v for v in service.get("volumes", []) if v.startswith(render.ADMIN_KEY_VOLUME + ":")]
              for name, service in compose["services"].items()}
    assert mounts == {
        "engine": [f"{render.ADMIN_KEY_VOLUME}:{admin_key.ADMIN_DIR}"],
        "sentinel": [f"{render.ADMIN_KEY_VOLUME}:{admin_key.ADMIN_DIR}:ro"],
        "gateway": [],
        "prometheus-config": [],
        "prometheus": [],
    }
    # The engine's command is the profile's argv: the entrypoint adds --config at start, nothing else does.
    assert "--config" not in compose["services"]["engine"]["command"]


def test_committed_compose_carries_the_key_volume():
    committed = (repo_root() / "compose.yaml").read_text()
    assert f"{render.ADMIN_KEY_VOLUME}:{admin_key.ADMIN_DIR}:ro" in committed
