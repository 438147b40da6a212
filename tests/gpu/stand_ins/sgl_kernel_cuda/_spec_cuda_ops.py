"""Torch versions of the EAGLE tree ops for CUDA, test-only: sync-free and safe inside a captured CUDA graph.

What SGLang 0.5.23 calls on CUDA for NEXTN / STANDALONE (EAGLE worker v2, topk 1, triton attention):
no speculative op of the `sgl_kernel` wheel at all. Every `from sgl_kernel import ..._cpu` in
sglang/kernels/ops/speculative/{spec_tree,cache_locs,eagle,multi_layer_eagle}.py,
sglang/kernels/ops/kvcache/cache_move.py and sglang/srt/mem_cache/allocation.py sits under `if _is_cpu:`;
on CUDA the same call sites launch SGLang's own Triton kernels, except the two tree ops below, which
sglang/kernels/ops/speculative/spec_tree.py takes from `sglang.kernels.ops.speculative.tree` -- a JIT
CUDA module (`load_jit("speculative_tree", cuda_files=["speculative/tree.cuh"])`, built with nvcc through
tvm-ffi on first use). The real sgl-kernel wheel exports the same two ops under these names with the same
argument lists (the JIT wrappers keep its `retrive_*` spelling), and MUSA still imports them from
`sgl_kernel`. So they live here, exported as `sgl_kernel.<name>`, for two uses:

- the package's names match the real wheel's (nothing on the CUDA path calls them through `sgl_kernel`);
- a fallback for the JIT module when it cannot be built on the GPU machine: `use_for_sglang_jit_tree()`
  points SGLang's tree module at these functions (call it from a plugin in the server process).

Neither op runs inside a captured region (build_tree after the draft-decode replay, verify_tree_greedy
after the target-verify replay, both eager), but both are written without host syncs anyway: no
`.item()` / `.tolist()` / boolean-mask indexing, loops bounded by Python ints taken from shapes and
arguments only, results written in place into the tensors SGLang passes. That keeps the overlap
scheduler's CPU ahead of the GPU and lets them be captured if a caller ever does.
"""

from __future__ import annotations

import torch

__all__ = [
    "build_tree_kernel_efficient",
    "verify_tree_greedy",
]

_FULL_MASK, _QLEN_ONLY, _QLEN_ONLY_BITPACKING = 0, 1, 2


def _node_parents(
    parent_list: torch.Tensor, selected_index: torch.Tensor, topk: int, draft_token_num: int
) -> torch.Tensor:
    """[bs, draft_token_num] tree parent of each node: node i >= 1 is the draft token chosen at
    selected_index[:, i - 1]; its parent is the root (0) when that index falls in the first step's
    block (index // topk == 0), else the node whose selected index equals the parent token
    parent_list[:, index // topk], plus one. -1 marks the root itself and a node whose parent was not
    selected (an invalid tree: the CUDA kernel prints a warning and skips such a node)."""
    bs, nd = selected_index.shape[0], draft_token_num
    root = torch.full((bs, 1), -1, dtype=torch.int64, device=selected_index.device)
    if nd == 1:  # the root alone (an empty reduction below would raise)
        return root
    sel = selected_index.to(torch.int64)
    parent_tb = torch.div(sel, topk, rounding_mode="floor")  # [bs, nd - 1]
    if parent_list.shape[1] > 0:
        safe_tb = parent_tb.clamp(0, parent_list.shape[1] - 1)  # tb == 0 rows are masked below
        parent_token = torch.gather(parent_list.to(torch.int64), 1, safe_tb)
    else:  # a one-step draft: every node hangs off the root
        parent_token = torch.full_like(parent_tb, -1)
    # First cp with sel[cp] == parent token (the kernels scan cp upward and stop at the first hit).
    hits = sel.unsqueeze(1) == parent_token.unsqueeze(2)  # [bs, node, cp]
    cp_ids = torch.arange(nd - 1, device=sel.device, dtype=torch.int64)
    first_cp = torch.where(hits, cp_ids, nd - 1).amin(dim=2)
    found_parent = torch.where(first_cp < nd - 1, first_cp + 1, -1)
    parents = torch.where(parent_tb == 0, 0, found_parent)
    return torch.cat((root, parents), dim=1)


def build_tree_kernel_efficient(
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
    """Build the verify tree in place, positional arguments as SGLang 0.5.23 passes them
    (sglang/kernels/ops/speculative/spec_tree.py build_tree_kernel_efficient_func, from
    sglang/srt/speculative/eagle_utils.py build_tree_kernel_efficient; the buffers are allocated
    there: retrive_* pre-filled with -1, a FULL_MASK tree_mask pre-filled with True so the prefix
    columns need no write). Semantics of sglang/kernels/jit/include/sgl_kernel/speculative/eagle.cuh
    build_tree_efficient:

    - retrive_index[b, i] = b * draft_token_num + i;
    - retrive_next_token[b, p] = p's first (lowest) child, retrive_next_sibling[b, i] = the next
      higher child of i's parent; entries with no such node keep their value;
    - positions[b * n + i] = seq_len[b] + depth of node i;
    - tree_mask row of node i: the root column and the columns of i and its ancestors True, the other
      draft columns False. FULL_MASK rows are seq_len[b] + n wide, packed request after request;
      QLEN_ONLY rows are n wide.

    The ancestor walk runs `depth` steps, as the Triton twin in spec_tree.py bounds it (a valid tree
    is never deeper)."""
    mode = int(tree_mask_mode)
    if mode == _QLEN_ONLY_BITPACKING:
        raise NotImplementedError(
            "sgl_kernel stand-in (tests/gpu): build_tree_kernel_efficient with QLEN_ONLY_BITPACKING is not "
            "implemented (the triton attention backend verifies with FULL_MASK)"
        )
    if mode not in (_FULL_MASK, _QLEN_ONLY):
        raise ValueError(f"tree_mask_mode {mode}")
    nd, bs = int(draft_token_num), selected_index.shape[0]
    if bs == 0:
        return
    device = selected_index.device
    seq_lens = verified_seq_len.to(torch.int64)
    node = torch.arange(nd, device=device, dtype=torch.int64)
    parents = _node_parents(parent_list, selected_index, int(topk), nd)  # [bs, nd]

    batch = torch.arange(bs, device=device, dtype=torch.int64)
    retrive_index.copy_((batch.view(bs, 1) * nd + node).to(retrive_index.dtype))

    # child[b, p, i]: node i hangs off node p (the root row and unparented nodes have parent -1).
    child = parents.unsqueeze(1) == node.view(1, nd, 1)
    first_child = torch.where(child, node.view(1, 1, nd), nd).amin(dim=2)
    retrive_next_token.copy_(
        torch.where(first_child < nd, first_child, retrive_next_token.to(torch.int64)).to(retrive_next_token.dtype)
    )
    # later_sibling[b, i, k]: k > i shares i's (real) parent.
    later_sibling = (
        (parents.unsqueeze(2) == parents.unsqueeze(1))
        & (parents.unsqueeze(2) >= 0)
        & (node.view(1, 1, nd) > node.view(1, nd, 1))
    )
    next_sibling = torch.where(later_sibling, node.view(1, 1, nd), nd).amin(dim=2)
    retrive_next_sibling.copy_(
        torch.where(next_sibling < nd, next_sibling, retrive_next_sibling.to(torch.int64)).to(
            retrive_next_sibling.dtype
        )
    )

    # Ancestor walk: on_path[b, i, j] = node j (>= 1) lies on the path from node i up to the root.
    on_path = torch.zeros((bs, nd, nd), dtype=torch.bool, device=device)
    steps = torch.zeros((bs, nd), dtype=torch.int64, device=device)
    cur = node.view(1, nd).expand(bs, nd)
    alive = (node >= 1).view(1, nd).expand(bs, nd)
    for _ in range(int(depth)):
        on_path |= alive.unsqueeze(2) & (node.view(1, 1, nd) == cur.unsqueeze(2))
        steps += alive.to(torch.int64)
        up = torch.gather(parents, 1, cur)
        alive = alive & (up >= 1)  # stop at the root (0) or an unparented node (-1)
        cur = up.clamp(min=0)
    positions.view(bs, nd).copy_((seq_lens.view(bs, 1) + steps).to(positions.dtype))

    # Every row sees the root column; node columns 1.. are the path.
    rows = on_path.clone()
    rows[:, :, 0] = True
    if mode == _FULL_MASK:
        prefix = torch.cumsum(seq_lens, dim=0) - seq_lens  # exclusive: earlier requests' context
        row_start = nd * nd * batch + prefix * nd + seq_lens  # row 0's root column, per request
        start = row_start.view(bs, 1, 1) + (seq_lens.view(bs, 1, 1) + nd) * node.view(1, nd, 1)
    else:
        start = (nd * nd * batch).view(bs, 1, 1) + nd * node.view(1, nd, 1)
    flat = tree_mask.view(-1)  # a view, never a copy: the writes must land in SGLang's buffer
    flat.index_put_(((start + node.view(1, 1, nd)).reshape(-1),), rows.reshape(-1).to(flat.dtype))


def verify_tree_greedy(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    target_predict: torch.Tensor,
) -> None:
    """Greedy verification in place, keyword arguments as SGLang 0.5.23 passes them
    (sglang/kernels/ops/speculative/spec_tree.py verify_tree_greedy_func, from
    sglang/srt/speculative/eagle_utils.py eagle_sample; predicts [bs * n] int32 zeros,
    accept_index [bs, num_steps + 1] int32 pre-filled with -1, accept_token_num [bs] int32,
    target_predict the target's argmax [bs, n]). Semantics of eagle.cuh VerifyTreeGreedy: from the
    root, at each level take the first child (then its siblings) whose draft token equals the
    target's token at the last accepted node; stop at the first level without one.

    - accept_index[b, 0] = the root's slot, accept_index[b, k] = the k-th accepted node's slot (flat,
      from retrive_index); later entries untouched;
    - accept_token_num[b] = accepted draft tokens (the bonus token not counted);
    - predicts[slot] = target_predict.flat[slot] for every slot on the accepted path (its last one
      is the bonus token); other entries untouched.

    Vectorized over the batch: num_steps levels, each a sibling scan of at most n steps."""
    bs, nd = candidates.shape
    num_spec = accept_index.shape[1]
    if bs == 0:
        return
    device = candidates.device
    cand = candidates.to(torch.int64)
    r_index = retrive_index.to(torch.int64)
    r_next = retrive_next_token.to(torch.int64)
    r_sibling = retrive_next_sibling.to(torch.int64)
    target_flat = target_predict.reshape(-1).to(torch.int64)
    pred_flat = predicts.view(-1)
    accepted = accept_index.to(torch.int64)  # working copy, copied back at the end
    rows = torch.arange(bs, device=device, dtype=torch.int64)

    last = r_index[:, 0]  # flat slot of the last accepted node
    accepted[:, 0] = last
    path = [last]
    num = torch.zeros(bs, dtype=torch.int64, device=device)
    cur = torch.zeros(bs, dtype=torch.int64, device=device)  # tree-local index of the current node
    active = torch.ones(bs, dtype=torch.bool, device=device)
    for _ in range(1, num_spec):
        first = torch.gather(r_next, 1, cur.clamp(min=0).view(bs, 1)).view(bs)
        cur = torch.where(active, first, -1)
        want = target_flat[last]
        matched = torch.zeros(bs, dtype=torch.bool, device=device)
        for _ in range(nd):  # a level has fewer than n siblings
            live = (cur != -1) & ~matched
            safe = cur.clamp(min=0).view(bs, 1)
            hit = live & (torch.gather(cand, 1, safe).view(bs) == want)
            matched |= hit
            step_on = torch.gather(r_sibling, 1, safe).view(bs)
            cur = torch.where(live & ~hit, step_on, cur)
        slot = torch.gather(r_index, 1, cur.clamp(min=0).view(bs, 1)).view(bs)
        num = num + matched.to(torch.int64)
        # Write slot at column num for matched rows; unmatched rows rewrite their current value.
        column = num.clamp(max=num_spec - 1)
        accepted[rows, column] = torch.where(matched, slot, accepted[rows, column])
        last = torch.where(matched, slot, last)
        path.append(last)
        active = active & matched
    accept_index.copy_(accepted.to(accept_index.dtype))
    accept_token_num.copy_(num.to(accept_token_num.dtype))
    # Every slot on the path takes the target's token there (a row that stopped repeats its last slot,
    # rewriting the same value). Slots of different rows never collide: each row owns its n slots.
    slots = torch.stack(path, dim=1).reshape(-1)
    pred_flat.index_put_((slots,), target_flat[slots].to(pred_flat.dtype))


def use_for_sglang_jit_tree() -> None:
    """Route SGLang 0.5.23's CUDA tree ops to the functions above instead of its JIT CUDA module
    (for a GPU machine where `load_jit("speculative_tree", ...)` cannot build: no nvcc or tvm-ffi).
    spec_tree.py binds build_tree_kernel_efficient at import time and imports verify_tree_greedy from
    the tree module at each call, so both modules are patched. Call it in the server process before
    the first decode step (an SGLANG_PLUGINS plugin)."""
    from sglang.kernels.ops.speculative import spec_tree, tree

    tree.build_tree_kernel_efficient = build_tree_kernel_efficient
    tree.verify_tree_greedy = verify_tree_greedy
    spec_tree.sgl_build_tree_kernel_efficient = build_tree_kernel_efficient
