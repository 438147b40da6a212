"""Benchmark clients against the simulator: SGLang's own `python -m sglang.bench_serving --backend sglang`
run for real, the request shape it sends, and the tokenizer files such a client needs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from sparkgate_sim import textgen, tokenizer_files

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
    assert len(vocab) == len(set(vocab.values())) == 3 + textgen.VOCAB_SIZE + len(textgen.CODE_VOCAB)
    assert data["pre_tokenizer"] == {"type": "WhitespaceSplit"}
    assert data["model"]["type"] == "WordLevel" and data["model"]["unk_token"] in vocab
    # The ids /generate returns are the tokenizer's ids for the same words.
    assert all(vocab[word] == textgen.TOKEN_ID_OFFSET + i for i, word in enumerate(textgen.VOCAB))
    assert all(vocab[word] == textgen.CODE_TOKEN_ID_OFFSET + i for i, word in enumerate(textgen.CODE_VOCAB))
    assert json.loads((directory / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"


@pytest.mark.sglang
def test_sglang_bench_serving_runs_against_the_sim(start_profile, tmp_path):
    """SGLang's benchmark client, unmodified, runs against the simulator, which decodes at its configured speed
    by its own (engine-time) accounting."""
    sim = start_profile("baseline", scale=0.05)
    tokenizer = tokenizer_files.write(tmp_path / "tok")
    out = tmp_path / "bench.jsonl"
    argv = [
        sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--host", sim.host,
        "--port", str(sim.port), "--dataset-name", "random-ids", "--random-input-len", "32",
        "--random-output-len", "64", "--random-range-ratio", "1.0", "--num-prompts", "3", "--max-concurrency", "1",
        "--tokenizer", str(tokenizer), "--model", "ling-v3-flash-fp4", "--output-file", str(out),
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(out.read_text().splitlines()[-1])
    assert record["completed"] == 3 and record["total_output_tokens"] == 3 * 64
    assert record["server_info"]["moe_runner_backend"] == "flashinfer_mxfp4"
    assert record["mean_tpot_ms"] > 0 and record["output_throughput"] > 0
    # The client's figures are wall-clock (on a loaded host they swing either way: a late first chunk makes the
    # rest arrive faster); the speed is judged from the engine's own accounting of the same requests.
    decode_lines = [line for line in sim.log().splitlines() if "Decode batch, #running-req: 1" in line]
    assert decode_lines, "no periodic decode line over 3 x 64 decode iterations"
    for line in decode_lines:
        engine_tok_s = float(re.search(r"gen throughput \(token/s\): ([0-9.]+)", line).group(1))
        assert engine_tok_s == pytest.approx(37.81, rel=0.02)
