"""The tiny Ling-3.0-flash checkpoints (tests/gpu/v3_checkpoints.py) are what the GPU lane says they are.

- From the files alone (dequantized FP8 block-128 and MXFP4 with E8M0 scales): the target repeats every token of the
  vocab, the "agree" NEXTN layer drafts that same token, the "random" one never does.
- SGLang 0.5.23's own BailingMoeV3ForCausalLM and BailingMoeForCausalLMNextN, built on the CPU from the config
  (a subprocess: SGLANG_USE_CPU_ENGINE=1 and the CPU `sgl_kernel` stand-in of tests/real/stand_ins), fill every
  parameter from the files (the KV-cache scales and the draft's shared embedding and head aside), and give the
  routed experts the MoE method the lane's launches expect: Mxfp4HummingMoEMethod for the fp4 layout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.v3_checkpoints import DRAFT_SHARED, KV_SCALES, NEXTN_SHARD, TARGET_SHARD, build_tiny_v3, prove_argmax

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-v3")
    return {variant: build_tiny_v3(root / variant, variant) for variant in ("agree", "random", "bf16")}


def test_the_build_is_deterministic_and_random_shares_the_target(tiny, tmp_path):
    again = build_tiny_v3(tmp_path / "again", "agree")
    for name in (TARGET_SHARD, NEXTN_SHARD, "config.json"):
        assert (again / name).read_bytes() == (tiny["agree"] / name).read_bytes(), name
    assert (tiny["random"] / TARGET_SHARD).read_bytes() == (tiny["agree"] / TARGET_SHARD).read_bytes()
    assert (tiny["random"] / NEXTN_SHARD).read_bytes() != (tiny["agree"] / NEXTN_SHARD).read_bytes()


def test_the_fp4_layout_target_repeats_every_token_and_the_agreeing_draft_drafts_it(tiny):
    proof = prove_argmax(tiny["agree"])
    assert proof["target"] == proof["tokens"]
    assert proof["draft"] == proof["tokens"]
    assert proof["target_margin"] > 1.0, proof["target_margin"]


def test_the_random_draft_never_drafts_what_the_target_writes(tiny):
    proof = prove_argmax(tiny["random"])
    assert proof["target"] == proof["tokens"]
    assert all(d != t for d, t in zip(proof["draft"], proof["target"], strict=True))


def test_the_bf16_variant_is_the_same_model_without_quantization(tiny):
    config = json.loads((tiny["bf16"] / "config.json").read_text())
    assert "quantization_config" not in config
    proof = prove_argmax(tiny["bf16"])
    assert proof["target"] == proof["tokens"] and proof["draft"] == proof["tokens"]


VARIANT_METHODS = {"agree": "Mxfp4HummingMoEMethod", "bf16": "UnquantizedFusedMoEMethod"}


@pytest.fixture(scope="module")
def proofs(tiny) -> dict[str, dict]:
    """SGLang's own load of each variant, all in one fresh process (SGLang imported once)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests" / "real" / "stand_ins")]),
           "SGLANG_USE_CPU_ENGINE": "1"}
    done = subprocess.run([sys.executable, "-m", "tests.gpu.v3_checkpoints", "--prove-loads",
                           *(str(tiny[v]) for v in VARIANT_METHODS)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [json.loads(ln[len("PROOF "):]) for ln in done.stdout.splitlines() if ln.startswith("PROOF ")]
    assert len(lines) == len(VARIANT_METHODS), done.stdout[-2000:]
    return dict(zip(VARIANT_METHODS, lines, strict=True))


@pytest.mark.sglang
@pytest.mark.parametrize(("variant", "moe_method"), list(VARIANT_METHODS.items()))
def test_sglang_fills_every_parameter_of_target_and_draft_from_the_files(proofs, variant, moe_method):
    proof = proofs[variant]
    for role, may_stay_unwritten in (("target", ()), ("draft", DRAFT_SHARED)):
        unwritten = {name for name in proof[role]["unwritten"]
                     if not name.endswith(KV_SCALES) and name not in may_stay_unwritten}
        assert unwritten == set(), (role, unwritten)
        assert proof[role]["moe_methods"] == [moe_method], proof[role]["moe_methods"]
