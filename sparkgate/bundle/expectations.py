"""expectations.json: what the gate must observe for a profile (read by `sparkgate verify`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkgate.evidence.answer_set import SET_VERSION as ANSWER_SET_VERSION
from sparkgate.floor import recorded_baseline_answers, recorded_baseline_tok_s
from sparkgate.images import load_lock
from sparkgate.optimizations import REGISTRY
from sparkgate.sglang.parser import SGLANG_VERSION

if TYPE_CHECKING:
    from sparkgate.profile.loading import LoadedProfile

EXPECTATIONS_VERSION = 1


def build(loaded: LoadedProfile, target: str, time_scale: float) -> dict:
    profile = loaded.profile
    image = load_lock().engine_images[profile.image]
    return {
        "expectations_version": EXPECTATIONS_VERSION,
        "generated_from": loaded.source,
        "profile": profile.name,
        "target": target,
        # Wall-clock durations measured against the simulator are scaled by this (1.0 on a Spark).
        "time_scale": time_scale,
        "engine": {
            # The simulator answers like stock SGLang; a real image reports its own build's version.
            "sglang_version": SGLANG_VERSION if target == "sim" else image.sglang_version,
            "image": profile.image,
            "image_capabilities": image.capabilities.model_dump(mode="json"),
            "model_path": profile.model.path,
            "served_model_name": profile.model.served_name,
            "architecture": profile.model.architecture,
            "port": profile.sglang.port,
        },
        "batch_size": profile.batch_size,
        "cuda_graph": {"decode_required": True},
        "requested": profile.requested(),
        "optimizations": {key: module.expectations(profile) for key, module in REGISTRY.items()},
        "speed": {
            # A baseline measured on this host (`invoke bench --profile baseline --record-floor`) wins.
            "baseline_decode_tok_s": recorded_baseline_tok_s(target) or profile.gate.baseline_decode_tok_s,
            "min_decode_tok_s": profile.gate.min_decode_tok_s,
            # Only stacked profiles must beat the baseline; the baseline itself is the reference.
            "must_beat_baseline": bool(profile.requested()),
        },
        "calibration": profile.gate.calibration.model_dump(mode="json"),
        # The host's memory after admission (evidence/host_memory.py; docs/checks/host.md).
        "host": {"min_mem_available_gib": profile.gate.watch.min_mem_available_gib,
                 "max_swap_growth_mib": profile.gate.watch.max_swap_growth_mib},
        # Requests running with no token made (evidence/stall.py; docs/checks/engine.md).
        "stall": {"after_s": profile.gate.watch.stall_after_s},
        "answers": {
            "set_version": ANSWER_SET_VERSION,
            # A stacked profile must answer like the baseline engine measured on this host, when one was.
            "baseline": recorded_baseline_answers(target) if profile.requested() else None,
        },
    }
