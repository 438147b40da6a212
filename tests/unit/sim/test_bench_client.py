"""Benchmark clients against the simulator: the request shape `sglang.bench_serving --backend sglang`
sends, read the way it reads it; and the real tool when an interpreter that can import it is given."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sparkgate.sim import tokenizer_files

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
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    ids = tokenizer.encode("bade bafi kobo", add_special_tokens=False)
    assert len(ids) == 3 and tokenizer.decode(ids) == "bade bafi kobo"


def _bench_python() -> str:
    return os.environ.get("SPARKGATE_BENCH_PYTHON", sys.executable)


@pytest.mark.sglang
def test_real_bench_serving_against_the_sim(start_profile, tmp_path):
    python = _bench_python()
    probe = subprocess.run([python, "-c", "import sglang.bench_serving"], check=False, capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"sglang.bench_serving not importable with {python}: {probe.stderr.strip().splitlines()[-1:]}")
    sim = start_profile("all-three", scale=0.05)
    tokenizer = tokenizer_files.write(tmp_path / "tok")
    out = tmp_path / "bench.jsonl"
    result = subprocess.run(
        [python, "-m", "sglang.bench_serving", "--backend", "sglang", "--host", sim.host, "--port", str(sim.port),
         "--dataset-name", "random-ids", "--random-input-len", "32", "--random-output-len", "64",
         "--random-range-ratio", "1.0", "--num-prompts", "3", "--max-concurrency", "1",
         "--tokenizer", str(tokenizer), "--model", "ling-v3-flash-fp4", "--output-file", str(out),
         "--disable-tqdm"],
        check=False, capture_output=True, text=True, timeout=180, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    record = json.loads(out.read_text().splitlines()[-1])
    assert record["completed"] == 3
    assert record["total_output_tokens"] == 3 * 64
