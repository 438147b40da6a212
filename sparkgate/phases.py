"""Where an SGLang engine is in its startup, read from its log (for progress and the sentinel)."""

from __future__ import annotations

from sparkgate.optimizations.mtp import DRAFT_MODEL_CLASS

READY = "ready"


def current_phase(log_text: str | None) -> str:
    """The latest startup phase the log shows; 'no log yet' when there is none."""
    if not log_text:
        return "no log yet"
    phase = "starting"
    for line in log_text.splitlines():
        if "server_args=" in line:
            phase = "starting (arguments resolved)"
        elif "Load weight begin" in line:
            phase = "loading draft weights" if phase.startswith("target weights loaded") else "loading target weights"
        elif "Load weight end" in line:
            phase = "draft weights loaded" if f"type={DRAFT_MODEL_CLASS}" in line else "target weights loaded"
        elif "CUDA graph begin" in line or "Capture cuda graph begin" in line:
            phase = "capturing CUDA graphs"
        elif "max_total_num_tokens=" in line:
            phase = "warming up"
        elif "The server is fired up and ready to roll!" in line:
            phase = READY
        elif line.startswith("Traceback") or "Exception:" in line or "Error:" in line and "Traceback" in log_text:
            phase = "crashed (see log)"
    return phase
