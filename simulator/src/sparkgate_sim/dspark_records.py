"""DSpark's per-decode-step info records: `internal_states[0].dspark_info_record` of /server_info.

SGLang builds the record in sglang/srt/speculative/dspark_components/dspark_observability.py
(`DsparkInfoDumper.dump`) and internal_state.py adds it only when the dumper is enabled, i.e. when
`SGLANG_DSPARK_DEBUG_DUMP` names components (comma-separated, or `all`) or `SGLANG_DSPARK_ENABLE_SPS_RECORD`
is true (core + step_cpu_time). With neither set (the default) there is no `dspark_info_record` at all.

Modelled components: core, step_cpu_time and the three GPU-time ones (from the timing model's step, draft
and verify parts, in simulated ms); `reqs` (per-request token ids) is accepted but adds nothing. The
simulator keeps the last MAX_RECORDS steps (SGLang keeps up to 200,000).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from sparkgate.sglang import conformance as C
from sparkgate_sim import sglang_env

DEBUG_DUMP_ENV = C.env("dspark_debug_dump")
SPS_RECORD_ENV = C.env("dspark_enable_sps_record")
RAGGED_VERIFY_MODE_ENV = C.env("ragged_verify_mode")
COMPONENTS = ("core", "step_cpu_time", "step_gpu_time", "draft_gpu_time", "target_verify_gpu_time", "reqs")
MAX_RECORDS = 2000


def ragged_verify_mode(env: Mapping[str, str]) -> str:
    """SGLANG_RAGGED_VERIFY_MODE: static (default), cap-accept or compact."""
    return (env.get(RAGGED_VERIFY_MODE_ENV) or "static").strip().lower()


def enabled_components(env: Mapping[str, str]) -> set[str]:
    tokens = {t.strip() for t in env.get(DEBUG_DUMP_ENV, "").split(",") if t.strip()}
    components = set(COMPONENTS) if "all" in tokens else tokens & set(COMPONENTS)
    if sglang_env.is_true(env, SPS_RECORD_ENV):
        components |= {"core", "step_cpu_time"}
    return components


class InfoRecords:
    def __init__(self, env: Mapping[str, str], *, gamma: int, verify_num_draft_tokens: int):
        self.components = enabled_components(env)
        self.mode = ragged_verify_mode(env)
        self.gamma = gamma
        self.verify_num_draft_tokens = verify_num_draft_tokens
        self._records: deque[dict[str, Any]] = deque(maxlen=MAX_RECORDS)
        self._after_non_decode = True

    @property
    def enabled(self) -> bool:
        return bool(self.components)

    def note_non_decode_step(self) -> None:
        """A prefill ran: the next step has no CPU step time (no previous decode stamp)."""
        self._after_non_decode = True

    def observe(self, forward_ct: int, step_s: float, draft_s: float) -> None:
        if not self.enabled:
            return
        record: dict[str, Any] = {"forward_ct": forward_ct}
        if "core" in self.components:
            window = self.verify_num_draft_tokens
            record.update(bs=1, mode=self.mode, num_running_reqs=1, num_verify_tokens=window,
                          verify_tokens_local=window, verify_tokens_dp_synced=window, verify_tokens_graph_key=window)
        if "step_cpu_time" in self.components and not self._after_non_decode:
            record["step_cpu_ms"] = step_s * 1000
        if "step_gpu_time" in self.components:
            record["step_gpu_ms"] = step_s * 1000
        if "draft_gpu_time" in self.components:
            record["draft_gpu_ms"] = draft_s * 1000
        if "target_verify_gpu_time" in self.components:
            record["target_verify_gpu_ms"] = (step_s - draft_s) * 1000
        self._after_non_decode = False
        self._records.append(record)

    def dump(self) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        return {
            "mode": self.mode,
            "gamma": self.gamma,
            "verify_num_draft_tokens": self.verify_num_draft_tokens,
            "components": sorted(self.components),
            "records": list(self._records),
            "simulate_acc_len": None,
        }
