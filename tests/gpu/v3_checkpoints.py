"""Tiny Ling-3.0-flash checkpoints with REAL weight files, for stock SGLang 0.5.23 on CUDA (issue #32).

`build_tiny_v3(dest, variant)` writes, in seconds and byte-for-byte deterministic (`seed`): config.json (the
Ling-3.0-flash config of tests/fixtures/bench/ling-3.0-flash-config.json scaled down: `bailing_hybrid`,
`BailingMoeV3ForCausalLM`, KDA linear attention in groups of `layer_group_size` closed by an MLA layer, one dense
first layer, MoE with a shared expert, one NEXTN layer), the project's tokenizer (tests/real/checkpoints.py) and
two safetensors shards with their index: shard 1 the target, shard 2 the NEXTN layer (index num_hidden_layers).

Variants (VARIANTS):
- "agree": FP8 block-128 linears and MXFP4 routed experts, the Ling-3.0-flash-fp4 layout
  (quantization_config.routed_experts_quant_method "mxfp4": sglang/srt/configs/model_config.py sets
  is_fp4_experts, sglang/srt/layers/quantization/fp8.py hands the experts to Mxfp4HummingMoEMethod under
  `--moe-runner-backend humming`). Every block writes nothing into the residual stream: the output projections
  (the attention `dense` of KDA and MLA, the MLPs' and experts' `down_proj`) are zero, the rest seeded random. So
  the last hidden state is the embedding of the current token; the final norm is 1 and the LM head equals the
  embedding, whose rows are random unit vectors: greedy decoding REPEATS THE LAST TOKEN. The NEXTN layer's
  `eh_proj` is [I | 0] over concat(enorm(embedding), hnorm(target hidden)) (sglang/srt/models/
  bailing_moe_nextn.py BailingMoEModelNextN.forward: the embedding half first), its block vanishes likewise and
  its final norm is 1: it drafts the token it is given, which is what the target then writes (every draft
  token accepted).
- "random": the same target (shard 1 byte-identical to "agree"); the NEXTN layer's block has other seeded
  random weights, and `eh_proj` is [-I | 0]: the draft proposes the token LEAST like the current one, never the
  one the target writes (every draft token rejected).
- "bf16": the "agree" weights in BF16 with no quantization_config at all (experts BF16 too): the checkpoint
  the Humming runner cannot take.

`prove_argmax(dest)` (tests/unit/test_v3_checkpoints.py) dequantizes the files (FP8 with its 128x128 block
scales, MXFP4 E2M1 codes with their E8M0 scales per 32) and checks both claims for every token of the vocab
with plain torch in the layers' order. The SGLang side (its loader fills every parameter of the target and of
the NEXTN draft from these files) is proven by tests/unit/test_v3_checkpoints.py with the real 0.5.23 classes
on the CPU, through `python -m tests.gpu.v3_checkpoints --prove-load DIR` (a fresh process: SGLang's module
flags read SGLANG_USE_CPU_ENGINE at import).

The draft: with `--speculative-algorithm NEXTN --speculative-draft-model-path DIR` SGLang builds
BailingMoeForCausalLMNextN from DIR's config.json and files (configs/model_config.py renames the architecture)
and loads only `model.layers.<num_hidden_layers>.*` (bailing_moe_v3.py load_weights is_nextn); its embedding and
head are the target's (speculative/eagle_worker_v2.py init_lm_head: set_embed_and_head). So the draft path is
the checkpoint directory itself ("random" carries its own NEXTN layer).

Tensor layout (checkpoint name -> dtype, shape; H hidden, I moe_intermediate_size, L a layer):
    model.word_embeddings.weight, lm_head.weight            BF16 [V, H]
    model.norm.weight, *.input_layernorm.weight, *.post_attention_layernorm.weight   BF16 [H]
    FP8 linear X: X.weight F8_E4M3 [out, in], X.weight_scale_inv F32 [ceil(out/128), ceil(in/128)]
      KDA layer: attention.{q,k,v,f,g}_proj (FP8 [heads*head_dim, H]), attention.dense (FP8 [H, heads*v_head_dim]),
                 attention.b_proj.weight BF16 [heads, H] (unquantized in SGLang: kimi_linear.py b_proj has no
                 quant_config), attention.{q,k,v}_conv1d.weight BF16 [heads*head_dim, 1, K],
                 attention.A_log F32 [heads], attention.dt_bias F32 [heads*head_dim], attention.o_norm.weight BF16
      MLA layer: attention.q_proj, kv_a_proj_with_mqa, kv_b_proj, dense (FP8), attention.kv_a_layernorm.weight BF16
      dense MLP: mlp.{gate,up,down}_proj (FP8); MoE shared expert: mlp.shared_experts.{gate,up,down}_proj (FP8)
      NEXTN: model.layers.<N>.eh_proj (FP8 [H, 2H]), model.layers.<N>.{enorm,hnorm,final_layernorm}.weight BF16
    MoE router: mlp.gate.weight F32 [E, H]
    MXFP4 expert e of layer L: mlp.experts.<e>.{gate,up}_proj.weight I8 [I, H/2], .weight_scale_inv F8_E8M0
      [I, H/32]; mlp.experts.<e>.down_proj.weight I8 [H, I/2], .weight_scale_inv F8_E8M0 [H, I/32]
      (two E2M1 codes a byte, the first element in the low nibble; one power-of-two scale per 32 elements)
    "bf16": the same names without any weight_scale_inv, every weight BF16 (experts [I, H] and [H, I]).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from tests.real.checkpoints import VOCAB_SIZE, build_tokenizer

CONFIG = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "ling-3.0-flash-config.json"
VARIANTS = ("agree", "random", "bf16")
SEED = 0
CONTEXT = 40960
# The shape that served on an H200 with --load-format dummy. The MLA dims stay Ling's (kv_lora_rank 512, qk_nope
# 128, qk_rope 64, v 128, head_dim 128): smaller ones break the Triton MLA decode kernel.
TINY = {
    "hidden_size": 1024, "intermediate_size": 1024, "num_hidden_layers": 6, "first_k_dense_replace": 1,
    "num_attention_heads": 8, "num_key_value_heads": 8, "num_experts": 16, "num_experts_per_tok": 4,
    "moe_intermediate_size": 256, "moe_shared_expert_intermediate_size": 256, "n_group": 1, "topk_group": 1,
    "layer_group_size": 3,
}
TARGET_SHARD = "model-00001-of-00002.safetensors"
NEXTN_SHARD = "model-00002-of-00002.safetensors"
INDEX = "model.safetensors.index.json"
FP8_BLOCK = 128
FP8_MAX = 448.0
MXFP4_BLOCK = 32
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
INIT_STD = 0.02
EXPERT_SCALE_EXP = -6  # random E2M1 codes times 2**-6: |w| <= 6/64
# safetensors dtype names (the format's own spelling) of the torch dtypes written here
ST_DTYPES = {"bfloat16": "BF16", "float32": "F32", "float8_e4m3fn": "F8_E4M3", "float8_e8m0fnu": "F8_E8M0",
             "int8": "I8"}

# What a tiny V3 launch needs on CUDA beyond tests/real/engine.py CUDA_BASE_ARGS (triton attention, pytorch
# sampling, --mem-fraction-static 0.3, decode graphs of batch 1, no prefill graphs): the context the H200 run served.
LAUNCH_ARGS = ("--context-length", str(CONTEXT))


def tiny_v3_config(ids: dict[str, int], quantized: bool = True) -> dict[str, Any]:
    """config.json: the full Ling-3.0-flash config's fields at the tiny shape (TINY), the tokenizer's ids."""
    cfg = {k: v for k, v in json.loads(CONFIG.read_text()).items() if not k.startswith("_")}
    cfg.update(TINY, vocab_size=VOCAB_SIZE, torch_dtype="bfloat16", max_position_embeddings=CONTEXT, **ids)
    if not quantized:
        del cfg["quantization_config"]
    return cfg


def launch_args(model: Path, runner: str, nextn: bool = False) -> tuple[str, ...]:
    """The SGLang argv extras (after CUDA_BASE_ARGS) of a tiny V3 launch with that MoE runner; with `nextn` the NEXTN
    draft from the checkpoint's own NEXTN layer."""
    from tests.real.engine import NEXTN_ARGS

    args = [*LAUNCH_ARGS, "--moe-runner-backend", runner]
    if nextn:
        args += [*NEXTN_ARGS, "--speculative-draft-model-path", str(model)]
    return tuple(args)


# --- quantization (what the files hold) and its inverse (what the proof reads back) --------------------------

def fp8_block_quant(w):
    """[out, in] float -> (F8_E4M3 weight, F32 weight_scale_inv per 128x128 block): w ~= q * scale_inv."""
    import torch

    out_f, in_f = w.shape
    rows, cols = -(-out_f // FP8_BLOCK), -(-in_f // FP8_BLOCK)
    padded = torch.zeros(rows * FP8_BLOCK, cols * FP8_BLOCK, dtype=torch.float32)
    padded[:out_f, :in_f] = w.float()
    blocks = padded.view(rows, FP8_BLOCK, cols, FP8_BLOCK)
    amax = blocks.abs().amax(dim=(1, 3))
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    q = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).view_as(padded)[:out_f, :in_f]
    return q.to(torch.float8_e4m3fn).contiguous(), scale.contiguous()


def fp8_block_dequant(q, scale_inv):
    import torch

    expand = scale_inv.repeat_interleave(FP8_BLOCK, 0).repeat_interleave(FP8_BLOCK, 1)
    return q.to(torch.float32) * expand[: q.shape[0], : q.shape[1]]


def mxfp4_dequant(packed, scale):
    """I8 [n, k/2] (two E2M1 codes a byte, low nibble first) and F8_E8M0 [n, k/32] -> float32 [n, k]."""
    import torch

    raw = packed.view(torch.uint8).to(torch.int64)
    codes = torch.stack((raw & 0xF, raw >> 4), dim=-1).flatten(-2)
    lut = torch.tensor(E2M1, dtype=torch.float32)
    values = lut[codes & 0x7] * torch.where(codes & 0x8 > 0, -1.0, 1.0)
    return values * scale.to(torch.float32).repeat_interleave(MXFP4_BLOCK, -1)


def _mxfp4_random(gen, rows: int, cols: int):
    import torch

    packed = torch.randint(-128, 128, (rows, cols // 2), generator=gen, dtype=torch.int8)
    scale = torch.full((rows, cols // MXFP4_BLOCK), 2.0**EXPERT_SCALE_EXP).to(torch.float8_e8m0fnu)
    return packed, scale


def _mxfp4_zero(rows: int, cols: int):
    import torch

    return (torch.zeros(rows, cols // 2, dtype=torch.int8),
            torch.ones(rows, cols // MXFP4_BLOCK).to(torch.float8_e8m0fnu))


# --- the weights ---------------------------------------------------------------------------------------------

class _Writer:
    """Collects one shard's tensors in the variant's precision."""

    def __init__(self, gen, quantized: bool) -> None:
        self.gen, self.quantized, self.tensors = gen, quantized, {}

    def randn(self, *shape, std: float = INIT_STD):
        import torch

        return torch.randn(*shape, generator=self.gen) * std

    def plain(self, name: str, value, dtype: str = "bfloat16") -> None:
        import torch

        self.tensors[name] = value.to(getattr(torch, dtype)).contiguous()

    def linear(self, name: str, w) -> None:
        """An FP8 block-quantized linear (quantized variants) or a BF16 one."""
        if self.quantized:
            q, scale = fp8_block_quant(w)
            self.tensors[f"{name}.weight"], self.tensors[f"{name}.weight_scale_inv"] = q, scale
        else:
            self.plain(f"{name}.weight", w)

    def expert(self, name: str, rows: int, cols: int, zero: bool) -> None:
        """A routed expert's projection: MXFP4 codes + E8M0 scales, or BF16 (of the same values)."""
        packed, scale = _mxfp4_zero(rows, cols) if zero else _mxfp4_random(self.gen, rows, cols)
        if self.quantized:
            self.tensors[f"{name}.weight"], self.tensors[f"{name}.weight_scale_inv"] = packed, scale
        else:
            self.plain(f"{name}.weight", mxfp4_dequant(packed, scale))


def _norm(w: _Writer, name: str, size: int) -> None:
    import torch

    w.plain(f"{name}.weight", torch.ones(size))


def _layer(w: _Writer, cfg: dict, p: str, linear_attn: bool, moe: bool) -> None:
    """One decoder layer under prefix `p`: random inputs, zero outputs (nothing reaches the residual stream)."""
    import torch

    h, heads, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["head_dim"]
    a = f"{p}.attention"
    if linear_attn:  # KDA (sglang/srt/models/kimi_linear.py, no_kda_lora)
        for proj in ("q_proj", "k_proj", "v_proj", "f_proj", "g_proj"):
            w.linear(f"{a}.{proj}", w.randn(heads * hd, h))
        w.plain(f"{a}.b_proj.weight", w.randn(heads, h))
        for conv in ("q_conv1d", "k_conv1d", "v_conv1d"):
            w.plain(f"{a}.{conv}.weight", w.randn(heads * hd, 1, cfg["short_conv_kernel_size"], std=0.5))
        w.plain(f"{a}.A_log", torch.zeros(heads), "float32")
        w.plain(f"{a}.dt_bias", torch.zeros(heads * hd), "float32")
        _norm(w, f"{a}.o_norm", hd)
        w.linear(f"{a}.dense", torch.zeros(h, heads * cfg["v_head_dim"]))
    else:  # MLA (sglang/srt/models/deepseek_v2.py DeepseekV2AttentionMLA, q_lora_rank null)
        qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
        w.linear(f"{a}.q_proj", w.randn(heads * qk, h))
        w.linear(f"{a}.kv_a_proj_with_mqa", w.randn(cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], h))
        _norm(w, f"{a}.kv_a_layernorm", cfg["kv_lora_rank"])
        w.linear(f"{a}.kv_b_proj", w.randn(heads * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]),
                                           cfg["kv_lora_rank"]))
        w.linear(f"{a}.dense", torch.zeros(h, heads * cfg["v_head_dim"]))
    m = f"{p}.mlp"
    if moe:
        inter, shared = cfg["moe_intermediate_size"], cfg["moe_shared_expert_intermediate_size"]
        w.plain(f"{m}.gate.weight", w.randn(cfg["num_experts"], h), "float32")
        for e in range(cfg["num_experts"]):
            w.expert(f"{m}.experts.{e}.gate_proj", inter, h, zero=False)
            w.expert(f"{m}.experts.{e}.up_proj", inter, h, zero=False)
            w.expert(f"{m}.experts.{e}.down_proj", h, inter, zero=True)
        w.linear(f"{m}.shared_experts.gate_proj", w.randn(shared, h))
        w.linear(f"{m}.shared_experts.up_proj", w.randn(shared, h))
        w.linear(f"{m}.shared_experts.down_proj", torch.zeros(h, shared))
    else:
        inter = cfg["intermediate_size"]
        w.linear(f"{m}.gate_proj", w.randn(inter, h))
        w.linear(f"{m}.up_proj", w.randn(inter, h))
        w.linear(f"{m}.down_proj", torch.zeros(h, inter))
    _norm(w, f"{p}.input_layernorm", h)
    _norm(w, f"{p}.post_attention_layernorm", h)


def is_linear_layer(cfg: dict, layer: int) -> bool:
    """KDA or MLA: sglang/srt/models/bailing_moe_v3.py is_linear_layer (an int layer_group_size)."""
    return (layer + 1) % cfg["layer_group_size"] != 0


def _target(cfg: dict, seed: int, quantized: bool) -> dict:
    import torch

    gen = torch.Generator().manual_seed(seed)
    w = _Writer(gen, quantized)
    embed = torch.nn.functional.normalize(torch.randn(cfg["vocab_size"], cfg["hidden_size"], generator=gen), dim=1)
    w.plain("model.word_embeddings.weight", embed)
    w.plain("lm_head.weight", embed)
    _norm(w, "model.norm", cfg["hidden_size"])
    for layer in range(cfg["num_hidden_layers"]):
        _layer(w, cfg, f"model.layers.{layer}", is_linear_layer(cfg, layer),
               moe=layer >= cfg["first_k_dense_replace"])
    return w.tensors


def _nextn(cfg: dict, seed: int, quantized: bool, agree: bool) -> dict:
    """The NEXTN layer at index num_hidden_layers: an MLA + MoE block (bailing_moe_nextn.py forces attention_type
    1 and a MoE MLP) and the bridge eh_proj/enorm/hnorm/final_layernorm."""
    import torch

    h = cfg["hidden_size"]
    w = _Writer(torch.Generator().manual_seed(seed + (1 if agree else 2)), quantized)
    p = f"model.layers.{cfg['num_hidden_layers']}"
    eye = torch.eye(h) if agree else -torch.eye(h)
    w.linear(f"{p}.eh_proj", torch.cat((eye, torch.zeros(h, h)), dim=1))  # [embedding half | hidden half]
    for norm in ("enorm", "hnorm", "final_layernorm"):
        _norm(w, f"{p}.{norm}", h)
    _layer(w, cfg, p, linear_attn=False, moe=True)
    return w.tensors


# --- files ---------------------------------------------------------------------------------------------------

def _st_bytes(tensors: dict) -> bytes:
    """A safetensors file, written here (names sorted, 8-byte aligned header): the bytes depend only on the
    tensors, whatever safetensors version the machine has."""
    import torch

    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    chunks, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name]
        data = t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": ST_DTYPES[str(t.dtype).removeprefix("torch.")], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def read_safetensors(path: Path) -> dict:
    """The tensors of a safetensors file (for the proofs; safetensors' own reader would do the same)."""
    import torch

    blob = path.read_bytes()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + length])
    header.pop("__metadata__", None)
    by_name = {v: k for k, v in ST_DTYPES.items()}
    out = {}
    for name, entry in header.items():
        start, end = entry["data_offsets"]
        raw = torch.frombuffer(bytearray(blob[8 + length + start:8 + length + end]), dtype=torch.uint8)
        out[name] = raw.view(getattr(torch, by_name[entry["dtype"]])).reshape(entry["shape"])
    return out


def read_checkpoint(dest: Path) -> dict:
    """Every tensor of the checkpoint, by name, through its index."""
    index = json.loads((dest / INDEX).read_text())
    out = {}
    for shard in sorted(set(index["weight_map"].values())):
        out.update(read_safetensors(dest / shard))
    return out


def build_tiny_v3(dest: Path, variant: str = "agree", seed: int = SEED) -> Path:
    """Write the checkpoint of `variant` (VARIANTS) into `dest`; same seed, same bytes."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: expected one of {VARIANTS}")
    dest.mkdir(parents=True, exist_ok=True)
    ids = build_tokenizer(dest)
    quantized = variant != "bf16"
    cfg = tiny_v3_config(ids, quantized)
    (dest / "config.json").write_text(json.dumps(cfg, indent=1, sort_keys=True) + "\n")
    shards = {TARGET_SHARD: _target(cfg, seed, quantized),
              NEXTN_SHARD: _nextn(cfg, seed, quantized, agree=variant != "random")}
    weight_map, total = {}, 0
    for shard, tensors in shards.items():
        (dest / shard).write_bytes(_st_bytes(tensors))
        weight_map.update({name: shard for name in tensors})
        total += sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (dest / INDEX).write_text(json.dumps(index, indent=1) + "\n")
    return dest


# --- the proof of the claims, in plain torch over the files ----------------------------------------------------

def dequantized(tensors: dict, name: str):
    """The float32 value of checkpoint weight `name` (`X.weight`), whatever its encoding."""
    import torch

    w = tensors[name]
    scale = tensors.get(name.removesuffix(".weight") + ".weight_scale_inv")
    if scale is None:
        return w.to(torch.float32)
    if w.dtype == torch.float8_e4m3fn:
        return fp8_block_dequant(w, scale)
    if w.dtype == torch.int8 and scale.dtype == torch.float8_e8m0fnu:
        return mxfp4_dequant(w, scale)
    raise ValueError(f"{name}: unknown encoding {w.dtype} with scale {scale.dtype}")


def fp8_activation(x):
    """SGLang's dynamic activation quantization ahead of a block-FP8 GEMM: E4M3 per 1x128 group of a token
    (sglang/srt/layers/quantization/fp8_kernel.py per_token_group_quant_fp8), dequantized back."""
    import torch

    groups = x.float().view(x.shape[0], -1, FP8_BLOCK)
    scale = (groups.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=1e-10)
    return ((groups / scale).to(torch.float8_e4m3fn).float() * scale).view_as(x)


def rms_norm(x, weight, eps: float = 1e-6):
    import torch

    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


def output_projections(cfg: dict, layer: str) -> list[str]:
    """The weights through which layer prefix `layer` writes into the residual stream."""
    moe_layer = layer.endswith(f".{cfg['num_hidden_layers']}") or (
        int(layer.rsplit(".", 1)[1]) >= cfg["first_k_dense_replace"])
    names = [f"{layer}.attention.dense.weight"]
    if moe_layer:
        names.append(f"{layer}.mlp.shared_experts.down_proj.weight")
        names += [f"{layer}.mlp.experts.{e}.down_proj.weight" for e in range(cfg["num_experts"])]
    else:
        names.append(f"{layer}.mlp.down_proj.weight")
    return names


def prove_argmax(dest: Path) -> dict[str, Any]:
    """For every token t of the vocab, with the weights dequantized from the files: every block's output
    projections are exactly zero, so the target's last hidden state is the embedding e_t and its greedy next token
    is argmax(head . norm(e_t)); the NEXTN draft's is argmax(head . final_norm(eh_proj . [enorm(e_t), hnorm(e_t)]))
    (the draft's head is the target's). Returns both next-token lists and the margins."""
    import torch

    cfg = json.loads((dest / "config.json").read_text())
    tensors = read_checkpoint(dest)
    quantized = "quantization_config" in cfg
    layers = [f"model.layers.{i}" for i in range(cfg["num_hidden_layers"] + 1)]
    for layer in layers:
        for name in output_projections(cfg, layer):
            if dequantized(tensors, name).abs().max().item() != 0.0:
                raise AssertionError(f"{name} is not zero: the block writes into the residual stream")
    ones = [n for n in tensors if n.endswith(("norm.weight", "layernorm.weight"))]
    for name in ones:
        if not torch.equal(tensors[name].float(), torch.ones(tensors[name].shape)):
            raise AssertionError(f"{name} is not all ones")
    embed = tensors["model.word_embeddings.weight"]
    head = tensors["lm_head.weight"].float()
    tokens = torch.arange(cfg["vocab_size"])
    hidden = embed[tokens].float()  # the residual stream at the last layer: the embedding, untouched
    logits = rms_norm(hidden, tensors["model.norm.weight"], cfg.get("rms_norm_eps", 1e-6)).bfloat16().float() @ head.T
    target = logits.argmax(-1)
    n = f"model.layers.{cfg['num_hidden_layers']}"
    eps = cfg.get("rms_norm_eps", 1e-6)
    bridge = torch.cat((rms_norm(hidden, tensors[f"{n}.enorm.weight"], eps),
                        rms_norm(hidden, tensors[f"{n}.hnorm.weight"], eps)), dim=-1).bfloat16().float()
    if quantized:
        bridge = fp8_activation(bridge)
    drafted = bridge @ dequantized(tensors, f"{n}.eh_proj.weight").T
    draft_logits = rms_norm(drafted, tensors[f"{n}.final_layernorm.weight"], eps).bfloat16().float() @ head.T
    draft = draft_logits.argmax(-1)
    top2 = logits.topk(2, dim=-1).values
    return {"target": target.tolist(), "draft": draft.tolist(), "tokens": tokens.tolist(),
            "target_margin": (top2[:, 0] - top2[:, 1]).min().item()}


# --- the SGLang side: its own classes load the files (run in a fresh process) ----------------------------------

def _sglang_cpu_runtime(moe_runner_backend: str) -> None:
    """Single-process CPU runtime like SGLang's own unit tests: published ServerArgs, a gloo world of one, the
    model-parallel groups, DP-attention state and the MoE flags (which pick Mxfp4HummingMoEMethod)."""
    import socket

    from sglang.srt.distributed.parallel_state import init_distributed_environment, initialize_model_parallel
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.layers.moe.utils import initialize_moe_config
    from sglang.srt.runtime_context import SpawnRanks, get_server_args, publish, reset_context
    from sglang.srt.server_args import ServerArgs

    reset_context()
    publish(ServerArgs(model_path="dummy", device="cpu", moe_runner_backend=moe_runner_backend), role="test",
            ranks=SpawnRanks(world_rank=0))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                 distributed_init_method=f"tcp://127.0.0.1:{port}")
    initialize_model_parallel()
    initialize_dp_attention(server_args=get_server_args())
    initialize_moe_config()


# Parameters the files rightly do not fill: the KV-cache scales of RadixAttention (Fp8KVCacheMethod; only an FP8 KV
# cache reads them, default 1.0) and, in the draft, the embedding and head it takes from the target.
KV_SCALES = (".k_scale", ".v_scale")
DRAFT_SHARED = ("model.word_embeddings.weight", "lm_head.weight")


def prove_load(dest: Path, moe_runner_backend: str = "humming", runtime: bool = True) -> dict[str, Any]:
    """Build SGLang 0.5.23's BailingMoeV3ForCausalLM and BailingMoeForCausalLMNextN from `dest`'s config.json (its
    quantization config through Fp8Config.from_config and ModelConfig's is_fp4_experts rule), run their own
    load_weights over the files twice, each time after filling every parameter with another byte pattern
    (0x55, 0xAA): a parameter element is written by the files iff both loads leave the same bytes. Returns, per
    model, the parameters (name, dtype, shape), the unwritten ones, the MoE method class and the loaded values."""
    import copy

    import torch
    from sglang.srt.configs.bailing_hybrid import BailingHybridConfig
    from sglang.srt.layers.quantization.fp8 import Fp8Config
    from sglang.srt.models.bailing_moe_nextn import BailingMoeForCausalLMNextN
    from sglang.srt.models.bailing_moe_v3 import BailingMoeV3ForCausalLM

    if runtime:  # once per process: a second gloo world of one is refused
        _sglang_cpu_runtime(moe_runner_backend)
    raw = json.loads((dest / "config.json").read_text())
    qc = raw.get("quantization_config")
    quant = None
    if qc is not None:
        quant = Fp8Config.from_config(qc)
        quant.is_fp4_experts = qc.get("routed_experts_quant_method") == "mxfp4"  # model_config.py, loader.py
    hf = BailingHybridConfig(**{k: v for k, v in raw.items() if k != "quantization_config"})
    files = read_checkpoint(dest)
    weights = sorted(files.items())
    torch.set_default_dtype(torch.bfloat16)
    result = {}
    for role, build in (("target", lambda: BailingMoeV3ForCausalLM(config=copy.deepcopy(hf), quant_config=quant)),
                        ("draft", lambda: _draft(hf, quant, BailingMoeForCausalLMNextN))):
        model = build()
        params = dict(model.named_parameters())
        snapshots = []
        for fill in (0x55, 0xAA):
            with torch.no_grad():
                for p in params.values():
                    p.data.reshape(-1).view(torch.uint8).fill_(fill)
            model.load_weights(iter(weights))
            snapshots.append({n: p.data.reshape(-1).view(torch.uint8).clone() for n, p in params.items()})
        unwritten = {}
        for n in params:
            same = snapshots[0][n] == snapshots[1][n]
            if not bool(same.all()):
                unwritten[n] = int((~same).sum())
        moe = {type(m.quant_method).__name__ for m in model.modules() if hasattr(m, "w13_weight")}
        result[role] = {"params": {n: (str(p.dtype), tuple(p.shape)) for n, p in params.items()},
                        "unwritten": unwritten, "moe_methods": sorted(moe),
                        "values": {n: p.data.clone() for n, p in params.items()}}
    return result


def _draft(hf, quant, cls):
    import copy

    cfg = copy.deepcopy(hf)
    cfg.architectures = ["BailingMoeForCausalLMNextN"]  # configs/model_config.py _config_draft_model
    return cls(config=cfg, quant_config=quant)


def _main(argv: list[str]) -> int:
    """`--build DIR VARIANT`, or `--prove-load DIR [BACKEND]` / `--prove-loads DIR...`: prints each proof's summary
    as one JSON line."""
    if len(argv) >= 3 and argv[0] == "--build":
        build_tiny_v3(Path(argv[1]), argv[2])
        return 0
    if len(argv) >= 2 and argv[0] in ("--prove-load", "--prove-loads"):
        # --prove-loads DIR...: each checkpoint with the Humming backend, SGLang imported and set up once
        if argv[0] == "--prove-loads":
            dirs, backend = argv[1:], "humming"
        else:
            dirs, backend = argv[1:2], argv[2] if len(argv) > 2 else "humming"
        for i, directory in enumerate(dirs):
            result = prove_load(Path(directory), backend, runtime=i == 0)
            summary = {role: {k: v for k, v in r.items() if k != "values"} for role, r in result.items()}
            print("PROOF " + json.dumps(summary, default=list))
        return 0
    raise SystemExit("usage: python -m tests.gpu.v3_checkpoints --build DIR VARIANT | --prove-load DIR [BACKEND] | "
                     "--prove-loads DIR...")


if __name__ == "__main__":
    import sys

    sys.exit(_main(sys.argv[1:]))
