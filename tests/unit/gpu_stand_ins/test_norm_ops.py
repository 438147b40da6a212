"""The GPU lane's torch stand-in for sgl-kernel's fused_add_rmsnorm (tests/gpu/stand_ins/sgl_kernel_cuda/_norm_ops.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

OPS = Path(__file__).resolve().parents[2] / "gpu" / "stand_ins" / "sgl_kernel_cuda" / "_norm_ops.py"
_spec = importlib.util.spec_from_file_location("sparkgate_test_sgl_kernel_cuda_norm", OPS)
norm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(norm)


def _expected(x, residual, weight, eps):
    summed = residual + x
    return summed * torch.rsqrt(summed.float().pow(2).mean(-1, keepdim=True) + eps).to(summed.dtype) * weight, summed


@pytest.mark.parametrize("inference", [False, True])
def test_fused_add_rmsnorm_updates_in_place_also_on_inference_tensors_outside_inference_mode(inference):
    """BailingMoeV3's final norm passes tensors made under inference mode to the op outside it (seen on CUDA)."""
    generator = torch.Generator().manual_seed(3)
    make = (lambda: torch.randn(2, 8, generator=generator))
    if inference:
        with torch.inference_mode():
            x, residual = make(), make()
    else:
        x, residual = make(), make()
    weight = torch.rand(8, generator=generator) + 0.5
    want_out, want_residual = _expected(x.clone(), residual.clone(), weight, 1e-6)
    assert x.is_inference() is inference
    norm.fused_add_rmsnorm(x, residual, weight, 1e-6)
    torch.testing.assert_close(residual, want_residual)
    torch.testing.assert_close(x, want_out, rtol=1e-5, atol=1e-5)
