"""Is a run labelled with the profile that was measured? A project's gateway keeps its URL when a deploy of
another profile replaces the stack (the documented NEXTN <-> DSpark switch), so `build/<profile>/deploy-record.json`
can point at a gateway that now serves a different profile. The sentinel's verdict names the profile it
verified; bench refuses to measure under another name, and compare refuses to pair runs whose own records
show they measured the same kind of engine under different claims.
"""

from __future__ import annotations

# Optimizations that decode speculatively: what a profile claims about its engine's speculative algorithm.
SPECULATIVE = ("mtp", "dspark")


def gate_profile_mismatch(gate: dict | None, profile: str, url: str) -> str | None:
    """Why an open gate must not be benched as `profile` (one line with the fix), or None when it may be.
    No gate (a bare engine at --url) has no verified profile to check."""
    if gate is None:
        return None
    verified = gate.get("profile")
    if verified == profile:
        return None
    return (f"gate.profile: the gate at {url} verified profile {verified!r}, not {profile!r} (a later deploy in "
            f"this project replaced the {profile} stack, or the URL is another stack's); a run labelled {profile} "
            f"would measure {verified}: bench it as itself (invoke bench --profile {verified}) or redeploy "
            f"(invoke deploy --profile {profile})")


def recorded_mismatch(summary: dict) -> str | None:
    """A stored run whose recorded gate verified another profile than the run is labelled with (runs made
    before bench refused that)."""
    gate = (summary.get("environment") or {}).get("gate")
    verified = gate.get("profile") if isinstance(gate, dict) else None
    if verified is None or verified == summary.get("profile"):
        return None
    return f"its gate had verified profile {verified!r}, not {summary.get('profile')!r}"


def speculative_claim(summary: dict) -> list[str]:
    return [name for name in SPECULATIVE if name in (summary.get("requested_optimizations") or [])]


def recorded_algorithm(summary: dict) -> tuple[bool, str | None]:
    """(recorded?, the engine's speculative_algorithm as the run recorded it)."""
    engine = (summary.get("environment") or {}).get("engine")
    if not isinstance(engine, dict) or "speculative_algorithm" not in engine:
        return False, None
    return True, engine["speculative_algorithm"]


def same_engine_different_claims(a: dict, b: dict) -> str | None:
    """Two runs whose profiles claim different speculative decoding but whose engines recorded the same
    speculative algorithm: one of them measured the other's engine. None when they agree or it is not recorded."""
    claim_a, claim_b = speculative_claim(a), speculative_claim(b)
    if claim_a == claim_b:
        return None
    (has_a, algorithm_a), (has_b, algorithm_b) = recorded_algorithm(a), recorded_algorithm(b)
    if not (has_a and has_b) or algorithm_a != algorithm_b:
        return None
    claims = lambda claim: "+".join(claim) or "no speculative decoding"  # noqa: E731
    return (f"both engines recorded speculative_algorithm {algorithm_a!r}, but {a.get('profile')} requests "
            f"{claims(claim_a)} and {b.get('profile')} requests {claims(claim_b)}: one run measured the other's "
            "engine")
