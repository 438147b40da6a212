"""The engine log: from a file (the shared log volume) or a container's logs (`docker logs`)."""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from typing import BinaryIO

# SGLang's log record (sglang/srt/utils/common.py configure_logger): "[<time><prefix>] <message>". The checks match
# a message from its start: text a client sent, which --log-requests echoes *inside* a message (as a repr, so
# without a raw newline), can then never pass for an engine line, nor poison a check that wants zero or exactly
# one. Lines without the prefix (tracebacks, uvicorn's access log) are never evidence.
_RECORD = re.compile(r"\[[^\]\n]*\] (.*)")


@dataclass(frozen=True)
class EngineLog:
    source: str  # what was read, for the verdict
    text: str | None  # None: could not be read (fail closed)
    error: str | None = None

    def messages(self) -> list[str]:
        """The message part of every SGLang log record, in order."""
        if self.text is None:
            return []
        # Records end at "\n" only (a "\r" before it is dropped): str.splitlines also breaks at \x1c-\x1e, \x85
        # and \u2028/\u2029, so a hostile string inside one record could start a forged record of its own.
        return [m.group(1) for line in self.text.split("\n") if (m := _RECORD.match(line.removesuffix("\r")))]

    def count(self, message: str) -> int:
        """Records whose message starts with `message`."""
        return sum(1 for m in self.messages() if m.startswith(message))

    def matching(self, pattern: re.Pattern[str]) -> list[str]:
        """Messages that are a rendering of an SGLang log format (see conformance.log_pattern), from their start."""
        return [m for m in self.messages() if pattern.match(m)]


def open_regular(path: str) -> BinaryIO:
    """The file at `path` for reading, opened without blocking, and only if it is a regular file: the engine's
    container owns the log volume, and a FIFO or a device at the log's path must not hang the sentinel."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    handle = open(fd, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        handle.close()
        raise OSError(errno.EINVAL, "not a regular file")
    return handle


def from_file(path: str) -> EngineLog:
    try:
        with open_regular(path) as handle:
            return EngineLog(f"file {path}", handle.read().decode("utf-8", errors="replace"))
    except OSError as exc:
        return EngineLog(f"file {path}", None, f"cannot read {path}: {exc.strerror or exc}")


def from_container(container: str) -> EngineLog:
    docker = shutil.which("docker")
    if docker is None:
        return EngineLog(f"container {container}", None, "docker CLI not found")
    result = subprocess.run([docker, "logs", container], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        return EngineLog(f"container {container}", None, result.stderr.strip() or "docker logs failed")
    return EngineLog(f"container {container}", result.stdout + result.stderr)


def missing() -> EngineLog:
    return EngineLog("none", None, "no log source given (--log-file or --container)")
