"""A real browser for the end-to-end tests: Debian's headless Chromium renders a page (its DOM, parsed) and
screenshots it into tests/artifacts/status_page/ (git-ignored).

Chromium talks to 127.0.0.1 only: background networking, sync, component updates, default apps and every proxy
are off, and its resolver maps every other name to nothing."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from tests.unit.test_status_page import dom

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "tests" / "artifacts" / "status_page"
CHROMIUM = "/usr/bin/chromium-headless-shell"  # Debian bookworm's chromium-headless-shell (.ci/run installs it)
WINDOW = (1280, 2000)
QUIET = [
    "--headless", "--no-sandbox",  # CI runs as root
    "--disable-gpu", "--disable-background-networking", "--no-first-run", "--disable-sync",
    "--disable-component-update", "--disable-default-apps", "--disable-extensions", "--disable-breakpad",
    "--no-proxy-server", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]


@pytest.fixture(scope="module")
def chromium() -> str:
    if not Path(CHROMIUM).is_file() and not shutil.which("chromium-headless-shell"):
        pytest.fail("the status page's browser test needs Debian's chromium-headless-shell "
                    "(apt-get install --no-install-recommends chromium-headless-shell; .ci/run installs it)")
    return CHROMIUM if Path(CHROMIUM).is_file() else shutil.which("chromium-headless-shell")


def browse(chromium: str, profile_dir: Path, url: str, *action: str) -> subprocess.CompletedProcess:
    argv = [chromium, *QUIET, f"--user-data-dir={profile_dir}", *action, url]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=profile_dir)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def rendered(chromium: str, profile_dir: Path, url: str):
    """The page's DOM after Chromium loaded and laid it out (no script runs on it: there is none)."""
    return dom(browse(chromium, profile_dir, url, "--dump-dom").stdout)


def screenshot(chromium: str, profile_dir: Path, url: str, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    target = ARTIFACTS / name
    target.unlink(missing_ok=True)
    browse(chromium, profile_dir, url, f"--screenshot={target}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
           "--hide-scrollbars")
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{target} is not a PNG"
    assert struct.unpack(">II", data[16:24]) == WINDOW, struct.unpack(">II", data[16:24])
    assert len(data) > 20_000, f"{target}: {len(data)} bytes, an empty page?"
    return target
