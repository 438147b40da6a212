"""What the simulated engine image knows: the env vars its SGLang declares and the fork's patches.

`fork` is the inclusionAI branch the bundle builds (declares SGLANG_ENABLE_FP8_LM_HEAD, quantizes the
LM head online, and gives the NEXTN draft `set_lm_head_from_target`); `stock` is upstream 0.5.23,
which silently ignores the FP8 variable and shares only the head's weight tensor with the draft.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparkgate import fork
from sparkgate import sglang_flags as F

# A small slice of SGLang 0.5.23's `Envs` (environ.py): the variables the bundle sets or that matter
# to the evidence. `exportable_env_vars()` only ever reports declared variables, so this list is what
# `internal_states[0].env_vars` can contain.
STOCK_DECLARED_ENV = (
    F.EXPOSE_OWN_ENV_VARS_ENV,
    F.PLUGINS_ENV,
    "SGLANG_ENABLE_JIT_DEEPGEMM",
    "SGLANG_JIT_DEEPGEMM_PRECOMPILE",
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
    "SGLANG_FP8_IGNORED_LAYERS",
    "SGLANG_DSV4_FP4_DEQUANT",
    "SGLANG_HUMMING_ONLINE_QUANT_CONFIG",
    "SGLANG_HUMMING_INPUT_QUANT_CONFIG",
    "SGLANG_HUMMING_USE_F16_ACCUM",
    "SGLANG_HUMMING_MOE_GEMM_TYPE",
    "SGLANG_HEALTH_CHECK_TIMEOUT",
    "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION",
    "SGLANG_LOG_MS",
    "SGLANG_DSPARK_FP32_LM_HEAD",
    "SGLANG_ROCM_OPT_DSPARK_FP8_LM_HEAD",
)


@dataclass(frozen=True)
class Image:
    name: str
    declared_env: tuple[str, ...]
    draft_shares_lm_head_module: bool  # BailingMoeForCausalLMNextN.set_lm_head_from_target exists

    def knows(self, env_name: str) -> bool:
        return env_name in self.declared_env


IMAGES = {
    "fork": Image("fork", STOCK_DECLARED_ENV + tuple(fork.FORK_ONLY_ENV), draft_shares_lm_head_module=True),
    "stock": Image("stock", STOCK_DECLARED_ENV, draft_shares_lm_head_module=False),
}


def engine_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment as SGLang sees it after import: legacy SGL_* names copied to SGLANG_*.

    (SGLang's rewrite overwrites an SGLANG_ name with the legacy value; we do the same.)
    """
    env = dict(environ)
    for key, value in environ.items():
        canonical = F.canonical_env_name(key)
        if canonical != key:
            env[canonical] = value
    return env


def exportable_env_vars(image: Image, env: Mapping[str, str]) -> dict[str, str]:
    """`/server_info` env_vars: declared, set, non-secret variables only, sorted by name."""
    return {
        name: env[name]
        for name in sorted(image.declared_env)
        if name in env and not any(word in name for word in ("KEY", "TOKEN", "SECRET", "PASSWORD"))
    }
