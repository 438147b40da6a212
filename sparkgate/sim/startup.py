"""The startup sequence: SGLang's phases and log lines, in SGLang's order, with simulated durations.

Which lines appear follows from what engaged (see engagement.py), never from fault names:
  - `Online FP8 quantization enabled for lm_head.` once, only when the fork quantized the head;
  - a second `Load weight begin/end ... type=BailingMoeForCausalLMNextN` only when the draft loads;
  - `Capture ... CUDA graph begin/end` only when decode CUDA graphs are captured;
  - `Using indexed gemm for humming moe` only at the first Humming MoE forward (graph capture, or
    the warmup request when graphs are off).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from sparkgate.optimizations import fp8_lm_head, mtp
from sparkgate.sim import faults
from sparkgate.sim.engine import Restarted
from sparkgate.sim.resolve import MAX_TOTAL_NUM_TOKENS, MODEL_ARCH

if TYPE_CHECKING:
    from sparkgate.sim.engine import Engine

# Unified-memory ledger of a Spark (GB): what the `avail mem` / `mem usage` fields report.
AVAIL_AT_START_GB = 119.52
TARGET_WEIGHTS_GB = 61.37  # with the BF16 head (157,184 x 2,560)
FP8_HEAD_SAVING_GB = 0.40  # the same head in FP8: 0.805 GB -> 0.402 GB
DRAFT_WEIGHTS_GB = 3.21
KV_POOL_GB = 24.0
GRAPH_GB = {"target": 0.62, "draft_decode": 0.18, "draft_extend": 0.21, "decode": 0.55}
CHECKPOINT_QUANT = "quant=fp8, fmt=e4m3"  # the checkpoint's quantization_config, not the runtime method


class _Memory:
    def __init__(self) -> None:
        self.avail = AVAIL_AT_START_GB

    def take(self, gb: float) -> tuple[float, float]:
        before = self.avail
        self.avail -= gb
        return before, self.avail


def _server_args_line(engine: Engine) -> str:
    return "server_args=" + repr(dict(engine.resolved))


def _gemm_type(engine: Engine) -> str:
    return "grouped_contiguous" if engine.env.get("SGLANG_HUMMING_MOE_GEMM_TYPE", "").strip() == "grouped" else "indexed"


def run_startup(engine: Engine, epoch: int) -> None:
    try:
        _run(engine, epoch)
    except Restarted:
        return  # superseded by a newer (re)start


def _run(engine: Engine, epoch: int) -> None:
    log = engine.log
    engaged = engine.latch_engagement()
    board = engine.board
    phases = engine.knobs.phase_seconds(with_draft=engaged.draft_loaded, slow=board.loaded_with(faults.SLOW_START))
    mem = _Memory()
    startup: dict = {}
    tic_total = time.monotonic()

    def elapsed_since(tic: float) -> float:
        return (time.monotonic() - tic) / engine.knobs.time_scale

    log.info(_server_args_line(engine))
    if engine.args.get("attention_backend") is None:
        log.info("Attention backend not specified. Use triton backend by default.")
    engine.sleep_sim(phases["init"], epoch)

    # -- target weights
    tic = time.monotonic()
    log.scheduler(f"Load weight begin. avail mem={mem.avail:.2f} GB")
    if board.loaded_with(faults.CRASH_AT_LOAD):
        engine.sleep_sim(phases["load_weights"] * 0.4, epoch)
        _crash_at_load(engine)
    if board.loaded_with(faults.HANG_AT_LOAD):
        while True:  # stays "starting" until killed (or restarted through the admin endpoint)
            engine.sleep_sim(1.0, epoch)
    if engaged.fp8_lm_head:
        engine.sleep_sim(phases["load_weights"] * 0.02, epoch)
        log.scheduler(fp8_lm_head.LOG_SIGNATURE)
        engine.sleep_sim(phases["load_weights"] * 0.98, epoch)
    else:
        engine.sleep_sim(phases["load_weights"], epoch)
    target_gb = TARGET_WEIGHTS_GB - (FP8_HEAD_SAVING_GB if engaged.fp8_lm_head else 0.0)
    _, after = mem.take(target_gb)
    load_weight = elapsed_since(tic)
    log.scheduler(
        f"Load weight end. elapsed={load_weight:.2f} s, type={MODEL_ARCH}, {CHECKPOINT_QUANT}, "
        f"avail mem={after:.2f} GB, mem usage={target_gb:.2f} GB."
    )
    weight_gb = target_gb

    # -- NEXTN draft (same checkpoint)
    if engaged.draft_loaded:
        tic = time.monotonic()
        log.scheduler(f"Load weight begin. avail mem={mem.avail:.2f} GB")
        engine.sleep_sim(phases["load_draft_weights"], epoch)
        _, after = mem.take(DRAFT_WEIGHTS_GB)
        load_weight += elapsed_since(tic)
        log.scheduler(
            f"Load weight end. elapsed={elapsed_since(tic):.2f} s, type={mtp.DRAFT_MODEL_CLASS}, {CHECKPOINT_QUANT}, "
            f"avail mem={after:.2f} GB, mem usage={DRAFT_WEIGHTS_GB:.2f} GB."
        )
        weight_gb += DRAFT_WEIGHTS_GB
    startup["load_weight"] = load_weight

    # -- memory pools
    tic = time.monotonic()
    engine.sleep_sim(phases["kv_cache"], epoch)
    _, after = mem.take(KV_POOL_GB)
    log.scheduler(f"Memory pool end. avail mem={after:.2f} GB")
    startup["kv_cache_allocation"] = elapsed_since(tic)

    # -- CUDA graphs
    humming_logged = False
    graph_times: dict[str, float] = {}
    if engaged.cuda_graph:
        cfg = engine.resolved["cuda_graph_config"]["decode"]
        backend, bs = cfg["backend"], cfg["bs"] or [1]
        if engaged.draft_loaded:
            name, tokens_per_req, graph_gb = "target verify", engine.num_draft_tokens, GRAPH_GB["target"]
        else:
            name, tokens_per_req, graph_gb = "target decode", 1, GRAPH_GB["decode"]
        tic = time.monotonic()
        log.scheduler(
            f"Capture {name} CUDA graph begin. backend={backend}, num_tokens_per_req={tokens_per_req}, "
            f"avail mem={mem.avail:.2f} GB"
        )
        if engaged.humming:
            engine.sleep_sim(phases["capture_target"] * 0.1, epoch)
            log.scheduler(f"Using {_gemm_type(engine)} gemm for humming moe")
            humming_logged = True
            engine.sleep_sim(phases["capture_target"] * 0.9, epoch)
        else:
            engine.sleep_sim(phases["capture_target"], epoch)
        _, after = mem.take(graph_gb)
        graph_times["target"] = elapsed_since(tic)
        log.scheduler(
            f"Capture {name} CUDA graph end. bs={bs}, elapsed={graph_times['target']:.2f} s, "
            f"mem usage={graph_gb:.2f} GB, avail mem={after:.2f} GB."
        )
        if engaged.draft_loaded:
            for kind, tokens, share in (("decode", engine.resolved["speculative_eagle_topk"], 0.5), ("extend", tokens_per_req, 0.5)):
                tic = time.monotonic()
                log.scheduler(
                    f"Capture draft {kind} CUDA graph begin. backend={backend}, num_tokens_per_req={tokens}, "
                    f"bs={bs}, avail mem={mem.avail:.2f} GB"
                )
                engine.sleep_sim(phases["capture_draft"] * share, epoch)
                gb = GRAPH_GB[f"draft_{kind}"]
                _, after = mem.take(gb)
                graph_times[f"draft_{kind}"] = elapsed_since(tic)
                log.scheduler(
                    f"Capture draft {kind} CUDA graph end. elapsed={graph_times[f'draft_{kind}']:.2f} s, "
                    f"mem usage={gb:.2f} GB, avail mem={after:.2f} GB."
                )
    startup["cuda_graph"] = graph_times
    log.scheduler(
        f"max_total_num_tokens={MAX_TOTAL_NUM_TOKENS}, chunked_prefill_size={engine.resolved['chunked_prefill_size']}, "
        f"max_prefill_tokens={engine.resolved['max_prefill_tokens']}, "
        f"max_running_requests={engine.resolved['max_running_requests']}, "
        f"context_len={engine.resolved['context_length']}, available_gpu_mem={mem.avail:.2f} GB"
    )
    startup["scheduler_e2e"] = elapsed_since(tic_total)

    # -- HTTP server up, warmup request, ready
    host, port = engine.resolved["host"], engine.resolved["port"]
    log.raw(f"INFO:     Started server process [{os.getpid()}]")
    log.raw("INFO:     Waiting for application startup.")
    log.raw("INFO:     Application startup complete.")
    log.raw(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
    log.scheduler(
        "Prefill batch, #new-seq: 1, #new-token: 8, #cached-token: 0, token usage: 0.00, "
        "#running-req: 0, #queue-req: 0"
    )
    if engaged.humming and not humming_logged:
        engine.sleep_sim(phases["warmup"] * 0.3, epoch)
        log.scheduler(f"Using {_gemm_type(engine)} gemm for humming moe")
        engine.sleep_sim(phases["warmup"] * 0.7, epoch)
    else:
        engine.sleep_sim(phases["warmup"], epoch)
    log.raw(f'INFO:     127.0.0.1:{40000 + epoch} - "POST /generate HTTP/1.1" 200 OK')
    startup["tokenizer_e2e"] = elapsed_since(tic_total)
    if not engine.is_current(epoch):
        return
    if engine.metrics is not None:
        m = engine.metrics
        with m.registry.lock:
            m.weight_memory.set(m.scheduler_labels, weight_gb)
            m.gen_throughput.set(m.scheduler_labels, 0.0)
            m.num_running_reqs.set(m.scheduler_labels, 0)
            m.num_queue_reqs.set(m.scheduler_labels, 0)
            for phase in ("load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e"):
                m.startup_time.set({**m.scheduler_labels, "phase": phase}, startup[phase])
    engine.weight_mem_gb = weight_gb
    # Logged just before /health turns 200, so a client that saw 200 also finds the line.
    log.info("The server is fired up and ready to roll!")
    engine.mark_ready(epoch, startup)


def _crash_at_load(engine: Engine) -> None:
    engine.log.scheduler("Scheduler hit an exception: Traceback (most recent call last):")
    engine.die(
        1,
        "Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 6340, in run_scheduler_process\n'
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1290, in load_model\n'
        "    self.model = get_model(model_config=self.model_config, load_config=self.load_config)\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_loader/loader.py", line 612, in load_weights_and_postprocess\n'
        "    model.load_weights(weights)\n"
        "RuntimeError: CUDA error: out of memory\n"
        "[rank0]: Received sigquit from a child process. It usually means the child failed.",
    )

