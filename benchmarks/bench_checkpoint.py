#!/usr/bin/env python3
"""Benchmark the target checkpoint proof (prints numbers; not a test):

1. the deploy preflight (sparkgate/deploy/checkpoint.py, `full=False`) on a fake checkpoint with the published
   Ling-3.0-flash shape: 42 layers (2 dense), 512 experts, one NEXTN layer, every expert projection with its
   scale: ~129k tensors in a ~10 MB index over 64 shards whose safetensors headers are real and whose data is
   tiny (tests/plugins/checkpoints.py);
2. the verification rate of the full proof (`full=True`, `invoke model.verify` / after `invoke model.pull`):
   GB hashed per second over a few GB of shards written for real (no sparse files) in a temporary directory,
   deleted afterwards; with the raw hashlib SHA-256 rate of this machine beside it. The shards were just
   written, so they are read from the page cache: the rate is the hashing's, a cold read is bounded by the disk.

Usage: python benchmarks/bench_checkpoint.py [--size-gb 2] [--shards 64] [--runs 5] [--tmp /tmp]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sparkgate.deploy import checkpoint  # noqa: E402
from tests.plugins import checkpoints as ck  # noqa: E402

BLOCK = 8 << 20


def preflight_bench(tmp: Path, shards: int, runs: int) -> None:
    cfg = ck.config(layers=42, experts=512, first_dense=2, nextn=1)
    started = time.monotonic()
    made = ck.build(tmp / "shape", cfg, shards=shards)
    built = time.monotonic() - started
    index = made.directory / checkpoint.INDEX
    expect = checkpoint.Expect(ck.REPO, ck.REVISION, ck.ARCHITECTURE, mtp=True, humming=True, pull="bench")
    times = []
    for _ in range(runs):
        report = checkpoint.check(made.directory, expect)
        assert report.problems == [], report.problems[:3]
        times.append(report.seconds)
    headers = sum(int.from_bytes((made.directory / s).open("rb").read(8), "little") for s in made.shards)
    print(f"preflight (quick) on the Ling-3.0-flash shape: {report.tensors} tensors, {report.shards} shards, "
          f"index {index.stat().st_size / 1e6:.1f} MB, headers {headers / 1e6:.1f} MB in all (built in {built:.1f} s)")
    print(f"  median {statistics.median(times):.3f} s, min {min(times):.3f} s, max {max(times):.3f} s over {runs} runs")


def write_shard(path: Path, size: int, block: bytes, small: dict[str, bytes]) -> str:
    """A safetensors file holding the `small` tensors and one U8 tensor of `size` bytes, written for real (no
    holes); its SHA-256."""
    header, offset = {}, 0
    for tensor, data in small.items():
        header[tensor] = {"dtype": "U8", "shape": [len(data)], "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    header[f"blob.{path.stem}"] = {"dtype": "U8", "shape": [size], "data_offsets": [offset, offset + size]}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    digest = hashlib.sha256()
    with path.open("wb") as handle:
        for data in (len(text).to_bytes(8, "little") + text, *small.values()):
            handle.write(data)
            digest.update(data)
        left = size
        while left:
            data = block[:left]
            handle.write(data)
            digest.update(data)
            left -= len(data)
    return digest.hexdigest()


def rate_bench(tmp: Path, size_gb: float, files: int) -> None:
    directory = tmp / "rate"
    directory.mkdir()
    block = os.urandom(BLOCK)
    per = int(size_gb * 1e9 / files)
    names = [ck.shard_name(i, files) for i in range(files)]
    cfg = ck.config(layers=1, experts=1, first_dense=1, nextn=0)  # every tensor SGLang needs, tiny, in shard 1
    small = {tensor: b"\0\0" for tensor in ck.tensor_names(cfg)}
    weight_map = {**{tensor: names[0] for tensor in small}, **{f"blob.{Path(n).stem}": n for n in names}}
    started = time.monotonic()
    for position, name in enumerate(names):
        etag = write_shard(directory / name, per, block, small if position == 0 else {})
        ck.write_download_metadata(directory, name, ck.REVISION, etag)
    ck.write_file(directory, "config.json", json.dumps(cfg).encode())
    ck.write_file(directory, checkpoint.INDEX, json.dumps({"weight_map": weight_map}).encode())
    print(f"wrote {files} shards, {files * per / 1e9:.2f} GB, in {time.monotonic() - started:.1f} s")
    expect = checkpoint.Expect(ck.REPO, ck.REVISION, ck.ARCHITECTURE, mtp=False, humming=True, pull="bench")
    report = checkpoint.check(directory, expect, full=True)
    assert report.problems == [], report.problems[:3]
    hashed = report.tally.bytes
    print(f"full proof: {report.tally.files} files, {hashed / 1e9:.2f} GB hashed in {report.seconds:.2f} s: "
          f"{hashed / 1e9 / report.seconds:.2f} GB/s (page cache warm)")
    digest, data, started = hashlib.sha256(), block * 16, time.monotonic()
    for _ in range(8):
        digest.update(data)
    raw = 8 * len(data) / (time.monotonic() - started)
    print(f"raw hashlib SHA-256 on this machine: {raw / 1e9:.2f} GB/s (in memory)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--rate-files", type=int, default=16)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tmp", default=tempfile.gettempdir())
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sparkgate-bench-checkpoint.", dir=args.tmp))
    try:
        preflight_bench(tmp, args.shards, args.runs)
        rate_bench(tmp, args.size_gb, args.rate_files)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
