"""Tiny CPU models with the attribute layout the probe reads on the real Ling models.

Layers are SGLang's own classes (ParallelLMHead, VocabParallelEmbedding, FusedMoE) built on the CPU;
only the model shells are ours, shaped like BailingMoeV3ForCausalLM (target) and
BailingMoeForCausalLMNextN (draft): ``model.word_embeddings``, MoE layers, ``lm_head``,
``get_embed_and_head`` / ``set_embed_and_head``. Building them needs the ``cpu_runtime_context``
fixture.
"""

from __future__ import annotations

import torch
from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE
from sglang.srt.layers.moe.utils import MoeRunnerBackend
from sglang.srt.layers.quantization.humming import HummingMoEMethod
from sglang.srt.layers.quantization.modelopt_quant import ModelOptFp8Config
from sglang.srt.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from torch import nn

VOCAB = 64
HIDDEN = 16


def bf16_lm_head() -> ParallelLMHead:
    """Stock Ling head: UnquantizedEmbeddingMethod over a BF16 weight."""
    return ParallelLMHead(VOCAB, HIDDEN, params_dtype=torch.bfloat16, prefix="lm_head")


def fp8_lm_head() -> ParallelLMHead:
    """A real FP8 head: ModelOpt FP8 gives ModelOptFp8LinearMethod, an e4m3 weight and weight_scale."""
    config = ModelOptFp8Config(is_checkpoint_fp8_serialized=True, exclude_modules=[], packed_modules_mapping={})
    return ParallelLMHead(VOCAB, HIDDEN, quant_config=config, params_dtype=torch.bfloat16, prefix="lm_head")


def triton_moe_layer(layer_id: int) -> FusedMoE:
    """A real unquantized FusedMoE: UnquantizedFusedMoEMethod on the Triton runner.

    This is exactly what Humming's silent fallback leaves behind.
    """
    return FusedMoE(num_experts=4, hidden_size=HIDDEN, intermediate_size=32, top_k=2, layer_id=layer_id)


def humming_moe_layer(layer_id: int) -> FusedMoE:
    """A real FusedMoE carrying what a Humming-prepared layer carries.

    HummingMoEMethod needs humming-kernels and a GPU to initialise, so the instance is
    created without __init__; the probe reads only its class and the runner backend.
    """
    layer = triton_moe_layer(layer_id)
    # The unquantized method is a registered child module; a plain object cannot replace it in place.
    del layer.quant_method
    layer.quant_method = HummingMoEMethod.__new__(HummingMoEMethod)
    layer.runner_backend = MoeRunnerBackend.HUMMING
    return layer


class LookAlikeMoE(nn.Module):
    """Has the attributes but is not a FusedMoE: must not be counted."""

    def __init__(self) -> None:
        super().__init__()
        self.quant_method = HummingMoEMethod.__new__(HummingMoEMethod)
        self.runner_backend = MoeRunnerBackend.HUMMING


class _Decoder(nn.Module):
    def __init__(self, moe_layers) -> None:
        super().__init__()
        self.word_embeddings = VocabParallelEmbedding(VOCAB, HIDDEN, params_dtype=torch.bfloat16)
        self.layers = nn.ModuleList(moe_layers)


class TinyLingTarget(nn.Module):
    def __init__(self, lm_head: nn.Module, moe_layers) -> None:
        super().__init__()
        self.model = _Decoder(moe_layers)
        self.lm_head = lm_head

    def get_embed_and_head(self):
        return self.model.word_embeddings.weight, self.lm_head.weight


class TinyNextNDraft(nn.Module):
    """Like BailingMoeForCausalLMNextN in 0.5.23: shares the target's tensors, keeps its own head module."""

    def __init__(self, moe_layers) -> None:
        super().__init__()
        self.model = _Decoder(moe_layers)
        self.lm_head = bf16_lm_head()

    def set_embed_and_head(self, embed, head) -> None:
        del self.model.word_embeddings.weight
        del self.lm_head.weight
        self.model.word_embeddings.weight = embed
        self.lm_head.weight = head


class TinyNextNDraftSharingHead(TinyNextNDraft):
    """The fix the FP8-head image needs: take the target's head module (as qwen3_5_mtp does)."""

    def set_lm_head_from_target(self, lm_head: nn.Module) -> None:
        self.lm_head = lm_head
