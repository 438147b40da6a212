"""String types for profile fields that end up as paths, names and mount points: each admits only what its
consumer (SGLang's argv, a Compose volume entry, an OpenAI `model` field) can carry without interpretation."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated

from pydantic import AfterValidator

# No quotes, spaces, `$` (Compose interpolation), `:` (volume separator), `,` or `=` (option syntax).
_PATH_CHARACTERS = re.compile(r"[A-Za-z0-9._/@+-]+")
_SERVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/@+-]{0,127}")
_CLASS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# A full commit hash: a branch or tag name moves, so only a commit pins what was downloaded.
_GIT_REVISION = re.compile(r"[0-9a-f]{40}")
# Hugging Face Hub `owner/name` (it reaches a download command shown to the operator).
_HUB_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def _container_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"must be an absolute path inside the container, got {value!r}")
    if not _PATH_CHARACTERS.fullmatch(value):
        bad = sorted({c for c in value if not _PATH_CHARACTERS.fullmatch(c)})
        raise ValueError(
            f"path {value!r} contains {' '.join(repr(c) for c in bad)}; paths may use only letters, digits and . _ / @ + -"
        )
    parts = value.split("/")[1:]
    if value == "/" or value.endswith("/") or "" in parts or any(p in (".", "..") for p in parts):
        raise ValueError(f"path {value!r} is not normalized (no trailing or double slash, no . or .. segments)")
    return str(PurePosixPath(value))


def _pattern(regex: re.Pattern[str], what: str):
    def check(value: str) -> str:
        if not regex.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid {what}")
        return value

    return check


ContainerPath = Annotated[str, AfterValidator(_container_path)]
ServedName = Annotated[
    str, AfterValidator(_pattern(_SERVED_NAME, "served model name (letters, digits and . _ / @ + -, up to 128)"))
]
ClassName = Annotated[str, AfterValidator(_pattern(_CLASS_NAME, "Python class name"))]
GitRevision = Annotated[
    str, AfterValidator(_pattern(_GIT_REVISION, "full commit hash (40 lower-case hex digits, not a branch or tag)"))
]
HubRepo = Annotated[
    str, AfterValidator(_pattern(_HUB_REPO, "Hugging Face repository (owner/name: letters, digits and . _ -)"))
]
