"""Import-only stand-in for `flash_mla` (DeepSeek's FlashMLA kernels), test-only (tests/gpu).

SGLang 0.5.23's EAGLE worker imports the FlashMLA attention backend while it captures the draft-extend CUDA graph
(sglang/srt/speculative/eagle_worker_v2.py `_capture_cuda_graphs`, only to test the draft backend's type), and that
module imports `flash_mla` at load (sglang/kernels/ops/attention/flash_mla_interface.py). The lane's draft backend
is Triton, so no FlashMLA kernel runs; without this module every speculative launch on CUDA died at that import (seen
on the H200: `ModuleNotFoundError: No module named 'flash_mla'`). Calling anything here raises.
"""

from flash_mla.flash_mla_interface import FlashMLASchedMeta  # noqa: F401 - imported by name by SGLang


def fused_norm_rope_attn_rope_cast(*args, **kwargs):
    raise NotImplementedError("flash_mla stand-in (tests/gpu): fused_norm_rope_attn_rope_cast is not implemented")
