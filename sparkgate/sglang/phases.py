"""Where an SGLang engine is in its startup, read from its log (for progress and the sentinel)."""

from __future__ import annotations

from sparkgate.sglang import conformance as C

READY = "ready"
# SGLang's startup lines, in the order a start writes them (formats from the conformance fixture).
_SERVER_ARGS = C.log_pattern("server_args")
_LOAD_BEGIN = C.log_pattern("load_weight_begin")
_LOAD_END = C.log_pattern("load_weight_end")
_DRAFT_LOAD_END = C.log_pattern("load_weight_end", model_class=C.class_name("nextn_draft"))
_CAPTURE = C.log_pattern("capture_begin")
_SIZES = C.log_pattern("scheduler_sizes")
_READY = C.log_format("ready")


# Startup lines are short; a longer one (client text echoed into the log) is read only for the arguments and ready
# lines, whose patterns cost one pass: the others search every position and would grow with its square.
MAX_PHASE_LINE = 8192
TRACEBACK_NOTE = "; a traceback is in the log after it (see log)"


def _looks_like_an_error(line: str) -> bool:
    return line.startswith("Traceback") or "Exception:" in line or line.lstrip().startswith(("Error:", "RuntimeError:"))


def current_phase(log_text: str | None) -> str:
    """The latest startup phase the log shows; 'no log yet' when there is none.

    Only what the log proves: a traceback does not prove a crash (SGLang and its libraries log some on paths
    they recover from, and the start goes on), so it is noted after the phase it followed and dropped when a
    later startup line shows the start went on. Whether the engine died is the container's state, which the
    deploy follower reads (`engine exited (code N)`)."""
    if not log_text:
        return "no log yet"
    phase, traceback_after = "starting", False
    for line in log_text.splitlines():
        progressed = True
        long_line = len(line) > MAX_PHASE_LINE
        if _SERVER_ARGS.search(line):
            phase = "starting (arguments resolved)"
        elif long_line:
            progressed = _READY in line
            phase = READY if progressed else phase
        elif _LOAD_BEGIN.search(line):
            phase = "loading draft weights" if phase.startswith("target weights loaded") else "loading target weights"
        elif _LOAD_END.search(line):
            phase = "draft weights loaded" if _DRAFT_LOAD_END.search(line) else "target weights loaded"
        elif _CAPTURE.search(line):
            phase = "capturing CUDA graphs"
        elif _SIZES.search(line):
            phase = "warming up"
        elif _READY in line:
            phase = READY
        else:
            progressed = False
            if _looks_like_an_error(line):
                traceback_after = True
        if progressed:
            traceback_after = False
    return phase + TRACEBACK_NOTE if traceback_after else phase


# The startup phases a start can reach, in the order SGLang passes them, each with the log format that proves it
# (a refused start names those it never reached: evidence/startup.py). CUDA-graph capture is skipped by
# --disable-cuda-graph, so its absence alone proves nothing about an engine that did get ready.
PHASES = ("arguments", "load_weight_begin", "load_weight_end", "kv_cache", "cuda_graph_capture", "ready")
_PHASE_PATTERNS = (("arguments", _SERVER_ARGS), ("load_weight_begin", _LOAD_BEGIN), ("load_weight_end", _LOAD_END),
                   ("kv_cache", C.log_pattern("memory_pool_end")), ("cuda_graph_capture", _CAPTURE))


class PhaseTracker:
    """The phases a start has reached, fed one log line at a time (the engine entrypoint sees every line)."""

    def __init__(self) -> None:
        self.reached: list[str] = []

    def feed(self, line: str) -> None:
        if "ready" in self.reached:
            return  # nothing more to learn: a serving engine's lines cost nothing here
        if _READY in line:
            self._add("ready")
        elif len(line) > MAX_PHASE_LINE:
            # SGLang's own arguments line is longer than that (about 15 KB in 0.5.23: every server argument).
            if "arguments" not in self.reached and _SERVER_ARGS.search(line):
                self._add("arguments")
        else:
            for name, pattern in _PHASE_PATTERNS:
                if name not in self.reached and pattern.search(line):
                    self._add(name)
                    break

    def _add(self, name: str) -> None:
        if name not in self.reached:
            self.reached.append(name)
            self.reached.sort(key=PHASES.index)


def phases_reached(log_text: str | None) -> list[str]:
    """The startup phases the log proves, in PHASES order."""
    tracker = PhaseTracker()
    for line in (log_text or "").splitlines():
        tracker.feed(line)
    return tracker.reached
