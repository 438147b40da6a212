"""`sgl_kernel.speculative`, imported by sglang/kernels/ops/speculative/reconstruct_tree.py on CPU (NGRAM)."""

from sgl_kernel._spec_ops import reconstruct_indices_from_tree_mask_cpu as reconstruct_indices_from_tree_mask

__all__ = ["reconstruct_indices_from_tree_mask"]
