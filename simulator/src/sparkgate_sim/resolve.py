"""argv + env -> what the engine was asked for, and the resolved args `/server_info` reports.

Only argv and env decide behaviour (never profile names): Humming is `--moe-runner-backend humming`,
the FP8 head is `SGLANG_ENABLE_FP8_LM_HEAD` read as SGLang's EnvBool reads it (legacy `SGL_` spelling
included; `on` is invalid and leaves it off), MTP is `--speculative-algorithm NEXTN|EAGLE`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkgate import conformance as C
from sparkgate_sim import reasoning, sglang_env
from sparkgate_sim.cli import EngineArgs

MODEL_ARCH = C.class_name("target_model")
MODEL_TYPE = "bailing_hybrid"  # sglang/srt/configs/bailing_hybrid.py
HUMMING_BACKEND = C.string_("moe_backend_humming")
EAGLE = C.string_("spec_algorithm_eagle")
MTP_ALGORITHMS = (C.string_("spec_algorithm_nextn"), EAGLE)
# Every built-in speculative algorithm name of 0.5.23; anything else fails resolution.
KNOWN_SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")
DEFAULT_SPEC_PARAMS = (3, 1, 4)  # _auto_choose_speculative_params for Bailing archs
# With the Ling-3 mixed FP8/MXFP4 checkpoint on SM12x, `auto` resolves to flashinfer_mxfp4.
AUTO_MOE_BACKEND = C.string_("moe_backend_flashinfer_mxfp4")
DEFAULT_CONTEXT_LEN = 262144
MAX_TOTAL_NUM_TOKENS = 786432
# Memory-derived on a real engine; the simulator still runs one request at a time whatever it says.
DEFAULT_MAX_RUNNING_REQUESTS = 256


class ResolutionError(Exception):
    """What `resolve_once()` would raise (the real engine exits 1 with a traceback)."""


@dataclass(frozen=True)
class Requested:
    humming: bool
    fp8_lm_head: bool
    mtp: bool
    cuda_graph: bool
    fp32_lm_head: bool
    token_map: bool  # --speculative-token-map: SGLang then skips the draft's LM-head module share


# Resolved defaults of the fields the bundle and the gate look at (ServerArgs has ~500 more).
_DEFAULTS: dict[str, Any] = {
    "model_path": None,
    "tokenizer_path": None,
    "served_model_name": None,
    "host": "127.0.0.1",
    "port": 30000,
    "api_key": None,
    "dtype": "auto",
    "trust_remote_code": False,
    "load_format": "auto",
    "quantization": None,
    "context_length": None,
    "tp_size": 1,
    "pp_size": 1,
    "dp_size": 1,
    "ep_size": 1,
    "mem_fraction_static": None,
    "max_running_requests": None,
    "chunked_prefill_size": 8192,
    "max_prefill_tokens": 16384,
    "page_size": 1,
    "random_seed": None,
    "attention_backend": None,
    "moe_runner_backend": "auto",
    "enable_fp32_lm_head": False,
    "disable_cuda_graph": False,
    "enable_metrics": False,
    "decode_log_interval": 40,
    "log_level": "info",
    "reasoning_parser": None,
    "tool_call_parser": None,
    "weight_version": "default",
    "disaggregation_mode": "null",
    "speculative_algorithm": None,
    "speculative_draft_model_path": None,
    "speculative_num_steps": None,
    "speculative_eagle_topk": None,
    "speculative_num_draft_tokens": None,
    "speculative_moe_runner_backend": None,
    "speculative_draft_model_quantization": None,
    "speculative_token_map": None,
    "mamba_radix_cache_strategy": "extra_buffer",
}


def spec_algorithm(args: EngineArgs) -> str | None:
    raw = args.get("speculative_algorithm")
    return raw.upper() if isinstance(raw, str) and raw else None


def requested(args: EngineArgs, env: Mapping[str, str]) -> Requested:
    backend = args.get("moe_runner_backend", C.string_("moe_backend_auto"))
    decode_graph = args.get("cuda_graph_backend_decode", "full")
    return Requested(
        humming=backend == HUMMING_BACKEND,
        fp8_lm_head=sglang_env.is_true(env, C.fork_only("fp8_lm_head_env")),
        mtp=spec_algorithm(args) in MTP_ALGORITHMS,
        cuda_graph=not args.get("disable_cuda_graph", False) and decode_graph != "disabled",
        fp32_lm_head=bool(args.get("enable_fp32_lm_head", False)),
        token_map=args.get("speculative_token_map") is not None,
    )


def _bs_list(value: Any) -> list[int]:
    if value is None:
        return [1]
    return [int(v) for v in (value if isinstance(value, list) else [value])]


def resolve(args: EngineArgs) -> dict[str, Any]:
    """The resolved args as `server_args.resolved_dict()` would report them."""
    algorithm = spec_algorithm(args)
    if algorithm is not None and algorithm not in KNOWN_SPEC_ALGORITHMS:
        raise ResolutionError(f"Unknown speculative algorithm name: {args.get('speculative_algorithm')}")
    if algorithm is not None and algorithm not in MTP_ALGORITHMS:
        raise ResolutionError(
            f"speculative algorithm {algorithm} needs a separate draft model; this checkpoint ships NEXTN only"
        )
    parser = args.get("reasoning_parser")
    if parser is not None and parser not in reasoning.SUPPORTED_PARSERS:
        # SGLang has many more; the simulator models only the one the bundle uses, and says so.
        raise ResolutionError(f"the simulator models --reasoning-parser {reasoning.DEEPSEEK_R1} only, got {parser!r}")
    out = dict(_DEFAULTS)
    out.update(args.values)
    out["tokenizer_path"] = out["tokenizer_path"] or out["model_path"]
    out["served_model_name"] = out["served_model_name"] or out["model_path"]
    if out["moe_runner_backend"] == C.string_("moe_backend_auto"):
        out["moe_runner_backend"] = AUTO_MOE_BACKEND
    if out["attention_backend"] is None:
        out["attention_backend"] = "triton"  # "Attention backend not specified. Use triton backend by default."
    if out["context_length"] is None:
        out["context_length"] = DEFAULT_CONTEXT_LEN
    if algorithm is not None:
        out["speculative_algorithm"] = EAGLE  # NEXTN is EAGLE with the checkpoint's layer (speculative_hook.py)
        steps = out["speculative_num_steps"]
        topk = out["speculative_eagle_topk"]
        tokens = out["speculative_num_draft_tokens"]
        if steps is None and topk is None and tokens is None:
            steps, topk, tokens = DEFAULT_SPEC_PARAMS
        steps = steps if steps is not None else DEFAULT_SPEC_PARAMS[0]
        topk = topk if topk is not None else DEFAULT_SPEC_PARAMS[1]
        if topk == 1:
            tokens = steps + 1  # SGLang forces the verify window with a warning
        out["speculative_num_steps"] = steps
        out["speculative_eagle_topk"] = topk
        out["speculative_num_draft_tokens"] = tokens if tokens is not None else steps + 1
        out["speculative_moe_runner_backend"] = out["speculative_moe_runner_backend"] or out["moe_runner_backend"]
        out["speculative_draft_model_quantization"] = (
            out["speculative_draft_model_quantization"] or out["quantization"]
        )
        if out["max_running_requests"] is None:
            out["max_running_requests"] = 48
    if out["max_running_requests"] is None:
        out["max_running_requests"] = DEFAULT_MAX_RUNNING_REQUESTS
    decode_backend = "disabled" if out["disable_cuda_graph"] else out.get("cuda_graph_backend_decode", "full")
    decode_bs = _bs_list(out.get("cuda_graph_bs_decode"))
    out["cuda_graph_config"] = {
        "decode": {
            "backend": decode_backend,
            "max_bs": int(out.get("cuda_graph_max_bs_decode") or max(decode_bs)),
            "bs": decode_bs if decode_backend != "disabled" else [],
        },
        "prefill": {"backend": "disabled" if out["disable_cuda_graph"] else out.get("cuda_graph_backend_prefill", "disabled")},
    }
    return out
