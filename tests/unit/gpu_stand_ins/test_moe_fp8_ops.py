"""The torch stand-ins of sgl-kernel's MoE and FP8 CUDA ops (tests/gpu/stand_ins/sgl_kernel_cuda), on CPU tensors.

Each op is checked against a straightforward reference and against the contract its SGLang 0.5.23 consumer reads:
moe_align_block_size's buffers as the fused_moe Triton kernel walks them, fp8_scaled_mm's operands laid out as
apply_fp8_linear passes them. The modules are loaded from their files: the stand-in package itself is only
assembled for the GPU server (tests/gpu/site.py).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

OPS_DIR = Path(__file__).resolve().parents[2] / "gpu" / "stand_ins" / "sgl_kernel_cuda"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"sparkgate_test_sgl_kernel_cuda_{name}", OPS_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


moe = _load("_moe_ops")
fp8 = _load("_fp8_ops")

GARBAGE = -7  # what the preallocated buffers hold before the op; torch.empty would hold anything


# -- moe_align_block_size ------------------------------------------------------------------------------------


def _sglang_buffers(topk_ids: torch.Tensor, block_size: int, num_experts: int):
    """The buffers sglang/srt/layers/moe/moe_runner/triton_utils/moe_align_block_size.py allocates."""
    numel = topk_ids.numel()
    max_padded = numel * block_size if numel < num_experts + 1 else numel + (num_experts + 1) * (block_size - 1)
    max_padded = (max_padded + 3) // 4 * 4
    sorted_ids = torch.full((max_padded,), GARBAGE, dtype=torch.int32)
    expert_ids = torch.full((math.ceil(max_padded / block_size),), GARBAGE, dtype=torch.int32)
    post_pad = torch.full((1,), GARBAGE, dtype=torch.int32)
    cumsum = torch.full((num_experts + 2,), GARBAGE, dtype=torch.int32)
    return sorted_ids, expert_ids, post_pad, cumsum


def _align(topk_ids, block_size, num_experts, pad=True):
    """Call the op exactly as SGLang does (num_experts + 1 buckets, 8 positional arguments)."""
    buffers = _sglang_buffers(topk_ids, block_size, num_experts)
    pointers = [b.data_ptr() for b in buffers]
    moe.moe_align_block_size(topk_ids, num_experts + 1, block_size, *buffers, pad)
    assert [b.data_ptr() for b in buffers] == pointers, "outputs must stay in the preallocated storage"
    return buffers


def _reference_align(topk_ids: torch.Tensor, block_size: int, num_experts: int):
    """Plain Python: bucket e + 1, pairs in flat order inside a bucket, each bucket padded to block_size."""
    flat = topk_ids.reshape(-1).tolist()
    numel = len(flat)
    sorted_ids, expert_ids = [], []
    for bucket in range(num_experts + 1):
        members = [i for i, e in enumerate(flat) if e + 1 == bucket]
        padded = -(-len(members) // block_size) * block_size
        sorted_ids += members + [numel] * (padded - len(members))
        expert_ids += [bucket - 1] * (padded // block_size)
    return sorted_ids, expert_ids


def _routed_topk_ids(num_tokens: int, top_k: int, num_experts: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    scores = torch.rand(num_tokens, num_experts, generator=generator)
    return scores.topk(top_k, dim=-1).indices.to(torch.int32)  # distinct experts per token, like TopK


@pytest.mark.parametrize(
    ("num_tokens", "top_k", "num_experts", "block_size"),
    [(1, 2, 8, 16), (3, 2, 8, 16), (40, 2, 8, 16), (40, 2, 8, 64), (257, 6, 64, 32), (5, 1, 4, 1)],
)
def test_align_matches_the_reference_and_the_kernel_contract(num_tokens, top_k, num_experts, block_size):
    topk_ids = _routed_topk_ids(num_tokens, top_k, num_experts, seed=num_tokens * 31 + block_size)
    numel = topk_ids.numel()
    sorted_ids, expert_ids, post_pad, cumsum = _align(topk_ids, block_size, num_experts)
    want_sorted, want_experts = _reference_align(topk_ids, block_size, num_experts)
    total = len(want_sorted)

    assert post_pad.tolist() == [total]
    assert total % block_size == 0
    assert sorted_ids[:total].tolist() == want_sorted
    assert sorted_ids[total:].eq(numel).all(), "every slot past the padded total holds the sentinel numel"
    assert expert_ids[: total // block_size].tolist() == want_experts
    assert expert_ids[total // block_size :].eq(-1).all()

    # Every (token, slot) pair appears exactly once; every other slot is the sentinel.
    real = sorted_ids[sorted_ids < numel]
    assert sorted(real.tolist()) == list(range(numel))
    # Blocks are expert-homogeneous, and experts come in ascending order.
    flat = topk_ids.reshape(-1)
    for block, expert in enumerate(expert_ids[: total // block_size].tolist()):
        rows = sorted_ids[block * block_size : (block + 1) * block_size]
        rows = rows[rows < numel].long()
        assert rows.numel() > 0, "padding never fills a whole block"
        assert flat[rows].eq(expert).all()
    assert expert_ids[: total // block_size].diff().ge(0).all()
    # The scratch buffer holds the padded bucket starts (and the total).
    starts = [0]
    for bucket in range(num_experts + 1):
        count = int((flat + 1).eq(bucket).sum())
        starts.append(starts[-1] + -(-count // block_size) * block_size)
    assert cumsum.tolist() == starts


def test_align_puts_ep_filtered_ids_first_as_expert_minus_one():
    topk_ids = torch.tensor([[2, -1], [-1, 0], [3, 2]], dtype=torch.int32)
    sorted_ids, expert_ids, post_pad, _ = _align(topk_ids, block_size=4, num_experts=4)
    numel = topk_ids.numel()
    assert post_pad.tolist() == [16]
    assert sorted_ids[:16].tolist() == [1, 2, numel, numel, 3, numel, numel, numel, 0, 5, numel, numel,
                                        4, numel, numel, numel]
    assert expert_ids[:4].tolist() == [-1, 0, 2, 3]


def test_align_accepts_int64_ids_and_an_empty_batch():
    topk_ids = _routed_topk_ids(7, 2, 8, seed=3).long()
    sorted_ids, expert_ids, post_pad, _ = _align(topk_ids, 16, 8)
    want_sorted, want_experts = _reference_align(topk_ids, 16, 8)
    assert sorted_ids[: len(want_sorted)].tolist() == want_sorted
    assert expert_ids[: len(want_experts)].tolist() == want_experts

    empty = torch.empty((0, 2), dtype=torch.int32)
    sorted_ids = torch.full((4,), GARBAGE, dtype=torch.int32)
    expert_ids = torch.full((1,), GARBAGE, dtype=torch.int32)
    post_pad = torch.full((1,), GARBAGE, dtype=torch.int32)
    cumsum = torch.full((10,), GARBAGE, dtype=torch.int32)
    moe.moe_align_block_size(empty, 9, 16, sorted_ids, expert_ids, post_pad, cumsum, True)
    assert post_pad.tolist() == [0]
    assert sorted_ids.eq(0).all()  # the sentinel is numel == 0
    assert expert_ids.tolist() == [-1]


def test_align_without_padding_leaves_the_pad_slots_alone():
    topk_ids = torch.tensor([[0, 1]], dtype=torch.int32)
    sorted_ids, _, post_pad, _ = _align(topk_ids, block_size=4, num_experts=2, pad=False)
    assert post_pad.tolist() == [8]
    assert sorted_ids.tolist() == [0, GARBAGE, GARBAGE, GARBAGE, 1, GARBAGE, GARBAGE, GARBAGE]


def test_align_ignoring_invalid_experts_is_the_same_layout_when_no_id_is_minus_one():
    """Humming's indexed GEMM asks for ignore_invalid_expert=True; on one GPU no id is -1."""
    topk_ids = _routed_topk_ids(9, 4, 16, seed=5)
    plain = _align(topk_ids, 16, 16)
    buffers = _sglang_buffers(topk_ids, 16, 16)
    moe.moe_align_block_size(topk_ids, 17, 16, *buffers, True, True)
    assert [b.tolist() for b in buffers] == [b.tolist() for b in plain]


def test_align_ignoring_invalid_experts_leaves_minus_one_pairs_out():
    topk_ids = torch.tensor([[2, -1], [-1, 0], [3, 2]], dtype=torch.int32)
    sorted_ids, expert_ids, post_pad, _ = buffers = _sglang_buffers(topk_ids, 4, 4)
    moe.moe_align_block_size(topk_ids, 5, 4, *buffers, True, True)
    numel = topk_ids.numel()
    assert post_pad.tolist() == [12]
    assert sorted_ids[:12].tolist() == [3, numel, numel, numel, 0, 5, numel, numel, 4, numel, numel, numel]
    assert expert_ids[:3].tolist() == [0, 2, 3]
    assert sorted(i for i in sorted_ids.tolist() if i < numel) == [0, 3, 4, 5]  # pairs 1 and 2 (the -1 ids) gone


def _fused_moe_like_the_triton_kernel(x, w1, w2, topk_weights, topk_ids, block_size):
    """The two grouped GEMMs of sglang's fused_moe, walking the aligned buffers the way its Triton kernel does:
    blocks up to num_tokens_post_padded, rows with sorted id < numel, row -> token id // top_k, the block's
    expert from expert_ids, the router weight applied on the second GEMM, then the sum over top_k."""
    num_tokens, top_k = topk_ids.shape
    numel = topk_ids.numel()
    sorted_ids, expert_ids, post_pad, _ = _align(topk_ids, block_size, w1.shape[0])
    inter = torch.zeros(numel, w1.shape[1])
    out = torch.zeros(numel, w2.shape[1])
    flat_weights = topk_weights.reshape(-1)
    for block in range(int(post_pad[0]) // block_size):
        rows = sorted_ids[block * block_size : (block + 1) * block_size].long()
        rows = rows[rows < numel]
        expert = int(expert_ids[block])
        inter[rows] = x[rows // top_k] @ w1[expert].T
    gate, up = inter.chunk(2, dim=-1)
    act = torch.nn.functional.silu(gate) * up
    for block in range(int(post_pad[0]) // block_size):
        rows = sorted_ids[block * block_size : (block + 1) * block_size].long()
        rows = rows[rows < numel]
        expert = int(expert_ids[block])
        out[rows] = (act[rows] @ w2[expert].T) * flat_weights[rows, None]
    return out.view(num_tokens, top_k, -1)


def test_the_aligned_buffers_drive_a_correct_moe_forward():
    generator = torch.Generator().manual_seed(11)
    num_tokens, hidden, inter, num_experts, top_k, scale = 9, 8, 6, 8, 2, 2.5
    x = torch.randn(num_tokens, hidden, generator=generator)
    w1 = torch.randn(num_experts, 2 * inter, hidden, generator=generator)
    w2 = torch.randn(num_experts, hidden, inter, generator=generator)
    topk_ids = _routed_topk_ids(num_tokens, top_k, num_experts, seed=5)
    topk_weights = torch.rand(num_tokens, top_k, generator=generator)

    per_slot = _fused_moe_like_the_triton_kernel(x, w1, w2, topk_weights, topk_ids, block_size=4)
    combined = torch.empty(num_tokens, hidden)
    moe.moe_sum_reduce(per_slot, combined, scale)

    want = torch.zeros(num_tokens, hidden)
    for t in range(num_tokens):
        for k in range(top_k):
            e = int(topk_ids[t, k])
            g, u = (w1[e] @ x[t]).chunk(2)
            want[t] += topk_weights[t, k] * (w2[e] @ (torch.nn.functional.silu(g) * u))
    torch.testing.assert_close(combined, want * scale, rtol=1e-5, atol=1e-5)


# -- moe_sum_reduce -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_moe_sum_reduce_sums_top_k_scales_and_writes_in_place(dtype):
    generator = torch.Generator().manual_seed(2)
    inp = torch.randn(33, 6, 64, generator=generator).to(dtype)
    out = torch.full((33, 64), 123.0, dtype=dtype)
    pointer = out.data_ptr()
    moe.moe_sum_reduce(inp, out, 2.5)
    assert out.data_ptr() == pointer and out.dtype == dtype
    torch.testing.assert_close(out, (inp.float().sum(dim=1) * 2.5).to(dtype))


# -- FP8 ------------------------------------------------------------------------------------------------------


def test_per_token_quant_round_trip_error_is_bounded():
    generator = torch.Generator().manual_seed(4)
    x = (torch.randn(17, 64, generator=generator) * torch.logspace(-3, 2, 17)[:, None]).to(torch.bfloat16)
    q, scale = fp8._per_token_quant_fp8(x)
    assert q.dtype == torch.float8_e4m3fn and q.shape == x.shape
    assert scale.dtype == torch.float32 and scale.shape == (17, 1)
    absmax = x.float().abs().amax(dim=-1, keepdim=True)
    torch.testing.assert_close(q.float().abs().amax(dim=-1, keepdim=True), torch.full((17, 1), 448.0))
    error = (q.float() * scale - x.float()).abs()
    # e4m3 keeps 3 mantissa bits: a rounding error of at most 2**-4 of the value, below the row's absmax.
    assert (error <= absmax * 2**-4 + 1e-12).all()


def _sglang_fp8_operands(m: int, k: int, n: int, seed: int):
    """Operands as apply_fp8_linear passes them: per-token qinput [M, K] with x_scale [M, 1], and the
    per-channel weight of Fp8LinearMethod.process_weights_after_loading: q(W).t() ([K, N], column-major)
    with weight_scale [1, N]."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=generator).to(torch.bfloat16)
    w = (torch.randn(n, k, generator=generator) * 0.05).to(torch.bfloat16)
    qx, x_scale = fp8._per_token_quant_fp8(x)
    qw, w_scale = fp8._per_token_quant_fp8(w)
    return x, w, qx, x_scale, qw.t(), w_scale.t().contiguous()


@pytest.mark.parametrize(("m", "k", "n"), [(1, 64, 128), (5, 64, 64), (32, 128, 64), (3, 64, 256)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_fp8_scaled_mm_equals_the_dequantized_matmul(m, k, n, with_bias):
    x, w, qx, x_scale, weight, weight_scale = _sglang_fp8_operands(m, k, n, seed=m + k + n)
    assert weight.stride(0) == 1, "the weight reaches the op column-major"
    bias = torch.randn(n).to(torch.bfloat16) if with_bias else None

    out = fp8.fp8_scaled_mm(qx, weight, x_scale, weight_scale, torch.bfloat16, bias)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16

    dequantized = (qx.float() * x_scale) @ (weight.float() * weight_scale)
    if bias is not None:
        dequantized = dequantized + bias.float()
    torch.testing.assert_close(out, dequantized.to(torch.bfloat16), rtol=1e-2, atol=1e-2)
    # And the FP8 product stays near the bf16 linear layer it replaces.
    exact = x.float() @ w.float().t() + (bias.float() if bias is not None else 0.0)
    assert (out.float() - exact).abs().max() <= 0.05 * exact.abs().max()


def test_fp8_scaled_mm_accepts_flat_and_scalar_scales_and_other_output_dtypes():
    _, _, qx, x_scale, weight, weight_scale = _sglang_fp8_operands(4, 64, 32, seed=9)
    want = (qx.float() * x_scale) @ (weight.float() * weight_scale)
    flat = fp8.fp8_scaled_mm(qx, weight, x_scale.reshape(-1), weight_scale.reshape(-1), torch.float16)
    assert flat.dtype == torch.float16
    torch.testing.assert_close(flat.float(), want, rtol=1e-2, atol=1e-2)

    scalar_a, scalar_b = torch.tensor(0.02), torch.tensor([0.003])
    per_tensor = fp8.fp8_scaled_mm(qx, weight, scalar_a, scalar_b, torch.float32)
    torch.testing.assert_close(per_tensor, (qx.float() @ weight.float()) * 0.02 * 0.003, rtol=1e-5, atol=1e-6)


def test_the_reference_path_and_its_scale_helpers():
    assert fp8._row_scales(torch.tensor([2.0]), 3).tolist() == [[2.0], [2.0], [2.0]]
    assert fp8._row_scales(torch.arange(3.0).view(3, 1), 3).shape == (3, 1)
    assert fp8._col_scales(torch.tensor(5.0), 2).tolist() == [[5.0, 5.0]]
    assert fp8._col_scales(torch.arange(4.0).view(4, 1), 4).tolist() == [[0.0, 1.0, 2.0, 3.0]]
    a = torch.tensor([[1.0, 2.0]]).to(torch.float8_e4m3fn)
    b = torch.tensor([[1.0], [1.0]]).to(torch.float8_e4m3fn)
    out = fp8._dequantized_mm(a, b, torch.tensor([[0.5]]), torch.tensor([[4.0]]), torch.float32, torch.tensor([1.0]))
    assert out.tolist() == [[7.0]]
    # CPU tensors never take torch._scaled_mm (it is chosen only for CUDA operands of the supported layout).
    assert not fp8._torch_scaled_mm_fits(a, b, torch.bfloat16)


def test_only_the_called_ops_are_exported():
    assert moe.__all__ == ["moe_align_block_size", "moe_sum_reduce"]
    assert fp8.__all__ == ["fp8_scaled_mm"]
