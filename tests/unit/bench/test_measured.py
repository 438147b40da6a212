"""The H200 measurements' model (sparkgate/bench/measured.py): which profiles it speaks for, and that its arithmetic
gives back what was measured where nothing changes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sparkgate.bench import measured
from sparkgate.bench import roofline as roof
from sparkgate.profile import loading

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SHAPE = roof.ModelShape.from_file(FIXTURES / "bench" / "ling-3.0-flash-config.json")
FULL_SIZE = FIXTURES / "gpu-full-size"  # the run the figures come from (`bash tests/gpu/run full-size F`)


def measures(launch: str) -> dict:
    return json.loads((FULL_SIZE / launch / "measures.json").read_text())


def test_the_figures_are_the_recorded_runs_own():
    assert round(measures("gpu-bandwidth")["gb_per_s"], 1) == measured.BANDWIDTH_GB_S
    for launch in {d.launch for d in measured.DECODES}:
        speeds = measures(launch)["speeds"]
        decodes = {d.prompt: d for d in measured.DECODES if d.launch == launch}
        assert set(decodes) == set(speeds), launch
        for prompt, speed in speeds.items():
            accept = speed["spec_accept_length"]
            assert decodes[prompt] == measured.Decode(
                launch, decodes[prompt].profile, prompt, speed["prompt_tokens"] + speed["completion_tokens"] // 2,
                round(speed["decode_tok_s"], 1), None if accept is None else round(accept, 3))


@pytest.mark.parametrize(("profile", "kind"), [("humming", "humming"), ("humming-fp8", "humming"), ("mtp", None),
                                               ("all-three", "mtp"), ("baseline", None), ("fp8-lm-head", None),
                                               ("dspark", None)])
def test_each_profile_gets_only_the_decodes_that_ran_its_kernels(profile, kind):
    decodes = measured.for_profile(loading.load(profile).profile)
    assert {d.profile for d in decodes} == ({kind} if kind else set())


@pytest.mark.parametrize("decode", measured.DECODES, ids=lambda d: f"{d.launch}-{d.prompt}")
def test_predicting_the_h200_itself_gives_back_the_measured_speed(decode):
    line = decode.roofline(SHAPE)
    _, independent = measured.predicted_tok_s(line, decode.remainder_s(line))
    assert independent == pytest.approx(decode.decode_tok_s, rel=1e-9)


def test_less_bandwidth_predicts_less_speed_and_sharing_experts_never_less():
    decode = measured.DECODES[0]
    line = decode.roofline(SHAPE)
    remainder = decode.remainder_s(line)
    spark = roof.compute(SHAPE, dataclasses.replace(line.setup, bandwidth_gb_s=roof.SPARK_BANDWIDTH_GB_S))
    shared, independent = measured.predicted_tok_s(spark, remainder)
    assert independent < decode.decode_tok_s and shared >= independent
