"""The one place that spells SGLang's flags and environment variables.

Everything else refers to these names; argv lists are built from data with `dict2args`, never by
string concatenation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# --- flags the optimizations and rules reason about ---------------------------------------------
MODEL_PATH = "--model-path"
SERVED_MODEL_NAME = "--served-model-name"
HOST = "--host"
PORT = "--port"
API_KEY = "--api-key"
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
ENABLE_METRICS = "--enable-metrics"
DECODE_LOG_INTERVAL = "--decode-log-interval"

SPECULATIVE_FLAGS = (
    SPECULATIVE_ALGORITHM,
    SPECULATIVE_DRAFT_MODEL_PATH,
    SPECULATIVE_NUM_STEPS,
    SPECULATIVE_EAGLE_TOPK,
    SPECULATIVE_NUM_DRAFT_TOKENS,
)

# --- environment variables ------------------------------------------------------------------------
FP8_LM_HEAD_ENV = "SGLANG_ENABLE_FP8_LM_HEAD"  # fork only (see sparkgate.fork)
EXPOSE_OWN_ENV_VARS_ENV = "SGLANG_EXPOSE_OWN_ENV_VARS"  # makes /server_info list the *declared* env vars
PLUGINS_ENV = "SGLANG_PLUGINS"  # whitelist of entry-point names in group sglang.srt.plugins
HUMMING_COMPILER_ENV = "HUMMING_COMPILER"
HUMMING_CACHE_DIR_ENV = "HUMMING_CACHE_DIR"
# SGLang rewrites SGL_* to SGLANG_* at import (environ._handle_deprecated_envs).
LEGACY_ENV_PREFIX = "SGL_"
ENV_PREFIX = "SGLANG_"

# SGLang's EnvBool (sglang/srt/environ.py) lower-cases the raw value, without stripping, and accepts exactly
# these; anything else ("on", " 1", "") is invalid: SGLang warns and uses the variable's default.
_TRUE_STRINGS = frozenset({"true", "1", "yes", "y"})
_FALSE_STRINGS = frozenset({"false", "0", "no", "n"})


def env_bool(value: str) -> bool | None:
    """How SGLang's EnvBool reads `value`: True, False, or None when it rejects it (and uses the default)."""
    lowered = value.lower()
    if lowered in _TRUE_STRINGS:
        return True
    if lowered in _FALSE_STRINGS:
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


def env_lines(env: Iterable[tuple[str, str]]) -> list[str]:
    return [f"{key}={value}" for key, value in env]
