"""Fact extraction from SGLang's real layer classes built on the CPU."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.sglang
import sglang  # noqa: E402,F401 - needs sglang==0.5.23 (requirements/sglang-cpu.txt); missing is an error, never a skip
import torch  # noqa: E402
from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE  # noqa: E402

from sparkgate_probe import facts  # noqa: E402
from tests.unit.probe import tiny_models as tm  # noqa: E402


@pytest.fixture(autouse=True)
def _context(cpu_runtime_context):
    pass


def test_stock_bf16_head():
    assert facts.describe_lm_head(tm.bf16_lm_head()) == {
        "module_class": "ParallelLMHead",
        "quant_method": "UnquantizedEmbeddingMethod",
        "weight_dtype": "torch.bfloat16",
        "weight_shape": [tm.VOCAB, tm.HIDDEN],
        "has_weight_scale": False,
        "weight_scale_attr": None,
    }


def test_fp8_head_reports_quant_method_dtype_and_scale():
    record = facts.describe_lm_head(tm.fp8_lm_head())
    assert record["quant_method"] == "ModelOptFp8LinearMethod"
    assert record["weight_dtype"] == "torch.float8_e4m3fn"
    assert record["has_weight_scale"] is True
    assert record["weight_scale_attr"] == "weight_scale"


def test_block_fp8_scale_name_counts_as_a_scale():
    head = tm.bf16_lm_head()
    head.register_buffer("weight_scale_inv", torch.ones(1))
    record = facts.describe_lm_head(head)
    assert record["has_weight_scale"] is True
    assert record["weight_scale_attr"] == "weight_scale_inv"


def test_missing_head_is_null():
    assert facts.describe_lm_head(None) is None


def test_real_unquantized_fused_moe_is_the_triton_fallback():
    model = tm.TinyLingTarget(tm.bf16_lm_head(), [tm.triton_moe_layer(0), tm.triton_moe_layer(1)])
    assert facts.count_moe_layers(model.modules(), FusedMoE) == {"UnquantizedFusedMoEMethod/triton": 2}


def test_humming_layers_are_keyed_by_method_and_backend_and_look_alikes_are_ignored():
    layers = [tm.humming_moe_layer(0), tm.humming_moe_layer(1), tm.triton_moe_layer(2), tm.LookAlikeMoE()]
    model = tm.TinyLingTarget(tm.bf16_lm_head(), layers)
    assert facts.count_moe_layers(model.modules(), FusedMoE) == {
        "HummingMoEMethod/humming": 2,
        "UnquantizedFusedMoEMethod/triton": 1,
    }


def test_describe_model():
    model = tm.TinyLingTarget(tm.fp8_lm_head(), [tm.humming_moe_layer(0)])
    record = facts.describe_model(model, model.lm_head, FusedMoE)
    assert record["model_class"] == "TinyLingTarget"
    assert record["lm_head"]["quant_method"] == "ModelOptFp8LinearMethod"
    assert record["moe_layers"] == {"HummingMoEMethod/humming": 1}


def test_sharing_same_module():
    head = tm.fp8_lm_head()
    assert facts.lm_head_sharing(head, head) == {"module_shared": True, "weight_shared": True}


def test_sharing_only_the_tensor():
    target, draft = tm.bf16_lm_head(), tm.bf16_lm_head()
    draft.weight = target.weight
    assert facts.lm_head_sharing(target, draft) == {"module_shared": False, "weight_shared": True}


def test_no_sharing():
    assert facts.lm_head_sharing(tm.bf16_lm_head(), tm.bf16_lm_head()) == {
        "module_shared": False,
        "weight_shared": False,
    }


def test_missing_target_head_never_counts_as_shared():
    assert facts.lm_head_sharing(None, None) == {"module_shared": False, "weight_shared": False}


def test_unallocated_weights_never_count_as_shared():
    target, draft = tm.bf16_lm_head(), tm.bf16_lm_head()
    target.weight = torch.nn.Parameter(torch.empty(0), requires_grad=False)
    draft.weight = torch.nn.Parameter(torch.empty(0), requires_grad=False)
    assert facts.lm_head_sharing(target, draft)["weight_shared"] is False
