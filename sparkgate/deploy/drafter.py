"""Preflight for the DSpark drafter directory: present, the drafter the profile names, the pinned revision,
and weights that still hash to what the download recorded.

`hf download REPO --revision REV --local-dir DIR` (huggingface_hub's `_local_folder.py`) leaves, for every
file it wrote, `DIR/.cache/huggingface/download/<file>.metadata`: line 1 the commit the file came from,
line 2 its etag (for LFS files such as `*.safetensors`, the file's SHA-256), line 3 a timestamp. Those
files are the only record of which revision a directory holds, so a directory without them is refused.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

METADATA_DIR = Path(".cache") / "huggingface" / "download"
CONFIG = "config.json"
WEIGHTS_GLOB = "*.safetensors"
_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_CONFIG_BYTES = 1 << 20
MAX_METADATA_BYTES = 4096
HASH_CHUNK = 8 << 20
PROGRESS_EVERY = 1 << 30  # say how far a large file's hash has got every GiB


@dataclass(frozen=True)
class Pin:
    """What the profile expects of the drafter (optimizations.dspark)."""

    repo: str
    revision: str
    architecture: str
    block_size: int

    def download_command(self, directory: Path) -> str:
        return shlex.join(["hf", "download", self.repo, "--revision", self.revision, "--local-dir", str(directory)])


def problems(directory: Path, pin: Pin, say: Callable[[str], None] = lambda _: None) -> list[str]:
    """One line per fault (observed, expected, fix); empty when the directory is the pinned drafter."""
    fix = f"Fix: {pin.download_command(directory)}"
    if not directory.is_dir():
        return [f"{directory}: no drafter directory (expected {pin.repo} at {pin.revision[:12]}). {fix} "
                "(or point SPARKGATE_DSPARK_DIR at it)"]
    root = directory.resolve()
    found = _config_problems(root, directory, pin, fix)
    weights = sorted(p for p in root.rglob(WEIGHTS_GLOB) if METADATA_DIR.parts[0] not in p.relative_to(root).parts)
    if not weights:
        found.append(f"{directory}: no {WEIGHTS_GLOB} files (expected the drafter's weights). {fix}")
    for relative in [CONFIG, *(str(w.relative_to(root)) for w in weights)]:
        found += _revision_problems(root, directory, relative, pin, fix)
    found += _orphan_problems(root, directory, fix)
    for weight in weights:
        found += _checksum_problems(root, directory, weight, fix, say)
    return found


def _inside(root: Path, path: Path) -> bool:
    """Whether `path`, symlinks followed, stays inside the drafter directory (the engine mounts only it)."""
    try:
        path.resolve().relative_to(root)
    except ValueError:
        return False
    return True


def _config_problems(root: Path, shown: Path, pin: Pin, fix: str) -> list[str]:
    path = root / CONFIG
    where = f"{shown / CONFIG}"
    if not path.is_file():
        return [f"{where}: missing (expected the drafter's config naming {pin.architecture}). {fix}"]
    if not _inside(root, path):
        return [f"{where}: a symlink to {path.resolve()}, outside the drafter directory the engine mounts "
                f"(expected a file inside it). {fix}"]
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            return [f"{where}: larger than {MAX_CONFIG_BYTES} bytes (expected a model config). {fix}"]
        config = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return [f"{where}: not readable JSON ({type(exc).__name__}: {str(exc)[:120]}). {fix}"]
    if not isinstance(config, dict):
        return [f"{where}: a JSON {type(config).__name__}, expected an object. {fix}"]
    found = []
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or pin.architecture not in architectures:
        found.append(f"{where}: architectures {architectures!r}, expected to contain {pin.architecture!r} "
                     f"(another model in the drafter directory). {fix}")
    block = _block_size(config)
    if block is not None and block != pin.block_size:
        found.append(f"{where}: block_size {block!r}, expected {pin.block_size} "
                     "(optimizations.dspark.block_size; SGLang only warns and runs the mismatched block). "
                     f"{fix}, or set block_size to the drafter's")
    return found


def _block_size(config: dict) -> object:
    """The drafter's own block size as SGLang resolves it (speculative/dspark_components/dspark_config.py:
    `dspark_block_size`, then `dflash_config.block_size`, then top-level `block_size`); None when absent."""
    nested = config.get("dflash_config")
    for value in (config.get("dspark_block_size"),
                  nested.get("block_size") if isinstance(nested, dict) else None,
                  config.get("block_size")):
        if value is not None:
            return value
    return None


def _metadata(root: Path, relative: str) -> tuple[str, str] | str:
    """(commit, etag) recorded for a downloaded file, or why there is none."""
    path = root / METADATA_DIR / f"{relative}.metadata"
    if not path.is_file():
        return "no download metadata"
    if not _inside(root, path):
        return "download metadata is a symlink out of the directory"
    try:
        with path.open("rb") as handle:
            lines = handle.read(MAX_METADATA_BYTES).decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return f"unreadable download metadata ({type(exc).__name__})"
    if len(lines) < 2:
        return "download metadata without a commit and an etag"
    return lines[0].strip(), lines[1].strip()


def _revision_problems(root: Path, shown: Path, relative: str, pin: Pin, fix: str) -> list[str]:
    recorded = _metadata(root, relative)
    where = f"{shown / relative}"
    if isinstance(recorded, str):
        return [f"{where}: {recorded} in {METADATA_DIR}/ (expected the record `hf download --local-dir` "
                f"writes, naming commit {pin.revision[:12]}), so its revision cannot be proven. {fix}"]
    commit, _etag = recorded
    if commit != pin.revision:
        return [f"{where}: downloaded at revision {commit[:40]!r}, expected {pin.revision} "
                f"(optimizations.dspark.drafter_revision). {fix}"]
    return []


def _orphan_problems(root: Path, shown: Path, fix: str) -> list[str]:
    """Weights the download recorded but that are gone (a deleted or renamed shard)."""
    metadata_root = root / METADATA_DIR
    if not metadata_root.is_dir():
        return []
    found = []
    for record in sorted(metadata_root.rglob(f"{WEIGHTS_GLOB}.metadata")):
        relative = str(record.relative_to(metadata_root))[: -len(".metadata")]
        if not (root / relative).is_file():
            found.append(f"{shown / relative}: missing, but the download recorded it (expected every downloaded "
                         f"weight file). {fix}")
    return found


def _checksum_problems(root: Path, shown: Path, weight: Path, fix: str, say: Callable[[str], None]) -> list[str]:
    relative = str(weight.relative_to(root))
    where = f"{shown / relative}"
    if not _inside(root, weight):
        return [f"{where}: a symlink to {weight.resolve()}, outside the drafter directory the engine mounts "
                f"(expected a file inside it). {fix}"]
    recorded = _metadata(root, relative)
    if isinstance(recorded, str):
        return []  # already refused by the revision check
    etag = recorded[1]
    if not _SHA256.fullmatch(etag):
        return [f"{where}: recorded etag {etag[:64]!r} is not a SHA-256 (expected one for an LFS weight file), "
                f"so its content cannot be proven. {fix}"]
    try:
        digest = _sha256(weight, relative, say)
    except OSError as exc:
        return [f"{where}: unreadable ({exc.strerror or exc}). {fix}"]
    if digest != etag:
        return [f"{where}: SHA-256 {digest}, expected {etag} as downloaded (corrupt or modified file). {fix}"]
    return []


def _sha256(path: Path, relative: str, say: Callable[[str], None]) -> str:
    """Streamed, so a multi-GB file never sits in memory; large files report progress."""
    size = path.stat().st_size
    digest = hashlib.sha256()
    done, next_report = 0, PROGRESS_EVERY
    if size >= PROGRESS_EVERY:
        say(f"hashing drafter {relative} ({size / 2**30:.1f} GiB)")
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if done >= next_report and done < size:
                say(f"hashing drafter {relative}: {done / 2**30:.1f} / {size / 2**30:.1f} GiB")
                next_report += PROGRESS_EVERY
    return digest.hexdigest()
