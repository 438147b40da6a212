"""The tiny DSpark drafter (tests/gpu/dspark_drafter.py) loads in SGLang 0.5.23's own LingDSparkModel on CPU.

All cases run the drafter's `load_report` in one subprocess (SGLANG_USE_CPU_ENGINE=1, the CPU `sgl_kernel`
stand-in of tests/real/stand_ins): SGLang's config reader, class and `load_weights`, every parameter written
by a checkpoint tensor and every tensor consumed; with SGLang's default static ragged verify (no confidence
head) and with compact (the confidence head built and loaded).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.dspark_drafter import GAMMA, MASK_TOKEN_ID, VOCAB, build_dspark_drafter

pytestmark = pytest.mark.sglang
REPO = Path(__file__).resolve().parents[2]


MODES = ("static", "compact")
VARIANTS = ("agree", "random")


@pytest.fixture(scope="module")
def drafters(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("drafters")
    return {v: build_dspark_drafter(root / v, v) for v in VARIANTS}


@pytest.fixture(scope="module")
def reports(drafters) -> dict[tuple[str, str], dict]:
    """Every (variant, ragged mode) case in one subprocess: SGLang is imported once."""
    cases = {(v, m): f"{m}={drafters[v]}" for v in VARIANTS for m in MODES}
    env = dict(os.environ)
    env |= {
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests" / "real" / "stand_ins")]),
        "SGLANG_USE_CPU_ENGINE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.gpu.dspark_drafter", *cases.values()],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    return {key: printed[case] for key, case in cases.items()}


@pytest.mark.parametrize("ragged_mode", MODES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_sglang_loads_every_tensor(reports, variant, ragged_mode):
    report = reports[variant, ragged_mode]
    assert report["class"] == "LingDSparkModel"
    assert report["markov_head"] == "VanillaMarkov"
    assert report["confidence_head"] is (ragged_mode != "static")
    assert (report["gamma"], report["verify_num_draft_tokens"]) == (GAMMA, GAMMA + 1)
    assert report["mask_token_id"] == MASK_TOKEN_ID
    assert report["num_context_features"] == 3
    assert report["unwritten_params"] == []
    assert report["checkpoint_numel_loaded"] == report["param_numel"]
    if variant == "agree":
        assert report["final_hidden_max_abs"] == 0.0
        assert report["markov_argmax_is_prev"] == VOCAB
        if ragged_mode != "static":
            assert report["confidence_min"] > 0.999
    else:
        assert report["final_hidden_max_abs"] > 0.0
        assert report["markov_argmax_is_prev"] < VOCAB // 8


def test_build_is_deterministic(drafters, tmp_path):
    again = build_dspark_drafter(tmp_path / "agree", "agree")
    for name in ("config.json", "model.safetensors"):
        assert (again / name).read_bytes() == (drafters["agree"] / name).read_bytes()


def test_the_drafter_block_is_the_dspark_profiles():
    from sparkgate.profile import loading

    settings = loading.load("dspark").profile.optimizations.dspark
    assert (settings.block_size, settings.num_draft_tokens) == (GAMMA, GAMMA + 1)
