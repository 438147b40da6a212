"""Ling-3.0-flash at full size on one CUDA GPU (`bash tests/gpu/run full-size A|B`; docs/sizing.md).

Stock SGLang 0.5.23 builds the model from `config.json` alone with `--load-format dummy` (random FP8/BF16 values,
scales 1.0, MXFP4 experts as allocated): the roofline's own config (tests/fixtures/bench/ling-3.0-flash-config.json),
about 65 GiB in the Ling-3.0-flash-fp4 layout. Random routing still reads 8 experts a token, so a batch-1 decode step
moves the bytes a real one moves; the weights' values (and so the answers and a draft's acceptance) mean nothing.

Each launch writes, under $SPARKGATE_GPU_RECORD_DIR/<launch>/: launch.json (argv, env, GPU, ready seconds, or the
error it died with), server.log (the engine's whole log) and measures.json (what the lane measured by the engine's
own clock: decode speed per prompt length, accept counts; and, for the first launch, the GPU's copy bandwidth and a
kernel profile of decode steps). The CPU tests (tests/unit/bench/test_sizing.py, test_measured.py) read SGLang's own sizing lines
out of the logs (tests/unit/bench/logged_sizing.py) and hold the roofline and the memory plan (sparkgate/bench/sizing.py)
to them.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkgate.sglang import flags as F
from sparkgate.sglang import request_timing
from tests.gpu import records
from tests.real.checkpoints import build_tokenizer
from tests.real.engine import NEXTN_ARGS, EngineStartError, Launch, RealEngine, start_engine

CONFIG = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "ling-3.0-flash-config.json"
CONTEXT = 65536
PROMPT_LENGTHS = {"short": 16, "8k": 8000, "32k": 32000}
NEW_TOKENS = 64
MEM_FRACTION = "0.85"
HUMMING = {F.HUMMING_COMPILER_ENV: "nvrtc"}  # the humming profile's compiler; the cache dir is per run
PROFILE_STEPS = 12
BANDWIDTH_BYTES = 4 << 30


def build_full_size(dest: Path) -> Path:
    """config.json of the full shape (dummy weights need no weight files) and the lane's small tokenizer."""
    dest.mkdir(parents=True, exist_ok=True)
    ids = build_tokenizer(dest)
    cfg = {k: v for k, v in json.loads(CONFIG.read_text()).items() if not k.startswith("_")}
    cfg.update(torch_dtype="bfloat16", max_position_embeddings=CONTEXT, n_group=1, topk_group=1, **ids)
    (dest / "config.json").write_text(json.dumps(cfg, indent=1))
    return dest


@dataclass(frozen=True)
class FullLaunch:
    name: str
    moe_runner: str = "humming"
    graphs: bool = True
    nextn: bool = False
    cache: str = "warm"  # "cold": an empty HUMMING_CACHE_DIR; "warm": the run's shared one
    prompts: tuple[str, ...] = ("short", "8k", "32k")
    profile: bool = False
    start_timeout_s: float = 420.0

    def launch(self, model: Path, cache_root: Path) -> Launch:
        args = ["--load-format", "dummy", "--mem-fraction-static", MEM_FRACTION, "--max-total-tokens", "100000000",
                "--context-length", str(CONTEXT), "--moe-runner-backend", self.moe_runner]
        if not self.graphs:
            args += ["--cuda-graph-backend-decode", "disabled"]
        if self.nextn:
            args += [*NEXTN_ARGS, "--speculative-draft-model-path", str(model)]
        cache = cache_root / (f"cold-{self.name}" if self.cache == "cold" else "shared")
        return Launch(model_path=model, served_model_name="ling-full-dummy", max_running_requests=1, device="cuda",
                      extra_args=tuple(args), env={**HUMMING, F.HUMMING_CACHE_DIR_ENV: str(cache)},
                      start_timeout_s=self.start_timeout_s)


# Run A: Humming with decode graphs (cold kernel cache, then warm), the profile, graphs off.
# Run B: NEXTN (the verify step's cost), the MoE runners the Spark baseline and stock would use instead.
# One per run: every record of a run carries it, so records of two runs never pass for one (the 2026-12-06 records
# predate it).
RUN_ID = os.environ.get("SPARKGATE_GPU_RUN_ID") or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
RUNS: dict[str, tuple[FullLaunch, ...]] = {
    "A": (
        FullLaunch("full-humming-cold", cache="cold", prompts=("short",)),
        FullLaunch("full-humming-graphs", profile=True),
        FullLaunch("full-humming-eager", graphs=False, prompts=("short", "8k"), profile=True),
    ),
    "B": (
        FullLaunch("full-humming-nextn", nextn=True),
        FullLaunch("full-flashinfer-mxfp4", moe_runner="flashinfer_mxfp4", start_timeout_s=240.0),
        FullLaunch("full-marlin", moe_runner="marlin", start_timeout_s=240.0),
    ),
    # Run S: the sizing facts alone in one short run (cold kernel cache: the JIT is part of the start).
    "S": (FullLaunch("full-humming-cold", cache="cold", prompts=("short", "8k")),),
    # Run F: the whole table in one run under 10 minutes: cold Humming with every prompt length and the profile,
    # then (warm cache) NEXTN and graphs off (short prompt, profile). The other MoE runners are run B's: with them
    # run F outlasts the 10-minute limit.
    "F": (
        FullLaunch("full-humming-cold", cache="cold", profile=True),
        FullLaunch("full-humming-nextn", nextn=True),
        FullLaunch("full-humming-eager", graphs=False, prompts=("short",), profile=True),
    ),
}


def gpu_bandwidth(nbytes: int = BANDWIDTH_BYTES, repeats: int = 10) -> dict[str, Any]:
    """Device-to-device copy of `nbytes`: read + write bytes over the CUDA events' time (GB = 1e9 bytes)."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1000
    free, total = torch.cuda.mem_get_info()
    del src, dst
    torch.cuda.empty_cache()
    return {"copy_bytes": nbytes, "repeats": repeats, "seconds": seconds,
            "gb_per_s": round(2 * nbytes * repeats / seconds / 1e9, 1), "device": torch.cuda.get_device_name(0),
            "mem_total_bytes": total, "mem_free_bytes": free}


def generate_ids(engine: RealEngine, length: int, new_tokens: int = NEW_TOKENS) -> dict[str, Any]:
    """One /generate of a fixed `length`-token prompt at temperature 0, judged by the engine's own timing."""
    body = {"input_ids": [100 + (i % 400) for i in range(length)],
            "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0, "ignore_eos": True}}
    resp = engine.post("/generate", body, timeout=300)
    out = json.loads(resp.body)
    meta = out.get("meta_info") or {}
    completion = meta.get("completion_tokens") or 0
    timing = request_timing.from_meta(meta, completion)
    verify_ct = request_timing.count(meta, "spec_verify_ct")
    return {"prompt_tokens": meta.get("prompt_tokens"), "completion_tokens": completion,
            "ttft_s": timing.ttft_s, "decode_s": timing.decode_s, "decode_tok_s": timing.decode_tok_s(),
            "spec_verify_ct": verify_ct, "spec_accept_length": meta.get("spec_accept_length")}


def kernel_profile(engine: RealEngine, out_dir: Path, steps: int = PROFILE_STEPS) -> dict[str, Any]:
    """SGLang's own torch profiler (POST /start_profile, num_steps) over a short request's decode steps: GPU kernel
    time by kernel name, and the graph launches, from the Chrome trace it writes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    engine.post("/start_profile", {"output_dir": str(out_dir), "num_steps": steps, "activities": ["GPU", "CPU"],
                                   "with_stack": False, "record_shapes": False}, timeout=60)
    generate_ids(engine, PROMPT_LENGTHS["short"], new_tokens=steps + 8)
    deadline = time.monotonic() + 90
    traces: list[Path] = []
    while time.monotonic() < deadline and not traces:
        time.sleep(2)
        traces = sorted(out_dir.rglob("*.json.gz")) + sorted(out_dir.rglob("*.json"))
    if not traces:
        return {"error": f"no trace in {out_dir} after 90 s"}
    time.sleep(3)  # the trace is written whole before the next file appears; let a large one finish
    opener = gzip.open if traces[0].suffix == ".gz" else open
    with opener(traces[0], "rt") as fh:
        trace = json.load(fh)
    kernels: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    runtime: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    first, last = None, None
    for event in trace.get("traceEvents", []):
        if event.get("ph") != "X":
            continue
        cat, name, dur = event.get("cat", ""), str(event.get("name", ""))[:160], float(event.get("dur") or 0)
        if cat == "kernel":
            kernels[name][0] += 1
            kernels[name][1] += dur
            ts = float(event.get("ts") or 0)
            first = ts if first is None else min(first, ts)
            last = ts + dur if last is None else max(last, ts + dur)
        elif cat == "cuda_runtime" and "Graph" in name:
            runtime[name][0] += 1
            runtime[name][1] += dur
    ranked = sorted(kernels.items(), key=lambda kv: -kv[1][1])
    return {"trace_file": traces[0].name, "steps": steps,
            "kernels": [{"name": n, "calls": int(c), "total_us": round(t, 1)} for n, (c, t) in ranked[:80]],
            "kernel_names": len(kernels), "kernel_total_us": round(sum(t for _, t in kernels.values()), 1),
            "kernel_span_us": round(last - first, 1) if first is not None else None,
            "graph_runtime": {n: {"calls": int(c), "total_us": round(t, 1)} for n, (c, t) in runtime.items()}}


@dataclass
class FullResult:
    spec: FullLaunch
    error: str | None = None
    ready_s: float | None = None
    measures: dict[str, Any] = field(default_factory=dict)


def run_launch(spec: FullLaunch, model: Path, cache_root: Path, run_dir: Path) -> FullResult:
    out = records.record_dir() / spec.name
    out.mkdir(parents=True, exist_ok=True)
    result = FullResult(spec)
    launch = spec.launch(model, cache_root)
    started = time.monotonic()
    engine = None
    try:
        engine = start_engine(launch, run_dir / spec.name)
        result.ready_s = round(time.monotonic() - started, 1)
        speeds = {}
        for prompt in spec.prompts:
            speeds[prompt] = generate_ids(engine, PROMPT_LENGTHS[prompt])
        result.measures["speeds"] = speeds
        if spec.profile:
            result.measures["profile"] = kernel_profile(engine, run_dir / f"{spec.name}-trace")
        result.measures["server_info"] = {k: v for k, v in engine.server_info().items()
                                          if isinstance(v, int | float | str | bool) or v is None}
        result.measures["engagement"] = engine.engagement()
    except EngineStartError as exc:
        result.error = str(exc)[-6000:]
    except Exception as exc:  # a measurement that broke is recorded, never lost with the log
        result.error = f"{type(exc).__name__}: {exc}"[-6000:]
    finally:
        if engine is not None:
            engine.stop()
        records.keep_log(run_dir / spec.name / "server.log", out)
        records.write_json(out / "measures.json", result.measures)
        records.write_json(out / "launch.json", {
            "name": spec.name, "argv": list(launch.server_args(0))[6:], "env": dict(launch.env),
            "ready_s": result.ready_s, "error": result.error, "moe_runner": spec.moe_runner, "graphs": spec.graphs,
            "nextn": spec.nextn, "cache": spec.cache, "run": RUN_ID,
        })
    return result


def main(run: str) -> int:
    """Run A or B: each launch in turn, one engine at a time; prints one line per launch; exit 0 when every launch
    that should serve served (the fallback runners may die: their error is the record)."""
    import tempfile

    if run not in RUNS:
        raise SystemExit(f"usage: python -m tests.gpu.full_size {'|'.join(RUNS)}")
    base = Path(tempfile.mkdtemp(prefix="sparkgate-full-"))
    model = build_full_size(base / "ling-3.0-flash-dummy")
    cache_root = base / "humming-cache"
    if run in ("A", "S", "F"):
        bandwidth = gpu_bandwidth()
        records.write_json(records.record_dir() / "gpu-bandwidth" / "measures.json", {**bandwidth, "run": RUN_ID})
        print(f"bandwidth: {bandwidth['gb_per_s']} GB/s on {bandwidth['device']}", flush=True)
    failed = []
    for spec in RUNS[run]:
        began = time.monotonic()
        result = run_launch(spec, model, cache_root, base / "runs")
        speeds = {k: v.get("decode_tok_s") for k, v in result.measures.get("speeds", {}).items()}
        print(f"{spec.name}: ready {result.ready_s} s, decode tok/s {speeds}, {time.monotonic() - began:.0f} s"
              + (f", ERROR {result.error[-400:]}" if result.error else ""), flush=True)
        if result.error and spec.moe_runner == "humming":
            failed.append(spec.name)
    return 1 if failed else 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1] if len(sys.argv) == 2 else ""))
