#!/usr/bin/env python3
"""Benchmark the sentinel's per-context-band read (sparkgate/evidence/context_bands.py; prints numbers, not a test):

1. steady: one re-check period's read of the new log lines (what a Spark at batch 1 writes in a 5 s period: a
   prefill line, a few `Decode batch` lines with `accept len`, an access-log line), appended to a log file that
   already holds a long history; the read costs one open, one seek, one read of the new bytes and the parse;
2. burst: 1 MiB of new lines in one period (a busy engine with --log-requests, or the first read after a pause);
3. whole log: a 32 MiB log parsed in one go (`Bands.add_text`, what a read from the start costs; the sentinel
   itself reads at most 8 MiB a period and carries the rest).

The lines are the real CUDA engine's (tests/fixtures/gpu/standalone-self/server.log), their contexts spread over
every band.

Usage: python benchmarks/bench_context_bands.py [--runs 200] [--tmp /tmp]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sparkgate.evidence import calibration, context_bands  # noqa: E402
from sparkgate.evidence.recheck import OwnTraffic, RecheckContext  # noqa: E402
from tests.gpu import records  # noqa: E402

CONTEXTS = (300, 2000, 6000, 30000, 90000)


def corpus() -> list[str]:
    """The real log's lines, decode lines rewritten to contexts across the bands."""
    lines = [line + "\n" for line in records.server_log("standalone-self").split("\n") if line]
    out = []
    for index, line in enumerate(lines):
        if "Decode batch" in line and "#token: " in line:
            head, _, rest = line.partition("#token: ")
            line = head + f"#token: {CONTEXTS[index % len(CONTEXTS)]}" + rest[rest.index(","):]
        out.append(line)
    return out


def period_text(lines: list[str]) -> str:
    decode = [line for line in lines if "Decode batch" in line][:3]
    other = [line for line in lines if "Prefill batch" in line][:1]
    access = '[2026-12-05 07:00:00] INFO:     127.0.0.1:50000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    return "".join(other + decode) + access


def fill(lines: list[str], size: int) -> str:
    chunks, total, i = [], 0, 0
    while total < size:
        chunks.append(lines[i % len(lines)])
        total += len(chunks[-1])
        i += 1
    return "".join(chunks)


def sentinel_context(log: Path) -> RecheckContext:
    ctx = RecheckContext("context_bands", client=None, period_s=5.0, expectations={"requested": ["mtp"]},
                         own_traffic=OwnTraffic())
    context_bands.start_rechecks(ctx, str(log), calibration.break_even())
    return ctx


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--tmp", default=tempfile.gettempdir())
    args = parser.parse_args()
    lines = corpus()
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        log = Path(tmp) / "engine.log"
        log.write_text(fill(lines, 32 << 20))  # a long history before admission: never read
        ctx = sentinel_context(log)
        period = period_text(lines)
        times = []
        with log.open("a") as handle:
            for _ in range(args.runs):
                handle.write(period)
                handle.flush()
                started = time.perf_counter()
                context_bands.rechecks(ctx)
                times.append(time.perf_counter() - started)
        lines_read = sum(t.lines for t in ctx.state["bands"].tallies.values())
        print(f"steady: {len(period.encode())} B of new lines a period ({period.count(chr(10))} lines, 3 decode): "
              f"median {statistics.median(times) * 1e6:.0f} us, p95 {sorted(times)[int(0.95 * len(times))] * 1e6:.0f} us "
              f"over {args.runs} periods ({lines_read} decode lines counted)")

        burst = fill(lines, 1 << 20)
        times = []
        for _ in range(max(5, args.runs // 20)):
            with log.open("a") as handle:
                handle.write(burst)
            started = time.perf_counter()
            context_bands.rechecks(ctx)
            times.append(time.perf_counter() - started)
        print(f"burst: 1 MiB of new lines in one period ({burst.count(chr(10))} lines): median "
              f"{statistics.median(times) * 1e3:.1f} ms over {len(times)} bursts")

        whole = fill(lines, 32 << 20)
        times = []
        for _ in range(3):
            bands = context_bands.Bands()
            started = time.perf_counter()
            counted = bands.add_text(whole)
            times.append(time.perf_counter() - started)
        print(f"whole log: 32 MiB ({whole.count(chr(10))} lines, {counted} decode lines): median "
              f"{statistics.median(times) * 1e3:.0f} ms over {len(times)} parses")


if __name__ == "__main__":
    main()
