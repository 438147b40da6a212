"""Developer tasks: the test suite."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from invoke import Collection, Exit, task

PYTEST_NO_TESTS = 5
# Three pytest-xdist workers: the real-SGLang lane, the fleet lab and the Docker end-to-end tests are mostly
# waiting (on a server start, on SSH and Compose, on containers), so they overlap well even on 2 cores. A lane
# that shares one server or one lab stays on one worker (tests/conftest.py: ONE_WORKER_LANES, LaneScheduling).
PARALLEL = ("-n", "3", "--dist", "loadscope")
SLOWEST = ("--durations", "25")  # where the suite's time goes, printed at the end of every run
# The suite runs below the containers it tests: the simulator and the sentinel (in containers, nice 0) run
# time-scaled, so a wall millisecond they wait for the CPU reads as ten engine milliseconds. Niced, the test
# workers (and the real SGLang they start) take the CPU only when the system under test leaves it idle.
TEST_NICENESS = 10
REPO = Path(__file__).resolve().parents[2]


@task(
    help={
        "marker": "pytest -m expression, e.g. 'not docker' for a machine without Docker",
        "path": "test path (default: tests)",
        "dry_run": "print the commands without running them",
        "no_lint": "skip ruff (the lint runs first otherwise)",
    }
)
def test(c, marker="", path="tests", dry_run=False, no_lint=False):
    """Lint (ruff), then run the whole test suite (unit, simulator, probe, Docker end-to-end). Exit non-zero on
    any failure, including pytest's 'no tests ran'."""
    lint = [sys.executable, "-m", "ruff", "check", "--no-cache", "."]
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *PARALLEL, *SLOWEST, path]
    if marker:
        argv += ["-m", marker]
    if not no_lint:
        print(shlex.join(lint), flush=True)
    print(f"nice +{TEST_NICENESS}: " + shlex.join(argv), flush=True)
    if dry_run:
        return
    if not no_lint and subprocess.call(lint, cwd=REPO):
        raise Exit("ruff found problems (above); `ruff check --fix .` fixes the mechanical ones", code=1)
    if "not docker" not in marker:  # the suite includes the Docker end-to-end tests: make sure their image exists
        from sparkgate.bundle.image_build import ensure_runtime_image

        ensure_runtime_image()
    code = subprocess.call(argv, preexec_fn=_below_the_containers)
    if code == PYTEST_NO_TESTS:
        raise Exit("pytest collected no tests: check the path and -m expression", code=code)
    if code:
        raise Exit(code=code)


def _below_the_containers() -> None:
    os.nice(TEST_NICENESS)


ns = Collection(test)
