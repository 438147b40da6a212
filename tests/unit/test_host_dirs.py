"""The host directories compose.yaml mounts are found where Compose finds them (paths.HostDir)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkgate import paths


@pytest.mark.parametrize(("value", "expected"), [
    (None, Path.home() / "models" / "Ling-3.0-flash-fp4"),
    ("", Path.home() / "models" / "Ling-3.0-flash-fp4"),  # `${VAR:-default}`: an empty variable takes the default
    ("~/weights", Path.home() / "weights"),
    ("/data/ling", Path("/data/ling")),
])
def test_the_preflight_looks_where_compose_mounts(monkeypatch, value, expected):
    model = paths.model_dir("/models/Ling-3.0-flash-fp4")
    if value is None:
        monkeypatch.delenv(model.env, raising=False)
    else:
        monkeypatch.setenv(model.env, value)
    assert model.host() == expected
    assert model.compose() == "${SPARKGATE_MODEL_DIR:-${HOME}/models/Ling-3.0-flash-fp4}"
    assert paths.CACHE_DIR.compose("humming") == "${SPARKGATE_CACHE_DIR:-${HOME}/.cache/sparkgate}/humming"
