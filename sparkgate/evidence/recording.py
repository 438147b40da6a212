"""Every answer a verification got from the engine, kept so the verdict can be judged again without an engine.

    client = RecordingClient(url)                 # an EngineClient that keeps each exchange
    verdict = verify(url, expectations, log, client=client)
    recorded = Recording.of(client, expectations, log, verdict)  # what the checks read, and what they said
    again = replay(recorded)                       # the same checks, current code, the recorded answers

An exchange is one call the gatherer made (the HTTP status of a GET, a GET or POST's text, a streamed
/generate's chunks with their arrival offsets) or the error it met. Replay answers the same calls in the same
order; a call the recording does not hold is a ReplayMismatch (the code now asks for evidence that was never
recorded: a replay cannot judge it and says so). Client stopwatch readings replay as recorded offsets.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sparkgate.evidence.client import EngineClient, EngineUnreachable
from sparkgate.evidence.logs import EngineLog
from sparkgate.runtime.admin_key import REDACTED, SECRET_FIELDS, redact, redact_text

RECORDING_VERSION = 1
MAX_CALL_SECONDS = 7 * 24 * 3600.0
# Bounds on a recording read back (a verification makes a few dozen calls of at most a few hundred chunks; a
# verdict has a few dozen checks): enough room, and bounded work for a hostile file.
MAX_EXCHANGES, MAX_CHUNKS, MAX_CHECKS = 2000, 20000, 1000
Call = Literal["status", "GET", "POST", "stream", "admin_key_probe", "host_memory"]


class _Reading(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class AdminProbeReading(_Reading):  # evidence/admin_probe.AdminKeyProbe
    key_file: str
    without_key: int | None = None
    with_key: int | None = None
    error: str | None = None


class MemInfoReading(_Reading):  # evidence/host_memory.MemInfo
    total_kib: int
    available_kib: int
    swap_total_kib: int
    swap_free_kib: int


class HolderReading(_Reading):  # one of evidence/host_memory.largest_processes
    pid: int
    name: str
    rss_gib: float = Field(ge=0, allow_inf_nan=False)


class HostMemoryReading(_Reading):  # evidence/host_memory.HostMemory
    meminfo: MemInfoReading | None
    error: str | None
    holders: list[HolderReading] = Field(max_length=16)


READINGS: dict[str, type[_Reading]] = {"admin_key_probe": AdminProbeReading, "host_memory": HostMemoryReading}


class Exchange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    call: Call
    path: str
    body: dict[str, Any] | None = None
    status: int | None = None  # call "status": the HTTP status (0: nothing answered)
    text: str | None = None  # GET / POST: the answer's text
    chunks: list[tuple[float, dict[str, Any]]] | None = None  # stream: (seconds after sending, chunk)
    error: str | None = None  # EngineUnreachable's message
    timed_out: bool = False
    reading: dict[str, Any] | None = None  # admin_key_probe / host_memory: what was read (path: the file read)
    # How long the call took on the client's clock: a replay's clock advances by it, so budgets and wall caps
    # decide as they did (a hung engine's capture replays its time-outs). None in recordings made before.
    seconds: float | None = Field(None, ge=0, le=MAX_CALL_SECONDS, allow_inf_nan=False)

    @model_validator(mode="after")
    def _chunks_arrive_in_order(self) -> Exchange:
        offsets = [at for at, _ in self.chunks or []]
        if len(offsets) > MAX_CHUNKS:
            raise ValueError(f"{len(offsets)} chunks in one stream, over {MAX_CHUNKS}")
        if not all(math.isfinite(at) and 0 <= at <= MAX_CALL_SECONDS for at in offsets) or any(
                b < a for a, b in zip(offsets, offsets[1:], strict=False)):
            raise ValueError("chunk arrival offsets must be finite seconds from 0, in arrival order")
        if self.seconds is not None and offsets and offsets[-1] > self.seconds + 1e-3:
            raise ValueError("a chunk arrived after its stream ended (offset beyond the call's seconds)")
        return self

    @model_validator(mode="after")
    def _reading_fits_its_call(self) -> Exchange:
        shape = READINGS.get(self.call)
        if shape is not None and self.reading is not None:
            shape.model_validate(self.reading)  # a malformed reading is a bad recording, not a replay traceback
        return self


# A secret server arg as SGLang prints it in a log line (`server_args=ServerArgs(api_key='…', …)` or a dict repr):
# the value goes, the field stays. JSON answers are redacted field by field (admin_key.redact).
_SECRET_ASSIGNMENT = re.compile(
    r"""(\b(?:{})(?:['"]?\s*[:=]\s*))(['"])(?!{}\2)(.*?)\2""".format("|".join(SECRET_FIELDS), re.escape(REDACTED)))
MIN_KEY_CHARS = 8


def without_credentials(url: str) -> str:
    """`url` without its user:password@ part. A password may hold '/' (then no parser finds the authority's end),
    so everything up to the last '@' goes: an engine URL has none in its path, and too much gone beats a secret."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    return f"{scheme}://{rest.rsplit('@', 1)[1]}"


def scrub(text: str | None, keys: Iterable[str]) -> str | None:
    """`text` without secrets: a JSON document redacted field by field, any text by known key and printed form."""
    if text is None:
        return None
    keys = tuple(keys)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, dict | list):
        return json.dumps(redact(value, keys))
    text = redact_text(text, keys)
    return _SECRET_ASSIGNMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}{m.group(2)}", text)


def _scrubbed(exchange: Exchange, keys: tuple[str, ...]) -> Exchange:
    return exchange.model_copy(update={  # redact(None) is None
        "body": redact(exchange.body, keys), "text": scrub(exchange.text, keys), "error": scrub(exchange.error, keys),
        "chunks": None if exchange.chunks is None else [(at, redact(chunk, keys)) for at, chunk in exchange.chunks],
        "reading": redact(exchange.reading, keys)})


class Recording(BaseModel):
    """What one verification read, and the verdict it gave then."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recording_version: Literal[1] = RECORDING_VERSION
    engine_url: str
    expectations: dict[str, Any]
    log_source: str
    log_text: str | None
    log_error: str | None = None
    calibrate: bool = True
    # How the verification asked its repeated question, cold and warm (answers.run): "retry" - with the thinking
    # retry's room from the first request, as now; "own" - at the question's own room, asked again with more if
    # cut while thinking (the GPU lane's recordings made before the room grew replay as they were asked).
    repeat_room: Literal["retry", "own"] = "retry"
    exchanges: list[Exchange] = Field(default_factory=list, max_length=MAX_EXCHANGES)
    verdict: dict[str, Any]

    @classmethod
    def of(cls, client: RecordingClient, expectations: dict, log: EngineLog, verdict, *,
           calibrate: bool = True, secrets: Iterable[str] = ()) -> Recording:
        """The recording, with every secret it could carry replaced by a marker: the client's API key, `secrets`
        (the admin key), secret server args in JSON answers and in the log, credentials in the URL."""
        # A key shorter than MIN_KEY_CHARS is not searched for in free text (it would rewrite ordinary words and the
        # gate's own requests); secret fields and flags are redacted whatever their length.
        keys = tuple(k for k in (client.api_key, *secrets) if k and len(k) >= MIN_KEY_CHARS)
        verdict_dict = redact(verdict.as_dict(), keys)
        verdict_dict["engine_url"] = without_credentials(str(verdict_dict.get("engine_url", "")))
        return cls(engine_url=without_credentials(client.base_url), expectations=redact(expectations, keys),
                   log_source=log.source, log_text=scrub(log.text, keys), log_error=scrub(log.error, keys),
                   calibrate=calibrate, exchanges=[_scrubbed(e, keys) for e in client.exchanges], verdict=verdict_dict)

    @model_validator(mode="after")
    def _verdict_has_its_shape(self) -> Recording:
        checks = self.verdict.get("checks")
        if not isinstance(self.verdict.get("passed"), bool) or not isinstance(checks, list) or not all(
                isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("passed"), bool)
                for c in checks):
            raise ValueError("the recorded verdict is not one: it needs passed (true/false) and checks, each with "
                             "a name and passed")
        if len(checks) > MAX_CHECKS:
            raise ValueError(f"the recorded verdict has {len(checks)} checks, over {MAX_CHECKS}")
        scale = self.expectations.get("time_scale", 1.0)
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int | float)
                                  or not math.isfinite(scale) or not 0 < scale <= 1e6):
            raise ValueError(f"expectations time_scale {scale!r} is not a finite number above 0")
        return self

    def log(self) -> EngineLog:
        return EngineLog(self.log_source, self.log_text, self.log_error)


@dataclass(frozen=True)
class RecordingClient(EngineClient):
    """An EngineClient that keeps every exchange, errors included, in the order they happened, with its duration."""

    exchanges: list[Exchange] = field(default_factory=list)

    def _keep(self, started: float, **exchange: Any) -> None:
        self.exchanges.append(Exchange(**exchange, seconds=round(max(0.0, self.clock() - started), 6)))

    def status(self, path: str) -> int:
        started = self.clock()
        code = super().status(path)
        self._keep(started, call="status", path=path, status=code)
        return code

    def _fetch(self, method: str, path: str, body: dict | None = None, timeout: float | None = None) -> str:
        call: Call = "POST" if method == "POST" else "GET"
        started = self.clock()
        try:
            text = super()._fetch(method, path, body, timeout)
        except EngineUnreachable as exc:
            self._keep(started, call=call, path=path, body=body, error=str(exc), timed_out=exc.timed_out)
            raise
        self._keep(started, call=call, path=path, body=body, text=text)
        return text

    def beside(self, call, path, read, load):
        started = self.clock()
        result = read()
        self._keep(started, call=call, path=path, reading=result.as_dict())
        return result

    def stream_generate(self, body: dict, timeout: float) -> Iterator[tuple[float, dict]]:
        sent = self.clock()
        chunks: list[tuple[float, dict[str, Any]]] = []
        try:
            for arrived, chunk in super().stream_generate(body, timeout):
                offset = round(arrived, 6)
                chunks.append((offset, chunk))
                # The offset as the recording keeps it: the live verdict reads the same float a replay will (the raw
                # clock's sub-microsecond part could tip a rounded figure across its last digit).
                yield offset, chunk
        except EngineUnreachable as exc:
            self._keep(sent, call="stream", path="/generate", body=body, chunks=chunks, error=str(exc),
                       timed_out=exc.timed_out)
            raise
        self._keep(sent, call="stream", path="/generate", body=body, chunks=chunks)


class ReplayMismatch(Exception):
    """The code under replay made a call the recording does not hold at that point."""


@dataclass(frozen=True)
class ReplayClient(EngineClient):
    """Answers each call with the next recorded exchange, which must be the same call (kind, path, body)."""

    exchanges: tuple[Exchange, ...] = ()
    cursor: list[int] = field(default_factory=lambda: [0])
    now: list[float] = field(default_factory=lambda: [0.0])  # the replay's clock: the recorded durations, summed

    def clock(self) -> float:
        return self.now[0]

    def _advance(self, recorded: Exchange) -> None:
        self.now[0] += recorded.seconds or 0.0

    def _next(self, call: Call, path: str, body: dict | None) -> Exchange:
        index = self.cursor[0]
        if index >= len(self.exchanges):
            raise ReplayMismatch(f"call {index + 1} ({call} {path}) is beyond the {len(self.exchanges)} recorded")
        recorded = self.exchanges[index]
        if (recorded.call, recorded.path, recorded.body) != (call, path, body):
            raise ReplayMismatch(f"call {index + 1}: the code asks {call} {path}, the recording holds "
                                 f"{recorded.call} {recorded.path}" + (" (another body)" if recorded.path == path else "")
                                 + ": the code reads other evidence than it did, or the recorded run stopped on its "
                                 "wall clock (a budget or cap) where this replay did not")
        self.cursor[0] = index + 1
        if recorded.call != "stream":  # a stream's clock moves with its chunks (stream_generate)
            self._advance(recorded)
        return recorded

    @property
    def unused(self) -> int:
        return len(self.exchanges) - self.cursor[0]

    def status(self, path: str) -> int:
        recorded = self._next("status", path, None)
        return recorded.status if recorded.status is not None else 0

    def _fetch(self, method: str, path: str, body: dict | None = None, timeout: float | None = None) -> str:
        recorded = self._next("POST" if method == "POST" else "GET", path, body)
        if recorded.error is not None or recorded.text is None:
            raise EngineUnreachable(recorded.error or f"{method} {path}: no answer recorded", recorded.timed_out)
        return recorded.text

    def beside(self, call, path, read, load):
        return load(self._reading(call, path))

    def _reading(self, call: Call, path: str) -> dict[str, Any]:
        recorded = self._next(call, path, None)
        if recorded.reading is None:
            raise ReplayMismatch(f"{call} {path}: the recording holds no reading")
        return READINGS[call].model_validate(recorded.reading).model_dump()  # the validated, typed values

    def stream_generate(self, body: dict, timeout: float) -> Iterator[tuple[float, dict]]:
        recorded = self._next("stream", "/generate", body)
        sent = self.now[0]
        for offset, chunk in recorded.chunks or []:
            self.now[0] = max(self.now[0], sent + offset)
            yield offset, chunk
        self.now[0] = max(self.now[0], sent + (recorded.seconds or 0.0))
        if recorded.error is not None:
            raise EngineUnreachable(recorded.error, recorded.timed_out)


def replay(recording: Recording):
    """The verdict the current code gives on the recorded answers (sparkgate.evidence.verify.verify, no engine)."""
    from sparkgate.evidence.verify import verify  # verify imports the gatherer, which this module must not

    client = ReplayClient(recording.engine_url, exchanges=tuple(recording.exchanges))
    # The files the recorded verification read beside the engine (the sentinel's admin key, the host's meminfo):
    # named so the verification asks for them again, answered from the recording, never opened here.
    read = {e.call: e.path for e in recording.exchanges if e.call in READINGS}
    verdict = verify(recording.engine_url, recording.expectations, recording.log(), client=client,
                     calibrate=recording.calibrate, admin_key_file=read.get("admin_key_probe"),
                     meminfo_path=read.get("host_memory"), repeat_room_first=recording.repeat_room == "retry")
    if client.unused:
        raise ReplayMismatch(f"{client.unused} recorded call(s) were never asked for: the code reads less than was "
                             "recorded, or in another order")
    return verdict
