"""Benchmark clients against the simulator: the request shape `sglang.bench_serving --backend sglang`
sends, read the way it reads it, and the tokenizer files such a client needs.

(A real `python -m sglang.bench_serving` run needs SGLang's runtime imports - transformers, datasets and
a torchvision matching the installed torch - which the test venv does not carry; see docs/simulator.md.)"""

from __future__ import annotations

import json

from sparkgate.sim import textgen, tokenizer_files

# What bench_serving's async_request_sglang_generate posts (sglang/benchmark/serving.py, 0.5.23).
BENCH_PAYLOAD = {
    "text": "bade bafi kobo",
    "sampling_params": {"temperature": 0.0, "max_new_tokens": 48, "ignore_eos": True},
    "lora_path": None,
    "return_logprob": False,
    "return_routed_experts": False,
    "logprob_start_len": -1,
}


def test_bench_serving_request_shape(start_profile):
    sim = start_profile("all-three")
    events = [e for _, e in sim.stream("/generate", BENCH_PAYLOAD)]
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    # bench_serving counts tokens from meta_info.completion_tokens of chunks whose text is non-empty,
    # and takes spec_accept_length from whichever chunk carries it.
    assert all(c["text"] for c in chunks)
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[-1] == 48
    assert [c for c in chunks if "spec_accept_length" in c["meta_info"]] == chunks[-1:]


def test_tokenizer_files_match_the_simulator_tokenization(tmp_path):
    directory = tokenizer_files.write(tmp_path / "tok")
    data = json.loads((directory / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    assert len(vocab) == len(set(vocab.values())) == 1003
    assert data["pre_tokenizer"] == {"type": "WhitespaceSplit"}
    assert data["model"]["type"] == "WordLevel" and data["model"]["unk_token"] in vocab
    # The ids /generate returns are the tokenizer's ids for the same words.
    assert all(vocab[word] == textgen.TOKEN_ID_OFFSET + i for i, word in enumerate(textgen.VOCAB))
    assert json.loads((directory / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
