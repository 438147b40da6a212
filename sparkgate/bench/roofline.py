"""The bandwidth roofline for batch-1 decode: bytes read from memory per emitted token, and the speed the
memory bandwidth allows at best.

See docs/bench.md, "Reading the roofline" (the bound, the `-fp4` layout, MTP's bound and estimate), and
tests/fixtures/bench/README.md (the shape's sources and assumptions). Ignored here: norms, short-conv kernels and
biases (< 0.1 % of the bytes) and the FP8 block-128 scales (0.02 %).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from sparkgate.bench.published import PUBLISHED
from sparkgate.errors import Refusal

SPARK_BANDWIDTH_GB_S = 273.0
GB = 1e9
MXFP4_BYTES = 0.5 + 1 / 32  # 4-bit values, one E8M0 scale byte per 32
FP8_BYTES = 1.0
BF16_BYTES = 2.0
FP32_BYTES = 4.0


class RooflineError(Refusal, ValueError):
    pass


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    vocab: int
    layers: int
    first_dense: int
    intermediate: int
    heads: int
    head_dim: int
    kv_lora_rank: int
    qk_nope: int
    qk_rope: int
    v_head: int
    layer_group: int
    experts: int
    top_k: int
    shared_experts: int
    moe_intermediate: int
    shared_intermediate: int
    nextn_layers: int
    kda_heads: int
    kda_head_dim: int
    conv_kernel: int = 4  # KDA's short convolution (short_conv_kernel_size)
    architecture: str = "BailingMoeV3ForCausalLM"
    expert_quant: str = "mxfp4"

    @classmethod
    def from_config(cls, cfg: dict) -> ModelShape:
        def need(key: str) -> int:
            value = cfg.get(key)
            if not isinstance(value, int) or value < 0:
                raise RooflineError(f"config.json: {key!r} missing or not a non-negative integer (got {value!r})")
            return value

        if cfg.get("q_lora_rank") not in (None, 0):
            raise RooflineError("config.json: q_lora_rank is set; this roofline models the Ling-3.0-flash shape "
                                "(q_lora_rank null) only")
        quant = cfg.get("quantization_config") or {}
        heads = need("num_attention_heads")
        head_dim = need("head_dim")
        return cls(
            hidden=need("hidden_size"), vocab=need("vocab_size"), layers=need("num_hidden_layers"),
            first_dense=need("first_k_dense_replace"), intermediate=need("intermediate_size"),
            heads=heads, head_dim=head_dim, kv_lora_rank=need("kv_lora_rank"), qk_nope=need("qk_nope_head_dim"),
            qk_rope=need("qk_rope_head_dim"), v_head=need("v_head_dim"), layer_group=need("layer_group_size") or 1,
            experts=need("num_experts"), top_k=need("num_experts_per_tok"),
            shared_experts=need("num_shared_experts"), moe_intermediate=need("moe_intermediate_size"),
            shared_intermediate=cfg.get("moe_shared_expert_intermediate_size") or need("moe_intermediate_size"),
            nextn_layers=cfg.get("num_nextn_predict_layers") or 0,
            kda_heads=cfg.get("kda_num_heads") or heads, kda_head_dim=cfg.get("kda_head_dim") or head_dim,
            conv_kernel=need("short_conv_kernel_size") if "short_conv_kernel_size" in cfg else 4,
            architecture=(cfg.get("architectures") or ["?"])[0],
            expert_quant=str(quant.get("routed_experts_quant_method") or "mxfp4"),
        )

    @classmethod
    def from_file(cls, path: Path) -> ModelShape:
        try:
            return cls.from_config(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8
            raise RooflineError(f"{path}: cannot read a config.json ({exc})") from None

    # -- layer kinds
    def is_full_attention(self, index: int) -> bool:
        return (index + 1) % self.layer_group == 0

    @property
    def mla_layers(self) -> int:
        return sum(1 for i in range(self.layers) if self.is_full_attention(i))

    @property
    def kda_layers(self) -> int:
        return self.layers - self.mla_layers

    @property
    def moe_layers(self) -> int:
        return self.layers - self.first_dense

    # -- parameter counts
    @property
    def expert_params(self) -> int:
        return 3 * self.hidden * self.moe_intermediate  # gate, up, down

    @property
    def shared_params(self) -> int:
        return self.shared_experts * 3 * self.hidden * self.shared_intermediate

    @property
    def router_params(self) -> int:
        return self.experts * self.hidden

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden * self.intermediate

    @property
    def mla_params(self) -> int:
        h, n = self.hidden, self.heads
        q = h * n * (self.qk_nope + self.qk_rope)
        kv_a = h * (self.kv_lora_rank + self.qk_rope)
        kv_b = self.kv_lora_rank * n * (self.qk_nope + self.v_head)
        o = n * self.v_head * h
        gate = h * n
        return q + kv_a + kv_b + o + gate

    @property
    def kda_params(self) -> int:
        width = self.kda_heads * self.kda_head_dim
        return 6 * self.hidden * width + self.hidden * self.kda_heads

    @property
    def lm_head_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def eh_proj_params(self) -> int:
        return 2 * self.hidden * self.hidden

    def active_params(self) -> int:
        """Parameters one token touches in the target (LM head included, embedding table not)."""
        return (self.moe_layers * (self.top_k * self.expert_params + self.shared_params + self.router_params)
                + self.first_dense * self.dense_mlp_params + self.mla_layers * self.mla_params
                + self.kda_layers * self.kda_params + self.lm_head_params)


@dataclass(frozen=True)
class DecodeSetup:
    fp8_lm_head: bool = False
    mtp: bool = False
    num_steps: int = 3
    num_draft_tokens: int = 4
    accept_length: float = PUBLISHED["all-three"].accept_length
    context_tokens: int = 1024
    bandwidth_gb_s: float = SPARK_BANDWIDTH_GB_S


@dataclass(frozen=True)
class Component:
    part: str  # "verify"/"step" or "draft x3"
    name: str
    bound_bytes: float
    estimate_bytes: float


@dataclass
class Roofline:
    setup: DecodeSetup
    shape: ModelShape
    components: list[Component] = field(default_factory=list)

    @property
    def tokens_per_cycle(self) -> float:
        return self.setup.accept_length if self.setup.mtp else 1.0

    @property
    def bytes_per_cycle_bound(self) -> float:
        return sum(c.bound_bytes for c in self.components)

    @property
    def bytes_per_cycle_estimate(self) -> float:
        return sum(c.estimate_bytes for c in self.components)

    @property
    def bound_tok_s(self) -> float:
        return self.setup.bandwidth_gb_s * GB * self.tokens_per_cycle / self.bytes_per_cycle_bound

    @property
    def estimate_tok_s(self) -> float:
        return self.setup.bandwidth_gb_s * GB * self.tokens_per_cycle / self.bytes_per_cycle_estimate

    def as_dict(self) -> dict:
        return {
            "setup": self.setup.__dict__,
            "active_params": self.shape.active_params(),
            "components": [c.__dict__ for c in self.components],
            "tokens_per_cycle": self.tokens_per_cycle,
            "bytes_per_cycle_bound": self.bytes_per_cycle_bound,
            "bytes_per_cycle_estimate": self.bytes_per_cycle_estimate,
            "bytes_per_token_bound": self.bytes_per_cycle_bound / self.tokens_per_cycle,
            "bound_tok_s": self.bound_tok_s,
            "estimate_tok_s": self.estimate_tok_s,
        }


def experts_touched(shape: ModelShape, window: int) -> float:
    """Expected distinct experts per MoE layer for `window` positions routed independently."""
    return shape.experts * (1 - (1 - shape.top_k / shape.experts) ** window)


def _expert_bytes(shape: ModelShape) -> float:
    if shape.expert_quant != "mxfp4":
        raise RooflineError(f"routed experts in {shape.expert_quant!r}: only the MXFP4 layout is modelled")
    return shape.expert_params * MXFP4_BYTES


def _target_forward(shape: ModelShape, setup: DecodeSetup, window: int, part: str) -> list[Component]:
    head = BF16_BYTES if not setup.fp8_lm_head else FP8_BYTES
    expert = _expert_bytes(shape)
    fp8 = FP8_BYTES
    kv_per_token = (shape.kv_lora_rank + shape.qk_rope) * BF16_BYTES
    state = shape.kda_heads * shape.kda_head_dim * shape.kda_head_dim * FP32_BYTES * 2  # read + write
    bound_experts = shape.moe_layers * shape.top_k * expert
    estimate_experts = shape.moe_layers * experts_touched(shape, window) * expert
    same = [
        ("attention (MLA) FP8", shape.mla_layers * shape.mla_params * fp8),
        ("linear attention (KDA) FP8", shape.kda_layers * shape.kda_params * fp8),
        ("shared experts FP8", shape.moe_layers * shape.shared_params * fp8),
        ("router FP8", shape.moe_layers * shape.router_params * fp8),
        ("dense MLP FP8", shape.first_dense * shape.dense_mlp_params * fp8),
        (f"LM head {'FP8' if setup.fp8_lm_head else 'BF16'}", shape.lm_head_params * head),
        ("embedding rows BF16", window * shape.hidden * BF16_BYTES),
        (f"MLA cache, {setup.context_tokens} tokens", shape.mla_layers * setup.context_tokens * kv_per_token),
        ("KDA state read+write FP32", shape.kda_layers * state),
    ]
    return [Component(part, "routed experts MXFP4", bound_experts, estimate_experts)] + [
        Component(part, name, value, value) for name, value in same
    ]


def _draft_forward(shape: ModelShape, setup: DecodeSetup, part: str) -> list[Component]:
    head = BF16_BYTES if not setup.fp8_lm_head else FP8_BYTES
    steps = setup.num_steps
    kv_per_token = (shape.kv_lora_rank + shape.qk_rope) * BF16_BYTES
    parts = [
        ("draft layer: eh_proj + MLA + shared + router FP8",
         (shape.eh_proj_params + shape.mla_params + shape.shared_params + shape.router_params) * FP8_BYTES),
        ("draft layer: routed experts MXFP4", shape.top_k * _expert_bytes(shape)),
        (f"draft LM head {'FP8' if setup.fp8_lm_head else 'BF16'} (shared)", shape.lm_head_params * head),
        ("draft embedding row + MLA cache", shape.hidden * BF16_BYTES + setup.context_tokens * kv_per_token),
    ]
    return [Component(part, name, steps * value, steps * value) for name, value in parts]


def compute(shape: ModelShape, setup: DecodeSetup) -> Roofline:
    if setup.mtp:
        if shape.nextn_layers < 1:
            raise RooflineError("MTP needs the checkpoint's NextN layer (num_nextn_predict_layers >= 1)")
        components = _target_forward(shape, setup, setup.num_draft_tokens, f"verify ({setup.num_draft_tokens} positions)")
        components += _draft_forward(shape, setup, f"draft x{setup.num_steps}")
    else:
        components = _target_forward(shape, setup, 1, "step")
    return Roofline(setup, shape, components)


def setup_for_profile(profile, *, accept_length: float | None = None, context_tokens: int = 1024,
                      bandwidth_gb_s: float = SPARK_BANDWIDTH_GB_S) -> DecodeSetup:
    """The decode setup a profile launches (Humming changes kernels, not bytes: it does not appear here)."""
    opts = profile.optimizations
    mtp = opts.mtp
    return DecodeSetup(
        fp8_lm_head=opts.fp8_lm_head.enabled, mtp=mtp.enabled, num_steps=mtp.num_steps,
        num_draft_tokens=mtp.num_draft_tokens,
        accept_length=accept_length if accept_length is not None else DecodeSetup.accept_length,
        context_tokens=context_tokens, bandwidth_gb_s=bandwidth_gb_s,
    )


# The published Ling-3.0-flash shape, used when no checkpoint config.json is on this host. The values are the
# checkpoint's config.json fields as pinned by a third-party loader of Ling-3.0-flash (hidden 2560 and vocab
# 157,184 also appear in the Ling notebook's Spark recipe); with the layout modelled above they give 5.10 B active
# parameters, the published "5.1B active". tests/fixtures/bench/ling-3.0-flash-config.json carries the same values in
# checkpoint form. Confirm against your checkpoint: `invoke roofline --config <model dir>/config.json`.
REFERENCE_CONFIG: dict = {
    "architectures": ["BailingMoeV3ForCausalLM"],
    "model_type": "bailing_hybrid",
    "hidden_size": 2560,
    "vocab_size": 157184,
    "num_hidden_layers": 42,
    "first_k_dense_replace": 2,
    "intermediate_size": 6144,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "head_dim": 128,
    "q_lora_rank": None,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "layer_group_size": 6,
    "short_conv_kernel_size": 4,
    "no_kda_lora": True,
    "num_experts": 512,
    "num_experts_per_tok": 8,
    "num_shared_experts": 1,
    "moe_intermediate_size": 768,
    "moe_shared_expert_intermediate_size": 768,
    "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False,
    "quantization_config": {
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
        "routed_experts_quant_method": "mxfp4",
    },
}


def checkpoint_config(model_path: str) -> Path | None:
    """The checkpoint's config.json on this host, where deploy looks for the weights."""
    from sparkgate.paths import model_dir

    candidate = model_dir(model_path).host("config.json")
    return candidate if candidate.is_file() else None
