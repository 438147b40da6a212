"""The startup sequence: SGLang's phases and log lines, in SGLang's order, with simulated durations.

Which lines appear follows from what engaged (engagement.py), never from fault names. The lines and their order,
DSpark's included (DSparkWorkerV2, sglang/srt/speculative/dspark_components/dspark_worker_v2.py):
docs/simulator.md, "Surface" (**Log**) and "Faults"; the phase durations: "Knobs" (`SPARKGATE_SIM_PHASES`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sparkgate.sglang import conformance as C
from sparkgate_sim import faults, host_memory, sglang_env
from sparkgate_sim.engagement import DRAFT_MODEL_CLASS, DSPARK_DRAFT_CLASS
from sparkgate_sim.lifecycle import Restarted
from sparkgate_sim.metrics import REALTIME_DECODE, REALTIME_PREFILL_COMPUTE
from sparkgate_sim.resolve import (
    MODEL_ARCH,
    context_len,
    kv_cache_gb,
    mamba_cache_line,
    mamba_slots,
    missing_config_error,
    resolve_logged,
    ring_error,
    token_capacity_warning,
)
from sparkgate_sim.scheduler_lines import prefill_line

if TYPE_CHECKING:
    from sparkgate_sim.engine import Engine

# Unified-memory ledger of a Spark (GB): what the `avail mem` / `mem usage` fields report.
AVAIL_AT_START_GB = 119.52
TARGET_WEIGHTS_GB = 61.37  # with the BF16 head (157,184 x 2,560)
FP8_HEAD_SAVING_GB = 0.40  # the same head in FP8: 0.805 GB -> 0.402 GB
DRAFT_WEIGHTS_GB = 3.21
DSPARK_DRAFTER_GB = 2.72  # 1.36B parameters, BF16
# The drafter's config.json (Ling-3.0-flash-dspark): these are what the runner line reports.
DSPARK_SAMPLE_FROM_ANCHOR = False
DSPARK_MASK_TOKEN_ID = 156895  # the simulator's stand-in for the drafter's mask_token_id
DSPARK_MARKOV_HEAD = C.class_name("dspark_markov_vanilla")
# What SGLang finds left after the target when the draft graph is disabled (< 1 GB: dspark_worker_v2.py).
DSPARK_LOW_MEMORY_GB = 0.74
SGL = "/sgl-workspace/sglang/python/sglang/srt"
# The first frame of every scheduler traceback at startup.
RUN_SCHEDULER = (f'  File "{SGL}/managers/scheduler.py", line 6340, in run_scheduler_process\n'
                 "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)\n")
KV_POOL_GB = 24.0
# model_executor/graph_memory_usage.py GRAPH_MEMORY_USAGE_KEYS: the phases startup_time and memory_usage report.
GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")
GRAPH_GB = {"target": 0.62, "draft_decode": 0.18, "draft_extend": 0.21, "decode": 0.55}
CHECKPOINT_QUANT = "quant=fp8, fmt=e4m3, "  # the checkpoint's quantization_config, not the runtime method
GEMM_TYPE_ENV = C.env("humming_moe_gemm_type")
# humming-kernels' GemmType values (the package, not SGLang, defines them; SGLang picks GROUPED_CONTIGUOUS
# for SGLANG_HUMMING_MOE_GEMM_TYPE=grouped and INDEXED otherwise, moe_runner/humming.py).
GEMM_INDEXED, GEMM_GROUPED_CONTIGUOUS = C.string_("gemm_indexed"), "grouped_contiguous"
CUDA_GRAPH = C.string_("graph_backend_cuda")
FP8_HEAD_LOG = C.fork_only("fp8_lm_head_log")
FP8_HEAD_ENV = C.fork_only("fp8_lm_head_env")
ENVIRON_PY = "/sgl-workspace/sglang/python/sglang/srt/environ.py:82"
# entrypoints/http_server.py _execute_server_warmup: one /generate of max_new_tokens 8; its prompt is the
# 8 new tokens of the warmup's `Prefill batch` line. The scheduler counts both in sglang:realtime_tokens_total
# (its first token comes from the prefill, the other 7 from decode), so the family exists once the engine is
# ready (none with --skip-server-warmup until the first request).
WARMUP_PROMPT_TOKENS = 8
WARMUP_MAX_NEW_TOKENS = 8


class _Memory:
    def __init__(self) -> None:
        self.avail = AVAIL_AT_START_GB

    def take(self, gb: float) -> float:
        """What is left after `gb` more is taken."""
        self.avail -= gb
        return self.avail


def humming_line(engine: Engine) -> str:
    grouped = engine.env.get(GEMM_TYPE_ENV, "").lower() == C.string_("gemm_grouped")
    return C.log_line("humming_gemm", gemm_type=GEMM_GROUPED_CONTIGUOUS if grouped else GEMM_INDEXED)


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
    # Startup durations are read off the engine's simulated clock (the phases it slept), never off the host's.
    tic_total = engine.sim_clock()

    def elapsed_since(tic: float) -> float:
        # a difference of running sums: rounded, so the same phases always report the same figure
        return round(engine.sim_clock() - tic, 6)

    for name in (C.env("expose_own_env_vars"), FP8_HEAD_ENV):
        _, warning = sglang_env.read_bool(engine.env, name)
        if warning:  # EnvField.get warns (warnings.warn goes to stderr) and keeps the default
            log.traceback(f"{ENVIRON_PY}: UserWarning: {warning}")
    dspark = engine.requested.dspark
    drafter_missing = dspark and board.loaded_with(faults.DSPARK_DRAFTER_MISSING)
    _, resolution_lines = resolve_logged(engine.args, draft_config_readable=not drafter_missing)
    for line in resolution_lines:
        log.info(line)
    log.info(C.log_line("server_args", args=repr(dict(engine.resolved))))
    if engine.args.get("attention_backend") is None:
        log.info(C.log_line("attention_backend_default", backend="triton"))
    engine.sleep_sim(phases["init"], epoch)
    if drafter_missing:
        _drafter_config_missing(engine)

    # -- target weights
    tic = engine.sim_clock()
    log.scheduler(C.log_line("load_weight_begin", avail=mem.avail))
    if board.loaded_with(faults.CRASH_AT_LOAD):
        engine.sleep_sim(phases["load_weights"] * 0.4, epoch)
        _crash_at_load(engine)
    if board.loaded_with(faults.HANG_AT_LOAD):
        while True:  # stays "starting" until killed (or restarted through the admin endpoint)
            engine.sleep_sim(1.0, epoch)
    target_gb = TARGET_WEIGHTS_GB - (FP8_HEAD_SAVING_GB if engaged.fp8_lm_head else 0.0)
    host_mem = engine.host_memory  # what the host's meminfo shows: the weights fill it as they stream in
    host_mem.ramp_to(epoch, target_gb, phases["load_weights"])
    if engaged.fp8_lm_head:
        engine.sleep_sim(phases["load_weights"] * 0.02, epoch)
        log.scheduler(FP8_HEAD_LOG)
        engine.sleep_sim(phases["load_weights"] * 0.98, epoch)
    else:
        engine.sleep_sim(phases["load_weights"], epoch)
    after = mem.take(target_gb)
    load_weight = elapsed_since(tic)
    log.scheduler(C.log_line("load_weight_end", elapsed=load_weight, model_class=MODEL_ARCH, quant=CHECKPOINT_QUANT,
                             avail=after, usage=target_gb))
    weight_gb = target_gb

    # -- the draft: the NEXTN layer (same checkpoint) or the DSpark drafter (its own BF16 directory)
    if engaged.draft_loaded:
        draft_class, draft_quant, draft_gb = (
            (DSPARK_DRAFT_CLASS, "", DSPARK_DRAFTER_GB) if dspark else (DRAFT_MODEL_CLASS, CHECKPOINT_QUANT, DRAFT_WEIGHTS_GB)
        )
        tic = engine.sim_clock()
        log.scheduler(C.log_line("load_weight_begin", avail=mem.avail))
        host_mem.ramp_to(epoch, target_gb + draft_gb, phases["load_draft_weights"])
        engine.sleep_sim(phases["load_draft_weights"], epoch)
        after = mem.take(draft_gb)
        load_weight += elapsed_since(tic)
        log.scheduler(C.log_line("load_weight_end", elapsed=elapsed_since(tic), model_class=draft_class,
                                 quant=draft_quant, avail=after, usage=draft_gb))
        weight_gb += draft_gb
        if dspark:
            _dspark_worker_init_lines(engine)
    startup["load_weight"] = load_weight

    # -- memory pools (the KDA spec-verify ring is sized here: SGLang only fails this late)
    tic = engine.sim_clock()
    host_mem.ramp_to(epoch, host_memory.ENGINE_POOLS_GIB, phases["kv_cache"])
    engine.sleep_sim(phases["kv_cache"], epoch)
    ring = ring_error(engine.resolved)
    if ring is not None:
        _ring_invalid(engine, ring)
    kv_gb = KV_POOL_GB
    if dspark and engaged.cuda_graph and not engaged.dspark_draft_graph:
        # A larger static pool (e.g. --mem-fraction-static too high) leaves the drafter too little memory.
        kv_gb = mem.avail - GRAPH_GB["target"] - DSPARK_LOW_MEMORY_GB
    after = mem.take(kv_gb)
    warning = token_capacity_warning(engine.resolved)
    if warning is not None:
        log.scheduler(warning)
    engine.mamba_slots = mamba_slots(kv_gb, engine.resolved)
    log.scheduler(mamba_cache_line(engine.resolved, engine.mamba_slots))
    # The target's MLA cache, then (NEXTN) the draft layer's; a DSpark drafter's MHA pool is not modelled.
    for draft in (False, True) if engaged.draft_loaded and not dspark else (False,):
        log.scheduler(C.log_line("kv_cache_allocated", cache_name="KV Cache", state="is allocated",
                                 dtype="torch.bfloat16", tokens=engine.token_capacity,
                                 size=kv_cache_gb(engine.resolved, draft=draft)))
    log.scheduler(C.log_line("memory_pool_end", avail=after))
    startup["kv_cache_allocation"] = elapsed_since(tic)

    # -- CUDA graphs (and the warmup, up to ready): the host's figure reaches the ready engine's
    rest = [*(("capture_target", "capture_draft") if engaged.cuda_graph else ()),
            *(() if engine.resolved.get("skip_server_warmup") else ("warmup",))]
    host_mem.ramp_to(epoch, host_memory.ENGINE_READY_GIB, sum(phases.get(name, 0.0) for name in rest))
    humming_logged = False
    graph_times: dict[str, float] = {}
    if engaged.cuda_graph:
        cfg = engine.resolved["cuda_graph_config"]["decode"]
        backend, bs = cfg["backend"], cfg["bs"] or [1]
        if engaged.draft_loaded:
            name, tokens_per_req, graph_gb, phase = "target verify", engine.num_draft_tokens, GRAPH_GB["target"], "target_verify"
        else:
            name, tokens_per_req, graph_gb, phase = "target decode", 1, GRAPH_GB["decode"], "decode"
        tic = engine.sim_clock()
        log.scheduler(C.log_line("capture_begin", name=name, graph=CUDA_GRAPH, backend=backend, tokens=tokens_per_req,
                                 avail=mem.avail))
        if engaged.humming:
            engine.sleep_sim(phases["capture_target"] * 0.1, epoch)
            log.scheduler(humming_line(engine))
            humming_logged = True
            engine.sleep_sim(phases["capture_target"] * 0.9, epoch)
        else:
            engine.sleep_sim(phases["capture_target"], epoch)
        after = mem.take(graph_gb)
        graph_times[phase] = elapsed_since(tic)
        log.scheduler(C.log_line("capture_end", name=name, graph=CUDA_GRAPH, bs=bs, elapsed=graph_times[phase],
                                 usage=graph_gb, avail=after))
        if dspark:
            _dspark_draft_graph(engine, epoch, mem, phases, graph_times, backend, bs)
        elif engaged.draft_loaded:
            for kind, tokens, share in (("decode", engine.resolved["speculative_eagle_topk"], 0.5), ("extend", tokens_per_req, 0.5)):
                tic = engine.sim_clock()
                log.scheduler(C.log_line(f"capture_draft_{kind}_begin", backend=backend, tokens=tokens, bs=bs,
                                         avail=mem.avail))
                engine.sleep_sim(phases["capture_draft"] * share, epoch)
                gb = GRAPH_GB[f"draft_{kind}"]
                after = mem.take(gb)
                graph_times[f"draft_{kind}"] = elapsed_since(tic)
                log.scheduler(C.log_line(f"capture_draft_{kind}_end", elapsed=graph_times[f"draft_{kind}"], usage=gb,
                                         avail=after))
    resolved = engine.resolved
    log.scheduler(C.log_line(
        "scheduler_sizes", max_total_num_tokens=engine.token_capacity, chunked_prefill_size=resolved["chunked_prefill_size"],
        max_prefill_tokens=resolved["max_prefill_tokens"], max_running_requests=resolved["max_running_requests"],
        context_len=context_len(resolved), mem_label=C.string_("available_gpu_mem"), avail=mem.avail,
    ))
    # observability/startup_time.py build_scheduler_startup_time: capture times by phase over every phase of
    # model_executor/graph_memory_usage.py (0.0 for a phase not captured).
    startup["scheduler_e2e"] = elapsed_since(tic_total)
    startup["cuda_graph"] = {**dict.fromkeys(GRAPH_PHASES, 0.0), **graph_times}
    # entrypoints/engine.py logs the phases once the scheduler reported ready, before the HTTP server starts.
    log.info(C.log_line(
        "startup_timings", load_weight=startup["load_weight"], kv_cache_allocation=startup["kv_cache_allocation"],
        scheduler_e2e=startup["scheduler_e2e"], tokenizer_e2e=elapsed_since(tic_total),
        cuda_graph=", ".join(f"{phase}={seconds:.2f}" for phase, seconds in startup["cuda_graph"].items()),
    ))

    # -- HTTP server up, warmup request, ready
    host, port = engine.resolved["host"], engine.resolved["port"]
    log.raw(f"INFO:     Started server process [{os.getpid()}]")
    log.raw("INFO:     Waiting for application startup.")
    log.raw("INFO:     Application startup complete.")
    log.raw(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
    if engine.resolved.get("skip_server_warmup"):
        # entrypoints/http_server.py _wait_and_warmup: no warmup request, straight to ready; an eager Humming
        # engine then runs its first MoE forward with the first request (engine.py logs the line there).
        engine.humming_line_pending = engaged.humming and not humming_logged
    else:
        log.scheduler(prefill_line(WARMUP_PROMPT_TOKENS, 0, 0.0))
        engine.count_realtime_tokens(REALTIME_PREFILL_COMPUTE, WARMUP_PROMPT_TOKENS)
        if engaged.humming and not humming_logged:
            engine.sleep_sim(phases["warmup"] * 0.3, epoch)
            log.scheduler(humming_line(engine))
            engine.sleep_sim(phases["warmup"] * 0.7, epoch)
        else:
            engine.sleep_sim(phases["warmup"], epoch)
        engine.count_realtime_tokens(REALTIME_DECODE, WARMUP_MAX_NEW_TOKENS - 1)
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
                # the tokenizer-side collector emits it (metrics_collector.py emit_startup_time): no rank labels
                m.startup_time.set({**m.tokenizer_labels, "phase": phase}, startup[phase])
        engine.note_published()
    engine.weight_mem_gb = weight_gb
    # Logged just before /health turns 200, so a client that saw 200 also finds the line.
    log.info(C.log_format("ready"))
    engine.mark_ready(epoch, startup)


def _dspark_worker_init_lines(engine: Engine) -> None:
    """What DSparkWorkerV2.__init__ logs once the drafter loaded (dspark_worker_v2.py)."""
    resolved = engine.resolved
    window = int(resolved["speculative_num_draft_tokens"])
    gamma = window - 1
    engine.log.scheduler(C.log_line(
        "dspark_runner_initialized",
        attention_backend=resolved.get("speculative_draft_attention_backend") or resolved["attention_backend"],
        model=DSPARK_DRAFT_CLASS, gamma=gamma, verify_num_draft_tokens=window,
        query_token_num=gamma if DSPARK_SAMPLE_FROM_ANCHOR else gamma + 1,
        sample_from_anchor=DSPARK_SAMPLE_FROM_ANCHOR, mask_token_id=DSPARK_MASK_TOKEN_ID, markov_head=DSPARK_MARKOV_HEAD,
    ))
    engaged = engine.engaged
    if engaged is not None and not engaged.module_shared:
        engine.log.scheduler(C.log_format("dspark_own_vocab_modules"))


def _dspark_draft_graph(engine: Engine, epoch: int, mem: _Memory, phases: dict, graph_times: dict,
                        backend: str, bs: list) -> None:
    """DSparkWorkerV2.init_cuda_graphs: the memory check, the proposal folded (or kept eager), and the
    drafter's `draft verify` graph of gamma + 1 tokens per request (sample_from_anchor false)."""
    engaged, log = engine.engaged, engine.log
    assert engaged is not None
    if not engaged.dspark_draft_graph:
        log.scheduler(C.log_line("dspark_draft_graph_disabled", available=mem.avail))
        return
    if engaged.dspark_proposal_folded:
        greedy = sglang_env.is_true(engine.env, C.env("dspark_use_greedy_draft"))
        log.scheduler(C.log_line("dspark_proposal_folded", mode="greedy draft" if greedy else "sampling", suffix=""))
    elif engine.board.loaded_with(faults.DSPARK_PROPOSAL_EAGER):  # the sampler was built and gave up
        log.scheduler(C.log_line("dspark_proposal_eager", reason="no markov head"))
    # (SGLANG_DSPARK_FOLDED_PROPOSAL=0: the sampler is never built, so nothing is logged)
    tokens = engine.num_draft_tokens if not DSPARK_SAMPLE_FROM_ANCHOR else engine.num_draft_tokens - 1
    tic = engine.sim_clock()
    log.scheduler(C.log_line("capture_begin", name="draft verify", graph=CUDA_GRAPH, backend=backend, tokens=tokens,
                             avail=mem.avail))
    engine.sleep_sim(phases["capture_draft"], epoch)
    gb = GRAPH_GB["draft_decode"]
    after = mem.take(gb)
    graph_times["draft_decode"] = round(engine.sim_clock() - tic, 6)
    log.scheduler(C.log_line("capture_end", name="draft verify", graph=CUDA_GRAPH, bs=bs,
                             elapsed=graph_times["draft_decode"], usage=gb, avail=after))


def _drafter_config_missing(engine: Engine) -> None:
    """The target's ModelRunner reads the drafter's config for the DSpark target-hidden capture."""
    engine.scheduler_died(
        RUN_SCHEDULER
        + f'  File "{SGL}/model_executor/model_runner.py", line 426, in __init__\n'
        "    self.init_spec_aux_hidden_state()\n"
        f'  File "{SGL}/model_executor/model_runner.py", line 598, in init_spec_aux_hidden_state\n'
        "    resolve_spec_aux_hidden_state_config(\n"
        f'  File "{SGL}/model_executor/model_runner_components/spec_aux_hidden_state.py", line 74, in '
        "resolve_spec_aux_hidden_state_config\n"
        "    _resolve_dflash_aux_hidden_state(\n"
        f'  File "{SGL}/model_executor/model_runner_components/spec_aux_hidden_state.py", line 211, in '
        "_resolve_dflash_aux_hidden_state\n"
        "    draft_model_config = ModelConfig.from_server_args(\n"
        f'  File "{SGL}/configs/model_config.py", line 955, in from_server_args\n'
        "    return ModelConfig(\n"
        f'  File "{SGL}/configs/model_config.py", line 620, in __init__\n'
        "    get_config(\n"
        '  File "/usr/local/lib/python3.12/dist-packages/transformers/utils/hub.py", line 553, in cached_files\n'
        "    raise OSError(\n"
        f"OSError: {missing_config_error(engine.resolved)}"
    )


def _ring_invalid(engine: Engine, message: str) -> None:
    engine.scheduler_died(
        RUN_SCHEDULER
        + f'  File "{SGL}/mem_cache/memory_pool.py", line 826, in __init__\n'
        "    raise ValueError(\n"
        f"ValueError: {message}"
    )


def _crash_at_load(engine: Engine) -> None:
    engine.scheduler_died(
        RUN_SCHEDULER
        + f'  File "{SGL}/model_executor/model_runner.py", line 1290, in load_model\n'
        "    self.model = get_model(model_config=self.model_config, load_config=self.load_config)\n"
        f'  File "{SGL}/model_loader/loader.py", line 612, in load_weights_and_postprocess\n'
        "    model.load_weights(weights)\n"
        "RuntimeError: CUDA error: out of memory"
    )

