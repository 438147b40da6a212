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
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sparkgate.evidence.client import EngineClient, EngineUnreachable
from sparkgate.evidence.logs import EngineLog
from sparkgate.runtime.admin_key import REDACTED, SECRET_FIELDS, redact, redact_text

RECORDING_VERSION = 1
Call = Literal["status", "GET", "POST", "stream", "admin_key_probe", "host_memory"]


class _Reading(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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


class HostMemoryReading(_Reading):  # evidence/host_memory.HostMemory
    meminfo: MemInfoReading | None
    error: str | None
    holders: list[dict[str, str | int | float]]


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

    @model_validator(mode="after")
    def _reading_fits_its_call(self) -> Exchange:
        shape = READINGS.get(self.call)
        if shape is not None and self.reading is not None:
            shape.model_validate(self.reading)  # a malformed reading is a bad recording, not a replay traceback
        return self


# A secret server arg as SGLang prints it in a log line (`server_args=ServerArgs(api_key='…', …)` or a dict repr):
# the value goes, the field stays. JSON answers are redacted field by field (admin_key.redact).
_SECRET_ASSIGNMENT = re.compile(
    r"""(\b(?:{})(?:['"]?\s*[:=]\s*))(['"])(?!{})(.*?)\2""".format("|".join(SECRET_FIELDS), re.escape(REDACTED)))
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
    return exchange.model_copy(update={
        "body": redact(exchange.body, keys) if exchange.body is not None else None,
        "text": scrub(exchange.text, keys),
        "error": scrub(exchange.error, keys),
        "chunks": None if exchange.chunks is None else [(at, redact(chunk, keys)) for at, chunk in exchange.chunks],
        "reading": redact(exchange.reading, keys) if exchange.reading is not None else None,
    })


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
    exchanges: list[Exchange] = Field(default_factory=list)
    verdict: dict[str, Any]

    @classmethod
    def of(cls, client: RecordingClient, expectations: dict, log: EngineLog, verdict, *,
           calibrate: bool = True, secrets: Iterable[str] = ()) -> Recording:
        """The recording, with every secret it could carry replaced by a marker: the client's API key, `secrets`
        (the admin key), secret server args in JSON answers and in the log, credentials in the URL."""
        keys = tuple(k for k in (client.api_key, *secrets) if k)
        url = re.sub(r"//[^/@]*@", "//", client.base_url)
        return cls(engine_url=url, expectations=redact(expectations, keys), log_source=log.source,
                   log_text=scrub(log.text, keys), log_error=scrub(log.error, keys), calibrate=calibrate,
                   exchanges=[_scrubbed(e, keys) for e in client.exchanges], verdict=redact(verdict.as_dict(), keys))

    def log(self) -> EngineLog:
        return EngineLog(self.log_source, self.log_text, self.log_error)


@dataclass(frozen=True)
class RecordingClient(EngineClient):
    """An EngineClient that keeps every exchange, errors included, in the order they happened."""

    exchanges: list[Exchange] = field(default_factory=list)

    def status(self, path: str) -> int:
        code = super().status(path)
        self.exchanges.append(Exchange(call="status", path=path, status=code))
        return code

    def _fetch(self, method: str, path: str, body: dict | None = None, timeout: float | None = None) -> str:
        call: Call = "POST" if method == "POST" else "GET"
        try:
            text = super()._fetch(method, path, body, timeout)
        except EngineUnreachable as exc:
            self.exchanges.append(Exchange(call=call, path=path, body=body, error=str(exc), timed_out=exc.timed_out))
            raise
        self.exchanges.append(Exchange(call=call, path=path, body=body, text=text))
        return text

    def admin_key_probe(self, key_file: str):
        result = super().admin_key_probe(key_file)
        self.exchanges.append(Exchange(call="admin_key_probe", path=key_file, reading=result.as_dict()))
        return result

    def host_memory(self, meminfo_path: str):
        result = super().host_memory(meminfo_path)
        self.exchanges.append(Exchange(call="host_memory", path=meminfo_path, reading=result.as_dict()))
        return result

    def stream_generate(self, body: dict, timeout: float) -> Iterator[tuple[float, dict]]:
        sent = time.monotonic()
        chunks: list[tuple[float, dict[str, Any]]] = []
        try:
            for arrived, chunk in super().stream_generate(body, timeout):
                chunks.append((round(arrived - sent, 6), chunk))
                yield arrived, chunk
        except EngineUnreachable as exc:
            self.exchanges.append(Exchange(call="stream", path="/generate", body=body, chunks=chunks,
                                           error=str(exc), timed_out=exc.timed_out))
            raise
        self.exchanges.append(Exchange(call="stream", path="/generate", body=body, chunks=chunks))


class ReplayMismatch(Exception):
    """The code under replay made a call the recording does not hold at that point."""


@dataclass(frozen=True)
class ReplayClient(EngineClient):
    """Answers each call with the next recorded exchange, which must be the same call (kind, path, body)."""

    exchanges: tuple[Exchange, ...] = ()
    cursor: list[int] = field(default_factory=lambda: [0])

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

    def admin_key_probe(self, key_file: str):
        from sparkgate.evidence.admin_probe import AdminKeyProbe

        return AdminKeyProbe(**self._reading("admin_key_probe", key_file))

    def host_memory(self, meminfo_path: str):
        from sparkgate.evidence.host_memory import HostMemory

        return HostMemory.from_dict(self._reading("host_memory", meminfo_path))

    def _reading(self, call: Call, path: str) -> dict[str, Any]:
        recorded = self._next(call, path, None)
        if recorded.reading is None:
            raise ReplayMismatch(f"{call} {path}: the recording holds no reading")
        return recorded.reading

    def stream_generate(self, body: dict, timeout: float) -> Iterator[tuple[float, dict]]:
        recorded = self._next("stream", "/generate", body)
        sent = time.monotonic()
        for offset, chunk in recorded.chunks or []:
            yield sent + offset, chunk
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
                     meminfo_path=read.get("host_memory"))
    if client.unused:
        raise ReplayMismatch(f"{client.unused} recorded call(s) were never asked for: the code reads less than was "
                             "recorded, or in another order")
    return verdict
