"""The GPU lane's recorded evidence: written on the CUDA machine, kept in tests/fixtures/gpu/, replayed on CPU.

On the GPU machine (tests/gpu/conftest.py), per launch, under $SPARKGATE_GPU_RECORD_DIR/<launch>/:

    launch.json                 argv, startup seconds, the SGLang version, the GPU's name
    server.log                  the engine's whole log
    <profile>.recording.json    sparkgate.evidence.recording.Recording: every answer the verification read, and
                                the verdict it gave
    rechecks.json               the sentinel's re-check results after admission (speculative launches)
    side.json                   tests/real/differential.py's real side: observe.py's and the extra requests right
                                after the start, then /server_info, /metrics and the log
    after.json                  /server_info and /metrics after everything

Here: `python -m tests.gpu.records import gpu-records.tar.gz` replaces tests/fixtures/gpu/ with the archive's
launches, refusing any member that is not one of those files of a launch directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from sparkgate.evidence.recording import Recording

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
RECORD_ENV = "SPARKGATE_GPU_RECORD_DIR"
LAUNCH_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,40}")
MEMBER = re.compile(r"(launch\.json|server\.log|rechecks\.json|after\.json|side\.json|measures\.json"
                    r"|[a-z0-9-]{1,40}\.recording\.json)")
# The lane's record sets, each replaced whole by one run's archive: the tiny launches (`bash tests/gpu/run`), the
# full-size runs (`bash tests/gpu/run full-size F`), the tiny Ling-3.0-flash (`bash tests/gpu/run v3|v3-fallbacks|v3-dspark`).
SETS = {name: FIXTURES.parent / name for name in ("gpu", "gpu-full-size", "gpu-v3", "gpu-v3-fallbacks", "gpu-v3-dspark")}
MAX_MEMBER_BYTES = 8 << 20


def record_dir() -> Path:
    return Path(os.environ.get(RECORD_ENV, "tests/artifacts/gpu"))


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n")
    partial.replace(path)


LOG_KEPT_BYTES = 4 << 20  # a server log's last 4 MiB: the whole log of every launch so far, bounded for a runaway one


def head_and_tail(text: str, limit: int = 20000) -> str:
    """A long error kept whole at both ends: its first lines say why (not ready in time, exited with a code), its last
    lines are the log's tail."""
    return text if len(text) <= limit else f"{text[:limit // 10]}\n[...]\n{text[-(limit - limit // 10):]}"


def keep_log(source: Path, out: Path) -> None:
    """The server log of a launch as its record's server.log (the tail, when one ran away); none when it never wrote."""
    if source.is_file():
        out.mkdir(parents=True, exist_ok=True)
        (out / "server.log").write_bytes(source.read_bytes()[-LOG_KEPT_BYTES:])


# -- reading (CPU tests) -----------------------------------------------------------------------------------------

def launches(root: Path = FIXTURES) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def launch_info(name: str, root: Path = FIXTURES) -> dict[str, Any]:
    return json.loads((root / name / "launch.json").read_text())


def recordings(name: str, root: Path = FIXTURES) -> dict[str, Recording]:
    """profile -> the recorded verification of launch `name` against it."""
    suffix = ".recording.json"
    return {p.name[: -len(suffix)]: Recording.model_validate_json(p.read_text())
            for p in sorted((root / name).glob(f"*{suffix}"))}


def rechecks(name: str, root: Path = FIXTURES) -> list[dict[str, Any]]:
    path = root / name / "rechecks.json"
    return json.loads(path.read_text()) if path.is_file() else []


def after(name: str, root: Path = FIXTURES) -> dict[str, Any]:
    return json.loads((root / name / "after.json").read_text())


def side(name: str, root: Path = FIXTURES) -> dict[str, Any]:
    return json.loads((root / name / "side.json").read_text())


def server_log(name: str, root: Path = FIXTURES) -> str:
    return (root / name / "server.log").read_text()


# -- import (here, from the GPU machine's archive) -----------------------------------------------------------------

class BadArchive(Exception):
    pass


def import_archive(archive: Path, dest: Path = FIXTURES) -> list[str]:
    """Replace `dest` with the archive's launch directories (temp directory, then rename)."""
    with tarfile.open(archive, "r:gz") as tar:
        members = [m for m in tar.getmembers() if m.name not in (".", "./")]
        for member in members:
            parts = Path(member.name).parts
            parts = parts[1:] if parts and parts[0] == "." else parts
            if member.isdir() and len(parts) == 1 and LAUNCH_NAME.fullmatch(parts[0]):
                continue
            if not (member.isfile() and len(parts) == 2 and LAUNCH_NAME.fullmatch(parts[0])
                    and MEMBER.fullmatch(parts[1]) and member.size <= MAX_MEMBER_BYTES):
                raise BadArchive(f"{archive}: unexpected member {member.name!r} ({member.size} bytes)")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".gpu-import-") as tmp:
            staging = Path(tmp) / "gpu"
            tar.extractall(staging, members=[m for m in members if m.isfile()], filter="data")
            for name in launches(staging):
                for path in (staging / name).glob("*.recording.json"):
                    Recording.model_validate_json(path.read_text())  # a record CPU tests cannot read is refused now
            old = Path(tmp) / "old"
            if dest.exists():
                dest.rename(old)
            staging.rename(dest)
            shutil.rmtree(old, ignore_errors=True)
    return launches(dest)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.gpu.records")
    commands = parser.add_subparsers(dest="command", required=True)
    imports = commands.add_parser("import", help="replace a record set with a GPU run's archive")
    imports.add_argument("archive", type=Path)
    imports.add_argument("set", nargs="?", default="gpu", choices=sorted(SETS))
    args = parser.parse_args(argv)
    try:
        print("imported:", ", ".join(import_archive(args.archive, SETS[args.set])))
    except (BadArchive, OSError, tarfile.TarError, ValueError) as exc:
        sys.exit(f"tests.gpu.records: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
