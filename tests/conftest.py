"""Shared fixtures. Markers are registered in pyproject.toml and enforced with --strict-markers."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
