"""Tiny local checkpoints for the real SGLang server on CPU: built in seconds, no download, deterministic.

- `build_tiny_llama(dest)`: a `LlamaForCausalLM` (hidden 64, 2 layers, 4 query / 2 KV heads, vocab 512,
  bf16) with seeded random weights saved by transformers, and the shared tokenizer.
- `build_tiny_bailing_v2(dest)`: a config-only `BailingMoeV2ForCausalLM` in the Ling-2 shape (GQA with
  QK-norm and partial rotary, grouped top-k routing with a sigmoid score and expert bias, a shared
  expert, one dense first layer) and one NEXTN (MTP) layer. No weights: serve it with
  `--load-format dummy --trust-remote-code` (DUMMY_WEIGHTS_ARGS). transformers has no `bailing_moe_v2`
  model type, so the directory carries its own config class (auto_map) re-exporting SGLang's.
- The tokenizer: byte-level BPE trained here with `tokenizers` on a fixed corpus, with ChatML special
  tokens and chat template.

Builders write into the directory they are given (a pytest tmp dir); conftest.py exposes them as
session fixtures.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

VOCAB_SIZE = 512
SEED = 0
CONTEXT_LEN = 4096  # room for the answer set's register (about 2,700 tokens with this tokenizer)
IM_START, IM_END, ENDOFTEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Flags a config-only checkpoint (no weight files) needs: SGLang fills the weights itself, seeded
# (sglang/srt/model_loader/weight_utils.py initialize_dummy_weights: seed 1234 per parameter), so every
# launch of the same checkpoint gets the same weights.
DUMMY_WEIGHTS_ARGS = ("--load-format", "dummy", "--trust-remote-code")

_CORPUS_LINES = (
    "The quick brown fox jumps over the lazy dog.",
    "Pack my box with five dozen liquor jugs.",
    "How vexingly quick daft zebras jump!",
    "Sphinx of black quartz, judge my vow.",
    "A deployment is admitted only when every optimization is proven engaged.",
    "The engine serves requests, the gate reads its evidence, and the operator reads the report.",
    "Speculative decoding drafts tokens with a small head and verifies them with the target model.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 100 1000 2024 3.14 42.",
    "def add(a, b):\n    return a + b\n",
    "Hello, world! Hello there. How are you today? I am fine, thank you.",
)

# Re-exports SGLang's own class (sglang/srt/configs/bailing_moe_v2.py), so the fields SGLang's model
# code reads have exactly the defaults SGLang gives them. Runs inside the server process only.
_BAILING_CONFIG_PY = '''"""Config class for a test-only tiny BailingMoeV2 checkpoint (transformers has no bailing_moe_v2)."""

from sglang.srt.configs.bailing_moe_v2 import BailingMoeV2Config as _SGLangBailingMoeV2Config


class BailingMoeV2Config(_SGLangBailingMoeV2Config):
    model_type = "bailing_moe_v2"
'''


def _corpus() -> list[str]:
    return [f"{line} {i}" for i in range(20) for line in _CORPUS_LINES]


def build_tokenizer(dest: Path) -> dict[str, int]:
    """Train the byte-level BPE tokenizer into `dest`; return the special token ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[ENDOFTEXT, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    assert tokenizer.get_vocab_size() <= VOCAB_SIZE, tokenizer.get_vocab_size()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=ENDOFTEXT, eos_token=IM_END, pad_token=ENDOFTEXT, unk_token=None
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(dest)
    return {
        "bos_token_id": tokenizer.token_to_id(ENDOFTEXT),
        "eos_token_id": tokenizer.token_to_id(IM_END),
        "pad_token_id": tokenizer.token_to_id(ENDOFTEXT),
    }


def build_tiny_llama(dest: Path, seed: int = SEED) -> Path:
    """A dense LlamaForCausalLM with seeded random weights (bf16, safetensors) plus the tokenizer. Another `seed`:
    the same architecture and tokenizer with other weights (a draft that never agrees with the target)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    dest.mkdir(parents=True, exist_ok=True)
    ids = build_tokenizer(dest)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT_LEN,
        tie_word_embeddings=False,
        **ids,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(dest)
    return dest


def tiny_bailing_v2_config(ids: dict[str, int]) -> dict:
    """The config.json of the tiny BailingMoeV2 + NEXTN checkpoint (fields as in
    sglang/srt/models/bailing_moe.py and bailing_moe_nextn.py read them)."""
    return {
        "architectures": ["BailingMoeV2ForCausalLM"],
        "model_type": "bailing_moe_v2",
        "auto_map": {"AutoConfig": "configuration_bailing_moe_v2.BailingMoeV2Config"},
        "torch_dtype": "bfloat16",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "hidden_act": "silu",
        "use_qkv_bias": False,
        "use_bias": False,
        "use_qk_norm": True,
        "partial_rotary_factor": 0.5,
        "rms_norm_eps": 1e-6,
        "norm_head": False,
        "tie_word_embeddings": False,
        "max_position_embeddings": CONTEXT_LEN,
        # Spelled out: transformers 5 builds rope_parameters from rope_theta only when the config class
        # declares it before PretrainedConfig.__init__, which the from_pretrained path of this one does not.
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        "embedding_dropout": 0.0,
        "attention_dropout": 0.0,
        "output_dropout": 0.0,
        # MoE: 8 routed experts in 4 groups, top-2 from the best 2 groups, sigmoid scores with expert
        # bias (the DeepSeek-V3 style routing of Ling-2), one shared expert, first layer dense.
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "n_group": 4,
        "topk_group": 2,
        "score_function": "sigmoid",
        "moe_router_enable_expert_bias": True,
        "router_dtype": "fp32",
        "routed_scaling_factor": 2.5,
        "norm_topk_prob": True,
        "moe_intermediate_size": 32,
        "num_shared_experts": 1,
        "moe_shared_expert_intermediate_size": 32,
        "first_k_dense_replace": 1,
        "router_type": "topN",
        # One MTP layer (model.layers.<num_hidden_layers>), served by BailingMoeForCausalLMNextN.
        "num_nextn_predict_layers": 1,
        **ids,
    }


def build_tiny_bailing_v2(dest: Path) -> Path:
    """Config-only BailingMoeV2ForCausalLM with a NEXTN layer, the tokenizer and its config class."""
    dest.mkdir(parents=True, exist_ok=True)
    ids = build_tokenizer(dest)
    (dest / "configuration_bailing_moe_v2.py").write_text(_BAILING_CONFIG_PY)
    (dest / "config.json").write_text(json.dumps(tiny_bailing_v2_config(ids), indent=2, sort_keys=True) + "\n")
    return dest


def tree_digest(path: Path) -> str:
    """sha256 over every file's relative path and bytes: equal digests mean identical checkpoints."""
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


# --- the thinker: a model that reasons anyway, then answers (issue 35) ------------------------------------------
# A random-weight model answers nothing right, so the answers stage could only ever refuse it. The thinker is a
# LlamaForCausalLM with crafted weights: every layer's output projections are zero, so the residual stream is the
# current token's embedding and the model is a bigram machine, next token = f(current token), through the real
# SGLang (tokenizer, prefill over the whole prompt, greedy decode, logprobs, detokenizer, EOS and max_tokens). Its
# chat template plants one key token per question of the shipped answer set at the end of the generation prompt
# and ignores `enable_thinking` (what a template that "thinks anyway" does); from the key the model writes
# `<think>`, THINKER_REASONING_TOKENS reasoning tokens, `</think>` with the final answer (the set's own, or a wrong
# one), then EOS. Each step is an added token of its own, so chains never merge and f is a function.
THINKER_REASONING_TOKENS = 48  # past a short question's 32 tokens: the gate must ask again with room
THINKER_HIDDEN = 512  # random unit embeddings this wide are near-orthogonal: the right successor wins by far
THINKER_LOGIT_SCALE = 40.0
THINKER_WRONG_ANSWER = "7777"


def _thinker_chains(wrong: bool) -> list[tuple[str, str, list[str]]]:
    """(question prompt, key token, the tokens the model writes after it) per question of the shipped set."""
    from sparkgate.evidence import answer_set as answer_set_mod

    chains = []
    for question in answer_set_mod.load().every_question():
        answer = THINKER_WRONG_ANSWER if wrong else question.answer
        written = [f"<think>\n({question.id})"]
        written += [f" step{i}.{question.id}" for i in range(THINKER_REASONING_TOKENS)]
        written.append(f" (done {question.id})\n</think>\n\n{answer}")
        chains.append((question.prompt, f"<q:{question.id}>", written))
    return chains


def thinker_template(chains: list[tuple[str, str, list[str]]]) -> str:
    """ChatML, and at the end of the generation prompt the key of the question the last message asks. It never
    reads `enable_thinking`: the model thinks whatever the request says."""
    keys = "".join(f"{'{% if' if i == 0 else '{% elif'} {json.dumps(prompt)} in last %}}{key}"
                   for i, (prompt, key, _) in enumerate(chains))
    return CHATML_TEMPLATE.replace(
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% set last = messages[-1]['content'] %}"
        + keys + "{% endif %}{% endif %}")


def build_tiny_thinker(dest: Path, wrong: bool = False) -> Path:
    """The thinker (module note above): right final answers, or `wrong` ones, after the same reasoning."""
    import torch
    from tokenizers import AddedToken
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    dest.mkdir(parents=True, exist_ok=True)
    ids = build_tokenizer(dest)
    chains = _thinker_chains(wrong)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(dest)
    added = [key for _, key, _ in chains] + [token for _, _, written in chains for token in written]
    tokenizer.add_tokens([AddedToken(t, normalized=False, special=False) for t in added])
    tokenizer.chat_template = thinker_template(chains)
    tokenizer.save_pretrained(dest)
    vocab = 64 * -(-len(tokenizer) // 64)
    config = LlamaConfig(vocab_size=vocab, hidden_size=THINKER_HIDDEN, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT_LEN,
                         tie_word_embeddings=False, **ids)
    model = LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(SEED)
    embed = torch.nn.functional.normalize(torch.randn(vocab, THINKER_HIDDEN, generator=generator), dim=1)
    successor: dict[int, int] = {}
    for _, key, written in chains:
        steps = [tokenizer.convert_tokens_to_ids(t) for t in (key, *written)] + [ids["eos_token_id"]]
        successor.update(zip(steps, steps[1:], strict=False))
    head = torch.zeros(vocab, THINKER_HIDDEN)
    for current, following in successor.items():
        head[following] += embed[current] * THINKER_LOGIT_SCALE
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(embed)
        model.lm_head.weight.copy_(head)
        model.model.norm.weight.fill_(1.0)
        for layer in model.model.layers:  # nothing written into the residual stream: the bigram machine
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    model = model.to(torch.bfloat16)
    # The crafted successor must win at every step in the served precision (RMSNorm of a unit vector, scaled).
    normed = model.model.norm(model.model.embed_tokens.weight[list(successor)].unsqueeze(0))[0]
    chosen = (normed @ model.lm_head.weight.T).float().argmax(dim=-1).tolist()
    assert chosen == list(successor.values()), "the thinker's crafted successors do not win in bf16"
    model.save_pretrained(dest)
    return dest
