"""The status page in a real browser: Debian's headless Chromium opens `/sparkgate/` through a deployed stack's
gateway, the rendered DOM shows the open gate and its checks, memory pressure injected after admission closes the
gate and the page names the failing check with what was observed and expected. Both renders are screenshotted
into tests/artifacts/status_page/ (git-ignored).

Chromium talks to 127.0.0.1 only: background networking, sync, component updates, default apps and every proxy
are off, and its resolver maps every other name to nothing."""

from __future__ import annotations

import shutil
import struct
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sparkgate.sentinel import page
from tests.e2e.conftest import E2E_PERIOD_S
from tests.e2e.test_deploy import wait_for
from tests.unit.test_status_page import assert_inert, dom, hint_after, rows

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

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


def test_the_status_page_in_a_browser_follows_the_gate_from_open_to_closed(deploy_stack, chromium, tmp_path):
    stack = deploy_stack("all-three")
    assert stack.result.admitted, stack.result.reason
    url = stack.url + page.PATH
    # A couple of re-checks, so the history holds more than the admission sample.
    assert wait_for(lambda: stack.verdict()["rechecks"] >= 2, timeout=E2E_PERIOD_S * 4 + 3, interval=0.5)

    # Through the gateway, with the sentinel's headers intact; read-only.
    with urllib.request.urlopen(url, timeout=10) as response:
        headers, body = response.headers, response.read().decode()
    assert headers["Content-Type"] == page.CONTENT_TYPE and headers["Content-Security-Policy"] == page.CSP
    assert headers["X-Content-Type-Options"] == "nosniff" and headers["Cache-Control"] == "no-store"
    assert_inert(body)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"), timeout=10)
    assert refused.value.code == 405  # the gateway itself: the page is GET/HEAD only

    tree = rendered(chromium, tmp_path, url)
    assert tree.find(id="gate-state").text == "open" and "open" in tree.find(id="gate").attrs["class"].split()
    assert tree.find(id="profile").text == "all-three"
    shown = rows(tree)
    for name in ("engine.health", "host.memory_headroom", "mtp.accept_length", "suite.infra", "suite.smoke"):
        assert shown[name].find("td", class_="result").text == "passed", name
    memory_plot = tree.find("svg", **{"data-key": "mem_available_gib"})
    assert memory_plot.find_all("polyline") or memory_plot.find_all("circle")
    assert memory_plot.find_all("line", class_="threshold")
    screenshot(chromium, tmp_path, url, "status-open.png")

    # Memory pressure after admission: host.memory_headroom closes the gate at the next re-check; the full
    # verification that follows refuses the engine by it too, and the gate stays closed (retries included).
    stack.engine_admin("/admin/faults", {"add": ["memory-pressure"]})
    assert wait_for(lambda: stack.verdict()["state"] != "open", timeout=E2E_PERIOD_S * 3 + 3, interval=0.5), \
        "memory pressure did not close the gate"
    assert wait_for(lambda: (lambda v: v["state"] == "closed" and not v["full"]["passed"])(stack.verdict()),
                    timeout=60, interval=0.5), stack.verdict()["reason"]

    tree = rendered(chromium, tmp_path, url)
    assert tree.find(id="gate-state").text == "closed" and "closed" in tree.find(id="gate").attrs["class"].split()
    assert "host.memory_headroom" in tree.find(id="reason").text
    memory = rows(tree)["host.memory_headroom"]
    assert memory.find("td", class_="result").text == "FAILED"
    assert '"mem_available_gib":' in memory.find("td", class_="observed").text
    assert memory.find("td", class_="expected").text.startswith(">= 4")
    assert "GiB left" in hint_after(memory)
    screenshot(chromium, tmp_path, url, "status-closed.png")
