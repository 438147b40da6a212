"""Write run directories without a server: for the compare, plot and task tests."""

from __future__ import annotations

from pathlib import Path

from sparkgate.bench import runs, stats


def make_run(root: Path, run_id: str, profile: str, *, speed: float, correct: list[bool], accept: float | None = None,
             requested: tuple[str, ...] = (), fingerprint: str = "fp-1", label: str | None = None,
             target: str = "spark", workload: str = "gsm8k", tokens: int = 500) -> Path:
    records = []
    for index, ok in enumerate(correct):
        decode = (tokens - 1) / speed
        records.append({
            "index": index, "item_id": f"q{index}", "completion_tokens": tokens, "ttft_s": 0.2,
            "decode_s": decode, "e2e_s": 0.2 + decode, "text_chunks": tokens,
            "spec_verify_ct": round(tokens / accept) if accept else None, "finish_reason": "stop",
            "expected": "1", "correct": ok, "error": None,
        })
    path = root / run_id
    path.mkdir(parents=True)
    log = runs.RequestLog(path)
    for record in records:
        log.write(record)
    log.close()
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
