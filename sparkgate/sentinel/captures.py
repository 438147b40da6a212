"""The sentinel's captures (evidence/capture.py): the last full verification, and the last refused ones.

    <dir>/last.capture.tar.gz                       the latest full verification (or refused start), passed or refused
    <dir>/refused-<UTC time>-<n>.capture.tar.gz     each refused one, the newest KEEP_REFUSED kept

A start refused before any verification (the engine died while it loaded) is captured too (`save` with `start`):
its log, the phases it reached, the host's memory over the start. Each capture names its deploy (manifest `of`).

The directory is a named volume (`sentinel-captures`), so a refusal's evidence outlives the stack (`invoke down`
keeps it; `invoke capture` copies it out). Bounded on disk: KEEP_REFUSED files of at most capture.MAX_FILE_BYTES.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from sparkgate.evidence import capture
from sparkgate.evidence.recording import Recording

log = logging.getLogger("sparkgate.sentinel")
KEEP_REFUSED = 5
LAST = "last" + capture.SUFFIX
START_LOG_KEEP_BYTES = 512 * 1024
_REFUSED = re.compile(r"refused-(\d{8}T\d{6}Z)-(\d+)" + re.escape(capture.SUFFIX))


def refused_order(name: str) -> tuple[str, int] | None:
    """(time, count) of a refused capture's file name, which orders them oldest first; None for any other name."""
    found = _REFUSED.fullmatch(name)
    return (found[1], int(found[2])) if found else None


@dataclass
class CaptureStore:
    directory: Path
    bundle_dir: Path
    meminfo_path: str = "/proc/meminfo"
    keep_refused: int = KEEP_REFUSED
    written: int = field(default=0)

    def save(self, recording: Recording, expectations: dict, suites: dict, secrets: tuple[str, ...], *,
             of: capture.DeployOf | None = None, start: capture.StartFacts | None = None) -> dict:
        """Write this verification's (or refused start's) capture; returns what the status shows ({"last",
        "refused", "error"}). Never raises: a capture that cannot be written must not stop the gate from deciding."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # A log that escapes to more JSON than a capture may hold (quotes, control characters) is cut further:
            # what the sentinel keeps must read back whole.
            argv, env = self._bundle("argv.json", []), self._bundle("engine-env.json", {})
            image, hosts = self._image(expectations), [capture.host_facts("sentinel", self.meminfo_path)]
            # A dead start's log is kept by its head (arguments, load) and its last lines (the crash): a smaller bound.
            first = capture.LOG_KEEP_BYTES if start is None else START_LOG_KEEP_BYTES
            for keep in (first, first // 4, capture.LOG_KEEP_BYTES // 64):
                made = capture.make(
                    recording, profile=str(expectations.get("profile")), argv=argv, engine_env=env, image=image,
                    hosts=hosts, suites=suites, secrets=secrets, log_keep=keep, of=of, start=start)
                capture.write(made, self.directory / LAST, secrets)
                try:
                    capture.read(self.directory / LAST)
                    break
                except capture.CaptureRefused:
                    if keep == capture.LOG_KEEP_BYTES // 64:
                        raise
            if not made.manifest.passed or not suites.get("gate", {}).get("passed", True):
                self.written += 1
                stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
                capture.write(made, self.directory / f"refused-{stamp}-{self.written}{capture.SUFFIX}", secrets)
                self._prune()
            return self.listing()
        except Exception as exc:  # noqa: BLE001 - reported on the status, never fatal to the gate
            log.error("capture not written: %s: %s", type(exc).__name__, exc)
            return {**self.listing(), "error": f"capture not written: {type(exc).__name__}: {exc}"[:300]}

    def refused(self) -> list[Path]:
        """Refused captures, oldest first (their names sort by time, then by count)."""
        files = self.directory.glob("refused-*" + capture.SUFFIX) if self.directory.is_dir() else []
        return sorted((p for p in files if refused_order(p.name) is not None), key=lambda p: refused_order(p.name))

    def _prune(self) -> None:
        for old in self.refused()[:-self.keep_refused]:
            old.unlink(missing_ok=True)

    def listing(self) -> dict:
        last = self.directory / LAST
        return {"last": str(last) if last.is_file() else None, "refused": [str(p) for p in self.refused()]}

    def _bundle(self, name: str, default):
        try:
            return json.loads((self.bundle_dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return default

    @staticmethod
    def _image(expectations: dict) -> capture.ImageFacts:
        engine = expectations.get("engine") or {}
        capabilities = engine.get("image_capabilities")
        return capture.ImageFacts(key=engine.get("image"), sglang_version=engine.get("sglang_version"),
                                  capabilities=capabilities if isinstance(capabilities, dict) else {})
