"""Fake target checkpoints for the checkpoint preflight, the pull tests and benchmarks/bench_checkpoint.py: a
Ling-3.0-flash-shaped `config.json`, a `model.safetensors.index.json` and shards whose safetensors headers are
real (written in the format's own layout: 8-byte little-endian header length, JSON header, data) and whose
data is tiny, all recorded the way a `local_dir` download records them (huggingface_hub's own
`write_download_metadata`). Never a download.

Tensor names are the ones SGLang's Bailing V3 loader reads (sglang/srt/models/bailing_moe_v3.py): embedding,
final norm, head, per layer the attention, norms and MLP (dense for the first `first_k_dense_replace`, else
`num_experts` experts with FP8-style scales), and the NEXTN layer at index num_hidden_layers with its bridge.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub._local_folder import write_download_metadata
from huggingface_hub.utils.sha import git_hash

REVISION = "3f1c2b7d9e8a6f5b4c3d2e1f0a9b8c7d6e5f4a3b"
OTHER_REVISION = "0" * 40
REPO = "inclusionAI/Ling-3.0-flash-fp4"
ARCHITECTURE = "BailingMoeV3ForCausalLM"


def config(layers: int = 4, experts: int = 4, first_dense: int = 1, nextn: int = 1, **override) -> dict:
    """A Ling-3.0-flash-fp4-shaped config.json (the published shape is 42 layers, 512 experts, 2 dense)."""
    return {
        "architectures": [ARCHITECTURE], "model_type": "bailing_hybrid", "hidden_size": 64, "vocab_size": 512,
        "num_hidden_layers": layers, "first_k_dense_replace": first_dense, "num_experts": experts,
        "num_experts_per_tok": 2, "num_shared_experts": 1, "num_nextn_predict_layers": nextn,
        "tie_word_embeddings": False, "layer_group_size": 2, "short_conv_kernel_size": 4,
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                "weight_block_size": [128, 128], "routed_experts_quant_method": "mxfp4"},
        **override,
    }


def tensor_names(cfg: dict) -> list[str]:
    """Every tensor of the checkpoint, in layer order."""
    names = ["model.word_embeddings.weight", "model.norm.weight"]
    if not cfg.get("tie_word_embeddings", False):
        names.append("lm_head.weight")
    layers = cfg["num_hidden_layers"]
    nextn = cfg.get("num_nextn_predict_layers", 0)
    for layer in range(layers + nextn):
        prefix = f"model.layers.{layer}"
        names += [f"{prefix}.input_layernorm.weight", f"{prefix}.post_attention_layernorm.weight",
                  f"{prefix}.attention.q_proj.weight", f"{prefix}.attention.q_proj.weight_scale_inv",
                  f"{prefix}.attention.dense.weight"]
        if layer >= layers:  # the NEXTN layer: the bridge, its own head (which SGLang skips) and a MoE MLP
            names += [f"{prefix}.{part}.weight" for part in ("eh_proj", "enorm", "hnorm", "final_layernorm")]
            names += [f"{prefix}.eh_proj.weight_scale_inv", f"{prefix}.shared_head.head.weight"]
        if layer < cfg.get("first_k_dense_replace", 1):
            names += [f"{prefix}.mlp.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")]
            continue
        names += [f"{prefix}.mlp.gate.weight", f"{prefix}.mlp.shared_experts.down_proj.weight"]
        for expert in range(cfg["num_experts"]):
            for projection in ("gate_proj", "up_proj", "down_proj"):
                names += [f"{prefix}.mlp.experts.{expert}.{projection}.weight",
                          f"{prefix}.mlp.experts.{expert}.{projection}.weight_scale_inv"]
    return names


def safetensors_bytes(tensors: dict[str, bytes], dtype: str = "U8", pad_to: int = 8) -> bytes:
    """A safetensors file holding each tensor as a 1-D `dtype` array of its bytes (the format's own layout)."""
    header, offset = {}, 0
    width = {"U8": 1, "BF16": 2, "F32": 4}[dtype]
    for tensor, data in tensors.items():
        header[tensor] = {"dtype": dtype, "shape": [len(data) // width], "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % pad_to)  # safetensors pads the header with spaces to an 8-byte boundary
    return struct.pack("<Q", len(text)) + text + b"".join(tensors.values())


def record(directory: Path, relative: str, content: bytes, revision: str = REVISION) -> None:
    """The record a `local_dir` download writes: SHA-256 etag for an LFS file, git blob id for the others."""
    lfs = relative.endswith(".safetensors")
    write_download_metadata(directory, relative, revision, hashlib.sha256(content).hexdigest() if lfs
                            else git_hash(content))


def write_file(directory: Path, relative: str, content: bytes, revision: str | None = REVISION) -> Path:
    path = directory / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    if revision is not None:
        record(directory, relative, content, revision)
    return path


def shard_name(index: int, count: int) -> str:
    return f"model-{index + 1:05d}-of-{count:05d}.safetensors"


@dataclass
class Checkpoint:
    directory: Path
    config: dict
    weight_map: dict[str, str]
    shards: dict[str, dict[str, bytes]]  # shard -> tensor -> data

    def write_shard(self, shard: str, revision: str | None = REVISION) -> bytes:
        content = safetensors_bytes(self.shards[shard])
        write_file(self.directory, shard, content, revision)
        return content

    def write_index(self, revision: str | None = REVISION) -> None:
        index = {"metadata": {"total_size": sum(len(d) for s in self.shards.values() for d in s.values())},
                 "weight_map": self.weight_map}
        write_file(self.directory, "model.safetensors.index.json", json.dumps(index, indent=2).encode(), revision)

    def write_config(self, cfg: dict | None = None, revision: str | None = REVISION) -> None:
        self.config = cfg if cfg is not None else self.config
        write_file(self.directory, "config.json", json.dumps(self.config, indent=2).encode(), revision)


def build(directory: Path, cfg: dict | None = None, shards: int = 3, revision: str = REVISION,
          tensor_bytes: int = 2, names: list[str] | None = None) -> Checkpoint:
    """A complete checkpoint directory as a pull at `revision` leaves it."""
    directory.mkdir(parents=True, exist_ok=True)
    cfg = cfg if cfg is not None else config()
    names = names if names is not None else tensor_names(cfg)
    per_shard = -(-len(names) // shards)
    layout: dict[str, dict[str, bytes]] = {}
    weight_map: dict[str, str] = {}
    for position, tensor in enumerate(names):
        shard = shard_name(position // per_shard, shards)
        data = hashlib.sha256(tensor.encode()).digest()[:tensor_bytes].ljust(tensor_bytes, b"\0")
        layout.setdefault(shard, {})[tensor] = data
        weight_map[tensor] = shard
    made = Checkpoint(directory, cfg, weight_map, layout)
    made.write_config(revision=revision)
    made.write_index(revision)
    for shard in layout:
        made.write_shard(shard, revision)
    for relative, content in (("tokenizer_config.json", b'{"model_max_length": 262144}\n'),
                              ("generation_config.json", b'{"eos_token_id": 156892}\n'),
                              ("README.md", b"# Ling-3.0-flash-fp4\n")):
        write_file(directory, relative, content, revision)
    return made
