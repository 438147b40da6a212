"""A DSpark drafter directory as `hf download REPO --revision REV --local-dir DIR` leaves it (huggingface_hub's
_local_folder.py): config.json, the weights, and per file `.cache/huggingface/download/<file>.metadata` with
the commit on line 1 and the etag (an LFS file's SHA-256) on line 2. Tiny weights: the checks are the same."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

RECORDS = Path(".cache") / "huggingface" / "download"
WEIGHTS = b"not really bf16 " * 64


def make(directory: Path, revision: str, architecture: str = "LingDSparkModel", block_size: int = 8) -> Path:
    records = directory / RECORDS
    records.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({"architectures": [architecture], "dspark_block_size": block_size}))
    (records / "config.json.metadata").write_text(f"{revision}\n\"0123abcd\"\n1764590000.0\n")
    (directory / "model.safetensors").write_bytes(WEIGHTS)
    (records / "model.safetensors.metadata").write_text(f"{revision}\n{hashlib.sha256(WEIGHTS).hexdigest()}\n1764590000.0\n")
    return directory


def fault(directory: Path, name: str, revision: str, outside: Path) -> Path:
    """A drafter directory with one fault, by name; "good" and "missing" included."""
    if name == "missing":
        return directory
    make(directory, revision)
    records, config = directory / RECORDS, directory / "config.json"
    if name == "arch":
        config.write_text(json.dumps({"architectures": ["BailingMoeV3ForCausalLM"]}))
    elif name == "block":
        config.write_text(json.dumps({"architectures": ["LingDSparkModel"], "dflash_config": {"block_size": 4}}))
    elif name == "json":
        config.write_text('{"architectures": [')
    elif name == "norecord":
        (records / "model.safetensors.metadata").unlink()
    elif name == "revision":
        (records / "model.safetensors.metadata").write_text(f"{'0' * 40}\n{'a' * 64}\n1764590000.0\n")
    elif name == "corrupt":
        (directory / "model.safetensors").write_bytes(b"edited after the download")
    elif name == "symlink":
        (directory / "model.safetensors").unlink()
        outside.write_bytes(WEIGHTS)
        (directory / "model.safetensors").symlink_to(outside)
    elif name == "gone":
        (records / "shard-2.safetensors.metadata").write_text(f"{revision}\n{'b' * 64}\n1764590000.0\n")
    elif name == "etag":
        (records / "model.safetensors.metadata").write_text(f"{revision}\n\"abc\"\n1764590000.0\n")
    elif name == "noweights":
        (directory / "model.safetensors").unlink()
        (records / "model.safetensors.metadata").unlink()
    elif name == "unrecorded":
        (directory / "modeling_extra.py").write_text("import os\n")
    elif name != "good":
        raise ValueError(name)
    return directory
