"""TEST-ONLY SGLang general plugin: lets SGLang 0.5.23 run EAGLE/NEXTN speculation on a CPU without AMX.

Never shipped or installed: tests/real writes a dist-info for it (entry point `sparkgate_cpu_platform`
in group `sglang.srt.plugins`) into a temp dir that only the server subprocess has on its PYTHONPATH,
and selects it with SGLANG_PLUGINS.

Stock 0.5.23 has no torch_native entry for the EAGLE family (sglang/srt/speculative/draft_utils.py);
its only CPU entry, `--attention-backend intel_amx`, is rewritten to torch_native when
`get_platform().has_amx` is False (sglang/srt/arg_groups/overrides.py). `register()`:

- declares has_amx=True through SGLang's own `override_platform` (sglang/srt/runtime_context.py). Only
  that attention-backend decision reads it; the layers check the CPU itself (`cpu_has_amx_support`)
  and keep their torch-native paths. The intel_amx backend then calls the test `sgl_kernel` stand-in.
- makes `torch.cuda.synchronize` a no-op: NEXTN's `set_embed_and_head`
  (sglang/srt/models/bailing_moe_nextn.py) calls it unconditionally, which fails without CUDA.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

_installed = False


def _no_synchronize(device=None) -> None:
    return None


def register() -> None:
    global _installed
    if _installed:  # SGLang calls register() once per process; stay idempotent anyway
        return
    import torch
    from sglang.srt.runtime_context import override_platform

    override_platform(has_amx=True).install()
    torch.cuda.synchronize = _no_synchronize
    _installed = True
    logger.info("sparkgate_cpu_platform (test-only): platform has_amx=True, torch.cuda.synchronize is a no-op")
