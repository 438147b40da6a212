"""Preflight for the DSpark drafter directory: present, the drafter the profile names, the pinned revision,
every file still what the download wrote, and nothing the download did not write.

`hf download REPO --revision REV --local-dir DIR` (huggingface_hub's `_local_folder.py`) leaves, for every
file it wrote, `DIR/.cache/huggingface/download/<file>.metadata`: line 1 the commit the file came from,
line 2 its etag, line 3 a timestamp. The etag is the Hub's `X-Linked-Etag` header, else its `ETag`
(huggingface_hub `file_download.py`: `get_hf_file_metadata`): for LFS files such as `*.safetensors` the
SHA-256 of the content (64 hex), for the other files such as `config.json` the git blob SHA-1 of the content
(40 hex; `utils/sha.py`: `git_hash`). Those records are the only proof of which revision a directory holds
and of what each file held, so a file without one is refused: SGLang reads the drafter's config with
`trust_remote_code`, so an unrecorded `*.py` named by an edited `config.json` would run in the engine.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

METADATA_DIR = Path(".cache") / "huggingface" / "download"
CONFIG = "config.json"
WEIGHTS_GLOB = "*.safetensors"
_SHA256 = re.compile(r"[0-9a-f]{64}")  # an LFS file's etag
_GIT_SHA1 = re.compile(r"[0-9a-f]{40}")  # any other file's etag: its git blob id
MAX_CONFIG_BYTES = 1 << 20
MAX_METADATA_BYTES = 4096
MAX_VALUE_CHARS = 120  # an observed value in a finding
MAX_NAME_CHARS = 240  # a path in a finding (the file name sits at its end)
MAX_UNRECORDED_LISTED = 10  # unrecorded files named one per line; the rest counted in one more line
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

    def clean_download_command(self, directory: Path) -> str:
        """Re-download into an empty directory: `hf download --local-dir` keeps a file whose recorded etag
        matches the Hub's without re-hashing it (huggingface_hub `file_download.py`,
        `_hf_hub_download_to_local_dir`), and never deletes a file the repository lacks."""
        aside = shlex.join(["mv", "--", str(directory), f"{directory}.refused"])
        return f"{aside} && {self.download_command(directory)}"


def shown(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """`value` as one bounded line: its repr (so no newline or quote in it can forge a line), cut at `limit`
    with the true length."""
    try:
        text = repr(value)
    except RecursionError:
        return f"<a {type(value).__name__} nested too deeply to show>"
    if len(text) <= limit:
        return text
    length = len(value) if isinstance(value, str) else len(text)
    return f"{text[:limit]}… ({length} chars)"


def _name(path: Path | str) -> str:
    """A path, quoted like `shown`; a long one keeps its head and its tail, where the file's own name is."""
    text, head = repr(str(path)), MAX_NAME_CHARS // 4
    if len(text) <= MAX_NAME_CHARS:
        return text
    return f"{text[:head]}…{text[head - MAX_NAME_CHARS:]} ({len(str(path))} chars)"


def problems(directory: Path, pin: Pin, say: Callable[[str], None] = lambda _: None) -> list[str]:
    """One line per fault (observed, expected, fix); empty when the directory is the pinned drafter."""
    if not str(directory).isprintable():
        return [f"{_name(directory)}: the drafter directory's name holds control characters (expected a plain "
                "path, which the fix command can name on one line). Fix: download into a plain path and set "
                "SPARKGATE_DSPARK_DIR to it"]
    if not directory.is_dir():
        return [f"{_name(directory)}: no drafter directory (expected {pin.repo} at {pin.revision[:12]}). "
                f"Fix: {pin.download_command(directory)} (or point SPARKGATE_DSPARK_DIR at it)"]
    # Every other fault is fixed by a download into an empty directory: a download over this one would keep
    # edited files, stray files and another revision's leftovers.
    fix = f"Fix: move the directory aside and re-download: {pin.clean_download_command(directory)}"
    root = directory.resolve()
    present, unlisted = _present(root)
    recorded = _recorded(root)
    weights = sorted(name for name in present if PurePosixPath(name).match(WEIGHTS_GLOB))
    found, unreadable = _shape_problems(root, directory, present, fix)
    found += [f"{_name(path)}: a directory preflight cannot list ({shown(reason)}; expected a readable download, "
              f"since the engine may read what preflight cannot see). {fix}" for path, reason in unlisted]
    if CONFIG not in unreadable:
        found += _config_problems(root, directory, present, pin, fix)
    if not weights:
        found.append(f"{_name(directory)}: no {WEIGHTS_GLOB} files (expected the drafter's weights). {fix}")
    for relative in sorted({CONFIG, *weights, *recorded}):
        found += _revision_problems(root, directory, relative, pin, fix)
    found += _missing_problems(directory, sorted(recorded - present - {CONFIG}), fix)
    found += _unrecorded_problems(directory, sorted(present - recorded - {CONFIG, *weights} - unreadable), fix)
    for relative in sorted((recorded & present) - unreadable):
        found += _checksum_problems(root, directory, relative, fix, say)
    return found


def _present(root: Path) -> tuple[set[str], list[tuple[str, str]]]:
    """Every entry the engine could read, as a path relative to the directory: files, symlinks, and anything
    else that is not a plain directory, everywhere but the download's own `.cache/`; with the directories
    that could not be listed (os.walk would otherwise skip them silently)."""
    found, unlisted = set(), []

    def refuse(error: OSError) -> None:
        unlisted.append((error.filename, error.strerror or type(error).__name__))

    for current, directories, files in os.walk(root, onerror=refuse, followlinks=False):
        here = Path(current)
        if here == root and METADATA_DIR.parts[0] in directories:
            directories.remove(METADATA_DIR.parts[0])
        linked = [name for name in directories if (here / name).is_symlink()]  # os.walk lists, never enters
        found.update((here / name).relative_to(root).as_posix() for name in [*files, *linked])
    return found, unlisted


def _recorded(root: Path) -> set[str]:
    """Every file the download wrote a metadata record for."""
    metadata_root = root / METADATA_DIR
    if not metadata_root.is_dir():
        return set()
    suffix = ".metadata"
    return {record.relative_to(metadata_root).as_posix()[: -len(suffix)]
            for record in metadata_root.rglob(f"*{suffix}")}


def _inside(root: Path, path: Path) -> bool:
    """Whether `path`, symlinks followed, stays inside the drafter directory (the engine mounts only it)."""
    try:
        path.resolve().relative_to(root)
    except (ValueError, OSError, RuntimeError):  # RuntimeError: a symlink loop
        return False
    return True


def _shape_problems(root: Path, shown_dir: Path, present: set[str], fix: str) -> tuple[list[str], set[str]]:
    """Entries that are no regular file inside the directory (a symlink out of it, a FIFO that would hang the
    read, a linked directory); returned with their names, which no later check opens."""
    found, refused = [], set()
    for relative in sorted(present):
        path = root / relative
        where = _name(shown_dir / relative)
        if not _inside(root, path):
            found.append(f"{where}: a symlink to {_name(os.path.realpath(path))}, outside the drafter directory "
                         f"the engine mounts (expected a file inside it). {fix}")
        elif not _is_regular(path):
            found.append(f"{where}: not a regular file (a directory link, FIFO, device or dangling symlink; "
                         f"expected the downloaded file). {fix}")
        else:
            continue
        refused.add(relative)
    return found, refused


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def _config_problems(root: Path, shown_dir: Path, present: set[str], pin: Pin, fix: str) -> list[str]:
    where = _name(shown_dir / CONFIG)
    if CONFIG not in present:
        return [f"{where}: missing (expected the drafter's config naming {pin.architecture}). {fix}"]
    try:
        with (root / CONFIG).open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            return [f"{where}: larger than {MAX_CONFIG_BYTES} bytes (expected a model config). {fix}"]
        config = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return [f"{where}: not readable JSON ({type(exc).__name__}: {shown(str(exc))}). {fix}"]
    if not isinstance(config, dict):
        return [f"{where}: a JSON {type(config).__name__}, expected an object. {fix}"]
    found = []
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or pin.architecture not in architectures:
        found.append(f"{where}: architectures {shown(architectures)}, expected to contain {pin.architecture!r} "
                     f"(another model in the drafter directory). {fix}")
    block = _block_size(config)
    if block is not None and block != pin.block_size:
        found.append(f"{where}: block_size {shown(block)}, expected {pin.block_size} "
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
    if not _is_regular(path):
        return "download metadata is not a regular file"
    try:
        with path.open("rb") as handle:
            lines = handle.read(MAX_METADATA_BYTES).decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return f"unreadable download metadata ({type(exc).__name__})"
    if len(lines) < 2:
        return "download metadata without a commit and an etag"
    return lines[0].strip(), lines[1].strip()


def _revision_problems(root: Path, shown_dir: Path, relative: str, pin: Pin, fix: str) -> list[str]:
    recorded = _metadata(root, relative)
    where = _name(shown_dir / relative)
    if isinstance(recorded, str):
        return [f"{where}: {recorded} in {METADATA_DIR}/ (expected the record `hf download --local-dir` "
                f"writes, naming commit {pin.revision[:12]}), so its revision cannot be proven. {fix}"]
    commit, _etag = recorded
    if commit != pin.revision:
        return [f"{where}: downloaded at revision {shown(commit)}, expected {pin.revision} "
                f"(optimizations.dspark.drafter_revision). {fix}"]
    return []


def _missing_problems(shown_dir: Path, missing: list[str], fix: str) -> list[str]:
    """Files the download recorded but that are gone (a deleted or renamed shard, config or code file)."""
    return [f"{_name(shown_dir / relative)}: missing, but the download recorded it (expected every downloaded "
            f"file). {fix}" for relative in missing]


def _unrecorded_problems(shown_dir: Path, unrecorded: list[str], fix: str) -> list[str]:
    """Files the download never wrote: nothing proves what they hold, and SGLang loads the drafter with
    trust_remote_code, so a `*.py` there runs in the engine once the config names it."""
    found = [f"{_name(shown_dir / relative)}: not written by the download (no record in {METADATA_DIR}/; expected "
             f"only the drafter's downloaded files, since SGLang may read or run any of them). {fix}"
             for relative in unrecorded[:MAX_UNRECORDED_LISTED]]
    if len(unrecorded) > MAX_UNRECORDED_LISTED:
        found.append(f"{_name(shown_dir)}: {len(unrecorded) - MAX_UNRECORDED_LISTED} more files not written by "
                     f"the download (expected none). {fix}")
    return found


def _checksum_problems(root: Path, shown_dir: Path, relative: str, fix: str,
                       say: Callable[[str], None]) -> list[str]:
    recorded = _metadata(root, relative)
    if isinstance(recorded, str):
        return []  # already refused by the revision check
    etag = recorded[1]
    where = _name(shown_dir / relative)
    if _SHA256.fullmatch(etag):
        kind = "SHA-256"
    elif _GIT_SHA1.fullmatch(etag):
        kind = "git blob SHA-1"
    else:
        return [f"{where}: recorded etag {shown(etag)} is neither a SHA-256 (an LFS file's) nor a git blob "
                f"SHA-1 (any other file's), so its content cannot be proven. {fix}"]
    try:
        digest = _hash(root / relative, kind == "SHA-256", relative, say)
    except OSError as exc:
        return [f"{where}: unreadable ({shown(exc.strerror or str(exc))}). {fix}"]
    if digest != etag:
        return [f"{where}: {kind} {digest}, expected {etag} as downloaded (corrupt or edited file). {fix}"]
    return []


def _hash(path: Path, lfs: bool, relative: str, say: Callable[[str], None]) -> str:
    """The file's digest as the Hub's etag states it: SHA-256 of the content for an LFS file, else the git blob
    id (SHA-1 of `blob <size>\\0` + content). Streamed, so a multi-GB file never sits in memory; large files
    report progress."""
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if lfs:
            digest = hashlib.sha256()
        else:
            digest = hashlib.sha1(usedforsecurity=False)  # git's id, compared, not a security primitive
            digest.update(b"blob %d\0" % size)
        done, next_report = 0, PROGRESS_EVERY
        if size >= PROGRESS_EVERY:
            say(f"hashing drafter {shown(relative)} ({size / 2**30:.1f} GiB)")
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if done >= next_report and done < size:
                say(f"hashing drafter {shown(relative)}: {done / 2**30:.1f} / {size / 2**30:.1f} GiB")
                next_report += PROGRESS_EVERY
    return digest.hexdigest()
