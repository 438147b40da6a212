"""Collect every piece of evidence once; checks then read it without further I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkgate.evidence import admin_probe, host_memory
from sparkgate.evidence import answers as answers_mod
from sparkgate.evidence import calibration as calibration_mod
from sparkgate.evidence import metrics as metrics_mod
from sparkgate.evidence.client import EngineClient, EngineUnreachable
from sparkgate.evidence.logs import EngineLog
from sparkgate.sglang import conformance


@dataclass
class Evidence:
    expectations: dict
    health_status: int = 0
    server_info: dict | None = None
    server_info_error: str | None = None
    model_info: dict | None = None
    log: EngineLog | None = None
    metrics_before: list | None = None
    metrics_after: list | None = None
    metrics_error: str | None = None
    answers: answers_mod.AnswersResult | None = None
    calibration: calibration_mod.CalibrationResult | None = None
    admin_key: admin_probe.AdminKeyProbe | None = None  # only when the caller holds the admin key file
    meminfo_path: str | None = None  # only where the caller runs on the engine's host (the sentinel)
    host_memory: host_memory.HostMemory | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def time_scale(self) -> float:
        return float(self.expectations.get("time_scale") or 1.0)

    def internal_state(self) -> dict | None:
        states = (self.server_info or {}).get(conformance.string_("server_info_internal_states"))
        return states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else None

    def engagement(self) -> dict | None:
        state = self.internal_state()
        report = state.get("engagement") if state else None
        return report if isinstance(report, dict) else None

    def server_arg(self, name: str) -> Any:
        return (self.server_info or {}).get(name, MISSING)

    def requested(self, key: str) -> bool:
        return key in self.expectations.get("requested", [])


class _Missing:
    def __repr__(self) -> str:
        return "<absent>"


# A server_info key that is absent (distinct from a present null/False).
MISSING = _Missing()


def shown(value: Any) -> Any:
    """JSON-friendly view of a server_info value: an absent key reads "<absent>"."""
    return "<absent>" if value is MISSING else value


def gather(client: EngineClient, expectations: dict, log: EngineLog, *, calibrate: bool = True,
           admin_key_file: str | None = None, meminfo_path: str | None = None,
           repeat_room_first: bool = True) -> Evidence:
    evidence = Evidence(expectations=expectations, log=log, meminfo_path=meminfo_path)
    # Read through the client, as the engine's answers are, so a recording of this verification keeps them too.
    if meminfo_path is not None:
        evidence.host_memory = client.beside("host_memory", meminfo_path, lambda: host_memory.reading(meminfo_path),
                                             host_memory.HostMemory.from_dict)
    evidence.health_status = client.status("/health")
    if admin_key_file is not None:
        evidence.admin_key = client.beside("admin_key_probe", admin_key_file,
                                           lambda: admin_probe.probe(client, admin_key_file),
                                           lambda d: admin_probe.AdminKeyProbe(**d))
    try:
        evidence.server_info = client.get_json("/server_info")
    except EngineUnreachable as exc:
        evidence.server_info_error = str(exc)
    try:
        evidence.model_info = client.get_json("/model_info")
    except EngineUnreachable as exc:
        evidence.errors.append(str(exc))
    if not calibrate or evidence.health_status != 200:
        return evidence
    # First of the requests that generate: its first question is the engine's cold first prefill.
    evidence.answers = answers_mod.run(client, expectations, evidence.time_scale,
                                       repeat_room_first=repeat_room_first)
    try:
        evidence.metrics_before = metrics_mod.parse(client.get_text("/metrics"))
    except EngineUnreachable as exc:
        evidence.metrics_error = str(exc)
    budget = expectations["calibration"]
    evidence.calibration = calibration_mod.run(
        client, budget["prompts"], budget["max_new_tokens"], budget["time_budget_s"], evidence.time_scale
    )
    try:
        evidence.metrics_after = metrics_mod.parse(client.get_text("/metrics"))
    except EngineUnreachable as exc:
        evidence.metrics_error = str(exc)
    # The decode log interval may have passed now: re-read server_info for avg_spec_accept_length.
    try:
        evidence.server_info = client.get_json("/server_info")
    except EngineUnreachable as exc:
        evidence.server_info_error = str(exc)
    return evidence
