"""The CUDA stand-in's EAGLE tree ops (tests/gpu/stand_ins/sgl_kernel_cuda/_spec_cuda_ops.py), on CPU tensors.

Reference: the CPU stand-in's ops (tests/real/stand_ins/sgl_kernel/_spec_ops.py), which follow the same
contract (the 0.5.23 Triton twins in sglang/kernels/ops/speculative/spec_tree.py), on trees built the way
SGLang's draft loop builds them (select_top_k_tokens + organize_draft_results in sglang/srt/speculative/), and
the topk-1 chain the NEXTN/STANDALONE launches use (base_spec_worker.py's preallocated parents/indices).
Both modules are loaded by path: each package is named `sgl_kernel` on its server's PYTHONPATH.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


cuda_ops = _load("_gpu_stand_in_spec_cuda_ops", ROOT / "tests/gpu/stand_ins/sgl_kernel_cuda/_spec_cuda_ops.py")
cpu_ops = _load("_cpu_stand_in_spec_ops", ROOT / "tests/real/stand_ins/sgl_kernel/_spec_ops.py")


@pytest.fixture
def no_host_sync(monkeypatch):
    """Fail any tensor-to-host read: the ops must run without syncing (and so could be graph-captured)."""

    def refuse(name):
        def raiser(*args, **kwargs):
            raise AssertionError(f"host sync: Tensor.{name} called")

        return raiser

    names = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__index__", "__float__", "nonzero")

    class Guard:
        def __enter__(self):
            for name in names:
                monkeypatch.setattr(torch.Tensor, name, refuse(name))
            monkeypatch.setattr(torch, "nonzero", refuse("torch.nonzero"))

        def __exit__(self, *exc):
            monkeypatch.undo()
            return False

    return Guard()


def draft_tree(bs: int, topk: int, steps: int, num_draft: int, seed: int):
    """parent_list, selected_index, draft tokens as EAGLE's draft_forward produces them (scores are
    products of random probabilities, so every selected token's parent is selected too)."""
    gen = torch.Generator().manual_seed(seed)
    probs = torch.rand((bs, topk), generator=gen).sort(dim=1, descending=True).values
    score_list = [probs.unsqueeze(1)]
    token_list = [torch.randint(0, 50, (bs, topk), generator=gen)]
    parents_list = [torch.arange(-1, topk).expand(bs, -1)]
    scores = probs
    for i in range(1, steps):
        step_p = torch.rand((bs, topk, topk), generator=gen).sort(dim=2, descending=True).values
        expanded = scores.unsqueeze(2) * step_p
        cs_p, cs_index = torch.topk(expanded.flatten(1), topk, dim=-1)
        score_list.append(expanded)
        token_list.append(torch.randint(0, 50, (bs, topk * topk), generator=gen))
        parents_list.append(cs_index + topk * topk * (i - 1) + topk)
        scores = cs_p
    flat_scores = torch.cat(score_list, dim=1).flatten(1)
    selected = torch.sort(torch.topk(flat_scores, num_draft - 1, dim=-1).indices).values
    tokens = torch.gather(torch.cat(token_list, dim=1), 1, selected)
    parent_list = torch.cat(parents_list[:-1], dim=1) if steps > 1 else torch.empty((bs, 0), dtype=torch.long)
    return parent_list.contiguous(), selected, tokens


def tree_buffers(seq_lens: torch.Tensor, num_draft: int, mode: int, dtype: torch.dtype):
    """The buffers sglang/srt/speculative/eagle_utils.py build_tree_kernel_efficient allocates."""
    bs = seq_lens.numel()
    if mode == 0:
        mask = torch.ones(int(seq_lens.sum()) * num_draft + num_draft * num_draft * bs, dtype=dtype)
    else:
        mask = torch.ones(num_draft * num_draft * bs, dtype=dtype)
    retrieve = torch.full((3, bs, num_draft), -1, dtype=torch.long)
    positions = torch.empty(bs * num_draft, dtype=torch.long)
    return [mask, positions, retrieve[0], retrieve[1], retrieve[2]]


def run_build(op, parent_list, selected, seq_lens, buffers, topk, steps, num_draft, mode):
    op(parent_list, selected, seq_lens, *buffers, topk, steps, num_draft, mode)
    return buffers


CASES = [
    # (bs, topk, steps, num_draft): the launches' chain first, then trees
    (1, 1, 3, 4),
    (3, 1, 3, 4),
    (2, 1, 1, 2),
    (2, 2, 3, 5),
    (3, 4, 3, 8),
    (2, 3, 4, 6),
    (1, 2, 1, 3),
]


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.uint8])
@pytest.mark.parametrize(("bs", "topk", "steps", "num_draft"), CASES)
def test_build_tree_matches_cpu_stand_in(bs, topk, steps, num_draft, mode, mask_dtype, no_host_sync):
    parent_list, selected, _ = draft_tree(bs, topk, steps, num_draft, seed=bs * 100 + topk * 10 + steps)
    seq_lens = torch.tensor([7, 3, 11][:bs], dtype=torch.long)
    expected = run_build(
        cpu_ops.build_tree_kernel_efficient_cpu, parent_list, selected, seq_lens,
        tree_buffers(seq_lens, num_draft, mode, mask_dtype), topk, steps, num_draft, mode,
    )
    got = tree_buffers(seq_lens, num_draft, mode, mask_dtype)
    with no_host_sync:
        run_build(cuda_ops.build_tree_kernel_efficient, parent_list, selected, seq_lens, got, topk, steps, num_draft,
                  mode)
    names = ("tree_mask", "positions", "index", "next_token", "next_sibling")
    for name, want, have in zip(names, expected, got, strict=True):
        assert torch.equal(want, have), name


def test_build_tree_topk1_chain_as_the_launches_run_it():
    """topk 1, 3 steps, 4 draft tokens: base_spec_worker.py's preallocated parents [-1, 0, 1] and
    indices [0, 1, 2] make a chain root -> 1 -> 2 -> 3 (FULL_MASK, the triton backend's uint8 buffer)."""
    seq_lens = torch.tensor([5], dtype=torch.long)
    mask, positions, index, next_token, next_sibling = buffers = tree_buffers(seq_lens, 4, 0, torch.uint8)
    mask.fill_(0)  # the prefix columns are the caller's: stay as they were
    run_build(cuda_ops.build_tree_kernel_efficient, torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 1, 2]]),
              seq_lens, buffers, 1, 3, 4, 0)
    assert positions.tolist() == [5, 6, 7, 8]
    assert index.tolist() == [[0, 1, 2, 3]]
    assert next_token.tolist() == [[1, 2, 3, -1]]
    assert next_sibling.tolist() == [[-1, -1, -1, -1]]
    rows = mask.view(4, 9)
    assert not rows[:, :5].any()
    assert rows[:, 5:].tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]


def test_build_tree_leaves_an_unparented_node_unlinked():
    """A node whose parent token was not selected (NaN logprobs): no link, a one-step path, as the CUDA
    kernel's `continue` and the Triton twin's walk leave it."""
    seq_lens = torch.tensor([4], dtype=torch.long)
    buffers = tree_buffers(seq_lens, 3, 1, torch.bool)
    # node 2's index 5 // 2 = 2 -> parent token parent_list[2] = 9, which is not selected
    run_build(cuda_ops.build_tree_kernel_efficient, torch.tensor([[-1, 0, 9]]), torch.tensor([[1, 5]]),
              seq_lens, buffers, 2, 2, 3, 1)
    mask, positions, _, next_token, next_sibling = buffers
    assert next_token.tolist() == [[1, -1, -1]]
    assert next_sibling.tolist() == [[-1, -1, -1]]
    assert positions.tolist() == [4, 5, 5]
    assert mask.view(3, 3).tolist() == [[True, False, False], [True, True, False], [True, False, True]]


def test_build_tree_refuses_bit_packing():
    seq_lens = torch.tensor([4], dtype=torch.long)
    with pytest.raises(NotImplementedError, match="QLEN_ONLY_BITPACKING"):
        run_build(cuda_ops.build_tree_kernel_efficient, torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 1, 2]]),
                  seq_lens, tree_buffers(seq_lens, 4, 1, torch.uint8), 1, 3, 4, 2)


def verify_inputs(bs, topk, steps, num_draft, seed, vocab):
    parent_list, selected, tokens = draft_tree(bs, topk, steps, num_draft, seed)
    seq_lens = torch.full((bs,), 6, dtype=torch.long)
    _, _, index, next_token, next_sibling = run_build(
        cpu_ops.build_tree_kernel_efficient_cpu, parent_list, selected, seq_lens,
        tree_buffers(seq_lens, num_draft, 1, torch.bool), topk, steps, num_draft, 1,
    )
    gen = torch.Generator().manual_seed(seed + 1)
    # A tiny vocabulary so drafts often match the target and paths of every length occur.
    candidates = torch.cat((torch.zeros((bs, 1), dtype=torch.long), tokens % vocab), dim=1)
    target = torch.randint(0, vocab, (bs, num_draft), generator=gen)
    return candidates, index, next_token, next_sibling, target


def verify_outputs(bs, steps, num_draft):
    """As sglang/srt/speculative/eagle_utils.py eagle_sample allocates them."""
    return (
        torch.zeros(bs * num_draft, dtype=torch.int32),
        torch.full((bs, steps + 1), -1, dtype=torch.int32),
        torch.empty(bs, dtype=torch.int32),
    )


def run_verify(op, outputs, candidates, index, next_token, next_sibling, target):
    predicts, accept_index, accept_num = outputs
    op(predicts=predicts, accept_index=accept_index, accept_token_num=accept_num, candidates=candidates,
       retrive_index=index, retrive_next_token=next_token, retrive_next_sibling=next_sibling, target_predict=target)
    return outputs


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(("bs", "topk", "steps", "num_draft"), CASES)
def test_verify_tree_greedy_matches_cpu_stand_in(bs, topk, steps, num_draft, seed, no_host_sync):
    inputs = verify_inputs(bs, topk, steps, num_draft, seed, vocab=2 if seed % 2 else 3)
    expected = run_verify(cpu_ops.verify_tree_greedy_cpu, verify_outputs(bs, steps, num_draft), *inputs)
    got = verify_outputs(bs, steps, num_draft)
    with no_host_sync:
        run_verify(cuda_ops.verify_tree_greedy, got, *inputs)
    for name, want, have in zip(("predicts", "accept_index", "accept_token_num"), expected, got, strict=True):
        assert torch.equal(want, have), name


def test_verify_tree_greedy_chain_lengths():
    """The launches' chain (bs 1, 3 steps, 4 draft tokens): each accept length 0..3 from the target."""
    index = torch.tensor([[0, 1, 2, 3]])
    next_token = torch.tensor([[1, 2, 3, -1]])
    next_sibling = torch.full((1, 4), -1)
    candidates = torch.tensor([[10, 11, 12, 13]])
    for accepted in range(4):
        # the target agrees with the first `accepted` drafts, then disagrees; its last row is the bonus
        target = torch.tensor([[11, 12, 13, 99]])
        target[0, accepted] = 50 + accepted
        predicts, accept_index, accept_num = run_verify(
            cuda_ops.verify_tree_greedy, verify_outputs(1, 3, 4), candidates, index, next_token, next_sibling, target
        )
        assert accept_num.tolist() == [accepted]
        assert accept_index.tolist() == [list(range(accepted + 1)) + [-1] * (3 - accepted)]
        assert predicts.tolist()[: accepted + 1] == target[0, : accepted + 1].tolist()
        assert predicts.tolist()[accepted + 1 :] == [0] * (3 - accepted)


def test_exports():
    assert sorted(cuda_ops.__all__) == ["build_tree_kernel_efficient", "verify_tree_greedy"]
    assert all(callable(getattr(cuda_ops, name)) for name in cuda_ops.__all__)
