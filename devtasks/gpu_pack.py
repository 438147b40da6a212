"""`invoke test.gpu-pack`: what the GPU lane (tests/gpu) needs on a CUDA machine that has no package index.

    .whl/sglang-tree.zip    the sglang wheel's Python tree, trimmed (no compiled extensions, no diffusion package,
                            no SGLang test suite)
    .whl/deps/*.whl         tests/gpu/requirements.txt, --no-deps, for that machine's Python and platform
    .whl/MANIFEST.json      sha256 and size of each file above (tests/gpu/run refuses a pack that does not match)

Built in a temporary directory beside the destination and renamed into place: an interrupted pack leaves the
previous one whole.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from sparkgate.errors import Refusal
from sparkgate.fleet.export import sha256_file

TREE = "sglang-tree.zip"
DEPS = "deps"
MANIFEST = "MANIFEST.json"


class PackFailed(Refusal):
    exit_code = 1


def _pip_download(args: list[str], dest: Path, what: str) -> None:
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d", str(dest),
            *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise PackFailed(f"pip download of {what} failed: {last}")


def _trimmed_tree(wheel: Path, out: Path, trim_dirs: tuple[str, ...]) -> int:
    """Copy the wheel's members into a zip, leaving out compiled extensions, bytecode and `trim_dirs`."""
    kept = 0
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for member in source.infolist():
            name = member.filename
            if name.endswith((".so", ".pyc")) or "/__pycache__/" in name:
                continue
            if any(name == d or name.startswith(d + "/") for d in trim_dirs):
                continue
            target.writestr(member, source.read(member))
            kept += 1
    return kept


def pack(dest: Path, *, sglang: str, requirements: Path, python: str, platforms: tuple[str, ...],
         trim_dirs: tuple[str, ...]) -> Path:
    dest = dest.resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    platform_args = [arg for platform in platforms for arg in ("--platform", platform)]
    with tempfile.TemporaryDirectory(prefix=f".{dest.name}-", dir=dest.parent) as tmp:
        work = Path(tmp)
        staging = work / "pack"
        (staging / DEPS).mkdir(parents=True)
        print(f"test.gpu-pack: downloading {sglang} (its wheel's Python tree travels)", flush=True)
        _pip_download([sglang], work / "sglang-wheel", sglang)
        wheels = sorted((work / "sglang-wheel").glob("sglang-*.whl"))
        if len(wheels) != 1:
            raise PackFailed(f"expected one sglang wheel from pip, got {[w.name for w in wheels]}")
        kept = _trimmed_tree(wheels[0], staging / TREE, trim_dirs)
        print(f"test.gpu-pack: {TREE}: {kept} files, {(staging / TREE).stat().st_size / 1e6:.1f} MB", flush=True)
        print(f"test.gpu-pack: downloading {requirements.name} for CPython {python} on {platforms[0]}", flush=True)
        _pip_download(["--python-version", python, "--implementation", "cp", *platform_args, "-r", str(requirements)],
                      staging / DEPS, requirements.name)
        files = sorted(p for p in staging.rglob("*") if p.is_file())
        manifest = {
            "sglang": sglang,
            "python": python,
            "files": {str(p.relative_to(staging)): {"sha256": sha256_file(p), "bytes": p.stat().st_size} for p in files},
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        total = sum(entry["bytes"] for entry in manifest["files"].values())
        old = work / "previous"
        if dest.exists():
            dest.rename(old)
        staging.rename(dest)
    print(f"test.gpu-pack: {dest} ({len(files)} files, {total / 1e6:.1f} MB)", flush=True)
    return dest
