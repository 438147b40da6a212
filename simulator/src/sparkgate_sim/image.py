"""What the simulated engine image knows: the env vars its SGLang declares and the fork's patches.

`fork` is the inclusionAI branch the bundle builds (declares SGLANG_ENABLE_FP8_LM_HEAD, quantizes the
LM head online, and gives the NEXTN draft `set_lm_head_from_target`); `stock` is upstream 0.5.23,
which silently ignores the FP8 variable and shares only the head's weight tensor with the draft.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparkgate.sglang import conformance
from sparkgate_sim import sglang_env

# A slice of SGLang 0.5.23's `Envs` (environ.py): the variables the bundle sets or that matter to the
# evidence, every one checked as declared by the conformance test. `exportable_env_vars()` only ever
# reports declared variables, so this list is what `internal_states[0].env_vars` can contain.
STOCK_DECLARED_ENV = tuple(entry["text"] for entry in conformance.fixture()["env"].values())
FORK_ONLY_ENV = conformance.fork_only_of_kind("env")
FP8_LM_HEAD_ENV = conformance.fork_only("fp8_lm_head_env")


@dataclass(frozen=True)
class Image:
    name: str
    declared_env: tuple[str, ...]
    draft_shares_lm_head_module: bool  # BailingMoeForCausalLMNextN.set_lm_head_from_target exists

    def knows(self, env_name: str) -> bool:
        return env_name in self.declared_env


IMAGES = {
    "fork": Image("fork", STOCK_DECLARED_ENV + FORK_ONLY_ENV, draft_shares_lm_head_module=True),
    "stock": Image("stock", STOCK_DECLARED_ENV, draft_shares_lm_head_module=False),
}


# The environment as SGLang sees it after import: legacy SGL_* names copied to SGLANG_*.
engine_environment = sglang_env.with_legacy_names_rewritten


def exportable_env_vars(image: Image, env: Mapping[str, str]) -> dict[str, str]:
    """`/server_info` env_vars: declared, set, non-secret variables only, sorted by name."""
    return {
        name: env[name]
        for name in sorted(image.declared_env)
        if name in env and not any(word in name for word in ("KEY", "TOKEN", "SECRET", "PASSWORD"))
    }
