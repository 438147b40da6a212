"""The engine's admin key inside the running stack: on tmpfs, root-only, and nowhere in the engine's
command lines or environments (runs in the sentinel before every admission, and from the host)."""

from __future__ import annotations

import pytest

from sparkgate.runtime import admin_key
from sparkgate.suites.infra.conftest import _cmdline, proc_environ

pytestmark = pytest.mark.infra

KEY_FILE = admin_key.ADMIN_DIR / admin_key.KEY_FILE_NAME
CONFIG_FILE = admin_key.ADMIN_DIR / admin_key.CONFIG_FILE_NAME


def test_admin_key_files_are_root_only_on_tmpfs(engine_host):
    assert engine_host.mount_point(str(admin_key.ADMIN_DIR)).filesystem == "tmpfs"
    for path in (KEY_FILE, CONFIG_FILE):
        secret = engine_host.file(str(path))
        assert secret.is_file and secret.user == "root", path
        assert secret.mode == 0o600, f"{path} is {oct(secret.mode)}, not 0600"
    assert engine_host.file(str(admin_key.ADMIN_DIR)).mode == 0o700


def test_engine_processes_hold_the_key_in_neither_argv_nor_environment(engine_host, engine_processes):
    key = engine_host.file(str(KEY_FILE)).content_string.strip()
    assert len(key) >= 32
    for pid in (engine_processes.supervisor, engine_processes.server):
        assert not any(key in token for token in _cmdline(engine_host, pid)), f"pid {pid} argv holds the key"
        environ = proc_environ(engine_host, pid)
        assert not any(key in value for value in environ.values()), f"pid {pid} environment holds the key"
