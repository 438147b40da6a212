"""What the inclusionAI SGLang fork (branch ling_v3_support_mxfp4_humming) adds over stock 0.5.23.

This is the single place that lists fork-only command-line options and fork-only environment
variables. Stock SGLang rejects an unknown flag (exit 2) but silently ignores an unknown SGLANG_*
variable, which is why fork-only env vars also need runtime evidence (see the fp8_lm_head checks).
"""

from sparkgate.sglang import conformance

# Options the fork's parser has and stock 0.5.23 does not. Every flag of the published Spark launch
# exists in stock 0.5.23 (checked against the committed manifest), so this is empty today; add an entry
# here, with the fork commit that introduced it, before a profile may use such a flag.
FORK_ONLY_OPTIONS: dict[str, dict] = {}

# Everything else fork-only lives in the conformance fixture's `fork_only` section (one source), which
# tests/unit/test_sglang_conformance.py proves absent from stock 0.5.23.

# Environment variables only the fork declares in sglang/srt/environ.py (`Envs`).
# SGLANG_ENABLE_FP8_LM_HEAD: online FP8 quantization of the Ling-3 LM head (patch in bailing_moe_v3.py).
FORK_ONLY_ENV = conformance.fork_only_of_kind("env")

# Logged once when the fork quantizes the target's LM head at load.
FP8_LM_HEAD_LOG = conformance.fork_only("fp8_lm_head_log")

# The FP8 head's scale attribute (stock ParallelLMHead has none; the probe reports it as has_weight_scale).
FP8_LM_HEAD_SCALE_ATTR = conformance.fork_only("fp8_lm_head_weight_scale")

# The method the fork adds to BailingMoeForCausalLMNextN so the draft takes the target's whole LM-head module.
DRAFT_LM_HEAD_SHARE = conformance.fork_only("draft_lm_head_module_share")

# Model classes the fork gives a module-level LM-head share for the NEXTN draft
# (`set_lm_head_from_target`); stock 0.5.23 shares only the weight tensor for Bailing.
FORK_MODULE_SHARING_DRAFT_CLASSES = (conformance.class_name("nextn_draft"),)
