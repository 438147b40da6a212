"""Torch versions of the sgl-kernel CUDA ops a dense model's forward calls (test-only, correctness over speed).

Callers in SGLang 0.5.23: sglang/srt/layers/layernorm.py (RMSNorm / GemmaRMSNorm forward_cuda) and
sglang/srt/layers/activation.py (SiluAndMul, GeluAndMul forward_cuda). Every op is plain tensor arithmetic with
no host synchronisation, so it is safe inside a captured CUDA graph, and writes into `out` when SGLang passes one.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

__all__ = [
    "fused_add_rmsnorm",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "gemma_fused_add_rmsnorm",
    "gemma_rmsnorm",
    "rmsnorm",
    "silu_and_mul",
    "weak_ref_tensor",
]


def _normalised(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    wide = x.float()
    scaled = wide * torch.rsqrt(wide.pow(2).mean(dim=-1, keepdim=True) + eps)
    return scaled.to(x.dtype) * weight


def _into(out: torch.Tensor | None, value: torch.Tensor) -> torch.Tensor:
    if out is None:
        return value
    out.copy_(value)
    return out


def rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
    return _into(out, _normalised(input, weight, eps))


def fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
    """In place, as the CUDA kernel: residual += input, then input = rmsnorm(residual).

    BailingMoeV3's final norm passes inference tensors outside inference mode, where torch refuses an in-place
    update to them (the CUDA kernel writes through a pointer and never sees the flag): update them under it."""
    inference = input.is_inference() or residual.is_inference()
    with torch.inference_mode() if inference else contextlib.nullcontext():
        residual.add_(input)
        input.copy_(_normalised(residual, weight, eps))


def gemma_rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
    return _into(out, _normalised(input, 1.0 + weight, eps))  # Gemma stores weight - 1


def gemma_fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
    residual.add_(input)
    input.copy_(_normalised(residual, 1.0 + weight, eps))


def _gated(activation, input: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    half = input.shape[-1] // 2
    return _into(out, activation(input[..., :half]) * input[..., half:])


def silu_and_mul(input, out=None, enable_pdl=None):
    return _gated(F.silu, input, out)


def gelu_and_mul(input, out=None, enable_pdl=None):
    return _gated(F.gelu, input, out)


def gelu_tanh_and_mul(input, out=None, enable_pdl=None):
    return _gated(lambda t: F.gelu(t, approximate="tanh"), input, out)


def weak_ref_tensor(tensor):
    # sgl-kernel returns a non-owning alias (the breakable prefill graph keeps outputs alive elsewhere); an owning
    # reference is only less memory-thrifty.
    return tensor
