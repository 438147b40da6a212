"""The real SGLang 0.5.23 server starts on this CPU machine and answers with real evidence.

Four launch variations, each started once (the lane's tests run grouped by launch, see conftest.py): the
dense tiny llama; the same llama drafting for itself (STANDALONE speculation); the tiny BailingMoeV2
without speculation; the same model with NEXTN speculation. Both speculative launches run through the
test CPU platform plugin and the stand-in kernels, and must reproduce their reference's greedy tokens.
"""

from __future__ import annotations

import re

import pytest

from sparkgate_probe.hooks import HOOK_TARGETS

pytestmark = pytest.mark.real

PROMPTS = ("Hello, world!", "The quick brown fox", "def add(a, b):\n    return", "Numbers: 1 2 3")
MAX_NEW_TOKENS = 24
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def samples(metrics_text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample of `name` in a Prometheus text exposition."""
    found = []
    for line in metrics_text.splitlines():
        match = _SAMPLE.match(line)
        if match and match["name"] == name:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
            found.append((labels, float(match["value"])))
    return found


# -- dense tiny llama (torch_native attention) ---------------------------------------------------------

@pytest.fixture(scope="session")
def dense_reference(real_engines, dense_launch) -> dict[str, list[int]]:
    """Greedy output ids of the dense launch, per prompt (the reference for STANDALONE)."""
    engine = real_engines.get(dense_launch)
    return {prompt: engine.generate(prompt, max_new_tokens=MAX_NEW_TOKENS)["output_ids"] for prompt in PROMPTS}


def test_dense_generate_greedy(dense_reference, dense_engine):
    out = dense_engine.generate(PROMPTS[0], max_new_tokens=MAX_NEW_TOKENS)
    meta = out["meta_info"]
    assert isinstance(out["text"], str) and out["text"]
    assert len(out["output_ids"]) == MAX_NEW_TOKENS
    assert meta["completion_tokens"] == MAX_NEW_TOKENS
    assert meta["prompt_tokens"] > 0
    assert meta["finish_reason"] == {"type": "length", "length": MAX_NEW_TOKENS}
    assert "spec_verify_ct" not in meta  # no speculation, no speculative counters
    # Greedy is deterministic: the same request gives the same tokens.
    assert out["output_ids"] == dense_reference[PROMPTS[0]]


def test_dense_server_info_echoes_the_launch(dense_engine, dense_launch):
    info = dense_engine.server_info()
    assert info["version"] == "0.5.23"
    assert info["model_path"] == str(dense_launch.model_path)
    assert info["served_model_name"] == dense_launch.served_model_name
    assert info["max_running_requests"] == dense_launch.max_running_requests
    assert info["device"] == "cpu"
    assert info["attention_backend"] == "torch_native"
    assert info["speculative_algorithm"] is None
    assert info["enable_metrics"] is True
    model_info = dense_engine.get_json("/model_info")
    assert model_info["architectures"] == ["LlamaForCausalLM"]
    assert model_info["served_model_name"] == dense_launch.served_model_name


def test_dense_probe_report(dense_engine):
    assert dense_engine.children_forked()  # the lane's other launches fork SGLang's children (engine.Launch)
    report = dense_engine.engagement()
    assert report is not None, "no probe report at /server_info internal_states[0]['engagement']"
    assert report["probe_version"] == 1
    assert report["errors"] == []
    assert sorted(report["hooks_registered"]) == sorted(HOOK_TARGETS)
    assert report["hooks_attached"] == dict.fromkeys(HOOK_TARGETS, True)
    assert report["hooks_called"] == ["load_model/target", "get_internal_state"]
    target = report["target"]
    assert target["model_class"] == "LlamaForCausalLM"
    assert target["moe_layers"] == {}
    assert target["lm_head"] == {
        "module_class": "ParallelLMHead",
        "quant_method": "UnquantizedEmbeddingMethod",
        "weight_dtype": "torch.bfloat16",
        "weight_shape": [512, 64],
        "has_weight_scale": False,
        "weight_scale_attr": None,
    }
    assert report["draft"] is None and report["lm_head_sharing"] is None
    assert 'ENGAGEMENT {"event": "load_model"' in dense_engine.log_text()


def test_dense_metrics(dense_engine, dense_launch):
    dense_engine.generate(PROMPTS[1], max_new_tokens=4)
    text = dense_engine.metrics_text()
    assert sum(line.startswith("sglang:") for line in text.splitlines()) > 100
    generated = samples(text, "sglang:generation_tokens_total")
    assert generated and all(labels["model_name"] == dense_launch.served_model_name for labels, _ in generated)
    assert sum(value for _, value in generated) >= 4
    assert [value for _, value in samples(text, "sglang:max_total_num_tokens")] == [8192.0]
    assert [value for _, value in samples(text, "sglang:spec_num_steps")] == [0.0]


# -- the tiny llama drafting for itself (STANDALONE; intel_amx backend via the test platform plugin) ----

def test_standalone_greedy_equals_non_speculative(dense_reference, standalone_engine):
    correct_drafts = 0
    for prompt, expected in dense_reference.items():
        out = standalone_engine.generate(prompt, max_new_tokens=MAX_NEW_TOKENS)
        assert out["output_ids"] == expected, prompt
        meta = out["meta_info"]
        assert len(meta["spec_correct_drafts_histogram"]) == 4  # 0..3 drafts accepted per verify
        assert meta["spec_num_correct_drafts"] == sum(n * count for n, count in enumerate(
            meta["spec_correct_drafts_histogram"]))
        correct_drafts += meta["spec_num_correct_drafts"]
    # The draft is the target's own weights, so drafts do get accepted: the verify path's accept
    # bookkeeping (several accepted tokens, their KV slots, the bonus token) is exercised, not only rejects.
    assert correct_drafts > 0
    info = standalone_engine.server_info()
    assert info["speculative_algorithm"] == "STANDALONE"
    assert info["speculative_draft_model_path"] == info["model_path"]
    report = standalone_engine.engagement()
    assert report["errors"] == []
    assert report["hooks_called"] == ["load_model/target", "load_model/draft", "get_internal_state"]
    assert report["draft"]["model_class"] == "LlamaForCausalLM"
    assert report["lm_head_sharing"] is None  # STANDALONE keeps its own head: init_lm_head never runs


# -- tiny BailingMoeV2, no speculation (torch_native): the reference ------------------------------------

@pytest.fixture(scope="session")
def bailing_reference(real_engines, bailing_launch) -> dict[str, list[int]]:
    """Greedy output ids of the non-speculative launch, per prompt."""
    engine = real_engines.get(bailing_launch)
    return {prompt: engine.generate(prompt, max_new_tokens=MAX_NEW_TOKENS)["output_ids"] for prompt in PROMPTS}


def test_moe_probe_report_without_speculation(bailing_reference, bailing_engine):
    assert all(len(ids) == MAX_NEW_TOKENS for ids in bailing_reference.values())
    info = bailing_engine.server_info()
    assert info["speculative_algorithm"] is None and info["load_format"] == "dummy"
    # This launch keeps SGLang's spawn (conftest.bailing_launch): the probe loaded, attached every hook and reported
    # in a freshly started scheduler, as on a Spark, not in one that inherited the launcher's plugins.
    assert bailing_engine.launch.spawn_children and not bailing_engine.children_forked()
    report = bailing_engine.engagement()
    assert report["errors"] == []
    assert sorted(report["hooks_registered"]) == sorted(HOOK_TARGETS)
    assert report["hooks_attached"] == dict.fromkeys(HOOK_TARGETS, True)
    assert report["hooks_called"] == ["load_model/target", "get_internal_state"]
    assert report["target"]["model_class"] == "BailingMoeV2ForCausalLM"
    # One sparse layer (first_k_dense_replace=1 of 2). SGLang names the runner backend "triton" even on
    # CPU, where the layer runs its torch-native path.
    assert report["target"]["moe_layers"] == {"UnquantizedFusedMoEMethod/triton": 1}
    assert report["draft"] is None and report["lm_head_sharing"] is None


# -- the same model with NEXTN speculation (intel_amx backend via the test platform plugin) ------------

def test_nextn_greedy_equals_non_speculative(bailing_reference, nextn_engine):
    # --load-format dummy seeds every parameter (seed 1234), so both launches hold the same weights.
    for prompt, expected in bailing_reference.items():
        out = nextn_engine.generate(prompt, max_new_tokens=MAX_NEW_TOKENS)
        assert out["output_ids"] == expected, prompt
        meta = out["meta_info"]
        assert meta["completion_tokens"] == MAX_NEW_TOKENS
        assert 0 < meta["spec_verify_ct"] <= MAX_NEW_TOKENS
        assert meta["spec_accept_length"] == pytest.approx(MAX_NEW_TOKENS / meta["spec_verify_ct"])
        # 3 draft tokens proposed per verify (num_steps 3, topk 1).
        assert meta["spec_num_proposed_drafts"] == 3 * meta["spec_verify_ct"]


def test_nextn_server_info(nextn_engine):
    nextn_engine.generate(PROMPTS[0], max_new_tokens=8)
    info = nextn_engine.server_info()
    assert info["speculative_algorithm"] == "EAGLE"  # SGLang resolves NEXTN to EAGLE
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == (
        3, 1, 4,
    )
    assert info["attention_backend"] == "intel_amx"  # kept: the plugin said has_amx
    accept = info["internal_states"][0]["avg_spec_accept_length"]
    # A random MTP layer almost never guesses the target's token: about 1 (bonus token only).
    assert 1.0 <= accept < 1.5


def test_nextn_meta_info_fields(nextn_engine):
    meta = nextn_engine.generate(PROMPTS[1], max_new_tokens=8)["meta_info"]
    for key in ("spec_verify_ct", "spec_accept_length", "spec_accept_rate", "spec_num_correct_drafts",
                "spec_num_proposed_drafts", "spec_correct_drafts_histogram"):
        assert key in meta, key
    assert sum(meta["spec_correct_drafts_histogram"]) == meta["spec_verify_ct"]


def test_nextn_probe_report(nextn_engine):
    report = nextn_engine.engagement()
    assert report["errors"] == []
    assert report["hooks_called"] == ["load_model/target", "load_model/draft", "init_lm_head", "get_internal_state"]
    assert report["target"]["model_class"] == "BailingMoeV2ForCausalLM"
    assert report["draft"]["model_class"] == "BailingMoeForCausalLMNextN"
    assert report["draft"]["moe_layers"] == {"UnquantizedFusedMoEMethod/triton": 1}
    # Stock NEXTN: the draft keeps its own ParallelLMHead module but takes the target's weight tensor.
    assert report["lm_head_sharing"] == {"module_shared": False, "weight_shared": True}


def test_nextn_metrics(nextn_engine, nextn_launch):
    text = nextn_engine.metrics_text()
    assert [value for _, value in samples(text, "sglang:spec_num_steps")] == [3.0]
    assert [value for _, value in samples(text, "sglang:spec_num_draft_tokens")] == [4.0]
    verify_calls = samples(text, "sglang:spec_verify_calls_total")
    assert verify_calls and sum(value for _, value in verify_calls) > 0
    assert all(labels["model_name"] == nextn_launch.served_model_name for labels, _ in verify_calls)
