"""argv + env -> what the engine was asked for, and the resolved args `/server_info` reports.

Only argv and env decide behaviour (never profile names): Humming is `--moe-runner-backend humming`,
the FP8 head is `SGLANG_ENABLE_FP8_LM_HEAD` read as SGLang's EnvBool reads it (legacy `SGL_` spelling
included; `on` is invalid and leaves it off), MTP is `--speculative-algorithm NEXTN|EAGLE`, DSpark is
`--speculative-algorithm DSPARK` (resolved as sglang/srt/arg_groups/speculative_hook.py `_handle_dspark`
does: not aliased, steps and top-k forced to 1, gamma from the block size or the drafter's config).
A flag given twice keeps its last value (argparse), so NEXTN and DSPARK cannot both be asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkgate.sglang import conformance as C
from sparkgate_sim import reasoning, sglang_env
from sparkgate_sim.cli import EngineArgs

MODEL_ARCH = C.class_name("target_model")
MODEL_TYPE = "bailing_hybrid"  # sglang/srt/configs/bailing_hybrid.py
HUMMING_BACKEND = C.string_("moe_backend_humming")
EAGLE = C.string_("spec_algorithm_eagle")
MTP_ALGORITHMS = (C.string_("spec_algorithm_nextn"), EAGLE)
DSPARK = C.string_("spec_algorithm_dspark")
DRAFTER_BLOCK_SIZE = 8  # block_size in the Ling-3.0-flash-dspark drafter's config.json
DEFAULT_DSPARK_GAMMA = 7  # sglang/srt/speculative/dspark_components/dspark_config.py
SPEC_MAX_RUNNING_REQUESTS = 48
DEFAULT_LINEAR_ATTN_BACKEND = "triton"
RING_DECODE_BACKENDS = ("triton", "flashinfer")
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
    dspark: bool = False  # --speculative-algorithm DSPARK


# Resolved defaults of the fields the bundle and the gate look at (ServerArgs has ~500 more).
_DEFAULTS: dict[str, Any] = {
    "model_path": None,
    "tokenizer_path": None,
    "served_model_name": None,
    "host": "127.0.0.1",
    "port": 30000,
    "api_key": None,
    "admin_api_key": None,
    "ssl_keyfile_password": None,
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
    "speculative_draft_model_revision": None,
    "speculative_dspark_block_size": None,
    "mamba_radix_cache_strategy": "extra_buffer",
    "mamba_ssm_dtype": None,
    "linear_attn_backend": DEFAULT_LINEAR_ATTN_BACKEND,
    "linear_attn_decode_backend": None,
    "enable_linear_replayssm": False,
    "linear_replayssm_cache_len": 16,
    "enable_linear_replayssm_spec": False,
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
        dspark=spec_algorithm(args) == DSPARK,
    )


def _bs_list(value: Any) -> list[int]:
    if value is None:
        return [1]
    return [int(v) for v in (value if isinstance(value, list) else [value])]


def resolve(args: EngineArgs, *, draft_config_readable: bool = True) -> dict[str, Any]:
    """The resolved args as `server_args.resolved_dict()` would report them."""
    return resolve_logged(args, draft_config_readable=draft_config_readable)[0]


def resolve_logged(args: EngineArgs, *, draft_config_readable: bool = True) -> tuple[dict[str, Any], list[str]]:
    """(resolved args, the lines SGLang logs while resolving them, in order). `draft_config_readable`:
    whether the drafter's config.json can be read (a DSpark drafter directory may be empty)."""
    algorithm = spec_algorithm(args)
    logged: list[str] = []
    if algorithm is not None and algorithm not in KNOWN_SPEC_ALGORITHMS:
        raise ResolutionError(f"Unknown speculative algorithm name: {args.get('speculative_algorithm')}")
    if algorithm is not None and algorithm not in (*MTP_ALGORITHMS, DSPARK):
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
    # arg_groups/speculative_hook.py handle_speculative_decoding: a draft path given without a revision reads "main"
    # (the draft path NEXTN defaults to later, for the architectures it lists, gets none).
    if out["speculative_draft_model_path"] is not None and out["speculative_draft_model_revision"] is None:
        out["speculative_draft_model_revision"] = "main"
    if out["moe_runner_backend"] == C.string_("moe_backend_auto"):
        out["moe_runner_backend"] = AUTO_MOE_BACKEND
    if out["attention_backend"] is None:
        out["attention_backend"] = "triton"  # "Attention backend not specified. Use triton backend by default."
    # context_length stays as given (None when unset): the model's length is derived later, from its config
    # (ModelConfig.context_len); see context_len().
    if algorithm == DSPARK:
        out["speculative_algorithm"] = DSPARK  # not aliased (speculative_hook.py)
        logged += _resolve_dspark(out, draft_config_readable)
    elif algorithm is not None:
        out["speculative_algorithm"] = EAGLE  # NEXTN is EAGLE with the checkpoint's layer (speculative_hook.py)
        steps, topk = out["speculative_num_steps"], out["speculative_eagle_topk"]
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
        out["speculative_draft_model_quantization"] = (
            out["speculative_draft_model_quantization"] or out["quantization"]
        )
        if out["max_running_requests"] is None:
            out["max_running_requests"] = 48
    if out["max_running_requests"] is None:
        out["max_running_requests"] = DEFAULT_MAX_RUNNING_REQUESTS
    # arg_groups/overrides.py _speculative_moe_runner_default, a post-process that runs with or without
    # speculation: the draft's MoE runner defaults to the target's.
    out["speculative_moe_runner_backend"] = out["speculative_moe_runner_backend"] or out["moe_runner_backend"]
    if out["enable_linear_replayssm_spec"]:
        logged += _resolve_replayssm_spec(out)
    decode_backend = "disabled" if out["disable_cuda_graph"] else out.get("cuda_graph_backend_decode", "full")
    decode_bs = _bs_list(out.get("cuda_graph_bs_decode"))
    prefill_max_bs = int(out.get("cuda_graph_max_bs_prefill") or out["chunked_prefill_size"])
    out["cuda_graph_config"] = {
        # The batch sizes are materialized whatever the backend (arg_groups/memory_hook.py
        # _handle_gpu_memory_settings), so a disabled decode graph still lists them.
        "decode": _phase_config(
            decode_backend, int(out.get("cuda_graph_max_bs_decode") or max(decode_bs)), decode_bs,
        ),
        "prefill": _phase_config(
            "disabled" if out["disable_cuda_graph"] else out.get("cuda_graph_backend_prefill", "disabled"),
            prefill_max_bs, prefill_graph_sizes(prefill_max_bs),
        ),
    }
    return out, logged


def _phase_config(backend: str, max_bs: int, bs: list[int]) -> dict[str, Any]:
    """One phase of `cuda_graph_config` with every PhaseConfig field (model_executor/cuda_graph_config.py)."""
    return {"backend": backend, "max_bs": max_bs, "bs": bs, "tc_compiler": "eager", "max_context_size": None,
            "full_prefill_max_req": None, "full_prefill_prefix_chunk_tokens": None, "max_seq_len": None}


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """arg_groups/cuda_graph_hook.py generate_prefill_cuda_graph_batch_sizes: the captured token counts."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_bs + 1, 512)))
    return [size for size in sizes if size <= max_bs]


def token_capacity(resolved: dict[str, Any]) -> int:
    """The KV pool's tokens (max_total_num_tokens): the profiled capacity, capped by --max-total-tokens
    (mem_cache/kv_cache_configurator.py _apply_token_constraints)."""
    given = resolved.get("max_total_tokens")
    return MAX_TOTAL_NUM_TOKENS if given is None else min(MAX_TOTAL_NUM_TOKENS, int(given))


# Ling-3.0-flash's state pools as SGLang 0.5.23 allocated them at full size on CUDA (mem_cache/memory_pool.py): its MLA
# layers' KV cache, "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 3695357, KV size: 27.75 GB" (8,064 B a
# token; the NEXTN layer's own, "#tokens: 4184066, KV size: 4.49 GB": 1,152 B), and its KDA layers' recurrent state,
# "Mamba Cache is allocated. max_mamba_cache_size: 351, conv_state size: 0.85GB, ssm_state size: 24.06GB" (SGLang
# allocates max_mamba_cache_size + 1 slots).
KV_BYTES_PER_TOKEN = 8064
DRAFT_KV_BYTES_PER_TOKEN = 1152
MAMBA_CONV_GB_PER_SLOT = 0.85 / 352
MAMBA_SSM_GB_PER_SLOT = 24.06 / 352
# What one running request holds ("mamba num" in the Decode batch line): its state and the two track buffers of the
# default `extra_buffer` radix strategy; SGLang printed 3 with one request running (its later 4 counts a cached
# prefix's state, which the simulator does not model).
MAMBA_SLOTS_PER_RUNNING_REQUEST = 3
GIB = 1 << 30


def kv_cache_gb(resolved: dict[str, Any], *, draft: bool = False) -> float:
    """The MLA KV cache of token_capacity tokens (the target's, or the NEXTN draft's), in SGLang's GB (2**30 B)."""
    return token_capacity(resolved) * (DRAFT_KV_BYTES_PER_TOKEN if draft else KV_BYTES_PER_TOKEN) / GIB


def mamba_slots(pool_gb: float, resolved: dict[str, Any]) -> int:
    """max_mamba_cache_size: --max-mamba-cache-size when given (kv_cache_configurator.py), else the slots that fit in
    what the pool leaves after the KV cache."""
    given = resolved.get("max_mamba_cache_size")
    if given is not None:
        return int(given)
    per_slot = MAMBA_CONV_GB_PER_SLOT + MAMBA_SSM_GB_PER_SLOT
    return max(1, int((pool_gb - kv_cache_gb(resolved)) / per_slot) - 1)


def mamba_cache_line(resolved: dict[str, Any], slots: int) -> str:
    """memory_pool.py's `Mamba Cache is allocated` line. With speculation the intermediate parts follow: one state
    per draft token for min(max_running_requests, slots) + 1 requests (kv_cache_configurator.py), none with DSpark's
    replay ring (the ring holds them: "intermediate_ssm_state_cache size: 0.00GB" in SGLang's DSpark log)."""
    line = C.log_line("mamba_cache_allocated", size=slots, conv=(slots + 1) * MAMBA_CONV_GB_PER_SLOT,
                      ssm=(slots + 1) * MAMBA_SSM_GB_PER_SLOT)
    if resolved["speculative_algorithm"] is None:
        return line
    states = 0 if resolved.get("enable_linear_replayssm_spec") else (
        (min(int(resolved["max_running_requests"]), slots) + 1) * int(resolved["speculative_num_draft_tokens"]))
    return (f"{line}intermediate_ssm_state_cache size: {states * MAMBA_SSM_GB_PER_SLOT:.2f}GB "
            f"intermediate_conv_window_cache size: {states * MAMBA_CONV_GB_PER_SLOT:.2f}GB ")


def token_capacity_warning(resolved: dict[str, Any]) -> str | None:
    """What _apply_token_constraints warns when --max-total-tokens exceeds the profiled capacity."""
    given = resolved.get("max_total_tokens")
    if given is None or int(given) <= MAX_TOTAL_NUM_TOKENS:
        return None
    return (f"max_total_tokens={given} is larger than the profiled value {MAX_TOTAL_NUM_TOKENS}. "
            "Use the profiled value instead.")


def context_len(resolved: dict[str, Any]) -> int:
    """The model's context length: --context-length when given, else the checkpoint's (ModelConfig.context_len)."""
    given = resolved.get("context_length")
    return int(given) if given is not None else DEFAULT_CONTEXT_LEN


def _resolve_dspark(out: dict[str, Any], draft_config_readable: bool) -> list[str]:
    """speculative_hook.py `_handle_dspark` for a dense drafter on one CUDA device (mutates `out`)."""
    logged: list[str] = []
    if out["speculative_draft_model_path"] is None:
        # The Ling target checkpoint neither bundles dspark_* keys nor ships a dspark/ subfolder.
        raise ResolutionError(C.log_format("dspark_draft_path_required"))
    for field, key in (("speculative_num_steps", "dspark_num_steps_override"),
                       ("speculative_eagle_topk", "dspark_topk_override")):
        if out[field] is not None and int(out[field]) != 1:
            logged.append(C.log_line(key, value=out[field]))
        out[field] = 1
    if not draft_config_readable:
        logged.append(C.log_line("dspark_draft_config_unreadable", error=missing_config_error(out)))
    block_size = out["speculative_dspark_block_size"]
    gamma: int | None = None
    if block_size is not None:
        if int(block_size) <= 0:
            raise ResolutionError(C.log_line("dspark_block_size_positive", value=block_size))
        gamma = int(block_size)
    elif draft_config_readable:
        gamma = DRAFTER_BLOCK_SIZE
    elif out["speculative_num_draft_tokens"] is None:
        gamma = DEFAULT_DSPARK_GAMMA
        logged.append(C.log_line("dspark_gamma_default", gamma=gamma))
    if gamma is not None:
        window = gamma + 1
        given = out["speculative_num_draft_tokens"]
        if given is not None and int(given) != window:
            raise ResolutionError(C.log_line("dspark_num_draft_tokens_mismatch", window=window, gamma=gamma, got=given))
        out["speculative_num_draft_tokens"] = window
    if out["max_running_requests"] is None:
        out["max_running_requests"] = SPEC_MAX_RUNNING_REQUESTS
        logged.append(C.log_format("spec_max_running_requests_reset"))
    return logged


def _resolve_replayssm_spec(out: dict[str, Any]) -> list[str]:
    """attention_hook.py's `--enable-linear-replayssm-spec` rules (the ring's size is checked later, at
    memory-pool setup: see ring_error)."""
    decode = out["linear_attn_decode_backend"] or out["linear_attn_backend"]
    if decode not in RING_DECODE_BACKENDS:
        raise ResolutionError(C.log_line("replayssm_spec_decode_backend", backend=repr(decode)))
    if out["enable_linear_replayssm"]:
        raise ResolutionError(C.log_format("replayssm_spec_exclusive"))
    if out["mamba_ssm_dtype"] is None:
        out["mamba_ssm_dtype"] = "float32"
        return [C.log_format("replayssm_spec_mamba_float32")]
    return []


def ring_error(resolved: dict[str, Any]) -> str | None:
    """The ValueError memory_pool.py raises when it sizes the KDA spec-verify ring, or None."""
    if not resolved["enable_linear_replayssm_spec"]:
        return None
    length = int(resolved["linear_replayssm_cache_len"])
    if length & (length - 1) != 0:
        return C.log_line("dspark_ring_not_power_of_two", length=length)
    tokens = resolved["speculative_num_draft_tokens"]
    if tokens is not None and length < 2 * int(tokens):
        return C.log_line("dspark_ring_too_small", length=length, num_draft_tokens=tokens)
    return None


def missing_config_error(resolved: dict[str, Any]) -> str:
    """What transformers raises for a drafter directory without config.json."""
    path = resolved["speculative_draft_model_path"]
    return (f"{path} does not appear to have a file named config.json. Checkout "
            f"'https://huggingface.co/{path}/tree/None' for available files.")
