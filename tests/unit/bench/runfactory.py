"""Write run directories without a server: for the compare, plot and task tests."""

from __future__ import annotations

from pathlib import Path

from sparkgate.bench import runs, stats


def write_requests(root: Path, run_id: str, records: list[dict]) -> Path:
    """A run directory holding `records` as its request log, as the harness writes it."""
    path = root / run_id
    path.mkdir(parents=True)
    log = runs.RequestLog(path)
    for record in records:
        log.write(record)
    log.close()
    return path

def make_run(root: Path, run_id: str, profile: str, *, speed: float, correct: list[bool], accept: float | None = None,
             requested: tuple[str, ...] = (), fingerprint: str = "fp-1", label: str | None = None,
             target: str = "spark", workload: str = "gsm8k", tokens: int = 500, timing: str = "engine") -> Path:
    records = []
    for index, ok in enumerate(correct):
        decode = (tokens - 1) / speed
        records.append({
            "index": index, "item_id": f"q{index}", "completion_tokens": tokens, "ttft_s": 0.2,
            "decode_s": decode, "e2e_s": 0.2 + decode, "text_chunks": tokens,
            "spec_verify_ct": round(tokens / accept) if accept else None, "finish_reason": "stop",
            "expected": "1", "correct": ok, "error": None, "timing": timing,
        })
    path = write_requests(root, run_id, records)
    results = stats.summarize(records)
    runs.write_json_atomic(path / runs.SUMMARY, {
        "summary_version": 1, "run_id": run_id, "profile": profile, "label": label,
        "requested_optimizations": list(requested), "complete": True, "stopped_early": None,
        "workload": {"name": workload, "description": f"{len(correct)} questions", "fingerprint": fingerprint,
                     "items": len(correct), "scored": True},
        "protocol": {"api": "chat", "sampling": {"name": "sampled"}, "max_tokens": 32768},
        "environment": {"target": target, "sim_faults": []},
        "results": results,
        "roofline": {"bound_tok_s": 100.0, "estimate_tok_s": 80.0, "fraction_of_bound": speed / 100.0,
                     "fraction_of_estimate": speed / 80.0},
    })
    return path


def make_speed_run(root: Path, run_id: str, label: str, workload: str, rates: list[float], *,
                   accept: float | None = None, fingerprint: str | None = None, sampling: str = "greedy",
                   max_tokens: int = 512, target: str = "sim", complete: bool = True, tokens: int | list[int] = 512,
                   age_s: float = 0.0, failed: tuple[int, ...] = (), requested: tuple[str, ...] = (),
                   engine: dict | None = None, gate_profile: str | None = None,
                   prompt_tokens: int | None = None) -> Path:
    """A finished code/prose-style run whose item i decoded at rates[i] tok/s over tokens (or tokens[i]);
    `age_s` backdates it (runs are ordered by when their summary was written). `engine` is the recorded engine
    configuration and `gate_profile` the profile the recorded gate had verified (neither recorded by default)."""
    import os
    import time

    records = []
    for index, rate in enumerate(rates):
        count = tokens[index] if isinstance(tokens, list) else tokens
        decode = (count - 1) / rate
        error = "HTTP 503" if index in failed else None
        records.append({
            "index": index, "item_id": f"{workload}-{index:03d}", "completion_tokens": 0 if error else count,
            "ttft_s": 0.2, "decode_s": None if error else decode, "e2e_s": None if error else 0.2 + decode,
            "text_chunks": count, "spec_verify_ct": round(count / accept) if accept and not error else None,
            "accept_length": accept if not error else None, "finish_reason": None if error else "length",
            "expected": None, "correct": None, "error": error,
            **({"prompt_tokens": prompt_tokens} if prompt_tokens is not None else {}),
        })
    path = write_requests(root, run_id, records)
    runs.write_json_atomic(path / runs.SUMMARY, {
        "summary_version": 1, "run_id": run_id, "profile": label, "label": None,
        "requested_optimizations": list(requested),
        "complete": complete, "stopped_early": None if complete else "stopped after 3 consecutive failed requests",
        "workload": {"name": workload, "description": f"{len(rates)} {workload} prompts",
                     "fingerprint": fingerprint or f"fp-{workload}-{len(rates)}", "items": len(rates),
                     "scored": False, "source": {"generator": workload, "count": len(rates)}},
        "protocol": {"api": "chat", "sampling": {"name": sampling}, "max_tokens": max_tokens},
        "environment": {"target": target, "sim_faults": [],
                        **({"engine": engine} if engine is not None else {}),
                        **({"gate": {"state": "open", "profile": gate_profile}} if gate_profile else {})},
        "results": stats.summarize(records),
        "roofline": {},
    })
    stamp = time.time() - age_s
    os.utime(path / runs.SUMMARY, (stamp, stamp))
    return path
