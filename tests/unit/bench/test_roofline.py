"""Roofline numbers for the published Ling-3.0-flash shape against a hand calculation.

Shape (tests/fixtures/bench/ling-3.0-flash-config.json): H = 2560, vocab 157,184, 42 layers of which 7 are
MLA (every 6th) and 35 KDA, the first 2 dense (MLP width 6144) and 40 MoE (512 experts, top-8, one shared
expert, width 768). Bytes per parameter: MXFP4 0.53125, FP8 1, BF16 2. GB = 1e9 bytes, 273 GB/s.
"""

import json
from pathlib import Path

import pytest

from sparkgate.bench import roofline
from sparkgate.profile import loading as profiles

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "bench" / "ling-3.0-flash-config.json"

EXPERT = 3 * 2560 * 768  # 5,898,240 params (gate, up, down)
ROUTED = 40 * 8 * EXPERT * 0.53125  # 1,887,436,800 params -> 1,002,700,800 bytes
SHARED = 40 * EXPERT  # 235,929,600 bytes (FP8)
ROUTER = 40 * 512 * 2560  # 52,428,800
DENSE = 2 * 3 * 2560 * 6144  # 94,371,840
MLA_LAYER = 2560 * 32 * 192 + 2560 * 576 + 512 * 32 * 256 + 4096 * 2560 + 2560 * 32  # 31,965,184
MLA = 7 * MLA_LAYER  # 223,756,288
KDA_LAYER = 6 * 2560 * 4096 + 2560 * 32  # 62,996,480
KDA = 35 * KDA_LAYER  # 2,204,876,800
HEAD_PARAMS = 157_184 * 2_560  # 402,391,040
EMBED_ROW = 2560 * 2  # 5,120
MLA_CACHE = 7 * 1024 * 576 * 2  # 8,257,536 at 1024 tokens of context
KDA_STATE = 35 * 32 * 128 * 128 * 4 * 2  # 146,800,640: FP32 state read and written
BW = 273e9


def shape() -> roofline.ModelShape:
    return roofline.ModelShape.from_file(FIXTURE)


def test_hand_counts():
    assert EXPERT == 5_898_240 and ROUTED == 1_002_700_800
    assert MLA_LAYER == 31_965_184 and KDA_LAYER == 62_996_480
    assert HEAD_PARAMS == 402_391_040
    # LM head: 0.805 GB in BF16, 0.402 GB in FP8
    assert pytest.approx(0.805, abs=5e-4) == HEAD_PARAMS * 2 / 1e9
    assert pytest.approx(0.402, abs=5e-4) == HEAD_PARAMS * 1 / 1e9


def test_fixture_is_the_reference_shape_and_5_1b_active():
    config = json.loads(FIXTURE.read_text())
    config.pop("_sparkgate_note")
    assert config == roofline.REFERENCE_CONFIG
    s = shape()
    assert (s.mla_layers, s.kda_layers, s.moe_layers) == (7, 35, 40)
    # 1,887,436,800 routed + 235,929,600 shared + 52,428,800 router + 94,371,840 dense + 223,756,288 MLA
    # + 2,204,876,800 KDA + 402,391,040 head = 5,101,191,168: the published "5.1B active"
    assert s.active_params() == 5_101_191_168


def test_baseline_bf16_head():
    line = roofline.compute(shape(), roofline.DecodeSetup(fp8_lm_head=False))
    step = ROUTED + MLA + KDA + SHARED + ROUTER + DENSE + HEAD_PARAMS * 2 + EMBED_ROW + MLA_CACHE + KDA_STATE
    assert step == 4_773_909_504
    assert line.bytes_per_cycle_bound == pytest.approx(step)
    assert line.bytes_per_cycle_estimate == pytest.approx(step)  # one position: nothing to overlap
    assert line.bound_tok_s == pytest.approx(BW / step)  # 57.19 tok/s
    assert line.bound_tok_s == pytest.approx(57.19, abs=0.01)
    assert 37.81 / line.bound_tok_s == pytest.approx(0.661, abs=0.001)  # published baseline: 66 %


def test_fp8_head_saves_half_the_head():
    bf16 = roofline.compute(shape(), roofline.DecodeSetup(fp8_lm_head=False))
    fp8 = roofline.compute(shape(), roofline.DecodeSetup(fp8_lm_head=True))
    assert bf16.bytes_per_cycle_bound - fp8.bytes_per_cycle_bound == pytest.approx(HEAD_PARAMS)  # 0.402 GB
    assert fp8.bound_tok_s == pytest.approx(BW / 4_371_518_464)  # 62.45 tok/s
    assert 41.0 / fp8.bound_tok_s == pytest.approx(0.657, abs=0.001)


def test_all_three_mtp_cycle():
    setup = roofline.DecodeSetup(fp8_lm_head=True, mtp=True, num_steps=3, num_draft_tokens=4, accept_length=2.68)
    line = roofline.compute(shape(), setup)
    verify_bound = ROUTED + MLA + KDA + SHARED + ROUTER + DENSE + HEAD_PARAMS + 4 * EMBED_ROW + MLA_CACHE + KDA_STATE
    assert verify_bound == 4_371_533_824
    # one draft step: eh_proj 2*2560*2560 + one MLA layer + shared + router (FP8) = 52,281,344, top-8 experts
    # in MXFP4 = 25,067,520, the shared FP8 head 402,391,040, an embedding row and 1024 tokens of its cache
    draft_step = (2 * 2560 * 2560 + MLA_LAYER + EXPERT + 512 * 2560) + 8 * EXPERT * 0.53125 + HEAD_PARAMS \
        + EMBED_ROW + 1024 * 576 * 2
    assert draft_step == 480_924_672
    cycle = verify_bound + 3 * draft_step
    assert cycle == 5_814_307_840
    assert line.bytes_per_cycle_bound == pytest.approx(cycle)
    assert line.bound_tok_s == pytest.approx(BW * 2.68 / cycle)  # 125.83 tok/s
    # independent routing: 4 positions touch 512 * (1 - (63/64)**4) = 1,024,255 / 32,768 experts per layer
    touched = 512 * (1 - (63 / 64) ** 4)
    assert touched == pytest.approx(1_024_255 / 32_768)
    estimate = cycle + 40 * (touched - 8) * EXPERT * 0.53125
    assert line.bytes_per_cycle_estimate == pytest.approx(estimate)
    assert line.estimate_tok_s == pytest.approx(83.81, abs=0.01)
    assert 53.89 / line.estimate_tok_s == pytest.approx(0.643, abs=0.001)  # published all three: 64 %


def test_profiles_map_to_setups():
    base = roofline.setup_for_profile(profiles.load("baseline").profile)
    three = roofline.setup_for_profile(profiles.load("all-three").profile, accept_length=1.0)
    assert (base.fp8_lm_head, base.mtp) == (False, False)
    assert (three.fp8_lm_head, three.mtp, three.num_steps, three.num_draft_tokens, three.accept_length) == (True, True, 3, 4, 1.0)


def test_bad_configs_are_refused(tmp_path):
    config = dict(roofline.REFERENCE_CONFIG)
    del config["hidden_size"]
    with pytest.raises(roofline.RooflineError, match="hidden_size"):
        roofline.ModelShape.from_config(config)
    with pytest.raises(roofline.RooflineError, match="q_lora_rank"):
        roofline.ModelShape.from_config({**roofline.REFERENCE_CONFIG, "q_lora_rank": 1536})
    no_nextn = roofline.ModelShape.from_config({**roofline.REFERENCE_CONFIG, "num_nextn_predict_layers": 0})
    with pytest.raises(roofline.RooflineError, match="NextN"):
        roofline.compute(no_nextn, roofline.DecodeSetup(mtp=True))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(roofline.RooflineError, match="cannot read"):
        roofline.ModelShape.from_file(tmp_path / "config.json")
