"""TEST-ONLY stand-in for the `sgl-kernel` wheel. Never shipped, never installed into a venv.

The real SGLang 0.5.23 imports a module named `sgl_kernel` at module load even on CPU
(sglang/kernels/ops/kvcache/cache_move.py, sglang/srt/mem_cache/allocation.py,
sglang/kernels/ops/speculative/*.py), but PyPI has only CUDA builds of that wheel, which fail to import
without libcuda. tests/real puts this package on the PYTHONPATH of the SGLang server subprocess it
starts, and nowhere else, so the real server can start on a CPU test machine.

- Dense and MoE serving with `--attention-backend torch_native`: import-only. None of the functions
  below is called (the layers take their torch-native paths when the CPU has no AMX).
- Speculative decoding (EAGLE/NEXTN) with `--attention-backend intel_amx`: torch implementations of
  exactly the CPU ops that path calls, with the argument lists SGLang 0.5.23 passes:
  `torch.ops.sgl_kernel.decode_attention_cpu` / `extend_attention_cpu`
  (sglang/srt/layers/attention/intel_amx_backend.py) and the speculative bookkeeping ops of
  sgl-kernel's csrc/cpu/spec.cpp (callers: sglang/kernels/ops/speculative/{spec_tree,cache_locs,eagle,
  multi_layer_eagle,reconstruct_tree}.py, sglang/kernels/ops/kvcache/cache_move.py,
  sglang/srt/mem_cache/allocation.py). Written for correctness on tiny test models, not speed.
"""

from sgl_kernel import _attention_ops  # noqa: F401 - registers torch.ops.sgl_kernel.*
from sgl_kernel._spec_ops import (
    assign_draft_cache_locs_contiguous_cpu,
    assign_extend_cache_locs_cpu,
    assign_req_to_token_pool_cpu,
    build_draft_decode_metadata_cpu,
    build_tree_kernel_efficient_cpu,
    copy_all_layer_kv_cache_cpu,
    fill_accept_out_cache_loc_cpu,
    fill_bonus_tokens_cpu,
    reconstruct_indices_from_tree_mask_cpu,
    rotate_input_ids_cpu,
    verify_tree_greedy_cpu,
)

STAND_IN = True  # lets a log reader or test tell this package from a real sgl-kernel build
__version__ = "0.0.0+sparkgate.test.stand.in"

__all__ = [
    "STAND_IN",
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_req_to_token_pool_cpu",
    "build_draft_decode_metadata_cpu",
    "build_tree_kernel_efficient_cpu",
    "copy_all_layer_kv_cache_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "reconstruct_indices_from_tree_mask_cpu",
    "rotate_input_ids_cpu",
    "verify_tree_greedy_cpu",
]
