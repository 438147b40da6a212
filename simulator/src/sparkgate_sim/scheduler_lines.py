"""Scheduler log lines that both the startup warmup and live requests write."""

from __future__ import annotations

from sparkgate.sglang import conformance as C


def prefill_line(new_tokens: int, queued: int, usage: float) -> str:
    """SGLang's `Prefill batch` scheduler line for one new request (metrics_reporter.py)."""
    return C.log_line(
        "prefill_batch", iter="", new_seq=1, new_token=new_tokens, cached=0,
        usage=C.log_line("token_usage_part", usage=usage) + ", ", running=0, queue=queued, pending=0,
    )
