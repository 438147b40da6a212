"""Image tasks (`invoke images.base|wheels|sim|prometheus|spark|lock`); the build logic is sparkgate.bundle.image_build.

Without tasks.py the same tasks run as `python -m sparkgate.tasks.images <task>` (CI does).
"""

from __future__ import annotations

from invoke import Collection, Program

from sparkgate.bundle import image_build
from sparkgate.bundle.image_build import BASE_TAG
from sparkgate.tasks.common import sparkgate_task


@sparkgate_task("images.wheels", help={"force": "download again even if .ci/wheels is current",
                                       "dry_run": "print the command, do nothing"})
def wheels(c, force=False, dry_run=False):
    """Download the images' third-party wheels into .ci/wheels/ (host side; image builds stay offline).

    Wheels are for CPython 3.11 on manylinux of the host's architecture, binary only, exactly the pins
    of pyproject.toml (plus its `runtime` extra). .ci/wheels/manifest.json records the
    inputs and files; when they still match, nothing is downloaded (--force to redo).
    """
    image_build.download_wheels(force=force, dry_run=dry_run)


@sparkgate_task("images.base", help={"rebuild": "build even if the image exists", "tag": f"image tag (default {BASE_TAG})",
                                     "dry_run": "print the command and do nothing"})
def base(c, rebuild=False, tag=BASE_TAG, dry_run=False):
    """Build the Debian bookworm base image with mmdebstrap | docker import, if it is missing.

    No registry is involved: the rootfs comes from Debian's mirror (docker/build-base.sh). About 30-45 s.
    """
    image_build.build_base(rebuild=rebuild, tag=tag, dry_run=dry_run)


@sparkgate_task("images.runtime", help={"no_cache": "build without the layer cache",
                                        "dry_run": "print the command and do nothing"})
def runtime(c, no_cache=False, dry_run=False):
    """Build the runtime image (sentinel and gateway on every target, the simulator's engine; images.lock.yaml
    local_images) offline: --network none.

    Needs `images.base` and `images.wheels` first. sparkgate itself is built into a fresh wheel from the
    checkout each time, so the image always carries the current source.
    """
    image_build.build_runtime(no_cache=no_cache, dry_run=dry_run)


@sparkgate_task("images.prometheus", help={"rebuild": "build even if the image exists",
                                           "dry_run": "print the commands and do nothing"})
def prometheus(c, rebuild=False, dry_run=False):
    """Build the monitoring profile's Prometheus image (images.lock.yaml local_images.prometheus) offline.

    Debian bookworm's `prometheus` package (with promtool) at the pinned version: the host's apt downloads it
    and what the local base lacks, then docker/prometheus.Dockerfile installs it with --network none. Needs
    `images.base` first.
    """
    image_build.build_prometheus(rebuild=rebuild, dry_run=dry_run)


@sparkgate_task("images.spark", help={
    "allow_unpinned": "build on the base without a digest (development only; the image says so)",
    "max_jobs": "compile parallelism (MAX_JOBS); keep it low, unified memory is shared with the GPU",
    "dry_run": "print the command and do nothing",
})
def spark(c, allow_unpinned=False, max_jobs=4, dry_run=False):
    """Build the Spark engine image (linux/arm64) on the Spark itself, every pin from images.lock.yaml.

    Needs network access (GitHub for the fork, PyPI, FlashInfer's wheel index).
    The build fails unless the fork sits on the pinned commit and `sparkgate build-guard` passes.
    """
    image_build.build_spark(allow_unpinned=allow_unpinned, max_jobs=int(max_jobs), dry_run=dry_run)


@sparkgate_task("images.lock", help={"dry_run": "print the commands that resolve each digest and do nothing"})
def lock(c, dry_run=False):
    """Explain how to fill the digests in images.lock.yaml; refuses to guess them (no registry access here)."""
    image_build.lock_instructions(dry_run=dry_run)


ns = Collection("images", base, wheels, runtime, prometheus, spark, lock)


if __name__ == "__main__":
    Program(namespace=ns, name="sparkgate images", binary="python -m sparkgate.tasks.images").run()
