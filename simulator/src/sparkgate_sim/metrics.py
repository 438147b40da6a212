"""A tiny Prometheus text-format registry (no prometheus_client: the sim image is stdlib-only).

Names (from the conformance fixture), types and label sets follow SGLang 0.5.23's metrics_collector: scheduler-side series carry
model_name/engine_type/tp_rank/pp_rank/moe_ep_rank, tokenizer-side ones model_name/engine_type
(+ is_streaming where SGLang adds it).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping

from sparkgate.sglang import conformance as C

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
    0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000,
)  # fmt: skip
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400)

# sglang:realtime_tokens_total's `mode` values (metrics_collector.py increment_realtime_tokens); the simulator
# has no prefix cache, so `prefill_cache` never gets a sample.
REALTIME_PREFILL_COMPUTE, REALTIME_DECODE = "prefill_compute", "decode"
# sglang:cuda_graph_passes_total's prefill `mode` values (metrics_collector.py increment_prefill_cuda_graph_pass,
# counted on every prefill report; the decode values are the fixture's cuda_graph_mode_*).
PREFILL_GRAPH_MODE, PREFILL_EAGER_MODE = "prefill_cuda_graph", "prefill_none"

LabelKey = tuple[tuple[str, str], ...]


def _key(labels: Mapping[str, object]) -> LabelKey:
    return tuple((k, str(v)) for k, v in labels.items())


def _fmt_labels(key: LabelKey, extra: tuple[tuple[str, str], ...] = ()) -> str:
    items = key + extra
    return "{" + ",".join(f'{k}="{v}"' for k, v in items) + "}" if items else ""


def _fmt_value(value: float) -> str:
    return "+Inf" if math.isinf(value) else repr(float(value))


class _Metric:
    kind = ""

    def __init__(self, name: str, documentation: str):
        self.name = name
        self.documentation = documentation
        self.samples: dict[LabelKey, object] = {}

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.documentation}", f"# TYPE {self.name} {self.kind}"]

    def render(self) -> list[str]:
        return [f"{self.name}{_fmt_labels(k)} {_fmt_value(v)}" for k, v in self.samples.items()]


class Counter(_Metric):
    kind = "counter"

    def inc(self, labels: Mapping[str, object], amount: float = 1.0) -> None:
        key = _key(labels)
        self.samples[key] = float(self.samples.get(key, 0.0)) + amount


class Gauge(_Metric):
    kind = "gauge"

    def set(self, labels: Mapping[str, object], value: float) -> None:
        self.samples[_key(labels)] = float(value)


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...]):
        super().__init__(name, documentation)
        self.buckets = tuple(buckets) + (math.inf,)

    def observe(self, labels: Mapping[str, object], value: float) -> None:
        key = _key(labels)
        counts, total = self.samples.get(key, ([0] * len(self.buckets), 0.0))  # type: ignore[misc]
        self.samples[key] = ([count + (value <= bound) for count, bound in zip(counts, self.buckets, strict=True)],
                             total + value)

    def render(self) -> list[str]:
        lines = []
        for key, (counts, total) in self.samples.items():  # type: ignore[misc]
            for bound, count in zip(self.buckets, counts, strict=True):
                lines.append(f"{self.name}_bucket{_fmt_labels(key, (('le', _fmt_value(bound)),))} {float(count)!r}")
            lines.append(f"{self.name}_count{_fmt_labels(key)} {float(counts[-1])!r}")
            lines.append(f"{self.name}_sum{_fmt_labels(key)} {float(total)!r}")
        return lines


class Registry:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._metrics: list[_Metric] = []

    def add(self, metric: _Metric):
        self._metrics.append(metric)
        return metric

    def render(self) -> str:
        """Only families with a sample: SGLang serves /metrics through prometheus_client's multiprocess
        collector (PROMETHEUS_MULTIPROC_DIR, observability/metrics_collector.py), which lists a metric only
        once a process wrote a value for it (no HELP/TYPE for a labelled family without children)."""
        with self.lock:
            lines: list[str] = []
            for metric in self._metrics:
                if metric.samples:
                    lines.extend(metric.header())
                    lines.extend(metric.render())
        return "\n".join(lines) + "\n"


class EngineMetrics:
    """The SGLang series the gate and the dashboards read, with SGLang's names and label sets."""

    def __init__(self, served_model_name: str):
        self.registry = r = Registry()
        self.tokenizer_labels = {"model_name": served_model_name, "engine_type": "unified"}
        self.scheduler_labels = {**self.tokenizer_labels, "tp_rank": 0, "pp_rank": 0, "moe_ep_rank": 0}
        # scheduler side
        self.num_running_reqs = r.add(Gauge(C.metric("num_running_reqs"), "The number of running requests."))
        self.num_queue_reqs = r.add(Gauge(C.metric("num_queue_reqs"), "The number of requests in the waiting queue."))
        # SchedulerMetricsCollector.increment_realtime_tokens: labels + `mode`, bumped on every prefill report and
        # every decode iteration (a zero delta adds no child, so `prefill_cache` never shows without a cache hit).
        self.realtime_tokens = r.add(
            Counter(C.metric("realtime_tokens"),
                    "Total number of tokens processed (updated on each log interval). "
                    "mode: prefill_compute, prefill_cache, decode.")
        )
        self.num_used_tokens = r.add(Gauge(C.metric("num_used_tokens"), "The number of used tokens."))
        self.token_usage = r.add(Gauge(C.metric("token_usage"), "The token usage."))
        self.gen_throughput = r.add(Gauge(C.metric("gen_throughput"), "The generation throughput (token/s)."))
        self.spec_accept_length = r.add(Gauge(
            C.metric("spec_accept_length"),
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
        ))
        self.spec_accept_rate = r.add(
            Gauge(C.metric("spec_accept_rate"), "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).")
        )
        self.spec_block_accept_length = r.add(
            Gauge(C.metric("spec_block_accept_length"),
                  "Mean uncapped full-block accept length per verify step (accept + cap-trimmed drafts; exact only "
                  "in DSpark cap-accept mode).")
        )
        self.spec_num_steps = r.add(Gauge(C.metric("spec_num_steps"), "Currently active speculative_num_steps."))
        self.spec_num_draft_tokens = r.add(Gauge(C.metric("spec_num_draft_tokens"),
                                                 "Currently active speculative_num_draft_tokens."))
        self.is_cuda_graph = r.add(Gauge(C.metric("is_cuda_graph"), "Whether the batch is using CUDA graph."))
        self.cuda_graph_passes = r.add(
            Counter(C.metric("cuda_graph_passes"), "Total number of forward passes categorized by CUDA graph.")
        )
        self.weight_memory = r.add(Gauge(C.metric("weight_memory"), "Weight memory usage in GB."))
        self.startup_time = r.add(Gauge(C.metric("startup_time"), "Startup time by phase in seconds."))
        # tokenizer side
        self.prompt_tokens = r.add(Counter(C.metric("prompt_tokens"), "Number of prefill tokens processed."))
        self.generation_tokens = r.add(Counter(C.metric("generation_tokens"), "Number of generation tokens processed."))
        self.spec_verify_calls = r.add(
            Counter(C.metric("spec_verify_calls"), "Number of speculative decoding verification calls.")
        )
        self.num_requests = r.add(Counter(C.metric("num_requests"), "Number of requests processed."))
        self.ttft = r.add(Histogram(C.metric("ttft"), "Histogram of time to first token in seconds.", TTFT_BUCKETS))
        self.itl = r.add(Histogram(C.metric("itl"), "Histogram of inter-token latency in seconds.", ITL_BUCKETS))
        self.e2e = r.add(Histogram(C.metric("e2e"), "Histogram of End-to-end request latency in seconds", E2E_BUCKETS))

    def stream_labels(self, streaming: bool) -> dict[str, object]:
        return {**self.tokenizer_labels, "is_streaming": "true" if streaming else "false"}
