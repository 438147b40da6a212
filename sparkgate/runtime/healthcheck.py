"""Container healthcheck without curl: exit 0 only for HTTP 200."""

from __future__ import annotations

import urllib.error
import urllib.request


def check(url: str, timeout: float = 5.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - fixed local URL
            return 0 if response.status == 200 else 1
    except (urllib.error.URLError, OSError):
        return 1
