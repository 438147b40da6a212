"""Developer tasks: the test suite (`invoke test`), and the GPU lane (`invoke test.gpu-pack` here, `invoke test.gpu` or
`bash tests/gpu/run` on a CUDA machine; docs/testing-gpu.md)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from invoke import Collection, Exit, task

from sparkgate.tasks.common import sparkgate_task

PYTEST_NO_TESTS = 5
# Three pytest-xdist workers: the real-SGLang lane, the fleet lab and the Docker end-to-end tests are mostly
# waiting (on a server start, on SSH and Compose, on containers), so they overlap well even on 2 cores. A lane
# that shares one server or one lab stays on one worker (tests/conftest.py: ONE_WORKER_LANES, LaneScheduling).
# Four were measured slower (CI's tests 1,652 s against 1,571 s with three, the same machine and set-up, 2026-12-06):
# on 2 cores the lanes are CPU-bound once all run at once.
PARALLEL = ("-n", "3", "--dist", "loadscope")
SLOWEST = ("--durations", "25")  # where the suite's time goes, printed at the end of every run
REPO = Path(__file__).resolve().parents[1]


# `--under-load`: the tests that read speeds (end to end, the bench, the simulator's timing), with this many
# CPU-burning processes beside them. Every speed the gate and the bench judge is the engine's own accounting, so
# a busy host must not change a verdict; this is the switch that proves it.
UNDER_LOAD_PATHS = ("tests/e2e", "tests/unit/bench", "tests/unit/sim", "tests/unit/evidence")
CPU_BURNERS = 2
BURN = "while True: pass"


@task(
    help={
        "marker": "pytest -m expression, e.g. 'not docker' for a machine without Docker",
        "path": "test path (default: tests; with --under-load: " + " ".join(UNDER_LOAD_PATHS) + ")",
        "dry_run": "print the commands without running them",
        "no_lint": "skip ruff (the lint runs first otherwise)",
        "under_load": f"run the speed-reading tests with {CPU_BURNERS} CPU-burning processes beside them",
    }
)
def test(c, marker="", path="", dry_run=False, no_lint=False, under_load=False):
    """Lint (ruff), then run the whole test suite (unit, simulator, probe, Docker end-to-end). Exit non-zero on
    any failure, including pytest's 'no tests ran'."""
    lint = [sys.executable, "-m", "ruff", "check", "--no-cache", "."]
    paths = [path] if path else list(UNDER_LOAD_PATHS) if under_load else ["tests"]
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *PARALLEL, *SLOWEST, *paths]
    if marker:
        argv += ["-m", marker]
    if not no_lint:
        print(shlex.join(lint), flush=True)
    if under_load:
        print(f"under load: {CPU_BURNERS} x {sys.executable} -c {BURN!r} beside the tests", flush=True)
    print(shlex.join(argv), flush=True)
    if dry_run:
        return
    if not no_lint and subprocess.call(lint, cwd=REPO):
        raise Exit("ruff found problems (above); `ruff check --fix .` fixes the mechanical ones", code=1)
    if "not docker" not in marker:  # the suite includes the Docker end-to-end tests: make sure their image exists
        from sparkgate.bundle.image_build import ensure_runtime_image

        ensure_runtime_image()
    # The suite writes bytecode whatever the machine says (CI's machines set PYTHONDONTWRITEBYTECODE): with that
    # variable every process of the suite compiles the repository's modules again (each worker, each CLI a test runs)
    # and each of pytest's workers rewrites the asserts of all 136 test modules again (5 s of CPU a worker).
    # __pycache__ stays out of git and of every Docker context (.dockerignore).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(CPU_BURNERS if under_load else 0)]
    try:
        code = subprocess.call(argv, env=env)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    if code == PYTEST_NO_TESTS:
        raise Exit("pytest collected no tests: check the path and -m expression", code=code)
    if code:
        raise Exit(code=code)


# -- the GPU lane (tests/gpu) ------------------------------------------------------------------------------------
# What travels to a CUDA machine without a package index: the sglang 0.5.23 wheel's Python tree (its Rust
# extensions are cp311-only and optional: SGLang falls back to Python), and cp312 wheels of what that machine lacks.
GPU_PACK = REPO / ".whl"
GPU_REQUIREMENTS = REPO / "tests" / "gpu" / "requirements.txt"
GPU_SGLANG = "sglang==0.5.23"
GPU_PYTHON = "3.12"
# pip matches manylinux tags exactly: the tags the lane's wheels were published under.
GPU_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                 "manylinux1_x86_64")
# Left out of the trimmed tree: the diffusion package and SGLang's own test suite (never imported by the server),
# compiled extensions (built for CPython 3.11), bytecode.
GPU_TRIM_DIRS = ("sglang/multimodal_gen", "sglang/test")


@sparkgate_task("test.gpu-pack", help={"dest": f"where the pack goes (default {GPU_PACK.name}/ in the checkout, "
                                                "git-ignored)"})
def gpu_pack(c, dest=""):
    """Download what the GPU lane needs onto a networked machine: the trimmed SGLang tree and the wheels of
    tests/gpu/requirements.txt, with a manifest of sha256 sums that tests/gpu/run checks before installing."""
    from devtasks.gpu_pack import pack

    pack(Path(dest) if dest else GPU_PACK, sglang=GPU_SGLANG, requirements=GPU_REQUIREMENTS, python=GPU_PYTHON,
         platforms=GPU_PLATFORMS, trim_dirs=GPU_TRIM_DIRS)


@task
def gpu(c):
    """Run the GPU lane on this CUDA machine (tests/gpu/run: install the pack into a private directory, start the
    real SGLang on CUDA with the test stand-ins, judge it with the gate, record the evidence)."""
    code = subprocess.call(["bash", str(REPO / "tests" / "gpu" / "run")], cwd=REPO)
    if code:
        raise Exit(code=code)


@task
def captures(c):
    """Re-record the capture corpus (tests/fixtures/captures/, docs/field-reports.md): the simulator's faults, then
    the real SGLang CPU lane's launches, each verification kept as the sentinel keeps one. Written to a fresh
    directory and swapped in only when both parts succeeded."""
    import shutil
    import tempfile

    corpus = REPO / "tests" / "fixtures" / "captures"
    staging = Path(tempfile.mkdtemp(prefix=".captures.", dir=corpus.parent))
    try:
        steps = ([sys.executable, "-m", "tests.capture_corpus", "sim", str(staging)],
                 [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/real/test_gate_verdicts.py",
                  "-k", "fresh_capture"])
        for argv in steps:
            print(shlex.join(argv), flush=True)
            if subprocess.call(argv, cwd=REPO, env={**os.environ,
                                                   "SPARKGATE_CAPTURE_CORPUS": str(staging)}):
                raise Exit(f"re-recording stopped at `{shlex.join(argv)}`; the corpus is unchanged", code=1)
        retired = corpus.with_name(".captures.old")
        shutil.rmtree(retired, ignore_errors=True)
        if corpus.exists():
            corpus.rename(retired)
        staging.rename(corpus)
        shutil.rmtree(retired, ignore_errors=True)
        print(f"{corpus}: {len(list(corpus.iterdir()))} captures", flush=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


ns = Collection("test")
ns.add_task(test, default=True)
ns.add_task(captures)
ns.add_task(gpu_pack)
ns.add_task(gpu)
