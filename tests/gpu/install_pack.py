"""Install the pack of `invoke test.gpu-pack` into a private --target directory on the CUDA machine (stdlib only).

    python3 tests/gpu/install_pack.py PACK SITE

Every file must match the pack's MANIFEST.json (sha256, size) before anything is installed; the directory is built
beside SITE and renamed into place, with a stamp of the manifest's digest, so a second run with the same pack is a
no-op and an interrupted one leaves nothing half-installed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

STAMP = ".sparkgate-pack"
TREE = "sglang-tree.zip"


def sha256(path: Path) -> str:
    # stdlib only: this runs before the pack (pydantic among it, which sparkgate needs) is installed
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def main(pack: Path, site: Path) -> int:
    manifest_path = pack / "MANIFEST.json"
    if not manifest_path.is_file():
        print(f"install_pack: {manifest_path} missing: run `invoke test.gpu-pack` on a networked machine and carry "
              f"{pack.name}/ here", file=sys.stderr)
        return 2
    stamp = hashlib.sha256(manifest_path.read_bytes()).hexdigest()
    if (site / STAMP).is_file() and (site / STAMP).read_text().strip() == stamp:
        print(f"install_pack: {site} already holds this pack")
        return 0
    try:
        manifest = json.loads(manifest_path.read_text())
        files, python = dict(manifest["files"]), str(manifest["python"])
    except (ValueError, KeyError, TypeError) as exc:
        print(f"install_pack: {manifest_path} is not a pack manifest ({exc!r})", file=sys.stderr)
        return 2
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if python != running:
        print(f"install_pack: the pack is for Python {python}, this is {running}: `invoke test.gpu-pack` for it",
              file=sys.stderr)
        return 2
    present = {str(p.relative_to(pack)) for p in pack.rglob("*") if p.is_file() and p != manifest_path}
    if present != set(files) or TREE not in files:
        print(f"install_pack: {pack} holds other files than its MANIFEST.json lists "
              f"(unlisted: {sorted(present - set(files))}, missing: {sorted(set(files) - present)})", file=sys.stderr)
        return 2
    for name, want in files.items():
        path = pack / name
        if not path.is_file() or path.stat().st_size != want["bytes"] or sha256(path) != want["sha256"]:
            print(f"install_pack: {path} does not match MANIFEST.json (missing, truncated or altered)", file=sys.stderr)
            return 2
    staging = site.with_name(site.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with zipfile.ZipFile(pack / TREE) as tree:
        tree.extractall(staging)
    wheels = sorted(str(pack / name) for name in files if name.endswith(".whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--target", str(staging), *wheels], check=True)
    (staging / STAMP).write_text(stamp + "\n")
    shutil.rmtree(site, ignore_errors=True)
    staging.rename(site)
    print(f"install_pack: {manifest['sglang']} and {len(wheels)} wheels in {site}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
