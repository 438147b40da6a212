"""Torch versions of the sgl-kernel CUDA ops SGLang 0.5.23's Triton fused-MoE path calls (test-only).

Callers: sglang/srt/layers/moe/moe_runner/triton_utils/moe_align_block_size.py (through the AOT KernelSpec
`sgl_kernel:moe_align_block_size` of sglang/kernels/ops/moe/__init__.py) and
sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe.py (`from sgl_kernel import moe_sum_reduce`). Both run
inside the captured decode CUDA graph, so every op here has fixed output shapes, no host synchronisation and no
Python branch on tensor values, and writes into the buffers SGLang preallocated (same storage).
"""

from __future__ import annotations

import torch

__all__ = [
    "moe_align_block_size",
    "moe_sum_reduce",
]


def moe_align_block_size(
    topk_ids: torch.Tensor,
    num_experts: int,
    block_size: int,
    sorted_token_ids: torch.Tensor,
    experts_ids: torch.Tensor,
    num_tokens_post_pad: torch.Tensor,
    cumsum_buffer: torch.Tensor,
    pad_sorted_token_ids: bool = False,
    ignore_invalid_expert: bool = False,
) -> None:
    """Sort the flattened (token, slot) pairs by expert into block_size-padded, expert-homogeneous blocks.

    Caller: sglang/srt/layers/moe/moe_runner/triton_utils/moe_align_block_size.py passes
    (topk_ids, E + 1, block_size, sorted_ids, expert_ids, num_tokens_post_pad, cumsum_buffer, True).
    The "+1 bucket" convention of the CUDA kernel: expert id e goes to bucket e + 1, so bucket 0 holds the
    -1 ids of experts another EP rank owns, and `num_experts` counts that bucket. Each bucket is padded up to a
    multiple of block_size and the buckets are laid out in order. Outputs, in place:
    - sorted_token_ids[pos]: the flat index i of topk_ids.view(-1) (ascending within a bucket), and where
      pad_sorted_token_ids the whole buffer is first filled with numel, the sentinel the fused_moe Triton kernel
      masks out (`offs_token < num_valid_tokens`);
    - experts_ids[block]: bucket - 1 (the expert id; -1 for bucket 0) for every block below the padded total,
      and -1 past it (the kernel returns before reading those; -1 also matches its pad_expert_ids mode);
    - num_tokens_post_pad[0]: the padded total;
    - cumsum_buffer[: num_experts + 1]: the padded bucket starts (scratch; SGLang never reads it back).
    Ids must lie in [-1, num_experts - 2], as for the CUDA kernel (an id outside indexes out of range).

    With ignore_invalid_expert (Humming's indexed GEMM, sglang/srt/layers/moe/moe_runner/humming.py, passes it) a -1
    id is left out: bucket 0 stays empty and no sorted slot names its pair. On one GPU no id is -1, so the layout is
    the one above either way. Everything stays on the device (no host sync): safe inside CUDA-graph capture.
    """
    device = topk_ids.device
    numel = topk_ids.numel()
    buckets = topk_ids.reshape(-1).to(torch.int64) + 1

    counts = torch.zeros(num_experts, dtype=torch.int64, device=device)
    counts.scatter_add_(0, buckets, torch.ones_like(buckets))
    raw_start = torch.cumsum(counts, 0) - counts  # where each bucket starts in the stably sorted pairs
    if ignore_invalid_expert:
        counts[:1].zero_()  # a kernel, not a host-to-device copy: capture-safe
    padded = (counts + (block_size - 1)) // block_size * block_size
    padded_end = torch.cumsum(padded, 0)  # inclusive
    padded_start = padded_end - padded
    total = padded_end[-1:]  # shape [1], stays on the device

    # A stable sort keeps the pairs of one bucket in flat-index order; its rank inside the bucket is its
    # position in the sorted list minus the bucket's unpadded start.
    sorted_buckets, order = torch.sort(buckets, stable=True)
    rank = torch.arange(numel, dtype=torch.int64, device=device) - raw_start[sorted_buckets]
    destination = padded_start[sorted_buckets] + rank
    if pad_sorted_token_ids:
        sorted_token_ids.fill_(numel)
    if ignore_invalid_expert:
        # An ignored pair's slot is one past the end of a scratch copy, dropped with it.
        scratch = torch.cat([sorted_token_ids, sorted_token_ids[:1]])
        destination = torch.where(sorted_buckets > 0, destination, sorted_token_ids.numel())
        scratch.scatter_(0, destination, order.to(scratch.dtype))
        sorted_token_ids.copy_(scratch[:-1])
    else:
        sorted_token_ids.scatter_(0, destination, order.to(sorted_token_ids.dtype))

    # The bucket of block b is the first one whose padded end lies past the block's first row.
    block_starts = torch.arange(experts_ids.numel(), dtype=torch.int64, device=device) * block_size
    owner = torch.searchsorted(padded_end, block_starts, right=True)
    experts_ids.copy_(torch.where(block_starts < total, owner - 1, -1).to(experts_ids.dtype))

    num_tokens_post_pad[:1].copy_(total.to(num_tokens_post_pad.dtype))
    width = min(num_experts + 1, cumsum_buffer.numel())
    starts = torch.cat([padded_start, total])
    cumsum_buffer[:width].copy_(starts[:width].to(cumsum_buffer.dtype))


def moe_sum_reduce(input: torch.Tensor, output: torch.Tensor, routed_scaling_factor: float) -> None:
    """output[t] = routed_scaling_factor * sum_k input[t, k], accumulated in float32, written in place.

    Caller: sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe.py moe_combine_topk, on CUDA when a batch has
    more than 32 tokens and the top-k is not the (topk == 2, scale 1.0) case it adds with torch.add; smaller
    batches take SGLang's Triton moe_sum_reduce_triton. input is [tokens, topk, hidden], output [tokens, hidden].
    """
    output.copy_(input.float().sum(dim=1).mul_(float(routed_scaling_factor)))
