"""Compile the JIT kernels stock SGLang 0.5.23's Marlin MoE calls at batch-1 decode (nvcc, through
`sglang.kernels.jit`, into its default cache ~/.cache/sglang/jit), in the background while the v3-fallbacks run's
Humming reference starts: the v3-marlin launch then finds them built instead of compiling them inside its first
CUDA-graph capture (which ran past the lane's limit on 2026-12-06). The template arguments are the ones
`layers/moe/fused_moe_triton/fused_marlin_moe.py` passes without expert parallelism. Best effort: a kernel that fails
here is compiled by the server as before, and says why in this process's log."""

from __future__ import annotations

import sys
import time


def main() -> int:
    import torch
    from sglang.kernels.ops.moe import moe_align_single_token, moe_topk_sum, moe_wna16_marlin

    builds = {
        "marlin gate/up": lambda: moe_wna16_marlin._jit_moe_wna16_marlin_module(
            torch.bfloat16, False, False, True, False, True),
        "marlin down": lambda: moe_wna16_marlin._jit_moe_wna16_marlin_module(
            torch.bfloat16, False, False, True, True, True),
        "align single token": lambda: moe_align_single_token._jit_align_single_token_module(True),
        "topk sum": lambda: moe_topk_sum._jit_topk_sum_module(),
    }
    failed = 0
    for name, build in builds.items():
        began = time.monotonic()
        try:
            build()
            print(f"warm_marlin: {name} built in {time.monotonic() - began:.1f} s", flush=True)
        except Exception as exc:  # noqa: BLE001 - best effort, see the docstring
            failed += 1
            print(f"warm_marlin: {name} failed after {time.monotonic() - began:.1f} s: {type(exc).__name__}: {exc}",
                  flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
