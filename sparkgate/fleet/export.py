"""`invoke bundle.export`: one directory that carries a release into an air-gapped fleet.

    <out>/images.tar      `docker save` of every image the release runs
    <out>/image-ids.json  {reference: image ID} as saved; hosts compare the IDs they loaded
    <out>/bundle/         the rendered bundle (the same render as `invoke deploy`)
    <out>/release.json    what the rollout reads: release id, profile, target, images, guards, image IDs
    <out>/SHA256SUMS      `sha256sum` format over every file above; hosts run `sha256sum --check` on it

The directory is staged next to <out> and renamed into place, so a reader never sees half an export.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from sparkgate import atomic
from sparkgate.deploy import docker_cli
from sparkgate.errors import Refusal
from sparkgate.fleet import release as release_mod

MANIFEST = "SHA256SUMS"


class ExportError(Refusal):
    """The export cannot be made here."""


def sha256_file(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def manifest_text(directory: Path) -> str:
    """`sha256sum` lines for every file under `directory` (sorted, relative paths, the manifest excluded)."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)
    return "".join(f"{sha256_file(p)}  {p.relative_to(directory).as_posix()}\n" for p in files)


def export(options: release_mod.ReleaseOptions, say: Callable[[str], None] = print) -> Path:
    """Write the export for `options.profile` into `options.out`; returns it."""
    out = options.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        rendered = release_mod.build(release_mod.ReleaseOptions(**{**options.__dict__, "out": staging / "render"}))
        shutil.move(rendered["bundle"], staging / "bundle")
        shutil.rmtree(staging / "render")
        ids = {}
        for ref in rendered["images"]:
            image_id = docker_cli.image_id(ref)
            if image_id is None:
                raise ExportError(f"images: {ref} is not on this machine. Fix: build it (`invoke images.runtime`) or pull it "
                                  "by digest, then export again")
            ids[ref] = image_id
        say(f"docker save {' '.join(rendered['images'])} -> images.tar")
        saved = subprocess.run([docker_cli.docker_binary(), "save", "-o", str(staging / "images.tar"),
                                *rendered["images"]], capture_output=True, text=True, timeout=1800)
        if saved.returncode != 0:
            raise ExportError(f"docker save: exited {saved.returncode}: {saved.stderr.strip()[-300:]}. Fix: check disk space")
        (staging / "image-ids.json").write_text(json.dumps(ids, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        meta = {**rendered, "bundle": "bundle", "image_ids": ids}
        (staging / "release.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        (staging / MANIFEST).write_text(manifest_text(staging), encoding="utf-8")
        for path in [staging, *staging.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        atomic.install_directory(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    say(f"exported {rendered['release']} ({options.target}) to {out}: images.tar, bundle/, release.json, "
        f"image-ids.json, {MANIFEST}")
    return out
