"""`invoke capture`: copy the sentinel's capture of the last full verification out of a deployed stack, add what
only the host can see (its GPU and driver, Docker, the engine image's build guard), and write one file to attach
to a field report (docs/field-reports.md).

Its first line says whose capture it is: "of this deploy" only when the capture names this project's rendered bundle
and its engine container's start; otherwise "of ANOTHER deploy (bundle X, started T)" or "of an unnamed deploy":
another deploy's file is never handed over without saying so (a compose project shared by two checkouts, an older
refusal kept on the captures volume).

The file is read back before it is kept (a capture that would not replay is never handed out), and every secret the
host knows is replaced once more: the gateway API key, and a Hugging Face token (HF_TOKEN or huggingface_hub's token
file).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sparkgate.bundle.render import CAPTURES_DIR, CAPTURES_VOLUME
from sparkgate.deploy import docker_cli
from sparkgate.errors import Refusal, inert
from sparkgate.evidence import capture
from sparkgate.runtime import engine_run
from sparkgate.sentinel.captures import LAST, refused_order

# `sparkgate build-guard` lines: "[ok] name: detail" or "[MISSING] name: detail".
_GUARD_LINE = re.compile(r"\[(ok|MISSING)\] ([^:\n]+): (.*)")
GPU_QUERY = ("nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader")


class CaptureUnavailable(Refusal):
    """No capture to copy out: the line says why and what to run."""


def collect(project: docker_cli.Project, profile: str, out: Path | None, *, refused: bool = False,
            api_key_file: str | None = None, say: Callable[[str], None] = print) -> Path:
    started = time.monotonic()
    sentinel = project.container("sentinel")
    if sentinel is None:
        raise CaptureUnavailable(
            f"no sentinel container in project {project.name}: nothing deployed for {profile}, or `invoke down` "
            f"removed it (its captures stay on the volume {project.name}_{CAPTURES_VOLUME}; deploy again to "
            f"read it). Fix: invoke deploy --profile {profile}")
    with tempfile.TemporaryDirectory(prefix="sparkgate-capture-") as scratch:
        source = _pick(sentinel, refused, Path(scratch))
        captured = capture.read(source)
        if captured.manifest.profile != profile:
            raise CaptureUnavailable(f"the sentinel of {project.name} captured profile {captured.manifest.profile!r}, "
                                     f"not {profile!r}: pass the profile that stack runs")
        say(describe(captured, current_deploy(project)))
        host = capture.host_facts("host", gpu=_gpu(), docker=_docker_version())
        image = captured.context.image.model_copy(update={"build_guard": _build_guard(project, captured.context.image)})
        made = captured.model_copy(update={
            "manifest": captured.manifest.model_copy(update={"written_by": "host"}),
            "context": captured.context.model_copy(update={"image": image,
                                                           "hosts": [*captured.context.hosts, host]})})
        target = out or _default_path(project, captured)
        if target.is_dir():
            raise CaptureUnavailable(f"--out {target} is a directory: name the capture file to write")
        try:
            capture.write(made, target, _host_secrets(api_key_file))
        except OSError as exc:
            raise CaptureUnavailable(f"cannot write {target}: {exc.strerror or exc}") from None
    capture.read(target)  # what is handed out must read back whole
    say(f"wrote {target} ({target.stat().st_size / 1024:.0f} KiB in {time.monotonic() - started:.1f} s); "
        f"judge it again with: sparkgate verify --replay {target}")
    return target


def current_deploy(project: docker_cli.Project) -> capture.DeployOf | None:
    """This project's deploy as a capture names it: its rendered bundle's id and its engine container's id (Docker's
    hostname for it, which the engine entrypoint records). None when the bundle cannot be read."""
    bundle = engine_run.bundle_id_of(project.compose_file.parent)
    if bundle is None:
        return None
    container = project.container("engine")
    return capture.DeployOf(bundle=bundle, deploy=container[:12] if container else None)


def whose(of: capture.DeployOf | None, current: capture.DeployOf | None) -> str:
    """"of this deploy", or which other deploy a capture is of (its values shown inert: a capture is untrusted)."""
    if of is None:
        return "of an unnamed deploy (the capture names none: written by an older sparkgate)"
    this = (current is not None and of.bundle == current.bundle and of.deploy is not None
            and current.deploy is not None and of.deploy[:12] == current.deploy[:12])
    if this:
        return f"of this deploy (bundle {of.bundle}, engine {of.deploy}, started {of.started or 'unknown'})"
    return (f"of ANOTHER deploy (bundle {of.bundle}, engine {of.deploy or 'unknown'}, started {of.started or 'unknown'}"
            f"; this deploy: bundle {current.bundle if current else 'unknown'}, engine "
            f"{(current.deploy if current else None) or 'none'})")


def describe(captured: capture.Capture, current: capture.DeployOf | None) -> str:
    """The one line `invoke capture` prints first: what was captured, and whose deploy it is."""
    manifest = captured.manifest
    if manifest.judged == "start":
        what = (f"the refused start (engine exited, code {captured.context.start.exit_code if captured.context.start else '?'}"
                f") captured {manifest.created}")
    else:
        what = (f"the {'refused' if not captured.admitted else 'admitted'} verification of {manifest.created} "
                f"({len(captured.recording.exchanges)} engine answers)")
    return inert(f"capture of {what}, {whose(manifest.of, current)}")


def _pick(sentinel: str, refused: bool, scratch: Path) -> Path:
    """Copy the sentinel's captures (running or stopped: `docker cp` reads a stopped container too) into `scratch`
    and return the chosen one."""
    copied = docker_cli.run(["cp", f"{sentinel}:{CAPTURES_DIR}/.", str(scratch)], check=False, timeout=120)
    if copied.returncode != 0:
        raise CaptureUnavailable(
            f"cannot copy the sentinel's captures ({CAPTURES_DIR}): {copied.stderr.strip()[-200:]}. Fix: redeploy "
            "with this sparkgate (older stacks keep none)")
    if refused:
        names = [p.name for p in scratch.iterdir() if refused_order(p.name) is not None]
        if not names:
            raise CaptureUnavailable("the sentinel keeps no refused verification (every full verification so far "
                                     "passed). Fix: drop --refused for the last one")
        return scratch / max(names, key=refused_order)
    if not (scratch / LAST).is_file():
        raise CaptureUnavailable(
            f"the sentinel has no {LAST} yet: it writes one after each full verification (the first comes once "
            "the engine is healthy; `invoke status` shows the phase)")
    return scratch / LAST


def _default_path(project: docker_cli.Project, captured: capture.Capture) -> Path:
    stamp = re.sub(r"[^0-9TZ]", "", captured.manifest.created.replace("+00:00", "Z"))
    outcome = "admitted" if captured.admitted else "refused"
    # Beside the bundle, not inside it: a render replaces the bundle directory whole.
    return project.compose_file.parent.parent / "captures" / project.name / f"{stamp}-{outcome}{capture.SUFFIX}"


def _command(argv: tuple[str, ...] | list[str], timeout: float = 30) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip()[:500] or None) if done.returncode == 0 else None


def _gpu() -> str | None:
    return _command(GPU_QUERY)


def _docker_version() -> str | None:
    return _command(("docker", "version", "--format", "{{.Server.Version}}"))


def _build_guard(project: docker_cli.Project, image: capture.ImageFacts) -> list[dict] | None:
    """`sparkgate build-guard` inside the running engine container: what SGLang the image really holds."""
    engine = project.container("engine")
    if engine is None or not image.key:
        return None
    try:
        done = docker_cli.run(["exec", engine, "sparkgate", "build-guard", "--image", image.key], check=False,
                              timeout=180)
    except subprocess.TimeoutExpired:
        return [{"name": "build-guard", "ok": False, "detail": "did not finish in 180 s"}]
    found = [{"name": m[2].strip(), "ok": m[1] == "ok", "detail": m[3].strip()[:300]}
             for m in map(_GUARD_LINE.fullmatch, done.stdout.splitlines()) if m]
    return found or None


def _host_secrets(api_key_file: str | None) -> list[str]:
    found = [os.environ.get("HF_TOKEN", ""), os.environ.get("HUGGING_FACE_HUB_TOKEN", "")]
    token_file = Path(os.environ.get("HF_TOKEN_PATH") or Path(os.environ.get("HF_HOME") or
                                                                 Path.home() / ".cache" / "huggingface") / "token")
    for path in (token_file, Path(api_key_file) if api_key_file else None):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            found.append(path.read_text(encoding="utf-8").strip() if path else "")
    return [s for s in found if s]
