"""Gateway container entrypoint: decide API-key enforcement from the mounted secret, then run HAProxy.

The key never appears in rendered files, argv or logs: it arrives as a compose secret (a file) and is
turned into HAProxy's pattern file on the container's tmpfs /run/sparkgate, created 0600.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sparkgate.runtime.secret_files import SecretFileError, require_tmpfs, write_secret

SECRET = Path("/run/secrets/sparkgate_api_key")
AUTHORIZED = Path("/run/sparkgate/authorized.lst")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def prepare(secret: Path, authorized: Path, bind: str, mountinfo: str | None = None) -> tuple[bool, str | None]:
    """(require_key, refusal). Exposing the gateway beyond loopback without a key is refused, and so is a
    pattern file that would not be on tmpfs."""
    key = secret.read_text().strip() if secret.is_file() else ""
    if not key:
        if bind not in LOOPBACK:
            return False, (
                f"sparkgate gateway: refusing to publish on {bind} without an API key. Fix: put the key in a "
                "file and set SPARKGATE_API_KEY_FILE=/path/to/file (or bind 127.0.0.1)"
            )
        return False, None
    if any(ch in key for ch in "\r\n"):
        return False, "sparkgate gateway: the API key file holds more than one line. Fix: one key, one line"
    try:
        require_tmpfs(authorized.parent, mountinfo)
        write_secret(authorized, f"Bearer {key}\n")
    except (SecretFileError, OSError) as exc:
        return False, str(exc) if isinstance(exc, SecretFileError) else f"sparkgate gateway: {authorized}: {exc.strerror}"
    return True, None


def run(config: str) -> int:
    require_key, refusal = prepare(SECRET, AUTHORIZED, os.environ.get("SPARKGATE_GATEWAY_BIND", "127.0.0.1"))
    if refusal:
        print(refusal, file=sys.stderr, flush=True)
        return 78
    env = dict(os.environ)
    if require_key:
        env["SPARKGATE_REQUIRE_API_KEY"] = "1"
    print(f"sparkgate gateway: API key {'required' if require_key else 'not required (loopback only)'}", flush=True)
    os.execvpe("haproxy", ["haproxy", "-db", "-W", "-f", config], env)
    return 1  # not reached
