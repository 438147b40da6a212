"""Where the bundle's own files live."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


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



@dataclass(frozen=True)
class HostDir:
    """A host directory the rendered compose.yaml mounts: the one `env` names (unset or empty: `default` under
    $HOME, as Compose's `${VAR:-default}` reads it; `~` expanded, as Compose expands a bind mount's source).
    `host()` is where the preflight looks; `compose()` spells it for Compose. Set the variable to an absolute
    path: Compose resolves a relative one against the bundle's directory, not the caller's."""

    env: str
    default: str

    def host(self, *parts: str) -> Path:
        return Path(os.environ.get(self.env) or Path.home() / self.default).expanduser().joinpath(*parts)

    def compose(self, *parts: str) -> str:
        return "/".join([f"${{{self.env}:-${{HOME}}/{self.default}}}", *parts])


def model_dir(mounted_at: str) -> HostDir:
    """The target checkpoint: ~/models/<basename of model.path> unless SPARKGATE_MODEL_DIR says otherwise."""
    return HostDir("SPARKGATE_MODEL_DIR", f"models/{PurePosixPath(mounted_at).name}")


def dspark_dir(mounted_at: str) -> HostDir:
    """The DSpark drafter: ~/models/<basename of its draft path> unless SPARKGATE_DSPARK_DIR says otherwise."""
    return HostDir("SPARKGATE_DSPARK_DIR", f"models/{PurePosixPath(mounted_at).name}")


CACHE_DIR = HostDir("SPARKGATE_CACHE_DIR", ".cache/sparkgate")  # the kernel caches, one subdirectory each
