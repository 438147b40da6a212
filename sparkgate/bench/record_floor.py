"""Recording this host's baseline floor from a bench run (`invoke bench --profile baseline --record-floor`).

The floor itself, and how the gate reads it, is product code: sparkgate.floor. This module only decides
whether a run is fit to be a floor and what provenance to keep with it.
"""

from __future__ import annotations

from pathlib import Path

from sparkgate.floor import FloorError, store

MIN_REQUESTS = 8


def record(summary: dict, run_dir: Path, margin: float = 0.0) -> tuple[Path, dict]:
    """Store a baseline run's decode speed as the floor of its target. Refuses what would be a bad floor."""
    if not 0.0 <= margin < 0.5:
        raise FloorError(f"floor margin {margin} must be in [0, 0.5)")
    requested = summary.get("requested_optimizations")
    if requested:
        raise FloorError(f"--record-floor needs the baseline profile (no optimizations); {summary.get('profile')} "
                         f"requests {', '.join(requested)}")
    numbers = summary.get("results") or {}
    if not summary.get("complete"):
        raise FloorError("the run did not complete; a floor comes only from a complete run")
    if numbers.get("errors"):
        raise FloorError(f"the run had {numbers['errors']} failed request(s); a floor comes only from a clean run")
    if (numbers.get("completed") or 0) < MIN_REQUESTS:
        raise FloorError(f"only {numbers.get('completed')} requests: record a floor from at least {MIN_REQUESTS}")
    speed = numbers.get("decode_tok_s")
    if not speed:
        raise FloorError("the run measured no decode speed")
    if numbers.get("timing") != "engine":
        # The gate judges engine time: a floor from a client's stopwatch (a chat run) moves with the host's load.
        raise FloorError(f"the run's speeds are the client's stopwatch (timing: {numbers.get('timing')}); record a "
                         "floor from a run on the engine's own timing: invoke bench --api generate --record-floor")
    target = summary.get("environment", {}).get("target") or "spark"
    entry = {
        "floor_tok_s": round(speed * (1.0 - margin), 3),
        "measured_decode_tok_s": round(speed, 3),
        "margin": margin,
        "profile": summary.get("profile"),
        "run": str(run_dir),
        "workload": (summary.get("workload") or {}).get("name"),
        "requests": numbers.get("completed"),
        "images": summary.get("environment", {}).get("images"),
        "engine": summary.get("environment", {}).get("engine"),
        "host": (summary.get("environment", {}).get("host") or {}).get("hostname"),
        "recorded_at": summary.get("finished_at"),
    }
    gate = summary.get("environment", {}).get("gate")
    answers = (gate or {}).get("answers")
    if gate is not None and not (isinstance(answers, dict) and answers.get("texts")):
        # Through a sparkgate gateway the admitting verdict's answers are the baseline stacked profiles are held to:
        # a floor without them would silently switch answers.baseline_agreement off (and overwrite a good record).
        raise FloorError("the baseline's gateway verdict holds no right answers to record (answers stage missing or "
                         "every answer wrong): stacked profiles could not be compared with this baseline; check "
                         "`invoke status --profile baseline` and record again once its verdict answers right")
    if answers and answers.get("texts"):
        # The baseline engine's answers, from the verdict that admitted it: stacked profiles must agree, by the
        # log-probabilities of each right reply (answers.baseline_agreement). A record without them could never
        # vouch for anything, and re-recording would never fix it: refused here, where the cause is known.
        logprobs = answers.get("logprobs") if isinstance(answers.get("logprobs"), dict) else {}
        missing = sorted(qid for qid in answers["texts"] if not _well_formed_tokens(logprobs.get(qid)))
        if missing:
            raise FloorError(f"the baseline verdict's right replies carry no log-probabilities ({', '.join(missing[:3])}"
                             f"{', ...' if len(missing) > 3 else ''}): the engine did not honour `logprobs` on "
                             "/v1/chat/completions; a stacked profile could not be compared with it. Check the "
                             "engine image (SGLang returns them with speculative decoding too) and record again")
        entry["answers"] = {**answers, "recorded_at": entry["recorded_at"]}
    return store(target, entry), entry


def _well_formed_tokens(tokens) -> bool:
    """A recorded reply's tokens as baseline agreement reads them (sparkgate/evidence/answers.py), none missing."""
    from sparkgate.evidence.answers import well_formed

    return isinstance(tokens, list) and bool(tokens) and well_formed(tokens) is not None
