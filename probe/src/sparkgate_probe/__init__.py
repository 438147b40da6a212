"""sparkgate engagement probe: an SGLang general plugin.

Enabled with ``SGLANG_PLUGINS=engagement_probe``; reports which MoE kernels,
LM-head quantization and draft-head sharing the live engine actually uses, in
``/server_info`` -> ``internal_states[i]["engagement"]``. See docs/probe.md.
"""

from sparkgate_probe.plugin import HOOK_TARGETS, register
from sparkgate_probe.report import PROBE_VERSION, REPORT

__all__ = ["HOOK_TARGETS", "PROBE_VERSION", "REPORT", "register"]
