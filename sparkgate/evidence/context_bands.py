"""Speculation that pays, by context length: the accept length client traffic gets in each context band, against
the break-even accept length (a verify step's cost in plain decode steps, evidence/calibration.py break_even).

Read from SGLang's own decode log line (scheduler_components/metrics_reporter.py `report_decode_stats`), engine
counters only (no wall clock is read):

    Decode batch, #running-req: 1, #token: 5123, token usage: 0.02, accept len: 1.71, accept rate: 0.24, ...

The evidence, the bands, the break-even and what is reported: docs/checks/mtp.md, "Speculation by context length".
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

from sparkgate.bench.provenance import SPECULATIVE
from sparkgate.evidence import logs
from sparkgate.evidence.logs import EngineLog
from sparkgate.evidence.recheck import RecheckContext
from sparkgate.evidence.results import CheckResult, checked
from sparkgate.evidence.stages import Stage
from sparkgate.sglang import conformance as C

DOCS = "mtp.md"
CHECK = "sentinel.accept_by_context"
CHECKS = {CHECK: Stage.RECHECK_ONLY}
# The SGLang facts each check reads: "section.key" (conformance fixture) or "probe.<field>" (the probe report).
# evidence/catalog.py validates them; tests/unit/test_declared_reads.py proves them on the recorded captures.
READS = {
    'sentinel.accept_by_context': (
        'log_formats.decode_accept', 'log_formats.decode_batch', 'log_formats.decode_full_token_part',
        'log_formats.decode_token_part',
    ),
}

# (name, lowest context in tokens); a band runs up to the next one's lowest.
BANDS: tuple[tuple[str, int], ...] = (("0-1k", 0), ("1k-4k", 1024), ("4k-16k", 4096), ("16k-64k", 16384),
                                      ("64k+", 65536))
MIN_LINES = 3
MAX_READ_BYTES = 8 << 20  # read per period at most; the rest waits for the next period (bounded work)
MAX_PARTIAL_BYTES = 1 << 20  # an unterminated line longer than this is dropped
MAX_ACCEPT_LENGTH = 64.0  # SGLang's verify window is far smaller; a larger figure is not a reading

_DECODE = C.log_fields("decode_batch")
_ACCEPT = C.log_fields("decode_accept")
_TOKENS = (C.log_fields("decode_token_part"), C.log_fields("decode_full_token_part"))
_INT = re.compile(r"[0-9]{1,12}")


def _lead(text: str) -> str:
    """A log format's text up to its first hole (how the check names it)."""
    return text.split("{", 1)[0].strip(" :,")


SOURCE = (f"engine log since admission: SGLang's '{_lead(C.log_format('decode_batch'))}' lines "
          f"('{_lead(C.log_format('decode_token_part'))}' or '{_lead(C.log_format('decode_full_token_part'))}' over "
          f"'#running-req', '{_lead(C.log_format('decode_accept'))}')")


def band_of(context_tokens: float) -> str:
    return next((band for band, lowest in reversed(BANDS) if context_tokens >= lowest), BANDS[0][0])


@dataclass(frozen=True)
class DecodeReading:
    context_tokens: float  # mean per running request
    accept_length: float


def reading(message: str) -> DecodeReading | None:
    """One decode log message's context and accept length, or None (not a decode line, no speculation, or a value
    that is no reading: the line is untrusted text)."""
    decode = _DECODE.match(message)
    if decode is None:
        return None
    running, usage = decode.group("running"), decode.group("usage")
    tokens = next((m.group("tokens") for m in (p.search(usage) for p in _TOKENS) if m), None)
    tokens = None if tokens is None else tokens.split(",", 1)[0]  # "#full token: N" ends the format: cut at its ", "
    accept = _ACCEPT.search(usage)
    if tokens is None or accept is None or not _INT.fullmatch(running) or not _INT.fullmatch(tokens):
        return None
    try:
        accept_len = float(accept.group("accept_len"))
    except ValueError:
        return None
    if int(running) < 1 or not math.isfinite(accept_len) or not 1.0 <= accept_len <= MAX_ACCEPT_LENGTH:
        return None  # 0.00: no verify step in the interval (SGLang prints it so)
    return DecodeReading(int(tokens) / int(running), accept_len)


@dataclass
class Tally:
    lines: int = 0
    accept_sum: float = 0.0

    @property
    def accept_length(self) -> float | None:
        return self.accept_sum / self.lines if self.lines else None


@dataclass
class Bands:
    tallies: dict[str, Tally] = field(default_factory=lambda: {name: Tally() for name, _ in BANDS})

    def add_text(self, text: str) -> int:
        """Tally every decode line of a log text (parsed by logs.EngineLog); returns how many counted."""
        counted = 0
        # Only lines that carry an accept length can count: the rest skip the record parse (a cheap substring test;
        # the kept lines are still read as records from their start, split as EngineLog splits them, on "\n").
        marker = _lead(C.log_format("decode_accept"))
        kept = "\n".join(line for line in text.split("\n") if marker in line)
        for message in EngineLog("decode lines", kept).messages():
            found = reading(message)
            if found is not None:
                tally = self.tallies[band_of(found.context_tokens)]
                tally.lines += 1
                tally.accept_sum += found.accept_length
                counted += 1
        return counted

    def judged(self, break_even: float) -> dict[str, dict]:
        """Per band: lines, mean accept length and whether speculation pays (None: fewer than MIN_LINES lines)."""
        out = {}
        for name, tally in self.tallies.items():
            accept = tally.accept_length
            pays = None if tally.lines < MIN_LINES or accept is None else accept > break_even
            out[name] = {"lines": tally.lines, "accept_length": None if accept is None else round(accept, 3),
                         "pays": pays}
        return out


class LogTail:
    """The new bytes of a log file since the last read, as whole lines (an unterminated tail waits)."""

    def __init__(self, path: str, offset: int | None = None):
        self.path = path
        self.offset = self._size() if offset is None else offset
        self.partial = b""

    def _size(self) -> int:
        try:
            return os.stat(self.path).st_size
        except OSError:
            return 0

    def read(self, limit: int = MAX_READ_BYTES) -> str:
        try:
            with logs.open_regular(self.path) as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < self.offset:  # truncated or replaced: read the new file from its start
                    self.offset, self.partial = 0, b""
                handle.seek(self.offset)
                chunk = handle.read(limit)
        except OSError:
            return ""
        self.offset += len(chunk)
        data = self.partial + chunk
        cut = data.rfind(b"\n") + 1
        self.partial = data[cut:] if len(data) - cut <= MAX_PARTIAL_BYTES else b""
        return data[:cut].decode("utf-8", errors="replace")


def speculative(expectations: dict) -> bool:
    return any(key in (expectations.get("requested") or []) for key in SPECULATIVE)


def start_rechecks(ctx: RecheckContext, log_file: str, break_even: tuple[float, str],
                   verify_step_s: float | None = None) -> None:
    """At admission: lines from now on are client traffic. `verify_step_s`: the admitting calibration's verify step
    on the engine's clock, shown beside the break-even (a plain step of the same engine is not measured there)."""
    measured = verify_step_s if isinstance(verify_step_s, float) and math.isfinite(verify_step_s) else None
    ctx.state.update(tail=LogTail(log_file), bands=Bands(), break_even=break_even, skipped_periods=0,
                     own_seen=ctx.own_traffic.seq if ctx.own_traffic else 0, verify_step_s=measured)


def rechecks(ctx: RecheckContext) -> list[CheckResult]:
    state = ctx.state
    tail: LogTail | None = state.get("tail")
    if tail is None:
        return []
    text = tail.read()
    own = ctx.own_traffic.seq if ctx.own_traffic else 0
    if own != state.get("own_seen"):
        state["own_seen"] = own  # the sentinel's own probe decoded in this period: its lines are not client traffic
        state["skipped_periods"] += 1
    else:
        state["bands"].add_text(text)
    return [result(state["bands"], *state["break_even"], skipped_periods=state["skipped_periods"],
                   verify_step_s=state.get("verify_step_s"))]


def result(bands: Bands, break_even: float, source: str, skipped_periods: int = 0,
           verify_step_s: float | None = None) -> CheckResult:
    judged = bands.judged(break_even)
    not_paying = [name for name, band in judged.items() if band["pays"] is False]
    observed = {"bands": judged, "break_even_accept_length": break_even, "break_even_source": source,
                "not_paying": not_paying, "periods_left_out_for_own_probes": skipped_periods,
                "calibration_verify_step_ms": None if verify_step_s is None else round(verify_step_s * 1000, 3)}
    hint = (f"speculation does not pay in context band(s) {', '.join(not_paying)}: the accept length client traffic "
            f"gets there is at or below {break_even} (a verify step costs that many plain decode steps), so requests "
            "of that length decode slower than without speculation. Informational: the gate stays open. For "
            "such workloads, compare a profile without MTP/DSpark (`invoke compare`)") if not_paying else (
            "informational: acceptance per context band of client traffic since admission, against the break-even")
    return checked(CHECK, True, observed,
                   f"informational: accept length > {break_even} per band (judged with >= {MIN_LINES} decode lines)",
                   SOURCE, hint)
