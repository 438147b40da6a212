"""A tiny DSpark drafter (`LingDSparkModel`) for the tiny BailingMoeV3 target: real safetensors, deterministic.

SGLang 0.5.23's `LingDSparkModel` (sglang/srt/models/dspark.py) is a Qwen3-shaped DFlash draft stack
(sglang/srt/models/dflash.py `DFlashDraftModel`) plus a Markov head and a confidence head. It has no embedding
and no LM head of its own: the worker attaches the target's (`attach_shared_modules`), and `load_weights`
skips `embed_tokens.*` / `lm_head.*`. So the drafter only has to match the target's hidden size and vocab.

Two variants:
- `random`: seeded normal weights; it never agrees with anything (accept length about 1).
- `agree`: every drafted token is the block's anchor token. The draft's final `norm.weight` is zero, so its
  hidden state and the base logits (hidden @ lm_head.T) are exactly zero; the Markov bias of step k is
  `markov_w2 @ markov_w1[prev]` with `markov_w1 = I`, `markov_w2 = MARKOV_GAIN * I`, so it peaks at the previous
  token, and step 0's previous token is the anchor (sglang/srt/speculative/dspark_components/dspark_draft.py
  `draft_markov_block`). A target that repeats its last token then accepts every drafted token. The
  confidence head reads zero weights and a large bias (confidence about 1).

The config carries the fields SGLang's DSpark/DFlash parsers read (dspark_config.py
`parse_dspark_draft_config`, dflash_utils.py `parse_dflash_draft_config`): `block_size` (gamma; the launch's
`--speculative-num-draft-tokens` must be gamma + 1), `dflash_config.target_layer_ids` (target layers whose
outputs the draft reads; BailingMoeV3 captures after the layer), `mask_token_id` (< the target vocab),
`markov_rank` with `markov_head_type`, and `enable_confidence_head`.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.gpu.v3_checkpoints import CONTEXT

HIDDEN = 1024  # the tiny V3 target's hidden_size
VOCAB = 512  # tests/real/checkpoints.py VOCAB_SIZE, the target's vocab
TARGET_LAYERS = 6  # the tiny V3 target's num_hidden_layers
TARGET_LAYER_IDS = (1, 3, 5)  # context features: fc.weight is [HIDDEN, len(ids) * HIDDEN]
GAMMA = 8  # block_size, the dspark profile's: --speculative-num-draft-tokens 9
DRAFT_LAYERS = 1
HEADS, KV_HEADS, HEAD_DIM = 8, 2, 128
INTERMEDIATE = 1024
MARKOV_RANK = VOCAB  # rank = vocab lets the agreeing head be an identity
MASK_TOKEN_ID = VOCAB - 1  # input-only: embedded by the target embedding, never sampled
MARKOV_GAIN = 32.0  # the agreeing bias: logit of the previous token (all others 0)
CONFIDENCE_BIAS = 12.0  # sigmoid(12) ~ 0.99999
MAX_POSITIONS = CONTEXT  # the tiny V3 target's context: the draft's may not be shorter (see drafter_config)
SEED = 0
VARIANTS = ("random", "agree")


def drafter_config() -> dict:
    return {
        "architectures": ["LingDSparkModel"],
        "model_type": "qwen3",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": DRAFT_LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "vocab_size": VOCAB,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        # >= the target's context: the draft ModelConfig gets the target's context length and raises when it is
        # longer than this (sglang/srt/configs/model_config.py `_derive_context_length`).
        "max_position_embeddings": MAX_POSITIONS,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "block_size": GAMMA,
        "num_target_layers": TARGET_LAYERS,
        "dflash_config": {
            "target_layer_ids": list(TARGET_LAYER_IDS),
            "mask_token_id": MASK_TOKEN_ID,
            "num_target_layers": TARGET_LAYERS,
        },
        "mask_token_id": MASK_TOKEN_ID,
        "markov_rank": MARKOV_RANK,
        "markov_head_type": "vanilla",
        "enable_confidence_head": True,
        "confidence_head_with_markov": True,
        "sample_from_anchor": True,
    }


def _shapes() -> dict[str, tuple[int, ...]]:
    """Checkpoint tensor names (Qwen3 spelling: q/k/v and gate/up are split) and shapes."""
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    shapes: dict[str, tuple[int, ...]] = {}
    for i in range(DRAFT_LAYERS):
        p = f"layers.{i}"
        shapes |= {
            f"{p}.input_layernorm.weight": (HIDDEN,),
            f"{p}.post_attention_layernorm.weight": (HIDDEN,),
            f"{p}.self_attn.q_proj.weight": (q, HIDDEN),
            f"{p}.self_attn.k_proj.weight": (kv, HIDDEN),
            f"{p}.self_attn.v_proj.weight": (kv, HIDDEN),
            f"{p}.self_attn.o_proj.weight": (HIDDEN, q),
            f"{p}.self_attn.q_norm.weight": (HEAD_DIM,),
            f"{p}.self_attn.k_norm.weight": (HEAD_DIM,),
            f"{p}.mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN),
            f"{p}.mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
            f"{p}.mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
        }
    shapes |= {
        "norm.weight": (HIDDEN,),
        "fc.weight": (HIDDEN, len(TARGET_LAYER_IDS) * HIDDEN),
        "hidden_norm.weight": (HIDDEN,),
        "markov_head.markov_w1.weight": (VOCAB, MARKOV_RANK),
        "markov_head.markov_w2.weight": (VOCAB, MARKOV_RANK),
        "confidence_head.proj.weight": (1, HIDDEN + MARKOV_RANK),
        "confidence_head.proj.bias": (1,),
    }
    return shapes


def drafter_tensors(variant: str, seed: int = SEED) -> dict:
    """The drafter's weights by checkpoint name (bf16; the confidence head fp32, as SGLang builds it)."""
    import torch

    if variant not in VARIANTS:
        raise ValueError(f"unknown drafter variant {variant!r}; expected one of {VARIANTS}")
    gen = torch.Generator().manual_seed(seed)
    tensors = {
        name: torch.ones(shape) if name.endswith("norm.weight") else torch.randn(shape, generator=gen) * 0.02
        for name, shape in _shapes().items()
    }
    if variant == "agree":
        eye = torch.eye(VOCAB, MARKOV_RANK)
        tensors["norm.weight"] = torch.zeros(HIDDEN)
        tensors["markov_head.markov_w1.weight"] = eye
        tensors["markov_head.markov_w2.weight"] = eye * MARKOV_GAIN
        tensors["confidence_head.proj.weight"] = torch.zeros(1, HIDDEN + MARKOV_RANK)
        tensors["confidence_head.proj.bias"] = torch.full((1,), CONFIDENCE_BIAS)
    return {
        name: t.to(torch.float32 if name.startswith("confidence_head.") else torch.bfloat16).contiguous()
        for name, t in tensors.items()
    }


def build_dspark_drafter(dest: Path, variant: str = "agree", seed: int = SEED) -> Path:
    """Write config.json and model.safetensors into `dest` (created). Placing it at `<target>/dspark/` lets
    SGLang find it without --speculative-draft-model-path (arg_groups/speculative_hook.py)."""
    from safetensors.torch import save_file

    tensors = drafter_tensors(variant, seed)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.json").write_text(json.dumps(drafter_config(), indent=2, sort_keys=True) + "\n")
    save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest


def load_report(path: Path | str) -> dict:
    """Load the drafter with SGLang's own config reader, class and `load_weights`, on CPU, and report what
    happened. Runs in a subprocess that has SGLANG_USE_CPU_ENGINE=1 and the CPU `sgl_kernel` stand-in
    (tests/real/stand_ins) on its path; SGLANG_RAGGED_VERIFY_MODE decides whether the confidence head exists
    (static, SGLang's default, builds none: sglang/srt/models/dspark.py `build_confidence_head`)."""
    import torch
    from safetensors.torch import load_file
    from sglang.srt.runtime_context import SpawnRanks, publish, reset_context
    from sglang.srt.server_args import ServerArgs

    reset_context()
    publish(ServerArgs(model_path="dummy", device="cpu"), role="test", ranks=SpawnRanks(world_rank=0))
    from sglang.srt.models.dspark import LingDSparkModel
    from sglang.srt.speculative.dspark_components.dspark_config import resolve_runtime_config
    from sglang.srt.utils.hf_transformers_utils import get_config

    path = Path(path)
    config = get_config(str(path), trust_remote_code=False)
    runtime = resolve_runtime_config(
        draft_hf_config=config, speculative_num_draft_tokens=GAMMA + 1, target_vocab_size=VOCAB
    )
    torch.set_default_dtype(torch.bfloat16)
    model = LingDSparkModel(config)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for p in params.values():
            p.fill_(float("nan"))
    checkpoint = load_file(str(path / "model.safetensors"))
    model.load_weights(iter(checkpoint.items()))
    unwritten = sorted(n for n, p in params.items() if torch.isnan(p.float()).any())
    consumed = sum(t.numel() for n, t in checkpoint.items() if model.confidence_head or "confidence" not in n)
    report = {
        "class": type(model).__name__,
        "markov_head": type(model.markov_head).__name__,
        "confidence_head": model.confidence_head is not None,
        "gamma": runtime.gamma,
        "verify_num_draft_tokens": runtime.verify_num_draft_tokens,
        "mask_token_id": runtime.mask_token_id,
        "num_context_features": model.num_context_features,
        "unwritten_params": unwritten,
        "param_numel": sum(p.numel() for p in params.values()),
        "checkpoint_numel_loaded": consumed,
    }
    with torch.no_grad():
        # The agreeing construction, through SGLang's own modules: the final norm zeroes any draft hidden,
        # so the base logits are zero, and the Markov bias of every previous token peaks at that token.
        gen = torch.Generator().manual_seed(1)
        hidden = torch.randn(3, HIDDEN, generator=gen).to(torch.bfloat16)
        residual = torch.randn(3, HIDDEN, generator=gen).to(torch.bfloat16)
        normed, _ = model.norm(hidden.clone(), residual.clone())
        prev = torch.arange(VOCAB)
        bias, _ = model.markov_head.step_bias(prev, hidden_states=None, state=None)
        report["final_hidden_max_abs"] = float(normed.abs().max())
        report["markov_argmax_is_prev"] = int((bias.float().argmax(-1) == prev).sum())
        if model.confidence_head is not None:
            anchor = torch.tensor([7, 9])
            drafts = anchor.view(-1, 1).repeat(1, GAMMA)
            confidence, _ = model.confidence_head.predict(
                torch.zeros(2 * GAMMA, HIDDEN), anchor_tokens=anchor, draft_tokens=drafts,
                markov_head=model.markov_head,
            )
            report["confidence_min"] = float(confidence.min())
    return report


if __name__ == "__main__":
    import os
    import sys

    # `MODE=PATH ...`: one report per case in one process (SGLang reads SGLANG_RAGGED_VERIFY_MODE at each use,
    # `envs.SGLANG_RAGGED_VERIFY_MODE.get()`), so importing SGLang is paid once.
    reports = {}
    for case in sys.argv[1:]:
        mode, _, path = case.partition("=")
        os.environ["SGLANG_RAGGED_VERIFY_MODE"] = mode
        reports[case] = load_report(path)
    print(json.dumps(reports, sort_keys=True))
