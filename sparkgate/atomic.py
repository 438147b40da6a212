"""Atomic file and directory replacement: readers see the old content or the new, never a gap or half a file.

`write_text_atomically` writes a temp file in the target's directory and renames it over the target.
`replace_directory` stages a complete directory and swaps it with the old one in a single Linux
`renameat2(RENAME_EXCHANGE)`, so the path never stops existing, then removes the old one. (A running stack
is not affected: its bundle files travel inside its compose.yaml as configs, so nothing mounts the directory.)
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 1 << 1
# Used only when libc has no renameat2 wrapper (glibc < 2.28, musl < 1.2.5).
_SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276, "arm64": 276}


def write_text_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text`: a reader sees the old file or the whole new one, never a partial write."""
    with replacing(path) as temp:
        temp.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def replacing(path: Path, mode: int = 0o644) -> Iterator[Path]:
    """Yield a temp path next to `path`; when the block succeeds, it is synced and renamed over `path`.

    For writers that insist on a file name of their own (e.g. matplotlib's savefig). On failure the
    temp file is removed and `path` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + path.suffix, dir=path.parent)
    os.close(fd)
    temp = Path(name)
    try:
        yield temp
        os.chmod(temp, mode)  # mkstemp creates 0600
        _fsync_file(temp)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def replace_directory(directory: Path, files: Mapping[str, str]) -> None:
    """Make `directory` hold exactly `files` ({relative name: text}) without it ever being missing.

    A failure while staging leaves `directory` untouched and no temp directory behind.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.new.", dir=directory.parent))
    try:
        for name, text in files.items():
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            _fsync_file(target)
        os.chmod(staging, 0o755)  # mkdtemp makes it 0700; containers read the bundle as other users too
        _fsync_dir(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    install_directory(staging, directory)


def install_directory(staging: Path, directory: Path) -> None:
    """Put the fully written `staging` (a sibling of `directory`) at `directory`, which is never missing
    meanwhile, and remove the old one. On failure `staging` is removed and `directory` left as it was."""
    try:
        retired = _swap_in(Path(staging), Path(directory))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _fsync_dir(Path(directory).parent)
    if retired is not None:
        shutil.rmtree(retired, ignore_errors=True)


def _swap_in(staging: Path, directory: Path) -> Path | None:
    """Put `staging` at `directory`; return where the old directory went (None if there was none)."""
    if not directory.exists():
        os.rename(staging, directory)
        return None
    try:
        exchange(staging, directory)
    except OSError as exc:
        # Some filesystems (e.g. older overlayfs, NFS, FUSE) answer EINVAL, and old kernels or seccomp
        # profiles ENOSYS. Only then fall back to two renames, with a brief window in which `directory`
        # does not exist; every other error (permissions, EXDEV, ...) is real and propagates.
        if exc.errno not in (errno.EINVAL, errno.ENOSYS):
            raise
        holder = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old.", dir=directory.parent))
        os.rename(directory, holder / directory.name)
        os.rename(staging, directory)
        return holder
    # After the exchange `staging` holds the old directory; give it a name that says so.
    retired = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old.", dir=directory.parent))
    os.rename(staging, retired / directory.name)
    return retired


def exchange(a: Path, b: Path) -> None:
    """Atomically swap two existing paths (Linux renameat2 with RENAME_EXCHANGE); OSError on failure."""
    libc = ctypes.CDLL(None, use_errno=True)
    old, new = os.fsencode(a), os.fsencode(b)
    function = getattr(libc, "renameat2", None)
    if function is not None:
        function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        result = function(_AT_FDCWD, old, _AT_FDCWD, new, _RENAME_EXCHANGE)
    else:
        number = _SYS_RENAMEAT2.get(platform.machine())
        if number is None:
            raise OSError(errno.ENOSYS, f"renameat2 unavailable on {platform.machine()}")
        result = libc.syscall(ctypes.c_long(number), ctypes.c_int(_AT_FDCWD), ctypes.c_char_p(old),
                              ctypes.c_int(_AT_FDCWD), ctypes.c_char_p(new), ctypes.c_uint(_RENAME_EXCHANGE))
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"renameat2(RENAME_EXCHANGE) {a} <-> {b}: {os.strerror(code)}")


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    # Makes the rename itself durable; some filesystems refuse fsync on a directory, which is harmless.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
