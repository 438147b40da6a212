"""The simulated engine: lifecycle (starting -> ready, restarts, crashes), the batch-1 scheduler,
per-request generation with the timing model, and the decode-interval statistics SGLang reports.

All durations the engine reports (e2e_latency, TTFT/ITL histograms, `gen throughput`, startup
`elapsed=`) are in simulated seconds: what a real Spark would report. Only the sleeps are scaled
by `SPARKGATE_SIM_TIME_SCALE`, so a client's wall-clock rate divided by the scale matches them.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter as TallyCounter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkgate.sglang import conformance as C
from sparkgate_sim import answers, faults, host_memory, logits, reasoning, sglang_env, textgen, timing, workload
from sparkgate_sim.cli import EngineArgs
from sparkgate_sim.dspark_records import InfoRecords, ragged_verify_mode
from sparkgate_sim.engagement import Engaged, decide, probe_report
from sparkgate_sim.image import FP8_LM_HEAD_ENV, IMAGES, exportable_env_vars
from sparkgate_sim.knobs import Knobs
from sparkgate_sim.lifecycle import READY, STARTING, NotReady, Restarted
from sparkgate_sim.logs import EngineLog
from sparkgate_sim.metrics import (
    PREFILL_EAGER_MODE,
    PREFILL_GRAPH_MODE,
    REALTIME_DECODE,
    REALTIME_PREFILL_COMPUTE,
    EngineMetrics,
)
from sparkgate_sim.resolve import requested, resolve, token_capacity
from sparkgate_sim.scheduler_lines import decode_usage, prefill_line
from sparkgate_sim.startup import GRAPH_PHASES, humming_line, run_startup

EXPOSE_OWN_ENV_VARS = C.env("expose_own_env_vars")
GRAPH_LABEL = C.string_("graph_label_cuda")
# internal_state.py _DECODE_GRAPH_PHASES: the graph phases a PD router attributes to decode.
DECODE_GRAPH_PHASES = ("decode", "target_verify", "draft_decode", "draft_extend")
# metrics_reporter.py: _maybe_log_idle_metrics republishes 30 s after the last log_stats, and
# GEN_THROUGHPUT_STALENESS_SECONDS decays gen_throughput to 0 at a prefill report 30 s after the last decode
# report. Simulated seconds here, like every duration the engine reports.
IDLE_REPUBLISH_S = 30.0
GEN_THROUGHPUT_STALENESS_S = 30.0
# decode-stall is bounded: a request stalled this long (simulated seconds) is aborted, so nothing waits forever.
# It ends as a graceful abort (schedule_batch.py FINISH_ABORT().to_json(), no status code), which the
# tokenizer and the OpenAI routes pass through as a normal final chunk with finish reason "abort".
STALL_ABORT_AFTER_S = 600.0
STALL_ABORT_FINISH = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}


@dataclass
class GenRequest:
    prompt_key: str  # what seeds the output (text, rendered chat, or the input ids)
    prompt_tokens: int
    max_new_tokens: int | None  # None: stop at the model's natural EOS
    sampling: Mapping[str, Any]
    stream: bool
    stop: tuple[str, ...] = ()
    rid: str = field(default_factory=lambda: uuid.uuid4().hex)
    require_reasoning: bool = False  # chat with a reasoning parser: meta_info counts reasoning_tokens
    question: str | None = None  # where a question is looked for (chat: the last user message); None: prompt_key
    context: str = ""  # chat: the turns before that message (what the model was told earlier)
    ignore_eos: bool = False  # sampling's ignore_eos: no EOS, so no early stop after an answer either
    return_logprob: bool = False  # the final meta_info carries output_token_logprobs (logits.py)
    top_logprobs: int = 0  # and output_top_logprobs, this many per position


@dataclass
class Chunk:
    """One scheduler output for a request: the tokens so far and, on the last one, the final meta."""

    words: list[str]  # all output words so far (cumulative)
    ids: list[int]
    new_words: list[str]
    finished: bool
    meta_info: dict[str, Any]
    text: str


class RequestClock:
    """A request's timestamps as SGLang's ReqTimeStats reports them (observability/req_time_stats.py): wall-clock
    seconds since the epoch at receipt, plus the request's simulated queue, prefill and decode durations, so
    that differences between them are simulated seconds like every other duration the engine reports."""

    def __init__(self, received_wall: float, queued_sim: float, ttft_sim: float):
        self.received = received_wall
        self.queued = queued_sim
        self.first_token_latency = queued_sim + ttft_sim
        self.e2e: float | None = None

    def scheduler_meta(self) -> dict[str, float]:
        """SchedulerReqTimeStats.convert_to_output_meta_info: no HiCache storage waits, forward entry after the
        queue, prefill finished at the first token."""
        return {
            "storage_prefetch_wait": 0.0,
            "storage_staging_wait": 0.0,
            "forward_entry_time": self.received + self.queued,
            "prefill_finished_time": self.received + self.first_token_latency,
            "queue_time": self.queued,
        }

    def first_sent_ts(self) -> float:
        return self.received + self.first_token_latency

    def final_sent_ts(self) -> float:
        assert self.e2e is not None
        return self.received + self.e2e

    def final_meta(self, completion_tokens: int, sent_early: bool) -> dict[str, float]:
        """ReqTimeStats.convert_to_output_meta_info of the finished request; decode_throughput only with a decode
        phase (get_decode_throughput is None for one token)."""
        assert self.e2e is not None
        meta = {
            "request_received_ts": self.received,
            "first_token_latency": self.first_token_latency,
            "api_server_dispatch_finish_ts": self.received,
        }
        if sent_early:
            meta["response_sent_to_client_ts"] = self.first_sent_ts()
        meta["request_finished_ts"] = self.received + self.e2e
        decode = self.e2e - self.first_token_latency
        if completion_tokens > 1 and decode > 0:
            meta["decode_throughput"] = (completion_tokens - 1) / decode
        return meta


@dataclass
class DecodeWindow:
    """Counters between two decode-log lines (SGLang resets them at every log)."""

    tokens: int = 0
    sim_seconds: float = 0.0
    verify_ct: int = 0
    accepted_tokens: int = 0
    correct_drafts: int = 0


class Engine:
    def __init__(self, args: EngineArgs, env: Mapping[str, str], knobs: Knobs, log: EngineLog):
        self.args = args
        self.env = dict(env)
        self.knobs = knobs
        self.log = log
        self.image = IMAGES[knobs.image]
        # may raise ResolutionError before anything starts; an empty DSpark drafter directory changes
        # only what resolution logs (startup.py re-resolves for that) and how far startup gets
        self.resolved = resolve(args, draft_config_readable=faults.DSPARK_DRAFTER_MISSING
                                not in {f.name for f in knobs.faults})
        self.requested = requested(args, self.env)
        self.board = faults.FaultBoard(knobs.faults)
        self.served_model_name = self.resolved["served_model_name"]
        self.decode_log_interval = max(1, int(self.resolved["decode_log_interval"]))
        self.num_draft_tokens = int(self.resolved["speculative_num_draft_tokens"] or 1)
        self.token_capacity = token_capacity(self.resolved)  # max_total_num_tokens
        self.mamba_slots = 1  # max_mamba_cache_size: set when the startup allocates the pools
        self.launched_at = time.time()
        self.route_counts: TallyCounter[str] = TallyCounter()
        # Requests that came through a proxy (X-Forwarded-For): how the deploy tests prove that nothing
        # reached the engine through a closed gate, while the sentinel's own direct probes do not count.
        self.forwarded_counts: TallyCounter[str] = TallyCounter()
        self.restarts = 0
        self._lock = threading.RLock()  # engine state and statistics
        self._batch = threading.Lock()  # batch 1: one running request at a time
        self._slept_sim = 0.0  # sim_clock(): the simulated seconds of every sleep_sim so far
        self.crash_due: int | None = None  # crash-after-ready:N reached: the thread whose response goes out first
        self.epoch = 0
        # What the engine holds of the host's memory, and (SPARKGATE_SIM_HOST_MEMINFO) the meminfo file showing it.
        self.host_memory = host_memory.HostMemory(knobs.time_scale)
        self.meminfo = (host_memory.MeminfoWriter(knobs.host_meminfo, self.host_memory, self.board, log)
                        if knobs.host_meminfo else None)
        self._reset_lifetime()

    # ------------------------------------------------------------------ lifecycle
    def _reset_lifetime(self) -> None:
        """What a fresh engine process starts with."""
        self.state = STARTING
        self._slept_sim = 0.0  # sim_clock() of the new process
        self.host_memory.restart(self.epoch)
        self.engaged: Engaged | None = None
        self.visible_env: dict[str, str] = dict(self.env)
        self.speed: timing.SpeedModel | None = None
        self.startup_time: dict[str, Any] = {}
        self.weight_mem_gb = 0.0
        self.metrics = EngineMetrics(self.served_model_name) if self.resolved["enable_metrics"] else None
        self.queued = 0
        self.running = 0
        self.finished_requests = 0
        self.stall_began: float | None = None  # decode-stall: when the hanging forward began (monotonic)
        self.forward_ct_decode = 0
        # The engine's own clock of work: simulated seconds of prefill and decode this process has run. Every
        # duration a request reports is computed on it, never read off the host (a busy host paces the stream's
        # wall-clock delivery, not the engine's accounting).
        self.busy_sim = 0.0
        # What metrics_reporter.py keeps between reports: the running count last published (stats.num_running_reqs,
        # which _maybe_log_idle_metrics compares with the empty batch), when log_stats last ran
        # (metrics_collector.last_log_time) and when the last decode report was (last_decode_stats_tic).
        self.published_running = 0
        self.metrics_published_at = self.decode_stats_at = time.monotonic()
        self.window = DecodeWindow()
        self.spec_total_accepted = 0
        self.spec_total_verify_ct = 0
        self.dspark_records = InfoRecords(self.env, gamma=self.num_draft_tokens - 1,
                                          verify_num_draft_tokens=self.num_draft_tokens)
        self.last_gen_throughput = 0.0
        self.ready_at: float | None = None
        self.humming_line_pending = False  # --skip-server-warmup without graphs: the first request's forward logs it
        self.cold_garble_pending = False  # cold-prefill-garble: armed at ready, consumed by the first request served

    def start(self) -> None:
        with self._lock:
            epoch = self.epoch
        threading.Thread(target=run_startup, args=(self, epoch), name=f"startup-{epoch}", daemon=True).start()

    def restart(self) -> None:
        """Simulated engine restart: back to starting, new startup run, counters of a fresh process."""
        with self._lock:
            self.epoch += 1
            self.restarts += 1
            self._reset_lifetime()
        self.start()

    def latch_engagement(self) -> Engaged:
        self.board.latch_load_time()
        engaged = decide(self.requested, self.image, self.board, self.env, self.resolved["moe_runner_backend"])
        # fp8-env-ignored: the variable never reaches SGLang's Envs (an unpatched build, or an env file
        # that lost it), so it is neither applied nor listed among the exported env vars.
        visible = dict(self.env)
        if self.board.loaded_with(faults.FP8_ENV_IGNORED):
            visible.pop(FP8_LM_HEAD_ENV, None)
        with self._lock:
            self.visible_env = visible
            self.engaged = engaged
            self.speed = timing.SpeedModel(
                humming=engaged.humming,
                fp8_lm_head=engaged.fp8_lm_head,
                speculative=engaged.draft_loaded,
                cuda_graph=engaged.cuda_graph,
                dspark=engaged.dspark,
                dspark_draft_graph=engaged.dspark_draft_graph,
                dspark_proposal_folded=engaged.dspark_proposal_folded,
            )
        return engaged

    def mark_ready(self, epoch: int, startup_time: dict[str, Any]) -> None:
        with self._lock:
            if epoch != self.epoch:
                return
            self.startup_time = startup_time
            self.state = READY
            self.host_memory.hold(epoch, host_memory.ENGINE_READY_GIB)
            self.ready_at = time.monotonic()
            # Armed only now: the startup's own warmup forward and health polls never consume it.
            self.cold_garble_pending = self.board.loaded_with(faults.COLD_PREFILL_GARBLE)
        crash = self.board.runtime(faults.CRASH_AFTER_READY)
        if crash is not None and crash.in_seconds:
            threading.Thread(target=self._crash_later, args=(epoch, crash.count()), daemon=True).start()

    def is_current(self, epoch: int) -> bool:
        with self._lock:
            return epoch == self.epoch

    def sleep_sim(self, seconds: float, epoch: int | None = None) -> None:
        """Sleep `seconds` of simulated time; abandon the sleep if a restart supersedes `epoch`. The engine's
        simulated clock advances by exactly `seconds` (the host's pace only decides when the sleep ends)."""
        self._sleep_until(time.monotonic(), seconds, epoch)
        with self._lock:
            if epoch is None or epoch == self.epoch:  # a superseded start adds nothing to the new one's clock
                self._slept_sim += seconds

    def sim_clock(self) -> float:
        """Simulated seconds this engine process has spent in timed phases (startup phases, other simulated waits),
        from its start: a restart starts the clock again."""
        with self._lock:
            return self._slept_sim

    def die(self, code: int, traceback_text: str) -> None:
        """The engine process exits (crash): the log says why, as SGLang's would."""
        self.log.traceback(traceback_text)
        if self.meminfo is not None:
            self.meminfo.write(released=True)  # the dead process's memory is the host's again
        os._exit(code)

    def _crash_later(self, epoch: int, sim_seconds: float) -> None:
        try:
            self.sleep_sim(sim_seconds, epoch)
        except Restarted:
            return
        self._crash_scheduler()

    def _crash_scheduler(self) -> None:
        self.scheduler_died(
            '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3121, in event_loop_overlap\n'
            "    batch_result = self.run_batch(batch)\n"
            "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
        )

    def scheduler_died(self, frames: str) -> None:
        """The scheduler process dies of the exception `frames` ends with, logged as SGLang logs it."""
        self.log.scheduler("Scheduler hit an exception: Traceback (most recent call last):")
        self.die(1, f"Traceback (most recent call last):\n{frames}\n"
                    "[rank0]: Received sigquit from a child process. It usually means the child failed.")

    # ------------------------------------------------------------------ introspection
    def count_route(self, path: str, forwarded: bool = False) -> None:
        with self._lock:
            self.route_counts[path] += 1
            if forwarded:
                self.forwarded_counts[path] += 1

    def is_ready(self) -> bool:
        with self._lock:
            return self.state == READY

    def avg_spec_accept_length(self) -> float | None:
        with self._lock:
            if self.engaged is None or not self.engaged.draft_loaded or self.spec_total_verify_ct == 0:
                return None
            return self.spec_total_accepted / self.spec_total_verify_ct

    def internal_state(self) -> dict[str, Any]:
        with self._lock:
            state = dict(self.resolved)
            graph = self._graph_memory()
            state.update(
                world_size=1,
                # the scheduler's own startup_time (observability/startup_time.py build_scheduler_startup_time):
                # /server_info's top-level copy adds the tokenizer's tokenizer_e2e
                startup_time={k: v for k, v in self.startup_time.items() if k != "tokenizer_e2e"},
                effective_max_running_requests_per_dp=self.resolved["max_running_requests"],
                last_gen_throughput=self.last_gen_throughput,
                # scheduler_components/memory_usage.py build_memory_usage: GB rounded to 3 places
                memory_usage={
                    "weight": round(self.weight_mem_gb, 3),
                    "kvcache": 24.0,
                    "startup_available": 119.52,
                    "token_capacity": self.token_capacity,
                    "token_capacity_swa": None,
                    "graph": graph,
                },
                # internal_state.py _add_disaggregation: the captured decode batch sizes and their graph memory
                decode_cuda_graph_bs=list(self.resolved["cuda_graph_config"]["decode"]["bs"])
                if self.engaged is not None and self.engaged.cuda_graph else [],
                decode_cuda_graph_memory_gb=round(sum(graph[p] for p in DECODE_GRAPH_PHASES), 3),
            )
        accept = self.avg_spec_accept_length()
        if accept is not None:
            state["avg_spec_accept_length"] = accept
        engaged = self.engaged
        if engaged is not None and engaged.dspark:
            with self._lock:
                record = self.dspark_records.dump()
            if record is not None:  # only with SGLANG_DSPARK_DEBUG_DUMP / SGLANG_DSPARK_ENABLE_SPS_RECORD
                state[C.string_("internal_state_dspark_info_record")] = record
        if sglang_env.is_true(self.env, EXPOSE_OWN_ENV_VARS):
            state["env_vars"] = exportable_env_vars(self.image, self.visible_env)
        engaged = self.engaged
        if engaged is not None and engaged.probe_installed and self.board.runtime(faults.PROBE_MISSING) is None:
            state["engagement"] = probe_report(engaged)
        return state

    def _graph_memory(self) -> dict[str, float]:
        engaged = self.engaged
        graphs = dict.fromkeys(GRAPH_PHASES, 0.0)
        if engaged is not None and engaged.cuda_graph:
            if engaged.dspark:  # the drafter captures one graph (phase draft_decode), and only with memory
                graphs.update(target_verify=0.62, draft_decode=0.18 if engaged.dspark_draft_graph else 0.0)
            elif engaged.draft_loaded:
                graphs.update(target_verify=0.62, draft_decode=0.18, draft_extend=0.21)
            else:
                graphs["decode"] = 0.55
        return graphs

    # ------------------------------------------------------------------ generation
    def generate(self, req: GenRequest) -> Iterator[Chunk]:
        """Admit one request (NotReady now, not at the first chunk) and return its chunk stream."""
        with self._lock:
            if self.state != READY:
                raise NotReady()
            epoch = self.epoch
            self.queued += 1
            busy_at_arrival = self.busy_sim
        return self._queued(req, epoch, busy_at_arrival, time.time())

    def _queued(self, req: GenRequest, epoch: int, busy_at_arrival: float, received_wall: float) -> Iterator[Chunk]:
        """Wait for the single batch slot, then run to completion, one Chunk per scheduler step."""
        with self._batch:
            with self._lock:
                self.queued -= 1
                if epoch != self.epoch:
                    raise Restarted()
                self.running = 1
            try:
                yield from self._run(req, epoch, busy_at_arrival, received_wall)
            finally:
                with self._lock:
                    self.running = 0
                    if epoch == self.epoch:
                        self._maybe_publish_idle()  # the scheduler goes idle (unless a request is waiting)

    def _run(self, req: GenRequest, epoch: int, busy_at_arrival: float, received_wall: float) -> Iterator[Chunk]:
        engaged, speed = self.engaged, self.speed
        assert engaged is not None and speed is not None
        spec = engaged.draft_loaded
        seed = textgen.request_seed(req.prompt_key, req.sampling)
        with self._lock:
            degrade = self.board.runtime(faults.DEGRADE_AFTER)
            decay = self.board.runtime(faults.ACCEPT_DECAY)
            degraded = degrade is not None and self.finished_requests >= degrade.count()
            # Engine time, computed: the simulated work the batch slot did while this request waited for it.
            queued_sim = self.busy_sim - busy_at_arrival
        kind = workload.classify(req.prompt_key)
        accept_length = timing.accept_length_for(
            seed, max_len=self.num_draft_tokens, broken=engaged.draft_broken, degraded=degraded,
            nominal=timing.nominal_accept_length(engaged.dspark, kind),
        )
        thinks_anyway = self.board.latched(faults.THINKS_ANYWAY)
        thinks = textgen.model_thinks(req.prompt_key, template_ignores_off=thinks_anyway is not None)
        reasoning_words = thinks_anyway.count() if thinks_anyway is not None else None
        answer = self._answer_words(req)
        natural = textgen.natural_length(seed, thinks, answer, reasoning_words)
        if answer is not None:  # the model stops at EOS after the answer, unless the budget ends first
            limit = natural if req.max_new_tokens is None else min(req.max_new_tokens, natural)
        else:
            limit = req.max_new_tokens if req.max_new_tokens is not None else natural
        limit = max(1, limit)
        phase = (seed % 997) / 997.0  # where in the 2-2-3 pattern this request starts
        self.log.scheduler(prefill_line(req.prompt_tokens, self.queued, self._usage(req.prompt_tokens)))
        self._report_prefill(req.prompt_tokens)
        with self._lock:
            humming_first_forward, self.humming_line_pending = self.humming_line_pending, False
        if humming_first_forward:
            self.log.scheduler(humming_line(self))
        with self._lock:
            self.dspark_records.note_non_decode_step()
        ttft = timing.ttft_s(req.prompt_tokens)
        start = time.monotonic()
        sim_elapsed = ttft
        self._sleep_until(start, sim_elapsed, epoch)
        self._advance_busy(ttft)  # work done: a request arriving during this prefill waits all of it
        code = kind == workload.CODE
        first_word, first_id = textgen.output_token(seed, 0, thinks, code, answer, reasoning_words)
        words, ids = [first_word], [first_id]
        new = list(words)  # the tokens the latest chunk adds
        itl_samples: list[tuple[float, int]] = []
        verify_ct = correct = 0
        histogram: list[int] = []  # verify steps by number of correct drafts (Req.update_spec_correct_drafts_histogram)
        clock = RequestClock(received_wall, queued_sim, ttft)
        sent_early = False  # a streamed chunk went out before the final one
        stop_hit: str | None = None
        step = 0
        reported = False  # a decode-log report ran during this request (the running gauge reads 1 since)
        aborted = False  # decode-stall outlasted STALL_ABORT_AFTER_S
        while True:
            text = textgen.render_output(words)
            stop_hit = next((s for s in req.stop if s and s in text), None)
            finished = len(words) >= limit or stop_hit is not None
            if finished:
                break
            meta = self._meta(req, words, None, clock)
            if step == 0 and req.stream:
                # tokenizer_manager._wait_one_response: the first streamed chunk records when it was sent.
                meta["response_sent_to_client_ts"] = clock.first_sent_ts()
                sent_early = True
            yield Chunk(words, ids, new, False, meta, text)
            if step == 0:
                # Anchor the decode schedule where the first token was handed over: a slow first write
                # (a loaded machine) must not be made up for by shorter decode steps.
                start, sim_elapsed_at_anchor = time.monotonic(), sim_elapsed
            stalled_s = 0.0
            if reported and self.board.runtime(faults.DECODE_STALL) is not None:
                stalled_s, aborted = self._stall(epoch)
                sim_elapsed += stalled_s  # the request's latencies include the hang
                if aborted:
                    self._advance_busy(stalled_s)  # the slot was held all along: who waited, waited this long
                    break
            # one decode step: a verify step emitting k tokens (MTP) or one plain step
            context = req.prompt_tokens + len(words)
            decayed = decay is not None and context > decay.count()  # accept-decay: the draft misses at long context
            k = timing.emitted_at_step(timing.DECAYED_ACCEPT_LENGTH if decayed else accept_length, step, phase) if spec else 1
            k = max(1, min(k, limit - len(words)))
            dt = speed.verify_step_s(k) if spec else speed.plain_step_s()
            sim_elapsed += dt
            self._sleep_until(start, sim_elapsed - sim_elapsed_at_anchor, epoch)
            self._advance_busy(dt + stalled_s)
            emitted = [textgen.output_token(seed, len(words) + i, thinks, code, answer, reasoning_words) for i in range(k)]
            new = [token for token, _ in emitted]
            ids.extend(token_id for _, token_id in emitted)
            words.extend(new)
            itl_samples.append((dt + stalled_s, k))
            if spec:
                verify_ct += 1
                correct += k - 1
                histogram.extend([0] * (k - len(histogram)))
                histogram[k - 1] += 1
            reported |= self._after_decode_step(k, dt, spec, engaged, req.prompt_tokens + len(words), stalled_s)
            step += 1
        # EOS: no budget, or an answer that ended before the budget did (an answer exactly as long as the
        # budget is cut there: the length check comes first, as in SGLang's Req.check_finished).
        eos = req.max_new_tokens is None or (answer is not None and len(words) < req.max_new_tokens)
        if aborted:
            finish = dict(STALL_ABORT_FINISH)
            new = []  # the words so far were all sent already
        elif stop_hit is None and eos:
            finish = {"type": "stop", "matched": textgen.EOS_TOKEN_ID}
        elif stop_hit is not None:
            finish = {"type": "stop", "matched": stop_hit}
            text = text[: text.index(stop_hit)]
        else:
            finish = {"type": "length", "length": len(words)}
        e2e = queued_sim + sim_elapsed
        clock.e2e = e2e
        meta = self._meta(req, words, finish, clock)
        meta[C.string_("meta_e2e_latency")] = e2e
        if spec and verify_ct > 0:
            # Only on the final chunk, only with speculation (tokenizer_manager._calculate_spec_decoding_metrics).
            proposed = verify_ct * (self.num_draft_tokens - 1)
            if proposed:
                meta[C.string_("meta_spec_accept_rate")] = correct / proposed
                meta[C.string_("meta_spec_accept_length")] = len(words) / verify_ct
                meta[C.string_("meta_spec_num_correct_drafts")] = correct
                meta[C.string_("meta_spec_num_proposed_drafts")] = proposed
                meta[C.string_("meta_spec_verify_ct")] = verify_ct
            meta["spec_correct_drafts_histogram"] = histogram
        if self.resolved["enable_metrics"]:
            # tokenizer_manager._handle_batch_output: ReqTimeStats.convert_to_output_meta_info on the final chunk
            # (observability/req_time_stats.py), with the send time of an earlier streamed chunk.
            meta.update(clock.final_meta(len(words), sent_early=sent_early))
        if not sent_early:
            # tokenizer_manager._wait_one_response: the finished response records its send time, unless a streamed
            # chunk already did.
            meta["response_sent_to_client_ts"] = clock.final_sent_ts()
        if req.return_logprob:
            head = logits.Head(fp8=engaged.fp8_lm_head,
                               scale_off=engaged.fp8_lm_head and self.board.loaded_with(faults.FP8_HEAD_SCALE_OFF))
            chosen, tops = logits.token_logprobs(
                seed, words, ids, textgen.answer_start(seed, thinks, reasoning_words) if answer is not None else None,
                len(answer or ()), head, req.top_logprobs)
            meta["output_token_logprobs"] = chosen
            if req.top_logprobs:
                meta["output_top_logprobs"] = tops
        self._finish(req, len(words), verify_ct, queued_sim + ttft, itl_samples, e2e)
        yield Chunk(words, ids, new, True, meta, text)

    def _answer_words(self, req: GenRequest) -> tuple[str, ...] | None:
        """The answer the model writes to a recognised question (the faults' wrong one when garbled), or None.
        The first request served after ready consumes cold-prefill-garble, question or not; with ignore_eos
        the request decodes its whole budget as any other prompt does (no answer is written)."""
        with self._lock:
            cold, self.cold_garble_pending = self.cold_garble_pending, False
        if req.ignore_eos:
            return None
        found = answers.answer(req.question if req.question is not None else req.prompt_key, context=req.context)
        if found is None:
            return None
        if cold or self.board.runtime(faults.ANSWERS_GARBLED) is not None:
            return found.garbled()
        return found.words

    def _sleep_until(self, start: float, sim_offset: float, epoch: int | None) -> None:
        """Absolute schedule: sleep errors never accumulate across the steps of a request."""
        deadline = start + sim_offset * self.knobs.time_scale
        while True:
            if epoch is not None and not self.is_current(epoch):
                raise Restarted()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(remaining, 0.05))

    def _advance_busy(self, sim_seconds: float) -> None:
        with self._lock:
            self.busy_sim += sim_seconds

    def _usage(self, tokens: int) -> float:
        return tokens / self.token_capacity

    def _meta(self, req: GenRequest, tokens: list[str], finish: dict | None, clock: RequestClock) -> dict[str, Any]:
        """The meta_info keys of every chunk (tokenizer_manager._handle_batch_output), in SGLang's order."""
        reasoning_tokens = reasoning.reasoning_token_count(tokens) if req.require_reasoning else 0
        version = self.resolved["weight_version"]
        meta: dict[str, Any] = {
            "id": req.rid,
            C.string_("meta_finish_reason"): finish,
            C.string_("meta_prompt_tokens"): req.prompt_tokens,
            C.string_("meta_weight_version"): version,
            "num_retractions": 0,
        }
        if self.resolved["enable_metrics"]:
            # With --enable-metrics every chunk carries the scheduler's SchedulerReqTimeStats
            # (observability/req_time_stats.py convert_to_output_meta_info).
            meta.update(clock.scheduler_meta())
        meta.update({
            C.string_("meta_reasoning_tokens"): reasoning_tokens,
            C.string_("meta_completion_tokens"): len(tokens),
            "cached_tokens": 0,
        })
        if finish is not None:
            # The finished request's weight-version spans (utils/weight_versions.py add_weight_versions_to_meta_info).
            meta["weight_versions"] = [{"version": version, "start": 0, "end": len(tokens)}]
        # No prefix-cache hit: get_cached_tokens_details returns None (scheduler_components/output_streamer.py);
        # dp_rank is None without data-parallel attention, and sent on every chunk.
        meta.update(cached_tokens_details=None, dp_rank=None)
        return meta

    def _after_decode_step(
        self, k: int, dt: float, spec: bool, engaged: Engaged, seq_len: int, stalled_s: float = 0.0
    ) -> bool:
        """One decode iteration's bookkeeping (batch_result_processor.py, then report_decode_stats); True when it
        ran the periodic decode-log report. `stalled_s`: how long the step hung before it (decode-stall), which the
        gap to the next report includes."""
        with self._lock:
            self.forward_ct_decode += 1
            w = self.window
            w.tokens += k
            w.sim_seconds += dt + stalled_s
            if spec:
                w.verify_ct += 1
                w.accepted_tokens += k
                w.correct_drafts += k - 1
            if engaged.dspark and self.speed is not None:
                self.dspark_records.observe(self.forward_ct_decode, dt, self.speed.draft_part_s())
            if self.metrics is not None:
                mode = C.string_("cuda_graph_mode_graph" if engaged.cuda_graph else "cuda_graph_mode_eager")
                with self.metrics.registry.lock:
                    self.metrics.cuda_graph_passes.inc({**self.metrics.scheduler_labels, "mode": mode})
                    # every iteration: the tokens this step generated (a verify step: its accepted tokens)
                    self.metrics.realtime_tokens.inc({**self.metrics.scheduler_labels, "mode": REALTIME_DECODE}, k)
            if self.forward_ct_decode % self.decode_log_interval == 0:
                self._decode_log(spec, engaged, seq_len)
                return True
            return False

    def _decode_log(self, spec: bool, engaged: Engaged, seq_len: int) -> None:
        """The periodic `Decode batch` line and the gauges SGLang refreshes with it (lock held)."""
        w = self.window
        self.last_gen_throughput = w.tokens / w.sim_seconds if w.sim_seconds > 0 else 0.0
        usage = decode_usage(seq_len, self._usage(seq_len), self.mamba_slots)
        msg = C.log_line("decode_batch", iter="", running=1, usage=usage)
        accept_len = accept_rate = block_accept_len = 0.0
        if spec and w.verify_ct:
            accept_len = w.accepted_tokens / w.verify_ct
            accept_rate = w.correct_drafts / (w.verify_ct * (self.num_draft_tokens - 1))
            self.spec_total_accepted += w.accepted_tokens
            self.spec_total_verify_ct += w.verify_ct
            msg += C.log_line("decode_accept", accept_len=accept_len, accept_rate=accept_rate)
            if engaged.dspark and ragged_verify_mode(self.env) == "cap-accept":
                # Batch 1: the budget never trims the window, so every verify step is capped at the full
                # window and the uncapped block accept equals the committed one.
                block_accept_len = accept_len
                msg += C.log_line("decode_cap_len", cap_len=float(self.num_draft_tokens))
                msg += C.log_line("decode_block_accept", block_accept_len=block_accept_len)
        msg += C.log_line("decode_tail", graph_label=GRAPH_LABEL, cuda_graph=engaged.cuda_graph,
                          throughput=self.last_gen_throughput, queue=self.queued)
        self.log.scheduler(msg)
        if self.metrics is not None:
            m, labels = self.metrics, self.metrics.scheduler_labels
            with m.registry.lock:
                m.gen_throughput.set(labels, self.last_gen_throughput)
                m.num_running_reqs.set(labels, 1)
                m.num_queue_reqs.set(labels, self.queued)
                m.num_used_tokens.set(labels, seq_len)
                m.token_usage.set(labels, self._usage(seq_len))
                m.is_cuda_graph.set(labels, 1.0 if engaged.cuda_graph else 0.0)
                m.spec_accept_length.set(labels, accept_len)
                m.spec_accept_rate.set(labels, accept_rate)
                m.spec_block_accept_length.set(labels, block_accept_len)
                # metrics_reporter.py: 0 unless a speculative worker reports its steps and draft tokens
                m.spec_num_steps.set(labels, self.resolved["speculative_num_steps"] if spec else 0)
                m.spec_num_draft_tokens.set(labels, self.num_draft_tokens if spec else 0)
            self.published_running = 1  # len(batch.reqs)
            self.metrics_published_at = time.monotonic()
        self.decode_stats_at = time.monotonic()
        self.window = DecodeWindow()

    def health_generate(self) -> None:
        """SGLang's GET /health on an idle engine generates one token from input [0] (http_server.py
        health_generate): its prefill counts one realtime token; it never decodes. A busy engine skips it."""
        with self._lock:
            busy = self.running or self.queued
        if not busy:
            self.count_realtime_tokens(REALTIME_PREFILL_COMPUTE, 1)

    def count_realtime_tokens(self, mode: str, tokens: int) -> None:
        """increment_realtime_tokens: a zero delta adds nothing (no child for that mode)."""
        if self.metrics is None or not tokens:
            return
        m = self.metrics
        with m.registry.lock:
            m.realtime_tokens.inc({**m.scheduler_labels, "mode": mode}, tokens)

    def note_published(self) -> None:
        """The startup published the idle gauges (running 0) at ready: the idle republish counts from here."""
        with self._lock:
            self.published_running = 0
            self.metrics_published_at = time.monotonic()

    def _report_prefill(self, new_tokens: int) -> None:
        """report_prefill_stats with metrics on: the prefill's pass by CUDA graph, its tokens (no prefix cache: all
        computed), then log_stats with the running batch as it was before this request joined it (batch 1: empty,
        so 0) and the waiting queue (this request has left it); gen_throughput decays to 0 when the last decode
        report is stale."""
        with self._lock:
            if self.metrics is None:
                return
            now = time.monotonic()
            if (now - self.decode_stats_at) / self.knobs.time_scale > GEN_THROUGHPUT_STALENESS_S:
                self.last_gen_throughput = 0.0
            m, labels = self.metrics, self.metrics.scheduler_labels
            with m.registry.lock:
                m.cuda_graph_passes.inc({**labels, "mode": self._prefill_graph_mode(new_tokens)})
                m.realtime_tokens.inc({**labels, "mode": REALTIME_PREFILL_COMPUTE}, new_tokens)
                m.num_running_reqs.set(labels, 0)
                m.num_queue_reqs.set(labels, self.queued)
                m.gen_throughput.set(labels, self.last_gen_throughput)
                m.num_used_tokens.set(labels, new_tokens)
                m.token_usage.set(labels, self._usage(new_tokens))
            self.published_running = 0
            self.metrics_published_at = now

    def _prefill_graph_mode(self, new_tokens: int) -> str:
        """increment_prefill_cuda_graph_pass's mode: from a graph only with a prefill graph backend (Ling's KDA
        attention turns the CUDA default, breakable, off: arg_groups/cuda_graph_hook.py
        disable_breakable_cudagraph_if_incompatible) and a prefill within the captured token counts."""
        prefill = self.resolved["cuda_graph_config"]["prefill"]
        graph = prefill["backend"] != "disabled" and new_tokens <= prefill["max_bs"]
        return PREFILL_GRAPH_MODE if graph else PREFILL_EAGER_MODE

    def _maybe_publish_idle(self) -> None:
        """_maybe_log_idle_metrics, while the scheduler has nothing to run (lock held): publish when the running
        gauge disagrees with the empty batch (it read 1 since a decode report) or 30 s after the last publish:
        running and queue 0, gen_throughput 0, the KV pool empty."""
        if self.metrics is None or self.state != READY or self.running or self.queued:
            return
        now = time.monotonic()
        stale = self.published_running != 0
        if not stale and (now - self.metrics_published_at) / self.knobs.time_scale <= IDLE_REPUBLISH_S:
            return
        m, labels = self.metrics, self.metrics.scheduler_labels
        with m.registry.lock:
            m.num_running_reqs.set(labels, 0)
            m.num_queue_reqs.set(labels, 0)
            m.gen_throughput.set(labels, 0.0)
            m.num_used_tokens.set(labels, 0)
            m.token_usage.set(labels, 0.0)
        self.published_running = 0
        self.metrics_published_at = now

    def refresh_idle_metrics(self) -> None:
        """An idle scheduler runs _maybe_log_idle_metrics on every idle pass; only a /metrics read can tell when it
        did, so the simulator catches up on it there."""
        with self._lock:
            self._maybe_publish_idle()

    def _stall(self, epoch: int) -> tuple[float, bool]:
        """decode-stall: the decode forward does not return while the fault is on. The scheduler thread is stuck
        in it, so nothing is emitted, counted, logged or published (the gauges keep what they last showed);
        /health and /metrics are served elsewhere and keep answering. Returns the simulated seconds stalled and
        whether the stall outlasted STALL_ABORT_AFTER_S (the request is then aborted)."""
        scale = self.knobs.time_scale
        began = self.stall_began = time.monotonic()
        give_up = began + STALL_ABORT_AFTER_S * scale
        try:
            while self.board.runtime(faults.DECODE_STALL) is not None:
                if not self.is_current(epoch):
                    raise Restarted()
                now = time.monotonic()
                if now >= give_up:
                    return (now - began) / scale, True
                time.sleep(min(0.05, give_up - now))
            return (time.monotonic() - began) / scale, False
        finally:
            self.stall_began = None

    def stalled_s(self) -> float:
        """Simulated seconds the decode forward has hung so far (0: not stalled)."""
        began = self.stall_began
        return 0.0 if began is None else (time.monotonic() - began) / self.knobs.time_scale

    def _finish(
        self,
        req: GenRequest,
        completion_tokens: int,
        verify_ct: int,
        ttft: float,
        itl_samples: list[tuple[float, int]],
        e2e: float,
    ) -> None:
        with self._lock:
            self.finished_requests += 1
            finished = self.finished_requests
            if self.metrics is not None:
                m = self.metrics
                stream_labels = m.stream_labels(req.stream)
                with m.registry.lock:
                    m.prompt_tokens.inc(stream_labels, req.prompt_tokens)
                    m.generation_tokens.inc(stream_labels, completion_tokens)
                    m.num_requests.inc(stream_labels)
                    if verify_ct:
                        m.spec_verify_calls.inc(m.tokenizer_labels, verify_ct)
                    m.ttft.observe(stream_labels, ttft)
                    for dt, k in itl_samples:
                        m.itl.observe(m.tokenizer_labels, dt / k)  # SGLang amortizes over the new tokens
                    m.e2e.observe(stream_labels, e2e)
        crash = self.board.runtime(faults.CRASH_AFTER_READY)
        if crash is not None and not crash.in_seconds and finished >= crash.count():
            # Die once the response being written has reached the client (the HTTP handler calls crash_if_due).
            with self._lock:
                self.crash_due = threading.get_ident()  # the handler thread serving this request

    def crash_if_due(self) -> None:
        """Called by each HTTP handler thread after its response is written: dies if that response was the one."""
        with self._lock:
            due = self.crash_due == threading.get_ident()
            if due:
                self.crash_due = None
        if due:
            self._crash_scheduler()
