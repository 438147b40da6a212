"""What Ling-3.0-flash needs in memory: SGLang's sizing quantities predicted from the checkpoint's shape (held to
SGLang's own sizing lines in the H200 logs by tests/unit/bench/test_sizing.py), and a profile's memory plan on a DGX
Spark (`invoke sizing`).

SGLang 0.5.23 sizes the static pools once the weights are loaded
(`sglang/srt/mem_cache/kv_cache_configurator.py`, `_profile_available_bytes`):

    pool budget = free after the weights - free before the weights x (1 - mem_fraction_static)
                = free before x mem_fraction_static - weights (target and draft)

With `--max-mamba-cache-size N` the linear-attention state pool (N + 1 slots: KDA's recurrent state in FP32 and its
short-convolution state) comes out of that budget first; the MLA KV cache takes the rest, in tokens of
`kv_lora_rank + qk_rope_head_dim` BF16 values per full-attention layer (the NEXTN draft keeps its own pool of the same
token count). A budget at or below zero stops the start ("Loaded weights leave no GPU memory for the KV cache").
SGLang's "GB" in these lines is 2**30 bytes.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from sparkgate.bench import roofline as roof

GIB = 1 << 30
# KDA's short convolution keeps kernel - 1 past inputs for each of q, k and v.
KDA_CONV_STREAMS = 3
# The range of free memory CUDA reports on a DGX Spark before a model loads (128 GB unified, shared with the OS).
SPARK_FREE_GIB = (102.0, 110.0)
# What SGLang allocated beyond the model's bytes at full size (norms, convolution kernels, biases, block scales, and
# for the draft more not yet explained), as a share of the model's figure: measured on SGLang 0.5.23 (the H200
# records, tests/fixtures/gpu-full-size; tests/unit/bench/test_sizing.py holds them). The plan adds them.
UNMODELLED_WEIGHTS = {"target": 0.0188, "draft": 0.111}


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- from the checkpoint's shape -----------------------------------------------------------------------

def target_weight_bytes(shape: roof.ModelShape) -> float:
    """Every weight the target allocates, at the checkpoint's layout (the roofline's bytes per parameter): all routed
    experts MXFP4; attention, KDA, shared experts, routers and dense MLPs FP8; embedding and LM head BF16. Norms,
    convolution kernels, biases and block scales are left out (the measured figure is about 2 % higher)."""
    fp8 = (shape.moe_layers * (shape.shared_params + shape.router_params) + shape.first_dense * shape.dense_mlp_params
           + shape.mla_layers * shape.mla_params + shape.kda_layers * shape.kda_params)
    experts = shape.moe_layers * shape.experts * shape.expert_params * roof.MXFP4_BYTES
    return experts + fp8 * roof.FP8_BYTES + 2 * shape.lm_head_params * roof.BF16_BYTES  # embedding + LM head


def draft_weight_bytes(shape: roof.ModelShape) -> float:
    """The NEXTN draft as stock SGLang loads it: eh_proj, one MLA layer with its MoE, its own embedding and LM head."""
    fp8 = shape.eh_proj_params + shape.mla_params + shape.shared_params + shape.router_params
    return (shape.nextn_layers * (fp8 * roof.FP8_BYTES + shape.experts * shape.expert_params * roof.MXFP4_BYTES)
            + 2 * shape.lm_head_params * roof.BF16_BYTES)


def kv_bytes_per_token(shape: roof.ModelShape, *, draft: bool = False) -> int:
    layers = shape.nextn_layers if draft else shape.mla_layers
    return layers * (shape.kv_lora_rank + shape.qk_rope) * int(roof.BF16_BYTES)


def mamba_slot_bytes(shape: roof.ModelShape) -> tuple[int, int]:
    """(conv, ssm) bytes of one request's linear-attention state: BF16 convolution history, FP32 recurrent state."""
    width = shape.kda_heads * shape.kda_head_dim
    conv = shape.kda_layers * KDA_CONV_STREAMS * width * (shape.conv_kernel - 1) * int(roof.BF16_BYTES)
    ssm = shape.kda_layers * shape.kda_heads * shape.kda_head_dim ** 2 * int(roof.FP32_BYTES)
    return conv, ssm


# -- a profile's plan --------------------------------------------------------------------------------------------

class MemoryPlan(Frozen):
    profile: str
    free_gib: float
    mem_fraction_static: float
    context_tokens: int
    mamba_slots: int
    weights_gib: float  # target (+ draft), with what SGLang allocates beyond the model (UNMODELLED_WEIGHTS)
    mamba_gib: float
    spec_state_gib: float  # MTP's per-step intermediate SSM state, reserved with the Mamba pool
    kv_bytes_per_token: int  # target (+ draft)
    budget_gib: float  # free x fraction - weights
    kv_gib_for_context: float
    drafter_unmodelled: bool

    @property
    def state_gib(self) -> float:
        """What comes out of the pool budget before the KV cache: the Mamba pool and MTP's intermediate state."""
        return self.mamba_gib + self.spec_state_gib

    @property
    def needed_gib(self) -> float:
        return self.state_gib + self.kv_gib_for_context

    @property
    def headroom_gib(self) -> float:
        return self.budget_gib - self.needed_gib

    @property
    def tokens_that_fit(self) -> int:
        return max(0, int((self.budget_gib - self.state_gib) * GIB // self.kv_bytes_per_token))

    @property
    def min_free_gib(self) -> float:
        """Free memory at which the profile's context just fits at its mem_fraction_static."""
        return (self.weights_gib + self.needed_gib) / self.mem_fraction_static

    def summary(self) -> str:
        verdict = (f"fits {self.context_tokens:,} tokens, {self.headroom_gib:.1f} GiB to spare" if self.headroom_gib >= 0
                   else "does NOT start: the weights leave no pool" if self.budget_gib <= self.state_gib
                   else f"context cut to {self.tokens_that_fit:,} of {self.context_tokens:,} tokens")
        return f"{self.free_gib:g} GiB free: pool budget {self.budget_gib:.1f} GiB, {verdict}"


def plan(profile, shape: roof.ModelShape, free_gib: float) -> MemoryPlan:
    """The static pools SGLang would size for `profile` with `free_gib` free before the weights load."""
    args = profile.sglang
    opts = profile.optimizations
    fraction = args.mem_fraction_static or 0.9  # SGLang's own default on a large GPU
    nextn = opts.mtp.enabled
    weights = (target_weight_bytes(shape) * (1 + UNMODELLED_WEIGHTS["target"])
               + (draft_weight_bytes(shape) * (1 + UNMODELLED_WEIGHTS["draft"]) if nextn else 0.0))
    per_token = kv_bytes_per_token(shape) + (kv_bytes_per_token(shape, draft=True) if nextn else 0)
    slots = args.max_mamba_cache_size or 0
    conv, ssm = mamba_slot_bytes(shape)
    # kv_cache_configurator.py: with speculation (not DSpark's replay ring) and an explicit Mamba size, SGLang reserves
    # one state per draft token for min(max_running_requests, slots) + 1 requests (unset: SGLang's own figure,
    # at most the slots, which is what is counted).
    spec = ((conv + ssm) * (min(args.max_running_requests or slots, slots) + 1) * opts.mtp.num_draft_tokens
            if nextn and slots else 0)
    context = args.context_length or 0
    return MemoryPlan(
        profile=profile.name, free_gib=free_gib, mem_fraction_static=fraction, context_tokens=context, mamba_slots=slots,
        weights_gib=weights / GIB, mamba_gib=(slots + 1) * (conv + ssm) / GIB if slots else 0.0, spec_state_gib=spec / GIB,
        kv_bytes_per_token=per_token, budget_gib=free_gib * fraction - weights / GIB,
        kv_gib_for_context=context * per_token / GIB, drafter_unmodelled=opts.dspark.enabled,
    )


def start_floor_gib(profile) -> tuple[float, str]:
    """The free memory below which SGLang cannot size any KV pool for `profile` (its weights and Mamba pool exceed
    mem_fraction_static of what is free), with the reason in words, from the checkpoint on this host or the
    published shape. Rounded up to 0.1 GiB."""
    path = roof.checkpoint_config(profile.model.path)
    try:
        shape = roof.ModelShape.from_file(path) if path else roof.ModelShape.from_config(roof.REFERENCE_CONFIG)
    except (roof.RooflineError, TypeError, ValueError):  # a checkpoint the model check refuses on its own
        shape = roof.ModelShape.from_config(roof.REFERENCE_CONFIG)
    need = plan(profile, shape, free_gib=0.0)
    floor = math.ceil((need.weights_gib + need.state_gib) / need.mem_fraction_static * 10) / 10
    why = (f"{need.weights_gib:.1f} GiB of weights + {need.state_gib:.1f} GiB of Mamba state "
           f"({need.mamba_slots} slots{', MTP steps' if need.spec_state_gib else ''}) at --mem-fraction-static "
           f"{need.mem_fraction_static:g}{'; the DSpark drafter not counted' if need.drafter_unmodelled else ''}; "
           "docs/sizing.md")
    return floor, why
