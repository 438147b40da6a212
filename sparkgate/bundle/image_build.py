"""Building images: the mmdebstrap CI base, host-side wheels, the offline runtime (simulator, sentinel,
gateway) image and the Spark engine. The invoke tasks in sparkgate/tasks/images.py only call these.

Every command is built as an argv list and printed with `shlex.join` before it runs; `dry_run` prints it
and does nothing else. A refusal is one ImageError line (a Refusal) that says what to run next. Local builds
use the classic builder (`DOCKER_BUILDKIT=0`): the machines' docker CLI 28.2 has no buildx plugin, so
BuildKit builds through it fail with "buildx component missing".
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from sparkgate.deploy import docker_cli
from sparkgate.errors import Refusal
from sparkgate.paths import repo_root

BASE_TAG = "sparkgate/base:bookworm"

# The Python of the images: Debian bookworm's python3 in the base, CPython 3.11 from uv on the Spark.
IMAGE_PYTHON = "3.11"
# Optional-dependency groups of pyproject.toml that the runtime image installs (docker/runtime.Dockerfile).
RUNTIME_EXTRAS = ("runtime",)
# The runtime image builds sparkgate and the simulator from source with --no-build-isolation, so its
# build backend comes from the wheels too (docker/runtime.Dockerfile ARG SETUPTOOLS_VERSION, held equal by a test).
BUILD_REQUIREMENTS = ("setuptools==84.2.1",)
# Bundle data copied next to the package so the CLI works inside images (SPARKGATE_HOME).
BUNDLE_DATA = ("images.lock.yaml", "profiles", "templates")
# The Spark image's build context: only what the Dockerfile copies (keeps .venv, .git and build/ out).
SPARK_CONTEXT = ("pyproject.toml", "sparkgate", "probe", *BUNDLE_DATA)
RUNTIME_DOCKERFILE = "docker/runtime.Dockerfile"
LEGACY_BUILDER = {"DOCKER_BUILDKIT": "0"}
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache")


class ImageError(Refusal):
    """An image cannot be built here, or its build failed."""


def load_lock():
    """images.lock.yaml, read on first use (pydantic is not imported for `invoke --list` or a task's --help)."""
    from sparkgate import images

    return images.load_lock()


def _root() -> Path:
    return repo_root()


def _wheels_dir() -> Path:
    return _root() / ".ci" / "wheels"


def _state_dir() -> Path:
    return _root() / ".ci" / "state"


def _show(argv: list[str], env: dict[str, str] | None = None) -> str:
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    return f"{prefix} {shlex.join(argv)}".strip()


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    """Run argv with its output streaming through; a failure becomes one actionable ImageError line."""
    print(f"$ {_show(argv, env)}", flush=True)
    code = subprocess.call(argv, env={**os.environ, **(env or {})})
    if code:
        raise ImageError(f"{what} failed (exit {code}); the output above says why")


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(
        ["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True, check=False
    )
    return probe.returncode == 0


def _require_docker() -> None:
    if not _docker_answers():
        raise ImageError("no Docker engine answers; start one with `sudo bash .ci/dockerd start` (see docs/images.md)")


def _image_exists(tag: str) -> bool:
    return docker_cli.image_id(tag) is not None


def _image_size_mb(tag: str) -> int:
    out = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Size}}", tag], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip()) // 1_000_000


# --- wheels --------------------------------------------------------------------------------------


def wheel_platforms(machine: str | None = None) -> list[str]:
    """pip --platform tags for the images' Linux, matching the host's architecture.

    manylinux2014 covers the pinned packages; manylinux_2_28 is added because the images' glibc
    (bookworm: 2.36) runs those too and some projects publish only the newer tag.
    """
    machine = (machine or platform.machine()).lower()
    arch = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(machine)
    if arch is None:
        raise ImageError(f"no wheel platform for host architecture {machine!r}; build images on x86_64 or aarch64")
    return [f"manylinux2014_{arch}", f"manylinux_2_28_{arch}"]


def _pyproject() -> dict:
    return tomllib.loads((_root() / "pyproject.toml").read_text(encoding="utf-8"))


def image_requirements() -> tuple[list[str], str]:
    """(third-party requirements to download, the requirement line that installs sparkgate)."""
    project = _pyproject()["project"]
    extras = [name for name in RUNTIME_EXTRAS if name in project.get("optional-dependencies", {})]
    deps = list(project.get("dependencies", [])) + list(BUILD_REQUIREMENTS)
    for name in extras:
        deps.extend(project["optional-dependencies"][name])
    spec = f"{project['name']}[{','.join(extras)}]" if extras else project["name"]
    return sorted(set(deps)), f"{spec}=={project['version']}"


def wheels_manifest(machine: str | None = None) -> dict:
    deps, sparkgate_req = image_requirements()
    data = {"python": IMAGE_PYTHON, "platforms": wheel_platforms(machine), "requirements": deps}
    data["inputs_sha256"] = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    data["install"] = sparkgate_req
    return data


def _download_argv(dest: Path, manifest: dict) -> list[str]:
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--dest", str(dest)]
    argv += ["--only-binary=:all:", "--python-version", manifest["python"], "--implementation", "cp"]
    for tag in manifest["platforms"]:
        argv += ["--platform", tag]
    return argv + manifest["requirements"]


def _wheels_current(manifest: dict) -> bool:
    recorded_path = _wheels_dir() / "manifest.json"
    if not recorded_path.exists():
        return False
    recorded = json.loads(recorded_path.read_text())
    files = recorded.get("files") or []
    return (
        recorded.get("inputs_sha256") == manifest["inputs_sha256"]
        and bool(files)
        and all((_wheels_dir() / name).is_file() for name in files)
    )


def download_wheels(force: bool = False, dry_run: bool = False) -> None:
    """Download the images' third-party wheels into .ci/wheels/ (host side; image builds stay offline).

    Wheels are for CPython 3.11 on manylinux of the host's architecture, binary only, exactly the pins
    of pyproject.toml (plus its `runtime` extra). .ci/wheels/manifest.json records the
    inputs and files; when they still match, nothing is downloaded (--force to redo).
    """
    manifest = wheels_manifest()
    target = _wheels_dir()
    staging_parent = _state_dir()
    argv = _download_argv(target, manifest)
    if dry_run:
        print(shlex.join(argv))
        return
    if not force and _wheels_current(manifest):
        print(f"{target.relative_to(_root())} is current for pyproject.toml's pins; --force to download again")
        return
    staging_parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="wheels.", dir=staging_parent))
    try:
        _run(_download_argv(staging, manifest), "pip download of the image wheels")
        recorded = {**manifest, "files": sorted(p.name for p in staging.glob("*.whl"))}
        (staging / "manifest.json").write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    count = len(list(target.glob("*.whl")))
    size = sum(p.stat().st_size for p in target.glob("*.whl")) // 1_000_000
    print(f"{count} wheels ({size} MB) in {target.relative_to(_root())} for {', '.join(manifest['platforms'])}")


def _check_wheels(manifest: dict) -> None:
    if not (_wheels_dir() / "manifest.json").exists():
        raise ImageError("no wheels in .ci/wheels; run `invoke images.wheels` first (it needs PyPI, the build does not)")
    if not _wheels_current(manifest):
        raise ImageError(".ci/wheels is stale or incomplete for pyproject.toml's pins here; run `invoke images.wheels`")


# --- base ----------------------------------------------------------------------------------------


def build_base(rebuild: bool = False, tag: str = BASE_TAG, dry_run: bool = False) -> None:
    """Build the Debian bookworm base image with mmdebstrap | docker import, if it is missing.

    No registry is involved: the rootfs comes from Debian's mirror (docker/build-base.sh). About 30-45 s.
    """
    argv = ["bash", str(_root() / "docker" / "build-base.sh"), tag]
    if dry_run:
        print(shlex.join(argv))
        return
    _require_docker()
    if not rebuild and _image_exists(tag):
        print(f"{tag} exists ({_image_size_mb(tag)} MB); --rebuild to build it again")
        return
    if shutil.which("mmdebstrap") is None:
        raise ImageError("mmdebstrap not found; install it: apt-get install --no-install-recommends mmdebstrap")
    if os.geteuid() != 0:
        raise ImageError("building the base image needs root (mmdebstrap root mode); rerun as root")
    _run(argv, f"building {tag}")


# --- sim -----------------------------------------------------------------------------------------


def _copy_from_checkout(names: tuple[str, ...], destination: Path) -> None:
    """Files and directories of the checkout into a build context (without caches)."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = _root() / name
        if path.is_dir():
            shutil.copytree(path, destination / name, ignore=_IGNORE)
        else:
            shutil.copy2(path, destination / name)


def runtime_build_argv(tag: str, context: Path, no_cache: bool = False) -> list[str]:
    """The offline build: what the top-level compose files do with SPARKGATE_RUNTIME_BASE=sparkgate/base:bookworm
    and SPARKGATE_BUILD_NETWORK=none (same Dockerfile, same context, the wheels from .ci/wheels)."""
    argv = ["docker", "build", "--network", "none", "--build-arg", f"BASE_IMAGE={BASE_TAG}"]
    argv += ["--file", str(context / RUNTIME_DOCKERFILE), "--tag", tag]
    if no_cache:
        argv.append("--no-cache")
    return argv + [str(context)]


def build_runtime(no_cache: bool = False, dry_run: bool = False) -> None:
    """Build the runtime image (images.lock.yaml local_images.sim) offline: --network none.

    Needs `images.base` and `images.wheels` first. The context is the checkout itself (.dockerignore keeps it
    to what the Dockerfile copies), so the image always carries the current source.
    """
    tag = load_lock().local_images["sim"]
    argv = runtime_build_argv(tag, _root(), no_cache)
    if dry_run:
        print(_show(argv, LEGACY_BUILDER))
        return
    _require_docker()
    if not _image_exists(BASE_TAG):
        raise ImageError(f"{BASE_TAG} is missing; build it first with `invoke images.base`")
    _check_wheels(wheels_manifest())
    _run(argv, f"building {tag}", env=LEGACY_BUILDER)
    print(f"{tag}: {_image_size_mb(tag)} MB")


# --- spark ---------------------------------------------------------------------------------------


def spark_build_args(allow_unpinned: bool = False, max_jobs: int = 4) -> dict[str, str]:
    """--build-arg values for the Spark Dockerfile, every one taken from images.lock.yaml."""
    lock = load_lock()
    cuda = lock.base_images["cuda-devel-arm64"]
    fork = lock.sglang_fork
    pkgs = lock.python_packages
    args = {
        "BASE_IMAGE": cuda.ref,
        "BASE_DIGEST": cuda.digest or "",
        "SGLANG_REPO": fork.repo,
        "SGLANG_BRANCH": fork.branch,
        "SGLANG_COMMIT": fork.commit,
        "SGLANG_VERSION": fork.version,
        "HUMMING_KERNELS_VERSION": pkgs["humming-kernels"],
        "FLASHINFER_PYTHON_VERSION": pkgs["flashinfer-python"],
        "FLASHINFER_CUBIN_VERSION": pkgs["flashinfer-cubin"],
        "MAX_JOBS": str(max_jobs),
    }
    if allow_unpinned:
        args["SPARKGATE_ALLOW_UNPINNED_BASE"] = "1"
    return args


def spark_build_argv(context: Path, allow_unpinned: bool = False, max_jobs: int = 4) -> list[str]:
    lock = load_lock()
    argv = ["docker", "build", "--platform", lock.base_images["cuda-devel-arm64"].platform]
    for key, value in spark_build_args(allow_unpinned, max_jobs).items():
        argv += ["--build-arg", f"{key}={value}"]
    argv += ["--file", str(_root() / "Dockerfile"), "--tag", lock.engine_images["spark-fork"].tag]
    return argv + [str(context)]


def build_spark(allow_unpinned: bool = False, max_jobs: int = 4, dry_run: bool = False) -> None:
    """Build the Spark engine image (linux/arm64) on the Spark itself, every pin from images.lock.yaml.

    Needs network access (GitHub for the fork, PyPI, FlashInfer's wheel index).
    The build fails unless the fork sits on the pinned commit and `sparkgate build-guard` passes.
    """
    lock = load_lock()
    context = _state_dir() / "build" / "spark"
    argv = spark_build_argv(context, allow_unpinned, max_jobs)
    if dry_run:
        print(f"# stage {context.relative_to(_root())}/: {', '.join(SPARK_CONTEXT)}")
        print(shlex.join(argv))
        return
    if platform.machine().lower() not in ("aarch64", "arm64"):
        raise ImageError(
            f"the Spark engine image is linux/arm64 and is built on the Spark (this host is {platform.machine()}); "
            "`invoke images.spark --dry-run` prints the command"
        )
    if not lock.base_images["cuda-devel-arm64"].digest and not allow_unpinned:
        raise ImageError(
            "images.lock.yaml has no digest for base_images.cuda-devel-arm64; fill it (`invoke images.lock` "
            "explains how) or pass --allow-unpinned for a development build"
        )
    if not (_root() / "probe" / "pyproject.toml").exists():
        raise ImageError("probe/pyproject.toml is missing; the engine image installs the probe plugin from probe/")
    _require_docker()
    if context.exists():
        shutil.rmtree(context)
    _copy_from_checkout(SPARK_CONTEXT, context)
    _run(argv, f"building {lock.engine_images['spark-fork'].tag}")


# --- prometheus ----------------------------------------------------------------------------------

PROMETHEUS_DOCKERFILE = "docker/prometheus.Dockerfile"
DEBIAN_SUITE = "bookworm"
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


def prometheus_pin() -> tuple[str, str]:
    """(image tag, Debian package version) of the monitoring profile's Prometheus, from images.lock.yaml."""
    lock = load_lock()
    return lock.local_images["prometheus"], lock.debian_packages["prometheus"]


def debian_sources(keyring: str = DEBIAN_KEYRING) -> str:
    """The apt sources the base image is made from (docker/build-base.sh: same mirrors, same suites)."""
    mirror = os.environ.get("SPARKGATE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    security = os.environ.get("SPARKGATE_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
    return "".join(f"deb [signed-by={keyring}] {url} {suite} main\n" for url, suite in (
        (mirror, DEBIAN_SUITE), (mirror, f"{DEBIAN_SUITE}-updates"), (security, f"{DEBIAN_SUITE}-security")))


def apt_argv(root: Path, *args: str) -> list[str]:
    """Host apt-get confined to `root`: its own sources, lists, cache and a dpkg status copied from the base
    image, so it resolves exactly what that image lacks and touches nothing of the host's apt state."""
    options = {
        "Dir::Etc::SourceList": str(root / "sources.list"), "Dir::Etc::SourceParts": str(root / "empty"),
        "Dir::Etc::Preferences": str(root / "empty" / "preferences"),
        "Dir::Etc::PreferencesParts": str(root / "empty"), "Dir::State": str(root / "state"),
        "Dir::State::status": str(root / "status"), "Dir::Cache": str(root / "cache"),
        "Acquire::Languages": "none", "APT::Install-Recommends": "false", "Debug::NoLocking": "1",
        # The downloads land in a directory of ours, which apt's _apt sandbox user cannot write (as root).
        "APT::Sandbox::User": "root",
    }
    return ["apt-get", "-q", *[arg for key, value in options.items() for arg in ("-o", f"{key}={value}")], *args]


def _prometheus_debs(version: str, root: Path) -> list[Path]:
    """prometheus=VERSION and every dependency the base image lacks, as .debs verified by apt (Debian's archive
    keyring), downloaded on the host into `root`/cache/archives."""
    if shutil.which("apt-get") is None or not Path(DEBIAN_KEYRING).is_file():
        raise ImageError(f"the Prometheus image's packages are downloaded with the host's apt-get against {DEBIAN_KEYRING}; "
                         "install them (Debian: apt-get install apt debian-archive-keyring) or build with "
                         "`docker compose --profile monitoring build prometheus` from the top-level compose.yaml")
    for sub in ("empty", "state/lists/partial", "cache/archives/partial"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for old in (root / "cache" / "archives").glob("*.deb"):
        old.unlink()
    (root / "sources.list").write_text(debian_sources(), encoding="utf-8")
    status = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "cat", BASE_TAG,
                             "/var/lib/dpkg/status"], capture_output=True, text=True, check=False)
    if status.returncode != 0:
        raise ImageError(f"reading the dpkg status of {BASE_TAG} failed: {status.stderr.strip()[-300:]}")
    (root / "status").write_text(status.stdout, encoding="utf-8")
    _run(apt_argv(root, "update"), "apt-get update (Debian bookworm lists for the Prometheus image)")
    _run(apt_argv(root, "install", "--download-only", "-y", f"prometheus={version}"),
         f"downloading prometheus={version} and its dependencies")
    debs = sorted((root / "cache" / "archives").glob("*.deb"))
    if not any(p.name.startswith(f"prometheus_{version.split(':')[-1]}_") for p in debs):
        raise ImageError(f"apt downloaded no prometheus {version} .deb (got {[p.name for p in debs]})")
    return debs


def prometheus_build_argv(tag: str, version: str, context: Path) -> list[str]:
    """The offline build: the local base, the staged .debs, no network (the Dockerfile's registry path
    is what the top-level compose files' `build:` does)."""
    return ["docker", "build", "--network", "none", "--build-arg", f"BASE_IMAGE={BASE_TAG}",
            "--build-arg", f"PROMETHEUS_VERSION={version}", "--file", str(context / "prometheus.Dockerfile"),
            "--tag", tag, str(context)]


def build_prometheus(rebuild: bool = False, dry_run: bool = False) -> None:
    """Build the Prometheus image (images.lock.yaml local_images.prometheus) offline, if it is missing.

    Debian's `prometheus` package (with promtool) at debian_packages.prometheus: the host's apt downloads it and
    the dependencies the base image lacks (signatures checked), then docker/prometheus.Dockerfile installs
    them on the local base with --network none. Needs `images.base` first. About 15 s.
    """
    tag, version = prometheus_pin()
    root = _state_dir() / "prometheus-apt"
    context = _state_dir() / "build" / "prometheus"
    argv = prometheus_build_argv(tag, version, context)
    if dry_run:
        print(shlex.join(apt_argv(root, "update")))
        print(shlex.join(apt_argv(root, "install", "--download-only", "-y", f"prometheus={version}")))
        print(f"# stage {context}: prometheus.Dockerfile, debs/*.deb")
        print(_show(argv, LEGACY_BUILDER))
        return
    _require_docker()
    if not rebuild and _image_exists(tag):
        print(f"{tag} exists ({_image_size_mb(tag)} MB); --rebuild to build it again")
        return
    if not _image_exists(BASE_TAG):
        raise ImageError(f"{BASE_TAG} is missing; build it first with `invoke images.base`")
    started = time.monotonic()
    debs = _prometheus_debs(version, root)
    if context.exists():
        shutil.rmtree(context)
    (context / "debs").mkdir(parents=True)
    shutil.copy2(_root() / PROMETHEUS_DOCKERFILE, context / "prometheus.Dockerfile")
    for deb in debs:
        shutil.copy2(deb, context / "debs" / deb.name)
    _run(argv, f"building {tag}", env=LEGACY_BUILDER)
    shutil.rmtree(context, ignore_errors=True)
    print(f"{tag}: prometheus {version} ({len(debs)} packages), {_image_size_mb(tag)} MB, "
          f"built in {time.monotonic() - started:.0f} s")


# --- lock ----------------------------------------------------------------------------------------


def unpinned_refs() -> list[tuple[str, str, str]]:
    """(lock path, image reference, platform) for every registry image without a digest."""
    lock = load_lock()
    refs = [
        (f"base_images.{key}.digest", img.ref, img.platform) for key, img in lock.base_images.items() if not img.digest
    ]
    spark_tag = lock.engine_images["spark-fork"].tag
    for key, img in lock.engine_images.items():
        # sparkgate's own image is built locally, not pulled: its pin is the build, not a registry digest.
        if not img.digest and img.tag != spark_tag:
            refs.append((f"engine_images.{key}.digest", img.tag, "linux/arm64"))
    return refs


def lock_instructions(dry_run: bool = False) -> None:
    """Explain how to fill the digests in images.lock.yaml; refuses to guess them.

    Resolving a digest needs registry access, which CI and development machines do not have, so this
    task does not contact registries. It lists every unpinned image with the commands that resolve it
    on a host that can pull (e.g. the Spark); the digests are then written into images.lock.yaml by hand
    and reviewed like any other pin change.
    """
    refs = unpinned_refs()
    if not refs:
        print("every registry image in images.lock.yaml is pinned by digest")
        return
    for field, ref, plat in refs:
        pull = ["docker", "pull", "--platform", plat, ref]
        inspect = ["docker", "image", "inspect", "--format", "{{index .RepoDigests 0}}", ref]
        print(f"{field}  ({ref}, {plat})")
        print(f"  {shlex.join(pull)}")
        print(f"  {shlex.join(inspect)}   # the part after '@' is the digest")
    if dry_run:
        return
    raise ImageError(
        f"{len(refs)} image(s) in images.lock.yaml have no digest and this task needs registry access to resolve "
        "them; run the commands above on a host that can pull, then write each sha256 into images.lock.yaml"
    )


def _registry_build_argv(tag: str) -> list[str]:
    """The runtime image on the digest-pinned registry base, with network (what `docker compose up --build`
    does by default): for machines that cannot make the mmdebstrap base (not root, or no mmdebstrap)."""
    base = load_lock().base_images["runtime-base"].pinned_ref
    return ["docker", "build", "--build-arg", f"BASE_IMAGE={base}", "--file", str(_root() / RUNTIME_DOCKERFILE),
            "--tag", tag, str(_root())]


def ensure_runtime_image() -> None:
    """Build what the sim target needs (base, wheels, runtime image), so `invoke deploy --target sim` and
    `invoke test` work on a fresh machine with Docker without a separate build step, and never run an image
    older than the checkout: the build runs every time, and the layer cache makes an unchanged checkout a
    few seconds. Without root or mmdebstrap the pinned registry base is used instead of the offline one."""
    tag = load_lock().local_images["sim"]
    _require_docker()
    print(f"building {tag} from this checkout (cached layers: seconds when nothing changed)", flush=True)
    if not _image_exists(BASE_TAG) and (os.geteuid() != 0 or shutil.which("mmdebstrap") is None):
        print(f"{BASE_TAG} cannot be made here (needs root and mmdebstrap): building on the pinned registry base")
        _run(_registry_build_argv(tag), f"building {tag}", env=LEGACY_BUILDER)
        return
    build_base()
    download_wheels()
    build_runtime()
