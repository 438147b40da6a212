"""The Compose entry point from a fresh clone: `docker compose -f compose.yaml -f compose.sim.yaml up --build`
in a clone of HEAD with nothing rendered builds the images, starts engine (simulator), sentinel and gateway,
and the gateway opens only after the sentinel's verdict; then one request is served through it.

CI's machines reach no registry, so the runtime image builds on the offline base (SPARKGATE_RUNTIME_BASE)
with no network (SPARKGATE_BUILD_NETWORK=none) from .ci/wheels, which `invoke images.wheels` downloads on the
host into the checkout, as a user would before an offline build (docs/images.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from sparkgate.bundle.image_build import BASE_TAG, load_lock
from tests.e2e.conftest import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.compose]

FILES = ["-f", "compose.yaml", "-f", "compose.sim.yaml"]  # README's `docker compose <FILES> up --build`
RUNTIME_SERVICES = ("engine", "sentinel", "gateway")  # the services of the sim stack that run the runtime image
MODEL = "ling-v3-flash-fp4"
BUDGET_S = 420  # image build (cached layers after the first) + simulated cold start + the sentinel's full proof


def _get(url: str, body: dict | None = None) -> tuple[int, dict | str]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (urllib.error.URLError, ConnectionError, OSError) as exc:
        return 0, str(exc)


@pytest.fixture
def clone(repo, tmp_path):
    """A clone of HEAD: the committed files only (no build/, no .venv); plus the host-side wheels."""
    target = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(repo), str(target)], check=True)
    assert not (target / "build").exists() and not (target / ".ci" / "wheels").exists()
    shutil.copytree(repo / ".ci" / "wheels", target / ".ci" / "wheels")
    return target


def test_compose_up_build_from_a_fresh_clone_opens_the_gate(clone, tmp_path):
    port = free_port()
    project = f"sparkgate-clone-{os.getpid()}"
    # Without the caller's Compose settings: COMPOSE_PROFILES=monitoring would build the shared Prometheus image too.
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")},
           "SPARKGATE_GATEWAY_PORT": str(port), "SPARKGATE_RUNTIME_BASE": BASE_TAG, "SPARKGATE_BUILD_NETWORK": "none"}
    # The user's command, with one more file that only renames the image it builds: Compose labels what it builds,
    # so under the shared tag it would replace the runtime image the other lanes run and record (the fleet lab's
    # release pins the image id it rolled out).
    merged = json.loads(subprocess.run(["docker", "compose", *FILES, "config", "--format", "json"], cwd=clone,
                                       env=env, capture_output=True, text=True, check=True).stdout)["services"]
    shared = load_lock().local_images["sim"]
    assert {n for n, spec in merged.items() if spec.get("image") == shared} == set(RUNTIME_SERVICES), merged.keys()
    tag = f"sparkgate/runtime:clone-test-{os.getpid()}"
    isolate = tmp_path / "isolate.yaml"
    isolate.write_text(json.dumps({"services": {name: {"image": tag} for name in RUNTIME_SERVICES}}))
    files = [*FILES, "-f", str(isolate)]
    log = (tmp_path / "compose-up.log").open("w")
    up = subprocess.Popen(["docker", "compose", "-p", project, *files, "up", "--build"], cwd=clone, env=env,
                          stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + BUDGET_S
        status, body = 0, ""
        closed_seen = False
        while time.monotonic() < deadline and up.poll() is None:
            status, body = _get(f"{url}/sparkgate/ready")
            if status == 200:
                break
            closed_seen = closed_seen or status == 503  # the gateway answers, closed, before the verdict
            time.sleep(2)
        assert status == 200, f"gate not open after {BUDGET_S}s (last {status}: {body}); up exit {up.poll()}; " \
                              f"log:\n{(tmp_path / 'compose-up.log').read_text()[-4000:]}"
        assert closed_seen, "the gateway never answered closed before it opened"
        # The gateway's own admission flag follows the sentinel's /ready within its poll interval (~1 s).
        follow = time.monotonic() + 15
        while _get(f"{url}/v1/models")[0] != 200 and time.monotonic() < follow:
            time.sleep(0.25)
        status, reply = _get(f"{url}/v1/chat/completions", {
            "model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "What is 2 + 3?"}],
        })
        assert status == 200, reply
        assert reply["model"] == MODEL and reply["choices"][0]["message"]
        assert reply["usage"]["completion_tokens"] > 0
        assert not (clone / "build").exists(), "the compose path rendered nothing on the host"
    finally:
        down = ["docker", "compose", "-p", project, *files, "down", "-v", "--remove-orphans", "-t", "5"]
        subprocess.run(down, cwd=clone, env=env, capture_output=True, check=False)
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
            subprocess.run(down, cwd=clone, env=env, capture_output=True, check=False)  # what it made meanwhile
        log.close()
        subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True, check=False)
