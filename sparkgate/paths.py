"""Where the bundle's own files live."""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """The bundle checkout (profiles/, templates/, images.lock.yaml). Overridable for installed use."""
    override = os.environ.get("SPARKGATE_HOME")
    if override:
        return Path(override)
    return Path(__file__).resolve().parent.parent


def profiles_dir() -> Path:
    return repo_root() / "profiles"


def templates_dir() -> Path:
    return repo_root() / "templates"


def build_dir() -> Path:
    return repo_root() / "build"
