"""The engine log: from a file (the shared log volume) or a container's logs (`docker logs`)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EngineLog:
    source: str  # what was read, for the verdict
    text: str | None  # None: could not be read (fail closed)
    error: str | None = None

    def count(self, needle: str) -> int:
        return 0 if self.text is None else self.text.count(needle)

    def lines_with(self, needle: str) -> list[str]:
        return [] if self.text is None else [l for l in self.text.splitlines() if needle in l]

    def matching(self, pattern: re.Pattern[str]) -> list[str]:
        """Lines holding a rendering of an SGLang log format (see conformance.log_pattern)."""
        return [] if self.text is None else [l for l in self.text.splitlines() if pattern.search(l)]


def from_file(path: str) -> EngineLog:
    try:
        return EngineLog(f"file {path}", Path(path).read_text(encoding="utf-8", errors="replace"))
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
