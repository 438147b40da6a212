"""Black-box HTTP smoke tests against a base URL: the engine before admission (run by the sentinel), or
the gateway after it (`invoke smoke`). Environment: SPARKGATE_SMOKE_URL (required),
SPARKGATE_SMOKE_MODEL (served model name), SPARKGATE_SMOKE_API_KEY_FILE (optional)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Http:
    base_url: str
    api_key: str | None

    def _request(self, method: str, path: str, body: dict | None = None) -> urllib.request.Request:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode() if body is not None else None
        return urllib.request.Request(self.base_url.rstrip("/") + path, data=data, headers=headers, method=method)

    def json(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(self._request(method, path, body), timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            text = exc.read()
            try:
                return exc.code, json.loads(text)
            except json.JSONDecodeError:
                return exc.code, {"raw": text.decode("utf-8", "replace")}

    def sse(self, path: str, body: dict) -> Iterator[dict]:
        with urllib.request.urlopen(self._request("POST", path, body), timeout=60) as response:
            assert response.status == 200
            for raw in response:
                line = raw.decode().strip()
                if line.startswith("data:"):
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        return
                    yield json.loads(payload)


@pytest.fixture(scope="session")
def http() -> Http:
    url = os.environ.get("SPARKGATE_SMOKE_URL")
    if not url:
        pytest.fail("SPARKGATE_SMOKE_URL is not set: the smoke suite needs a base URL")
    key_file = os.environ.get("SPARKGATE_SMOKE_API_KEY_FILE")
    key = Path(key_file).read_text().strip() if key_file else None
    return Http(url, key or None)


@pytest.fixture(scope="session")
def model() -> str:
    name = os.environ.get("SPARKGATE_SMOKE_MODEL")
    if not name:
        pytest.fail("SPARKGATE_SMOKE_MODEL is not set")
    return name
