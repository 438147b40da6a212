"""Atomic writes: a reader never sees a missing bundle directory or a half-written file."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sparkgate import atomic

MIN_SWAPS, MAX_SWAPS = 300, 20000  # at least this many swaps to race against, however fast the reader
ENOUGH_VERSIONS = 5  # the reader saw this many of the writer's versions: it read while the writer wrote

# A separate process, so the reader runs truly concurrently with the writer (no shared GIL): it polls the
# bundle path and reads its file as fast as it can, and reports what it saw. It touches `ready` after its first
# read and `enough` once it saw ENOUGH_VERSIONS versions: the writer swaps until then, however slow the host.
READER = textwrap.dedent("""
    import json, os, sys
    bundle, stop, ready, enough = sys.argv[1:5]
    seen = missing = torn = 0
    versions = set()
    while not os.path.exists(stop):
        if not os.path.isdir(bundle):
            missing += 1
            continue
        try:
            with open(os.path.join(bundle, "payload.txt")) as handle:
                text = handle.read()
        except FileNotFoundError:
            missing += 1
            continue
        lines = set(text.splitlines())
        if len(lines) != 1 or len(text) != 4000 * (len(next(iter(lines))) + 1):
            torn += 1
        else:
            versions.add(next(iter(lines)))
        seen += 1
        if seen == 1:
            open(ready, "w").close()
        if len(versions) == ENOUGH:
            open(enough, "w").close()
    print(json.dumps({"seen": seen, "missing": missing, "torn": torn, "versions": len(versions)}))
""").replace("ENOUGH", str(ENOUGH_VERSIONS))


def _payload(version: int) -> dict[str, str]:
    return {"payload.txt": f"v{version:04d}\n" * 4000, "argv.json": json.dumps([version]) + "\n"}


def _run_reader_during(swap, path: Path, tmp_path: Path) -> tuple[dict, int]:
    """The reader's counts, and the last version written: MIN_SWAPS swaps at least, and on until the reader saw
    enough of them (a slow host swaps longer, never judged by the clock)."""
    stop, ready, enough = tmp_path / "stop", tmp_path / "ready", tmp_path / "enough"
    reader = subprocess.Popen([sys.executable, "-c", READER, *map(str, (path, stop, ready, enough))],
                              stdout=subprocess.PIPE, text=True)
    version = 0
    try:
        while not ready.exists():  # the reader is polling before the first swap
            assert reader.poll() is None, "the reader died"
            time.sleep(0.01)
        while (version < MIN_SWAPS or not enough.exists()) and version < MAX_SWAPS:
            version += 1
            swap(version)
    finally:
        stop.touch()
        out, _ = reader.communicate(timeout=60)
    for marker in (stop, ready, enough):
        marker.unlink(missing_ok=True)
    return json.loads(out), version


def test_directory_never_missing_nor_half_written_during_many_swaps(tmp_path):
    bundle = tmp_path / "bundle"
    atomic.replace_directory(bundle, _payload(0))
    seen, last = _run_reader_during(lambda v: atomic.replace_directory(bundle, _payload(v)), bundle, tmp_path)
    assert seen["versions"] >= ENOUGH_VERSIONS, f"the reader barely ran ({seen}); the test proves nothing"
    assert seen["missing"] == 0 and seen["torn"] == 0, seen
    assert json.loads((bundle / "argv.json").read_text()) == [last]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"], "retired copies left behind"


def test_file_never_missing_nor_half_written_during_many_rewrites(tmp_path):
    directory = tmp_path / "dir"
    atomic.write_text_atomically(directory / "payload.txt", _payload(0)["payload.txt"])
    seen, _ = _run_reader_during(
        lambda v: atomic.write_text_atomically(directory / "payload.txt", _payload(v)["payload.txt"]), directory, tmp_path
    )
    assert seen["versions"] >= ENOUGH_VERSIONS, seen
    assert seen["missing"] == 0 and seen["torn"] == 0, seen
    assert [p.name for p in directory.iterdir()] == ["payload.txt"], "temp files left behind"
    assert oct((directory / "payload.txt").stat().st_mode)[-3:] == "644"


def test_install_directory_replaces_an_existing_export_and_removes_the_old_one(tmp_path):
    out = tmp_path / "export"
    atomic.replace_directory(out, _payload(1))
    staging = tmp_path / ".export.partial"
    staging.mkdir()
    (staging / "payload.txt").write_text(_payload(2)["payload.txt"])
    atomic.install_directory(staging, out)
    assert (out / "payload.txt").read_text() == _payload(2)["payload.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"], "old directory or staging left behind"


def test_exchange_refused_by_the_filesystem_falls_back_to_two_renames(tmp_path, monkeypatch):
    bundle = tmp_path / "bundle"
    atomic.replace_directory(bundle, _payload(1))

    def refuse(a, b):
        raise OSError(errno.EINVAL, "not supported here")

    monkeypatch.setattr(atomic, "exchange", refuse)
    assert atomic.replace_directory(bundle, _payload(2)) is None
    assert (bundle / "payload.txt").read_text() == _payload(2)["payload.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["bundle"]


def test_other_exchange_errors_propagate_and_leave_the_bundle(tmp_path, monkeypatch):
    bundle = tmp_path / "bundle"
    atomic.replace_directory(bundle, _payload(1))

    def deny(a, b):
        raise OSError(errno.EACCES, "permission denied")

    monkeypatch.setattr(atomic, "exchange", deny)
    with pytest.raises(PermissionError):
        atomic.replace_directory(bundle, _payload(2))
    assert (bundle / "payload.txt").read_text() == _payload(1)["payload.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["bundle"], "staging left behind"


def test_exchange_swaps_two_directories(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("from a")
    atomic.exchange(a, b)
    assert (b / "x").read_text() == "from a" and not (a / "x").exists()
    with pytest.raises(FileNotFoundError):
        atomic.exchange(a, tmp_path / "missing")


def test_replacing_removes_the_temp_file_on_failure(tmp_path):
    target = tmp_path / "out.png"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic.replacing(target) as temp:
        temp.write_text("half")
        raise RuntimeError("plot failed")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.png"]
