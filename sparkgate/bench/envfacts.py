"""Environment facts recorded with each run: what was measured, on what, and when.

Through the gateway only (the engine's port is not published, and the gateway answers `/server_info` itself):
`/sparkgate/verdict` holds the configuration and identity the sentinel verified. Against a bare engine (no
sparkgate gateway: a simulator in tests, or `--url` at any SGLang server) `/server_info` is read directly. Image
IDs come from the deploy record that `invoke deploy` wrote.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import socket
import subprocess

from sparkgate.evidence.client import fetch_json
from sparkgate.evidence.verify import verified_config_keys
from sparkgate.paths import repo_root


def engine_facts(url: str, api_key: str | None) -> dict:
    status, verdict = fetch_json(url.rstrip("/") + "/sparkgate/verdict", api_key)
    verified = (((verdict or {}).get("full") or {}).get("verification") or {}).get("engine") if status == 200 else None
    if isinstance(verified, dict):
        facts = {key: verified.get(key) for key in verified_config_keys() if key in verified}
        return {**facts, "source": "/sparkgate/verdict (the configuration the sentinel verified)"}
    status, info = fetch_json(url.rstrip("/") + "/server_info", api_key)
    if not info:
        return {"server_info": f"unavailable (HTTP {status})"}
    facts = {key: info.get(key) for key in verified_config_keys() if key in info}
    state = (info.get("internal_states") or [{}])[0]
    if "avg_spec_accept_length" in state:
        facts["avg_spec_accept_length_at_start"] = state["avg_spec_accept_length"]
    return facts


def gate_facts(url: str, api_key: str | None) -> dict | None:
    """The gate's state and the identity the sentinel verified; None when there is no sparkgate gateway."""
    status, verdict = fetch_json(url.rstrip("/") + "/sparkgate/verdict", api_key)
    if status != 200 or not verdict or "state" not in verdict:
        return None
    verification = ((verdict.get("full") or {}).get("verification") or {})
    answers = verification.get("answers") if isinstance(verification.get("answers"), dict) else {}
    return {
        "state": verdict.get("state"),
        "reason": verdict.get("reason"),
        "profile": verdict.get("profile"),
        "engine": verification.get("engine"),
        "verified_at": verification.get("time"),
        "full_runs": verdict.get("full_runs"),
        "rechecks": verdict.get("rechecks"),
        # How the verified engine read each question of the answer set (a baseline floor keeps them).
        "answers": {key: answers.get(key) for key in ("set_version", "read_as", "texts", "logprobs")} if answers else None,
    }


def host_facts() -> dict:
    facts = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo_root(), capture_output=True, text=True,
                                timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo_root(),
                               capture_output=True, text=True, timeout=5).stdout.strip()
        facts["sparkgate_commit"] = (commit + ("-dirty" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        facts["sparkgate_commit"] = None
    return facts


def now_utc() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
