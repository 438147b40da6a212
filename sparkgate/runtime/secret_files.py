"""Secrets on disk inside the stack's containers: only on tmpfs, 0600 from the moment they exist.

A secret written with the default umask and chmod-ed afterwards is world-readable for a moment; one
written to a directory that is not tmpfs lands in the container's writable layer, on the host's disk,
and outlives the container. Both are refused here rather than worked around.
"""

from __future__ import annotations

import os
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")


class SecretFileError(Exception):
    """A secret could not be placed safely (one line, names the path and the fix)."""


def filesystem_type(path: Path, mountinfo: str) -> str | None:
    """The filesystem type of the mount holding `path`, from /proc/self/mountinfo text."""
    best, fstype = "", None
    target = str(path)
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or not tail:
            continue
        mount_point = fields[4].replace("\\040", " ")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) > len(best):
            best, fstype = mount_point, tail[0]
    return fstype


def require_tmpfs(directory: Path, mountinfo: str | None = None) -> None:
    text = MOUNTINFO.read_text() if mountinfo is None else mountinfo
    fstype = filesystem_type(directory, text)
    if fstype != "tmpfs":
        raise SecretFileError(
            f"sparkgate: refusing to write a secret under {directory}: it is on {fstype or 'an unknown filesystem'}, "
            "not tmpfs, so the secret would reach the host's disk. Likely cause: a hand-edited compose file "
            "dropped the tmpfs mount. Fix: re-render the bundle (`invoke render --profile <name>`)"
        )


def write_secret(path: Path, text: str) -> None:
    """Write `text` to `path` readable by the owner only: created 0600 (O_EXCL, never chmod-ed after the
    fact), flushed, then renamed over any previous version so a reader never sees half a secret."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.unlink(missing_ok=True)  # a leftover from a killed writer: O_EXCL below must create afresh
    fd = os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
