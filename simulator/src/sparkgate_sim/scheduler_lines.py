"""Scheduler log lines that both the startup warmup and live requests write."""

from __future__ import annotations

from sparkgate.sglang import conformance as C
from sparkgate_sim.resolve import MAMBA_SLOTS_PER_RUNNING_REQUEST


def prefill_line(new_tokens: int, queued: int, usage: float) -> str:
    """SGLang's `Prefill batch` scheduler line for one new request (metrics_reporter.py), with the usage parts of a
    hybrid linear-attention model as Ling-3.0-flash is (pool_stats_observer.py get_prefill_usage_msg_parts): the
    MLA tokens' "full token usage", then the KDA state slots' "mamba usage" (none held before the request)."""
    return C.log_line(
        "prefill_batch", iter="", new_seq=1, new_token=new_tokens, cached=0,
        usage=f"full {C.log_line('token_usage_part', usage=usage)}, mamba usage: 0.00, ", running=0, queue=queued,
        pending=0,
    )


def decode_usage(tokens: int, usage: float, mamba_slots: int) -> str:
    """The usage parts of a hybrid model's `Decode batch` line (pool_stats_observer.py get_decode_usage_msg_parts):
    the MLA tokens, then the KDA state slots the running request holds."""
    held = MAMBA_SLOTS_PER_RUNNING_REQUEST
    return (f"{C.log_line('decode_full_token_part', tokens=tokens)}, full {C.log_line('token_usage_part', usage=usage)}"
            f", mamba num: {held}, mamba usage: {held / mamba_slots:.2f}, ")
