"""Evidence that the engine enforces its admin key: one read-only admin-level route, asked twice.

`GET /hicache/storage-backend` is marked `@auth_level(AuthLevel.ADMIN_OPTIONAL)` in SGLang 0.5.23's
sglang/srt/entrypoints/http_server.py and only reads four config values on the tokenizer side (no
scheduler round trip, no state change), so asking it is harmless even on an engine that would let the
request through. Asked without any key it must be refused (401, or 403 for a forced-admin route); asked
with the key from the sentinel's key file it must answer 200 - which proves the engine holds that key,
not some other one (an `--admin-api-key` on a hand-edited command line would override the config file).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from sparkgate.evidence.client import EngineClient
from sparkgate.runtime.admin_key import AdminKeyError, read_key

PROBE_ROUTE = "/hicache/storage-backend"


@dataclass(frozen=True)
class AdminKeyProbe:
    key_file: str
    without_key: int | None = None  # HTTP status; 0 when nothing answered
    with_key: int | None = None
    error: str | None = None  # the key file could not be read

    def as_dict(self) -> dict:
        return asdict(self)


def probe(client: EngineClient, key_file: str) -> AdminKeyProbe:
    try:
        key = read_key(Path(key_file))
    except AdminKeyError as exc:
        return AdminKeyProbe(key_file, error=str(exc))
    # Fresh clients: the caller's may carry the engine's API key, and neither request may carry another.
    without = EngineClient(client.base_url, api_key=None, timeout=client.timeout).status(PROBE_ROUTE)
    with_key = EngineClient(client.base_url, api_key=key, timeout=client.timeout).status(PROBE_ROUTE)
    return AdminKeyProbe(key_file, without, with_key)
