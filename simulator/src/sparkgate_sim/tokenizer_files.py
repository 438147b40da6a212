"""Write a tiny Hugging Face tokenizer that matches the simulator's tokenization exactly.

Benchmark clients such as `python -m sglang.bench_serving` need a tokenizer to build prompts and count
tokens. This one is a WordLevel tokenizer over the simulator's output vocabulary with whitespace
pre-tokenization, so its token counts equal the simulator's (`len(text.split())`), offline:

    python -m sparkgate_sim.tokenizer_files /tmp/sim-tokenizer
    python -m sglang.bench_serving --backend sglang --tokenizer /tmp/sim-tokenizer ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sparkgate_sim import textgen

SPECIALS = ("<pad>", "</s>", "<unk>")  # ids 0, 1 (EOS, as textgen.EOS_TOKEN_ID), 2


def tokenizer_json() -> dict:
    vocab = {**{token: i for i, token in enumerate(SPECIALS)}, **textgen.VOCAB_IDS, **textgen.CODE_IDS}
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
        for i, t in enumerate(SPECIALS)
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }


def tokenizer_config() -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "pad_token": "<pad>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": 262144,
        "clean_up_tokenization_spaces": False,
    }


def write(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer_json()), encoding="utf-8")
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=1), encoding="utf-8")
    return directory


if __name__ == "__main__":
    print(write(Path(sys.argv[1] if len(sys.argv) > 1 else "sim-tokenizer")))
