"""Torch versions of sgl-kernel's CPU speculative bookkeeping ops (csrc/cpu/spec.cpp), test-only.

Each function takes the arguments SGLang 0.5.23 passes (callers named per function) and mutates its
output tensors in place like the C++ op. Where 0.5.23 ships a Triton twin of an op
(sglang/kernels/ops/speculative/spec_tree.py, reconstruct_tree.py), the loop structure follows that
twin, since it is the contract the 0.5.23 callers were written against. Batches on the test machine
are tiny, so plain Python loops over the batch are fine.
"""

from __future__ import annotations

import ctypes

import torch


def _ints(t: torch.Tensor) -> list[int]:
    return [int(x) for x in t.reshape(-1).tolist()]


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """req_to_token[rpi[i], start[i]:end[i]] = out_cache_loc[prefix[i]:prefix[i+1]]
    (caller: sglang/srt/mem_cache/allocation.py assign_req_to_token_pool_func)."""
    offset = 0
    for req, start, end in zip(_ints(req_pool_indices), _ints(start_offset), _ints(end_offset), strict=True):
        n = end - start
        if n > 0:
            req_to_token[req, start:end] = out_cache_loc[offset : offset + n].to(req_to_token.dtype)
        offset += n


def assign_extend_cache_locs_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """The gather twin of assign_req_to_token_pool_cpu: out_cache_loc[prefix[i]:prefix[i+1]] =
    req_to_token[rpi[i], start[i]:end[i]] (caller: sglang/kernels/ops/speculative/cache_locs.py)."""
    offset = 0
    for req, start, end in zip(_ints(req_pool_indices), _ints(start_offset), _ints(end_offset), strict=True):
        n = end - start
        if n > 0:
            out_cache_loc[offset : offset + n] = req_to_token[req, start:end].to(out_cache_loc.dtype)
        offset += n


def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
    topk: int,
    num_steps: int,
) -> None:
    """Per request, the topk*num_steps draft slots from seq_lens[i] on (cache_locs.py)."""
    width = topk * num_steps
    assert out_cache_loc.numel() == req_pool_indices.numel() * width, "out_cache_loc has the wrong size"
    for i, (req, start) in enumerate(zip(_ints(req_pool_indices), _ints(seq_lens), strict=True)):
        out_cache_loc[i * width : (i + 1) * width] = req_to_token[req, start : start + width].to(out_cache_loc.dtype)


def build_draft_decode_metadata_cpu(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    topk: int,
    num_steps: int,
    pool_len: int,
) -> torch.Tensor:
    """A [num_seqs*topk, pool_len] table: row b*topk+k is request b's prefix, then candidate k's draft
    slots (laid out at seq_len + k*num_steps), for the multi-step draft decode
    (caller: sglang/srt/layers/attention/intel_amx_backend.py IntelAMXMultiStepDraftBackend)."""
    reqs, lens = _ints(req_pool_indices), _ints(seq_lens)
    # Zeros, not empty: only the first seq_len + num_steps entries of a row are defined.
    out = torch.zeros((len(reqs) * topk, pool_len), dtype=req_to_token.dtype, device=req_to_token.device)
    for b, (req, sl) in enumerate(zip(reqs, lens, strict=True)):
        src = req_to_token[req]
        for k in range(topk):
            row = out[b * topk + k]
            row[:sl] = src[:sl]
            draft_start = sl + k * num_steps
            row[sl : sl + num_steps] = src[draft_start : draft_start + num_steps]
    return out


def fill_bonus_tokens_cpu(
    accept_tokens: torch.Tensor, accept_lens: torch.Tensor, bonus_tokens: torch.Tensor, accept_stride: int
) -> None:
    """bonus_tokens[i] = accept_tokens.flat[accept_stride*i + accept_lens[i] - 1] (speculative/eagle.py)."""
    bs = accept_lens.shape[0]
    index = torch.arange(bs, dtype=torch.int64) * accept_stride + accept_lens.to(torch.int64) - 1
    bonus_tokens.copy_(accept_tokens.reshape(-1)[index].to(bonus_tokens.dtype))


def fill_accept_out_cache_loc_cpu(
    accept_index: torch.Tensor, out_cache_loc: torch.Tensor, accept_out_cache_loc: torch.Tensor
) -> None:
    """Compact the accepted tokens' KV slots in order, skipping -1 (speculative/eagle.py)."""
    flat = accept_index.reshape(-1).to(torch.int64)
    values = out_cache_loc[flat[flat > -1]]
    accept_out_cache_loc[: values.numel()] = values.to(accept_out_cache_loc.dtype)


def verify_tree_greedy_cpu(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    target_predict: torch.Tensor,
) -> None:
    """Greedy tree verification (speculative/spec_tree.py verify_tree_greedy_func, keyword call): walk
    each request's draft tree from the root and accept the longest path whose draft tokens equal the
    target's argmax. Writes predicts (flat, by tree slot), accept_index (slots of the accepted tokens,
    other entries untouched) and accept_token_num (accepted drafts, bonus excluded)."""
    bs, num_draft = candidates.shape
    num_steps = accept_index.shape[1]
    cand, ri = candidates.tolist(), retrive_index.tolist()
    next_token, next_sibling = retrive_next_token.tolist(), retrive_next_sibling.tolist()
    target = _ints(target_predict)  # indexed by flat slot, as retrive_index holds flat slots
    predict_at: dict[int, int] = {}
    for bx in range(bs):
        last = int(ri[bx][0])
        accept_index[bx, 0] = last
        accepted = 0
        cur = 0
        for _ in range(1, num_steps):
            cur = int(next_token[bx][cur])
            target_token = target[last]
            matched = False
            while cur != -1:
                if int(cand[bx][cur]) == target_token:
                    predict_at[last] = target_token
                    accepted += 1
                    last = int(ri[bx][cur])
                    accept_index[bx, accepted] = last
                    matched = True
                    break
                cur = int(next_sibling[bx][cur])
            if not matched:
                break
        accept_token_num[bx] = accepted
        predict_at[last] = target[last]
    if predict_at:
        slots = torch.tensor(list(predict_at), dtype=torch.int64)
        predicts.reshape(-1)[slots] = torch.tensor(list(predict_at.values()), dtype=predicts.dtype)


def build_tree_kernel_efficient_cpu(
    parent_list: torch.Tensor,
    selected_index: torch.Tensor,
    verified_seq_len: torch.Tensor,
    tree_mask: torch.Tensor,
    positions: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int,
) -> None:
    """Build the draft tree for target verify (speculative/spec_tree.py build_tree_kernel_efficient_func):
    retrieval links (index / first child / next sibling; the caller pre-fills -1), per-token positions
    and the tree mask (mode 0 FULL_MASK: per request [draft, seq_len + draft] rows after the prefix
    columns the caller pre-fills; mode 1 QLEN_ONLY: [draft, draft])."""
    mode = int(tree_mask_mode)
    if mode not in (0, 1):
        raise NotImplementedError(f"tree_mask_mode {mode} (QLEN_ONLY_BITPACKING) has no CPU implementation")
    nd = draft_token_num
    seq_lens = _ints(verified_seq_len)
    bs = len(seq_lens)
    parents = parent_list.reshape(bs, -1).tolist()
    selected = selected_index.reshape(bs, -1).tolist()
    ri, rnt, rns = retrive_index.tolist(), retrive_next_token.tolist(), retrive_next_sibling.tolist()
    pos = positions.reshape(-1).tolist()
    ones: list[int] = []
    zeros: list[int] = []

    def find(sel: list, token: int) -> int | None:
        for cp in range(nd - 1):
            if int(sel[cp]) == token:
                return cp
        return None

    prefix_sum = 0
    for b, seq_len in enumerate(seq_lens):
        sel, par = selected[b], parents[b]
        pos[b * nd] = seq_len
        for i in range(nd - 1, 0, -1):
            ri[b][i] = b * nd + i
            parent_tb = int(sel[i - 1]) // topk
            if parent_tb == 0:
                parent_position = 0
            else:
                found = find(sel, int(par[parent_tb]))
                if found is None:
                    continue
                parent_position = found + 1
            first = int(rnt[b][parent_position])
            rnt[b][parent_position] = i
            if first != -1:
                rns[b][i] = first
        ri[b][0] = b * nd

        for tx in range(nd):
            if mode == 0:
                base = nd * nd * b + prefix_sum * nd + (seq_len + nd) * tx + seq_len + 1
            else:
                base = nd * nd * b + nd * tx + 1
            ones.append(base - 1)  # every token sees the root
            zeros.extend(base + i for i in range(nd - 1))
            if tx == 0:
                continue
            cur, position = tx - 1, 0
            for _ in range(depth):
                position += 1
                ones.append(base + cur)
                parent_tb = int(sel[cur]) // topk
                if parent_tb == 0:
                    break
                found = find(sel, int(par[parent_tb]))
                if found is None:
                    break
                cur = found
            pos[b * nd + tx] = position + seq_len
        prefix_sum += seq_len

    flat_mask = tree_mask.reshape(-1)
    if zeros:
        flat_mask[torch.tensor(zeros, dtype=torch.int64)] = False
    if ones:
        flat_mask[torch.tensor(ones, dtype=torch.int64)] = True
    positions.copy_(torch.tensor(pos, dtype=positions.dtype).reshape(positions.shape))
    retrive_index.copy_(torch.tensor(ri, dtype=retrive_index.dtype))
    retrive_next_token.copy_(torch.tensor(rnt, dtype=retrive_next_token.dtype))
    retrive_next_sibling.copy_(torch.tensor(rns, dtype=retrive_next_sibling.dtype))


def reconstruct_indices_from_tree_mask_cpu(
    tree_mask: torch.Tensor,
    verified_seq_len: torch.Tensor,
    positions: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    batch_size: int,
    draft_token_num: int,
) -> None:
    """NGRAM verify metadata from a QLEN-layout tree mask, with the contract spelled out in
    sglang/kernels/ops/speculative/reconstruct_tree.py (mask[b, i, j]: j is an ancestor of i)."""
    if batch_size == 0:
        return
    n, bs = draft_token_num, batch_size
    mask = tree_mask.reshape(-1)[: bs * n * n].reshape(bs, n, n).bool()
    idx = torch.arange(n)
    rows, cols = idx.view(1, n, 1), idx.view(1, 1, n)
    ancestors = mask & (cols < rows)
    depth = ancestors.sum(-1)
    parent = torch.where(ancestors, cols, -1).amax(-1)  # [bs, i]
    has_child = ancestors.any(dim=1)  # [bs, tid]
    first_child = torch.where(ancestors, rows, n).amin(dim=1)
    same_parent = (parent.unsqueeze(2) == parent.unsqueeze(1)) & (rows > cols)  # [bs, k, tid]
    first_sibling = torch.where(same_parent, rows, n).amin(dim=1)
    outputs = (
        (positions, depth + verified_seq_len.to(torch.int64).view(bs, 1)),
        (retrive_index, torch.arange(bs).view(bs, 1) * n + idx.view(1, n)),
        (retrive_next_token, torch.where(has_child, first_child, -1)),
        (retrive_next_sibling, torch.where((parent >= 0) & (first_sibling < n), first_sibling, -1)),
    )
    for out, value in outputs:
        out.reshape(-1)[: bs * n] = value.reshape(-1).to(out.dtype)


def rotate_input_ids_cpu(
    input_ids: torch.Tensor,
    extend_start_loc: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    topk_index: torch.Tensor,
    select_index: torch.Tensor | None = None,
) -> None:
    """Shift each request's extend segment left by one and write the new draft token at its end, or at
    select_index[i] (caller: sglang/kernels/ops/speculative/multi_layer_eagle.py)."""
    selects = None if select_index is None else _ints(select_index)
    for i, (start, n, token) in enumerate(
        zip(_ints(extend_start_loc), _ints(extend_seq_lens), _ints(topk_index), strict=True)
    ):
        if n > 1:
            input_ids[start : start + n - 1] = input_ids[start + 1 : start + n].clone()
        if n > 0:
            input_ids[selects[i] if selects is not None else start + n - 1] = token


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor, src_loc: torch.Tensor
) -> None:
    """For every KV buffer (raw address data_ptrs[i], row stride strides[i] bytes): row tgt <- row src
    (caller: sglang/kernels/ops/kvcache/cache_move.py). All sources are read before any write."""
    tgt, src = tgt_loc.to(torch.int64), src_loc.to(torch.int64)
    if tgt.numel() == 0:
        return
    rows = int(torch.maximum(tgt.max(), src.max())) + 1
    for ptr, stride in zip(_ints(data_ptrs), _ints(strides), strict=True):
        view = torch.frombuffer((ctypes.c_uint8 * (rows * stride)).from_address(ptr), dtype=torch.uint8)
        view = view.view(rows, stride)
        view[tgt] = view[src]
