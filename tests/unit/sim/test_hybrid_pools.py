"""The simulator's Ling-3.0-flash is a hybrid model: its pool lines and the usage parts of its scheduler lines are
held to what SGLang 0.5.23 printed serving the full Ling-3.0-flash shape (tests/fixtures/gpu-full-size, run F)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkgate.evidence import context_bands, logs
from sparkgate_sim.resolve import kv_cache_gb, mamba_cache_line, mamba_slots
from sparkgate_sim.scheduler_lines import decode_usage

FULL_SIZE = Path(__file__).resolve().parents[2] / "fixtures" / "gpu-full-size"
NUMBER = re.compile(r"([#\w]+(?: \w+)?): (\d+(?:\.\d+)?)")  # "name: 1.5", a name of one or two words
DIGITS = re.compile(r"\d+(?:\.\d+)?")


def real_line(launch: str, start: str) -> str:
    messages = logs.from_file(str(FULL_SIZE / launch / "server.log")).messages()
    return next(m for m in messages if m.startswith(start))


def fields(line: str) -> dict[str, float]:
    return {name: float(value) for name, value in NUMBER.findall(line)}


def test_the_mamba_line_without_speculation_is_sglangs_to_the_character():
    real = real_line("full-humming-cold", "Mamba Cache is allocated")
    slots = int(fields(real)["max_mamba_cache_size"])
    assert mamba_cache_line({"speculative_algorithm": None}, slots) == real


def test_the_mamba_line_with_nextn_has_sglangs_intermediate_state_for_each_draft_token():
    real = fields(real_line("full-humming-nextn", "Mamba Cache is allocated"))
    resolved = {"speculative_algorithm": "EAGLE", "max_running_requests": 1, "speculative_num_draft_tokens": 4}
    ours = fields(mamba_cache_line(resolved, int(real["max_mamba_cache_size"])))
    assert ours.keys() == real.keys()
    # The log rounds each size to 0.01 GB; the per-slot figures come from the other launch's line.
    assert all(ours[name] == pytest.approx(real[name], abs=0.011) for name in real), (ours, real)


def test_dsparks_replay_ring_holds_the_intermediate_state():
    line = mamba_cache_line({"speculative_algorithm": "DSPARK", "enable_linear_replayssm_spec": True}, 64)
    assert fields(line)["intermediate_ssm_state_cache size"] == 0.0


def test_the_shipped_mamba_slots_flag_is_the_pools_size_and_the_kv_line_is_sglangs_per_token():
    assert mamba_slots(24.0, {"max_mamba_cache_size": "64"}) == 64
    real = fields(real_line("full-humming-cold", "KV Cache is allocated"))
    tokens = 100_000  # under the simulator's capacity
    per_token = kv_cache_gb({"max_total_tokens": tokens}) / tokens
    assert per_token == pytest.approx(real["KV size"] / real["#tokens"], rel=1e-3)  # the log rounds to 0.01 GB


def test_the_decode_line_has_sglangs_hybrid_parts_and_the_products_context_reading_takes_it():
    tail = "cuda graph: True, gen throughput (token/s): 46.36, #queue-req: 0"
    ours = f"Decode batch, #running-req: 1, {decode_usage(8018, 0.0, 64)}{tail}"
    assert DIGITS.sub("", ours) == DIGITS.sub("", real_line("full-humming-cold", "Decode batch"))  # parts, in order
    assert fields(ours)["mamba num"] == 3 and fields(ours)["mamba usage"] == round(3 / 64, 2)
    speculative = f"Decode batch, #running-req: 1, {decode_usage(8018, 0.0, 64)}accept len: 2.50, accept rate: 0.50, " \
                  f"{tail}"
    assert DIGITS.sub("", speculative) == DIGITS.sub("", real_line("full-humming-nextn", "Decode batch"))
    assert context_bands.reading(speculative) == context_bands.DecodeReading(8018, 2.5)
