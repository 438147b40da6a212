"""The one place that spells SGLang's flags and environment variables.

Everything else refers to these names; argv lists are built from data with `dict2args`, never by
string concatenation.
"""

from __future__ import annotations

from collections.abc import Mapping

# --- flags the optimizations and rules reason about ---------------------------------------------
MODEL_PATH = "--model-path"
SERVED_MODEL_NAME = "--served-model-name"
HOST = "--host"
PORT = "--port"
API_KEY = "--api-key"
ADMIN_API_KEY = "--admin-api-key"
SSL_KEYFILE_PASSWORD = "--ssl-keyfile-password"
CONFIG = "--config"
# Flags whose value is a secret: never on a rendered argv, never in a capture (evidence/capture.py).
SECRET_FLAGS = (API_KEY, ADMIN_API_KEY, SSL_KEYFILE_PASSWORD)
MOE_RUNNER_BACKEND = "--moe-runner-backend"
QUANTIZATION = "--quantization"
ENABLE_FP32_LM_HEAD = "--enable-fp32-lm-head"
MAX_RUNNING_REQUESTS = "--max-running-requests"
CUDA_GRAPH_MAX_BS_DECODE = "--cuda-graph-max-bs-decode"
CUDA_GRAPH_BS_DECODE = "--cuda-graph-bs-decode"
CUDA_GRAPH_BACKEND_DECODE = "--cuda-graph-backend-decode"
DISABLE_CUDA_GRAPH = "--disable-cuda-graph"
SPECULATIVE_ALGORITHM = "--speculative-algorithm"
SPECULATIVE_DRAFT_MODEL_PATH = "--speculative-draft-model-path"
SPECULATIVE_NUM_STEPS = "--speculative-num-steps"
SPECULATIVE_EAGLE_TOPK = "--speculative-eagle-topk"
SPECULATIVE_NUM_DRAFT_TOKENS = "--speculative-num-draft-tokens"
SPECULATIVE_TOKEN_MAP = "--speculative-token-map"
SPECULATIVE_DSPARK_BLOCK_SIZE = "--speculative-dspark-block-size"
SPECULATIVE_DSPARK_SPS_TABLE_PATH = "--speculative-dspark-sps-table-path"
SPECULATIVE_DSPARK_CONFIDENCE_STS_PATH = "--speculative-dspark-confidence-sts-path"
SPECULATIVE_DSPARK_ALIGN_VERIFY_TOKENS = "--speculative-dspark-align-verify-tokens-to-graph-tier"
ENABLE_LINEAR_REPLAYSSM_SPEC = "--enable-linear-replayssm-spec"
LINEAR_REPLAYSSM_CACHE_LEN = "--linear-replayssm-cache-len"
ENABLE_LINEAR_REPLAYSSM = "--enable-linear-replayssm"
LINEAR_ATTN_DECODE_BACKEND = "--linear-attn-decode-backend"
ENABLE_METRICS = "--enable-metrics"

SPECULATIVE_FLAGS = (
    SPECULATIVE_ALGORITHM,
    SPECULATIVE_DRAFT_MODEL_PATH,
    SPECULATIVE_NUM_STEPS,
    SPECULATIVE_EAGLE_TOPK,
    SPECULATIVE_NUM_DRAFT_TOKENS,
)

# Flags only optimizations.dspark may set: the block size and ragged-verify knobs DSpark alone reads
# (arg_groups/speculative_hook.py), and the linear-attention spec-verify ring it is launched with
# (arg_groups/attention_hook.py; SGLang would also take the ring with NEXTN, which sparkgate does not launch).
DSPARK_FLAGS = (
    SPECULATIVE_DSPARK_BLOCK_SIZE,
    SPECULATIVE_DSPARK_SPS_TABLE_PATH,
    SPECULATIVE_DSPARK_CONFIDENCE_STS_PATH,
    SPECULATIVE_DSPARK_ALIGN_VERIFY_TOKENS,
    ENABLE_LINEAR_REPLAYSSM_SPEC,
    LINEAR_REPLAYSSM_CACHE_LEN,
)

# --- environment variables ------------------------------------------------------------------------
FP8_LM_HEAD_ENV = "SGLANG_ENABLE_FP8_LM_HEAD"  # fork only (see sparkgate.sglang.fork)
EXPOSE_OWN_ENV_VARS_ENV = "SGLANG_EXPOSE_OWN_ENV_VARS"  # makes /server_info list the *declared* env vars
PLUGINS_ENV = "SGLANG_PLUGINS"  # whitelist of entry-point names in group sglang.srt.plugins
HUMMING_COMPILER_ENV = "HUMMING_COMPILER"
HUMMING_CACHE_DIR_ENV = "HUMMING_CACHE_DIR"
# SGLang rewrites SGL_* to SGLANG_* at import (environ._handle_deprecated_envs).
LEGACY_ENV_PREFIX = "SGL_"
ENV_PREFIX = "SGLANG_"

# SGLang's EnvBool (sglang/srt/environ.py) lower-cases the raw value, without stripping, and accepts exactly
# these; anything else ("on", " 1", "") is invalid: SGLang warns and uses the variable's default.
TRUE_STRINGS = frozenset({"true", "1", "yes", "y"})
FALSE_STRINGS = frozenset({"false", "0", "no", "n"})


def env_bool(value: str) -> bool | None:
    """How SGLang's EnvBool reads `value`: True, False, or None when it rejects it (and uses the default)."""
    lowered = value.lower()
    if lowered in TRUE_STRINGS:
        return True
    if lowered in FALSE_STRINGS:
        return False
    return None


def env_is_true(value: str) -> bool:
    """True exactly when SGLang reads `value` as true (an invalid value falls back to a False default)."""
    return env_bool(value) is True


def sglang_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment SGLang actually reads, after its import-time SGL_* -> SGLANG_* rewrite.

    environ._handle_deprecated_envs walks os.environ in order and, for every SGL_X, *sets*
    SGLANG_X = value: a legacy name overwrites the canonical one (SGL_X=0 beats SGLANG_X=1).
    """
    effective = dict(environ)
    for key, value in environ.items():
        if key.startswith(LEGACY_ENV_PREFIX):
            effective[ENV_PREFIX + key[len(LEGACY_ENV_PREFIX):]] = value
    return effective


def canonical_env_name(name: str) -> str:
    """The name SGLang will actually read, after its legacy-prefix rewrite."""
    if name.startswith(LEGACY_ENV_PREFIX) and not name.startswith(ENV_PREFIX):
        return ENV_PREFIX + name[len(LEGACY_ENV_PREFIX) :]
    return name


def field_flag(field_name: str) -> str:
    """SGLang's flag for a ServerArgs field name (`mem_fraction_static` -> `--mem-fraction-static`)."""
    return "--" + field_name.replace("_", "-")


def dict2args(options: Mapping[str, object]) -> list[str]:
    """Turn {field: value} into argv, in the mapping's order.

    True -> bare flag; False/None -> omitted; lists -> flag followed by each item; other -> str().
    """
    argv: list[str] = []
    for name, value in options.items():
        flag = name if name.startswith("--") else field_flag(name)
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv.append(flag)
            argv.extend(_scalar(v) for v in value)
        else:
            argv.append(flag)
            argv.append(_scalar(value))
    return argv


def _scalar(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return repr(value)  # keep 2.0 as "2.0", not "2"
    return str(value)


# --- extra_args policy: an allow-list -------------------------------------------------------------
# `sglang.extra_args` takes only flags listed here. SGLang 0.5.23 has ~530 flags and each release adds
# more; most change what is loaded (load format, weight loaders, model overrides), what runs (quantization,
# kernels, CUDA-graph config, draft backends) or carry secrets, and a new one is unknown to every rule.
# A deny-list would admit tomorrow's such flag silently; an allow-list fails closed. Each entry only shapes
# logging, observability, timeouts or scheduling order at batch 1, none of which the evidence depends on.
EXTRA_ARGS_ALLOWED: dict[str, str] = {
    "--log-level-http": "HTTP access-log verbosity",
    "--log-requests": "logs request metadata",
    "--log-requests-level": "how much of each request is logged",
    "--log-requests-format": "request log format",
    "--show-time-cost": "logs per-stage timings",
    "--enable-cache-report": "reports cached prompt tokens in usage",
    "--enable-request-time-stats-logging": "logs per-request timing stats",
    "--decode-log-interval": "how often the 'Decode batch' line and spec gauges update",
    "--uvicorn-access-log-exclude-prefixes": "silences access-log lines",
    "--bucket-time-to-first-token": "Prometheus histogram buckets",
    "--bucket-inter-token-latency": "Prometheus histogram buckets",
    "--bucket-e2e-request-latency": "Prometheus histogram buckets",
    "--prompt-tokens-buckets": "Prometheus histogram buckets",
    "--generation-tokens-buckets": "Prometheus histogram buckets",
    "--watchdog-timeout": "how long a stuck forward pass may take before SGLang aborts",
    "--soft-watchdog-timeout": "when SGLang warns about a slow forward pass",
    "--stream-interval": "tokens per streamed chunk",
    "--schedule-policy": "queue order (batch 1 runs one request at a time anyway)",
    "--schedule-conservativeness": "admission headroom of the scheduler",
    "--max-queued-requests": "queue length before SGLang answers 503",
    "--gc-warning-threshold-secs": "warns about long garbage-collection pauses",
}

# Why some refused flags are refused, for a more useful message than "not on the allow-list".
EXTRA_ARGS_REFUSAL_REASONS: dict[str, str] = {
    API_KEY: "carries a secret, which would be written into argv.json and compose.yaml; "
    "give the key file at deploy time (`invoke deploy --api-key-file FILE`) and the gateway enforces it",
    ADMIN_API_KEY: "carries a secret; sparkgate generates the engine's admin key at start and only the "
    "sentinel holds it",
    SSL_KEYFILE_PASSWORD: "carries a secret",
    "--load-format": "changes what is loaded (e.g. `dummy` skips the weights) while every check could still pass",
    "--json-model-override-args": "rewrites the model config the checkpoint ships",
    "--cuda-graph-config": "a JSON config that overrides the modelled batch-1 CUDA-graph settings",
    "--speculative-moe-runner-backend": "gives the draft its own MoE backend, unchecked by the gate",
    "--speculative-draft-model-quantization": "gives the draft its own quantization, unchecked by the gate",
    "--speculative-draft-load-format": "changes how the draft is loaded",
    "--enable-multi-layer-eagle": "switches to a multi-layer EAGLE worker with its own init_lm_head, which the "
    "probe does not hook",
    QUANTIZATION: "overrides the checkpoint's quantization, which decides which MoE method Humming can take",
    "--kv-cache-dtype": "changes the KV-cache precision the published figures were measured with",
    "--skip-server-warmup": "skips the warmup forward in which Humming proves it ran",
    "--log-level": "can hide the startup log lines the gate reads as evidence",
    CONFIG: "loads more flags from a file no rule sees",
}


# --- environment a profile may not set ------------------------------------------------------------
# Declared by SGLang, but each changes what is loaded, which code runs or which routes exist, and no check
# would notice. (Variables an optimization or the gate sets are refused separately, whatever their value.)
ENV_REFUSAL_REASONS: dict[str, str] = {
    "SGLANG_HTTP_SERVER_APP_PATH": "replaces the HTTP app, so routes the gateway and sentinel rely on can change",
    "SGLANG_PLATFORM": "selects platform plugins, which decide which general plugins (the probe) load",
    "SGLANG_EXTERNAL_MODEL_PACKAGE": "loads model classes from another package",
    "SGLANG_EXTERNAL_MM_MODEL_ARCH": "loads a model class from another package",
    "SGLANG_DISABLED_MODEL_ARCHS": "changes which model classes may load",
    "SGLANG_USE_MODELSCOPE": "fetches weights from ModelScope instead of the mounted checkpoint",
    "SGLANG_HUMMING_ONLINE_QUANT_CONFIG": "re-quantizes the weights Humming runs on",
    "SGLANG_HUMMING_INPUT_QUANT_CONFIG": "changes the activation quantization Humming runs with",
    "SGLANG_CPU_QUANTIZATION": "changes the quantization of what is loaded",
    "SGLANG_INT4_WEIGHT": "changes the quantization of what is loaded",
    "SGLANG_QUANT_ALLOW_DOWNCASTING": "lets SGLang downcast weights silently",
    "SGLANG_DSPARK_FP32_LM_HEAD": "changes the LM head's precision outside optimizations.fp8_lm_head",
    "SGLANG_ROCM_OPT_DSPARK_FP8_LM_HEAD": "changes the LM head's precision outside optimizations.fp8_lm_head",
    "SGLANG_RAGGED_VERIFY_MODE": "turns on DSpark's trimmed (cap-accept/compact) verify planner, which "
    "optimizations.dspark keeps off (static, SGLang's default)",
}
# Not SGLang's, but read by the loader or the interpreter before SGLang starts: they change which code runs.
ENV_REFUSED_PREFIXES: dict[str, str] = {
    "LD_": "changes which shared libraries the engine loads",
    "PYTHON": "changes which Python code the engine imports or runs",
    "SPARKGATE_": "reserved for sparkgate's own settings",
    # Declared by SGLang, but DSpark's knobs change how the drafter proposes, folds, samples or records, and
    # some without a log line the gate reads (SGLANG_DSPARK_FOLDED_PROPOSAL=0 keeps the proposal eager silently).
    "SGLANG_DSPARK_": "DSpark's own knobs change how the drafter proposes (kept eager, greedy, unfused), "
    "several without a log line the gate reads; optimizations.dspark launches DSpark with SGLang's defaults",
    # The generic DSpark worker reads these too (dspark_worker_v2.py, dspark_draft_sampler.py), and DSpark's
    # drafter is a DFlash model: same reason.
    "SGLANG_OPT_DSV41_": "change how the DSpark worker folds, commits and rejects drafts, without a log line the "
    "gate reads; optimizations.dspark launches DSpark with SGLang's defaults",
    "SGLANG_DFLASH_": "change how the DSpark drafter (a DFlash model) samples, without a log line the gate reads",
    "SGLANG_SPEC_": "change speculative decoding's scheduling and verification, which the gate measures only "
    "with SGLang's defaults",
    # Test and simulation hooks: SGLANG_SIMULATE_ACC_LEN forces the committed length of every verify step, so a
    # garbage-emitting engine would pass the acceptance and speed floors.
    "SGLANG_SIMULATE_": "simulate acceptance or expert routing: the gate would measure the simulation, not the "
    "engine (SGLANG_SIMULATE_ACC_LEN fakes the accept length while emitting junk)",
    "SGLANG_TEST_": "SGLang's test hooks inject failures, delays and scripted runtimes",
    "SGLANG_DEBUG_": "SGLang's debug hooks change memory-pool and I/O behaviour",
}
# The SGLang variables a profile may set, each with why it cannot fool the gate. SGLang 0.5.23 declares ~770
# variables; many change speculation, kernels, scheduling or accounting without a log line the gate reads (a
# review found SGLANG_SIMULATE_ACC_LEN, which fakes the accept length while the engine emits junk), so a deny-list
# would admit next release's knob silently. Anything else SGLang declares is refused; a refusal of a known-bad
# family above still gives its specific reason first.
ENV_ALLOWED_SGLANG: dict[str, str] = {
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "the published recipe sets it; the context length itself is a "
    "modelled field",
    "SGLANG_ENABLE_JIT_DEEPGEMM": "the published recipe sets it (0); the gate measures the speed that results",
    "SGLANG_JIT_DEEPGEMM_PRECOMPILE": "the published recipe sets it (0); it only moves compile time",
    "SGLANG_DSV4_FP4_DEQUANT": "the published recipe sets it (0); it concerns DeepSeek-V4 checkpoints",
    "SGLANG_FP8_IGNORED_LAYERS": "the published recipe sets it (empty); an LM head kept out of FP8 fails "
    "fp8_lm_head.target_head",
    "SGLANG_HUMMING_MOE_GEMM_TYPE": "picks Humming's indexed or grouped GEMM; humming.log_signature accepts either "
    "and fails on any other",
    "SGLANG_LOG_GC": "logging only",
    "SGLANG_LOG_MS": "adds milliseconds to log timestamps, inside the record prefix the log checks skip",
}
ENV_REFUSED_NAMES: dict[str, str] = {
    "PATH": "changes which programs the engine runs",
    "CUDA_VISIBLE_DEVICES": "changes which GPU the engine sees (set by the container runtime)",
    "NVIDIA_VISIBLE_DEVICES": "changes which GPU the container runtime exposes",
}
