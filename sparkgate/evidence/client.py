"""A small HTTP client for SGLang's endpoints (stdlib only: it also runs inside the sentinel image)."""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TypeVar

# Name lookups run here so they obey the client's timeout: on an internal Docker network the name of a
# stopped container is forwarded to an upstream resolver that cannot answer, and getaddrinfo itself
# has no timeout. A crashed engine must be noticed within one re-check period.
_RESOLVER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="resolve")


T = TypeVar("T")


def _resolvable(url: str, timeout: float) -> None:
    host = urllib.parse.urlsplit(url).hostname
    if not host:
        return
    future = _RESOLVER.submit(socket.getaddrinfo, host, None)
    try:
        future.result(timeout=timeout)
    except FutureTimeout:
        raise EngineUnreachable(f"{host}: name lookup did not answer within {timeout:.1f}s") from None
    except OSError as exc:
        raise EngineUnreachable(f"{host}: {exc}") from None


class EngineUnreachable(Exception):
    """The engine did not answer (refused, timed out, or answered non-JSON where JSON was due)."""

    def __init__(self, message: str, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out  # nothing arrived within the timeout (as opposed to a refusal or an error)


@dataclass(frozen=True)
class EngineClient:
    base_url: str
    api_key: str | None = None
    timeout: float = 10.0

    def _request(self, method: str, path: str, body: dict | None = None) -> urllib.request.Request:
        headers = {"Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        return urllib.request.Request(self.base_url.rstrip("/") + path, data=data, headers=headers, method=method)

    def status(self, path: str) -> int:
        """HTTP status of GET path; 0 when nothing answered."""
        try:
            _resolvable(self.base_url, self.timeout)
        except EngineUnreachable:
            return 0
        try:
            with urllib.request.urlopen(self._request("GET", path), timeout=self.timeout) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (urllib.error.URLError, OSError):
            return 0

    def _fetch(self, method: str, path: str, body: dict | None = None, timeout: float | None = None) -> str:
        """The answer's text; EngineUnreachable (timed_out set when nothing came in time) otherwise."""
        timeout = self.timeout if timeout is None else timeout
        _resolvable(self.base_url, self.timeout)
        try:
            with urllib.request.urlopen(self._request(method, path, body), timeout=timeout) as response:
                return response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            raise EngineUnreachable(f"{method} {path}: HTTP {exc.code}") from None
        except TimeoutError as exc:
            raise EngineUnreachable(f"{method} {path}: no answer within {timeout:.1f}s ({exc})", timed_out=True) from None
        except urllib.error.URLError as exc:
            timed_out = isinstance(exc.reason, (TimeoutError, socket.timeout))
            raise EngineUnreachable(f"{method} {path}: {exc}", timed_out=timed_out) from None
        except (OSError, http.client.HTTPException) as exc:  # IncompleteRead: the engine died mid-answer
            raise EngineUnreachable(f"{method} {path}: {type(exc).__name__}: {exc}") from None

    @staticmethod
    def _json_object(method: str, path: str, text: str) -> dict:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, a number too long to read, nesting too deep
            raise EngineUnreachable(f"{method} {path}: not JSON ({text[:80]!r})") from None
        if not isinstance(value, dict):
            raise EngineUnreachable(f"{method} {path}: expected a JSON object")
        return value

    def get_text(self, path: str) -> str:
        return self._fetch("GET", path)

    def get_json(self, path: str) -> dict:
        return self._json_object("GET", path, self.get_text(path))

    def post_json(self, path: str, body: dict, timeout: float) -> dict:
        """POST a JSON body, return the JSON object answered (EngineUnreachable otherwise)."""
        return self._json_object("POST", path, self._fetch("POST", path, body, timeout))

    def clock(self) -> float:
        """The verification's clock (seconds, monotonic): budgets and elapsed times read it, so that a replay can
        answer with the recorded durations instead of its own (recording.ReplayClient)."""
        return time.monotonic()

    def beside(self, call: str, path: str, read: Callable[[], T], load: Callable[[dict], T]) -> T:
        """Evidence read beside the engine's answers (the admin-key probe, the host's memory): `read()` here; a
        recording client keeps what it read (its `as_dict()`), a replaying one answers with `load(recorded)`."""
        return read()

    def stream_generate(self, body: dict, timeout: float) -> Iterator[tuple[float, dict]]:
        """POST /generate with stream=true; yields (seconds since the request was sent, chunk) per SSE event. Offsets,
        not clock readings: a recording keeps them, and its replay yields exactly the floats the live run did."""
        request = self._request("POST", "/generate", {**body, "stream": True})
        sent = time.monotonic()
        try:
            response = urllib.request.urlopen(request, timeout=timeout)
        except urllib.error.HTTPError as exc:
            raise EngineUnreachable(f"POST /generate: HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise EngineUnreachable(f"POST /generate: {exc}") from None
        with response:
            try:
                lines = list(_sse_lines(response))
            except (OSError, TimeoutError, http.client.HTTPException) as exc:  # a stalled or cut stream: no evidence
                raise EngineUnreachable(f"POST /generate: stream broke: {exc}") from None
            for arrived, raw in lines:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[len("data:") :].strip()
                if payload == "[DONE]":
                    return
                try:
                    yield arrived - sent, json.loads(payload)
                except (ValueError, RecursionError):
                    raise EngineUnreachable(f"POST /generate: bad stream chunk {payload[:80]!r}") from None


def _sse_lines(response) -> Iterator[tuple[float, bytes]]:
    """Read the stream, stamping each line with its arrival time (read errors propagate)."""
    for raw in response:
        yield time.monotonic(), raw


def fetch_json(url: str, api_key: str | None = None, timeout: float = 5.0) -> tuple[int, dict | None]:
    """(HTTP status, JSON object or None) of GET url, without raising: 0 when nothing answered. For
    polling and reporting, where an error answer is information too (the gateway's closed-gate 503)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
            body = json.loads(response.read() or b"null")
            return response.status, body if isinstance(body, dict) else None
    except urllib.error.HTTPError as exc:
        try:
            body = json.loads(exc.read() or b"null")
        except json.JSONDecodeError:
            body = None
        return exc.code, body if isinstance(body, dict) else None
    except (urllib.error.URLError, OSError, json.JSONDecodeError):
        return 0, None
