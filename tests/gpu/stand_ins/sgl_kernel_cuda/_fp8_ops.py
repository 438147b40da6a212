"""Torch version of the one sgl-kernel CUDA op SGLang 0.5.23's online FP8 linear path calls on SM90 (test-only).

With `--quantization fp8` on a bf16 checkpoint, Fp8LinearMethod (sglang/srt/layers/quantization/fp8.py) sees
cutlass_fp8_supported() true on SM90 (CUDA >= 12, sglang/srt/layers/quantization/fp8_utils.py), so it quantizes each
weight per output channel at load and apply_fp8_linear quantizes activations per token; both quantizations are
SGLang's own JIT kernel (sglang/kernels/ops/quantization/per_token_quant_fp8.py), not sgl-kernel. The GEMM goes to
sglang.kernels.ops.gemm.fp8_scaled_mm, whose AOT backend calls `sgl_kernel.fp8_scaled_mm` (implemented here).
It runs inside the captured decode CUDA graph: no host synchronisation, the path chosen from shapes and dtypes only.
"""

from __future__ import annotations

import torch

__all__ = [
    "fp8_scaled_mm",
]

_FP8 = torch.float8_e4m3fn
_FP8_MAX = torch.finfo(_FP8).max  # 448.0


def _row_scales(scales: torch.Tensor, rows: int) -> torch.Tensor:
    """A [rows, 1] float32 scale from a per-row ([rows] / [rows, 1]) or a scalar one."""
    flat = scales.reshape(-1).float()
    return flat.expand(rows).reshape(rows, 1).contiguous() if flat.numel() == 1 else flat.reshape(rows, 1)


def _col_scales(scales: torch.Tensor, cols: int) -> torch.Tensor:
    """A [1, cols] float32 scale from a per-column ([cols] / [1, cols] / [cols, 1]) or a scalar one."""
    flat = scales.reshape(-1).float()
    return flat.expand(cols).reshape(1, cols).contiguous() if flat.numel() == 1 else flat.reshape(1, cols)


def _dequantized_mm(mat_a, mat_b, row_scale, col_scale, out_dtype, bias):
    """The reference math: (A @ B) * row_scale * col_scale (+ bias) in float32, then cast."""
    out = torch.matmul(mat_a.float(), mat_b.float()) * row_scale * col_scale
    if bias is not None:
        out = out + bias.float()
    return out.to(out_dtype)


def _torch_scaled_mm_fits(mat_a: torch.Tensor, mat_b: torch.Tensor, out_dtype: torch.dtype) -> bool:
    # torch._scaled_mm's row-wise scaling (SM90): e4m3 operands, A row-major and B column-major, K and N
    # multiples of 16, bf16 output. Anything else takes the float32 reference path.
    return (
        mat_a.is_cuda
        and mat_a.dtype == _FP8
        and mat_b.dtype == _FP8
        and out_dtype == torch.bfloat16
        and mat_a.dim() == 2
        and mat_b.dim() == 2
        and mat_a.stride(1) == 1
        and mat_b.stride(0) == 1
        and mat_a.shape[1] % 16 == 0
        and mat_b.shape[1] % 16 == 0
    )


def fp8_scaled_mm(
    mat_a: torch.Tensor,
    mat_b: torch.Tensor,
    scales_a: torch.Tensor,
    scales_b: torch.Tensor,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """out[M, N] = (mat_a[M, K] @ mat_b[K, N]) * scales_a[m] * scales_b[n] (+ bias[n]), a new out_dtype tensor.

    Caller: sglang/kernels/ops/gemm/__init__.py Fp8ScaledMMOp.forward_aot, positionally
    (mat_a, mat_b, scales_a, scales_b, out_dtype, bias), from apply_fp8_linear in
    sglang/srt/layers/quantization/fp8_utils.py with qinput [M, K] (row-major e4m3), the weight as [K, N]
    (the transpose of a row-major [N, K], so column-major), x_scale [M, 1] float32 per token and
    weight_scale [1, N] float32 per channel. A scalar scale on either side (static per-tensor schemes) is
    broadcast to per-row / per-column.
    """
    m, n = mat_a.shape[0], mat_b.shape[1]
    row_scale = _row_scales(scales_a, m)
    col_scale = _col_scales(scales_b, n)
    if not _torch_scaled_mm_fits(mat_a, mat_b, out_dtype):
        return _dequantized_mm(mat_a, mat_b, row_scale, col_scale, out_dtype, bias)
    out = torch._scaled_mm(
        mat_a,
        mat_b,
        scale_a=row_scale.contiguous(),
        scale_b=col_scale.contiguous(),
        out_dtype=out_dtype,
        use_fast_accum=False,  # correctness first
    )
    if bias is not None:
        out = out + bias.to(out.dtype)
    return out


def _per_token_quant_fp8(x: torch.Tensor, eps: float = 1e-10) -> tuple[torch.Tensor, torch.Tensor]:
    """What SGLang's per-token FP8 quant produces (the inputs of fp8_scaled_mm): q [M, K] e4m3 and
    scale [M, 1] float32 with x ~= q * scale, scale = max(|x| per row, eps) / 448. Not exported; the unit tests
    use it to build operands exactly as SGLang lays them out."""
    wide = x.float()
    scale = wide.abs().amax(dim=-1, keepdim=True).clamp(min=eps) / _FP8_MAX
    q = (wide / scale).clamp(-_FP8_MAX, _FP8_MAX).to(_FP8)
    return q, scale
