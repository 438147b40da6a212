"""The H200 measurements' model (sparkgate/bench/measured.py): which profiles it speaks for, and that its arithmetic
gives back what was measured where nothing changes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sparkgate.bench import measured
from sparkgate.bench import roofline as roof
from sparkgate.profile import loading

SHAPE = roof.ModelShape.from_file(Path(__file__).resolve().parents[2] / "fixtures" / "bench" /
                                  "ling-3.0-flash-config.json")


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
