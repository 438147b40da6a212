"""The file-by-file proof of a directory huggingface_hub downloaded with `local_dir`: which revision each file
came from and that each file still holds what the download wrote, from the records the download left.

The records (huggingface_hub `_local_folder.py` `write_download_metadata`, left by `snapshot_download(...,
local_dir=DIR)` and `hf download --local-dir DIR`): `DIR/.cache/huggingface/download/<file>.metadata`, line 1 the
commit (the Hub's `X-Repo-Commit`), line 2 the etag (`X-Linked-Etag`, else `ETag`: `file_download.py`
`get_hf_file_metadata`), line 3 a timestamp. The etag is the content's SHA-256 for LFS files, its git blob SHA-1
(`utils/sha.py` `git_hash`) for the others. Why a file without a record is refused, and each refusal's fix:
docs/model.md, "Refusals and their fixes". Shared by the DSpark drafter (drafter.py) and target checkpoint
(checkpoint.py) preflights; every entry is hostile: nothing outside the directory is followed, nothing but regular
files opened.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

METADATA_DIR = Path(".cache") / "huggingface" / "download"
METADATA_SUFFIX = ".metadata"
SHA256 = re.compile(r"[0-9a-f]{64}")  # an LFS file's etag
GIT_SHA1 = re.compile(r"[0-9a-f]{40}")  # any other file's etag: its git blob id
MAX_METADATA_BYTES = 4096
MAX_VALUE_CHARS = 120  # an observed value in a finding
MAX_NAME_CHARS = 240  # a path in a finding (the file name sits at its end)
MAX_UNRECORDED_LISTED = 10  # unrecorded files named one per line; the rest counted in one more line
HASH_CHUNK = 8 << 20
PROGRESS_EVERY = 1 << 30  # say how far a large file's hash has got every GiB


@dataclass
class Tally:
    """What a proof hashed: files and bytes (the verification rate), and the files whose content differs from
    their record (a pull re-downloads exactly those)."""

    files: int = 0
    bytes: int = 0
    mismatched: list[str] = field(default_factory=list)


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


def name(path: Path | str) -> str:
    """A path, quoted like `shown`; a long one keeps its head and its tail, where the file's own name is."""
    text, head = repr(str(path)), MAX_NAME_CHARS // 4
    if len(text) <= MAX_NAME_CHARS:
        return text
    return f"{text[:head]}…{text[head - MAX_NAME_CHARS:]} ({len(str(path))} chars)"


def present(root: Path) -> tuple[set[str], list[tuple[str, str]]]:
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
        linked = [entry for entry in directories if (here / entry).is_symlink()]  # os.walk lists, never enters
        found.update((here / entry).relative_to(root).as_posix() for entry in [*files, *linked])
    return found, unlisted


def recorded(root: Path) -> set[str]:
    """Every file the download wrote a metadata record for."""
    metadata_root = root / METADATA_DIR
    if not metadata_root.is_dir():
        return set()
    return {record.relative_to(metadata_root).as_posix()[: -len(METADATA_SUFFIX)]
            for record in metadata_root.rglob(f"*{METADATA_SUFFIX}")}


def record_path(root: Path, relative: str) -> Path:
    return root / METADATA_DIR / f"{relative}{METADATA_SUFFIX}"


def inside(root: Path, path: Path) -> bool:
    """Whether `path`, symlinks followed, stays inside the directory (the engine mounts only it)."""
    try:
        path.resolve().relative_to(root)
    except (ValueError, OSError, RuntimeError):  # RuntimeError: a symlink loop
        return False
    return True


def is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def shape_problems(root: Path, shown_dir: Path, entries: set[str], fix: str, kind: str) -> tuple[list[str], set[str]]:
    """Entries that are no regular file inside the directory (a symlink out of it, a FIFO that would hang the
    read, a linked directory); returned with their names, which no later check opens."""
    found, refused = [], set()
    for relative in sorted(entries):
        path = root / relative
        where = name(shown_dir / relative)
        if not inside(root, path):
            found.append(f"{where}: a symlink to {name(os.path.realpath(path))}, outside the {kind} directory "
                         f"the engine mounts (expected a file inside it). {fix}")
        elif not is_regular(path):
            found.append(f"{where}: not a regular file (a directory link, FIFO, device or dangling symlink; "
                         f"expected the downloaded file). {fix}")
        else:
            continue
        refused.add(relative)
    return found, refused


def unlisted_problems(unlisted: list[tuple[str, str]], fix: str) -> list[str]:
    return [f"{name(path)}: a directory preflight cannot list ({shown(reason)}; expected a readable download, "
            f"since the engine may read what preflight cannot see). {fix}" for path, reason in unlisted]


def metadata(root: Path, relative: str) -> tuple[str, str] | str:
    """(commit, etag) recorded for a downloaded file, or why there is none."""
    path = record_path(root, relative)
    if not path.is_file():
        return "no download metadata"
    if not inside(root, path):
        return "download metadata is a symlink out of the directory"
    if not is_regular(path):
        return "download metadata is not a regular file"
    try:
        with path.open("rb") as handle:
            lines = handle.read(MAX_METADATA_BYTES).decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return f"unreadable download metadata ({type(exc).__name__})"
    if len(lines) < 2:
        return "download metadata without a commit and an etag"
    return lines[0].strip(), lines[1].strip()


def revision_problems(root: Path, shown_dir: Path, relative: str, revision: str, field_name: str, fix: str,
                      writer: str = "`hf download --local-dir`") -> list[str]:
    """The file's record names `revision` (`field_name` says where that pin comes from)."""
    found = metadata(root, relative)
    where = name(shown_dir / relative)
    if isinstance(found, str):
        return [f"{where}: {found} in {METADATA_DIR}/ (expected the record {writer} writes, naming commit "
                f"{revision[:12]}), so its revision cannot be proven. {fix}"]
    commit, _etag = found
    if commit != revision:
        return [f"{where}: downloaded at revision {shown(commit)}, expected {revision} ({field_name}). {fix}"]
    return []


def missing_problems(shown_dir: Path, missing: Iterable[str], fix: str) -> list[str]:
    """Files the download recorded but that are gone (a deleted or renamed shard, config or code file)."""
    return [f"{name(shown_dir / relative)}: missing, but the download recorded it (expected every downloaded "
            f"file). {fix}" for relative in missing]


def unrecorded_problems(shown_dir: Path, unrecorded: list[str], fix: str, kind: str,
                        max_listed: int = MAX_UNRECORDED_LISTED) -> list[str]:
    """Files the download never wrote: nothing proves what they hold, and SGLang loads models with
    trust_remote_code, so a `*.py` there runs in the engine once the config names it."""
    found = [f"{name(shown_dir / relative)}: not written by the download (no record in {METADATA_DIR}/; expected "
             f"only the {kind}'s downloaded files, since SGLang may read or run any of them). {fix}"
             for relative in unrecorded[:max_listed]]
    if len(unrecorded) > max_listed:
        found.append(f"{name(shown_dir)}: {len(unrecorded) - max_listed} more files not written by "
                     f"the download (expected none). {fix}")
    return found


def checksum_problems(root: Path, shown_dir: Path, relative: str, fix: str, say: Callable[[str], None],
                      kind: str, chunk: int = HASH_CHUNK, progress_every: int = PROGRESS_EVERY,
                      tally: Tally | None = None) -> list[str]:
    """The file hashes to the etag its record states (SHA-256 for an LFS file, else its git blob id)."""
    found = metadata(root, relative)
    if isinstance(found, str):
        return []  # already refused by the revision check
    etag = found[1]
    where = name(shown_dir / relative)
    if SHA256.fullmatch(etag):
        algorithm = "SHA-256"
    elif GIT_SHA1.fullmatch(etag):
        algorithm = "git blob SHA-1"
    else:
        return [f"{where}: recorded etag {shown(etag)} is neither a SHA-256 (an LFS file's) nor a git blob "
                f"SHA-1 (any other file's), so its content cannot be proven. {fix}"]
    try:
        digest_hex = digest(root / relative, algorithm == "SHA-256", f"{kind} {shown(relative)}", say, chunk,
                            progress_every, tally)
    except OSError as exc:
        return [f"{where}: unreadable ({shown(exc.strerror or str(exc))}). {fix}"]
    if digest_hex != etag:
        if tally is not None:
            tally.mismatched.append(relative)
        return [f"{where}: {algorithm} {digest_hex}, expected {etag} as downloaded (corrupt or edited file). {fix}"]
    return []


def digest(path: Path, lfs: bool, label: str, say: Callable[[str], None], chunk: int = HASH_CHUNK,
           progress_every: int = PROGRESS_EVERY, tally: Tally | None = None) -> str:
    """The file's digest as the Hub's etag states it: SHA-256 of the content for an LFS file, else the git blob
    id (SHA-1 of `blob <size>\\0` + content). Streamed, so a multi-GB file never sits in memory; large files
    report progress."""
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if lfs:
            hasher = hashlib.sha256()
        else:
            hasher = hashlib.sha1(usedforsecurity=False)  # git's id, compared, not a security primitive
            hasher.update(b"blob %d\0" % size)
        done, next_report = 0, progress_every
        if size >= progress_every:
            say(f"hashing {label} ({size / 2**30:.1f} GiB)")
        while data := handle.read(chunk):
            hasher.update(data)
            done += len(data)
            if done >= next_report and done < size:
                say(f"hashing {label}: {done / 2**30:.1f} / {size / 2**30:.1f} GiB")
                next_report += progress_every
    if tally is not None:
        tally.files += 1
        tally.bytes += done
    return hasher.hexdigest()
