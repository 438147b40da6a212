"""The validated profile: YAML is turned into these frozen models once, at the boundary."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, StrictBool, create_model, field_validator

from sparkgate.evidence import host_memory, stall
from sparkgate.frozen import Frozen
from sparkgate.optimizations import REGISTRY
from sparkgate.profile.safe_types import ClassName, ContainerPath, GitRevision, HubRepo, ServedName

PositiveInt = Annotated[int, Field(strict=True, gt=0)]
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ModelSource(Frozen):
    """The checkpoint, as the engine sees it inside the container."""

    path: ContainerPath = Field("/models/Ling-3.0-flash-fp4", description="Checkpoint directory inside the engine container")
    served_name: ServedName = Field("ling-v3-flash-fp4", description="Name clients use in the OpenAI `model` field")
    architecture: ClassName = Field("BailingMoeV3ForCausalLM", description="Target model class the engine must load")
    repo: HubRepo = Field(
        "inclusionAI/Ling-3.0-flash-fp4", description="Hub repository `invoke model.pull` downloads the checkpoint from"
    )
    revision: GitRevision | None = Field(
        None, description="Pinned checkpoint commit (40 hex, never a branch): `invoke model.pull` downloads it and "
        "preflight refuses a download recorded at any other; unset, model.pull refuses without --revision"
    )


class SGLangArgs(Frozen):
    """SGLang launch flags the schema models. Field names are SGLang's (`_` becomes `-` in the flag).

    Anything else goes in `extra_args`, which is checked by exactly the same rules.
    """

    trust_remote_code: StrictBool = True
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] = "bfloat16"
    tp_size: PositiveInt = 1
    ep_size: PositiveInt = 1
    host: str = "0.0.0.0"
    port: Annotated[int, Field(strict=True, ge=1, le=65535)] = 30000
    max_running_requests: PositiveInt | None = None
    max_mamba_cache_size: PositiveInt | None = None
    chunked_prefill_size: PositiveInt | None = None
    max_prefill_tokens: PositiveInt | None = None
    page_size: PositiveInt | None = None
    context_length: PositiveInt | None = None
    cuda_graph_backend_decode: Literal["full", "breakable", "disabled"] | None = None
    cuda_graph_max_bs_decode: PositiveInt | None = None
    cuda_graph_bs_decode: tuple[PositiveInt, ...] | None = None
    cuda_graph_backend_prefill: Literal["full", "breakable", "disabled"] | None = None
    random_seed: Annotated[int, Field(strict=True)] | None = None
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    attention_backend: str | None = None
    disable_flashinfer_autotune: StrictBool = False
    mem_fraction_static: Annotated[float, Field(strict=True, gt=0.0, lt=1.0)] | None = None
    fp8_gemm_backend: str | None = None
    moe_runner_backend: str | None = Field(
        None, description="MoE runner when Humming is not requested (optimizations.humming owns it otherwise)"
    )
    flashinfer_mxfp4_moe_precision: Literal["default", "bf16", "fp8"] | None = None
    disable_shared_experts_fusion: StrictBool = False
    enable_fp32_lm_head: StrictBool = Field(False, description="FP32 logits; mutually exclusive with the FP8 LM head")
    extra_args: tuple[str, ...] = Field(
        (), description="SGLang flags the schema does not model; only flags on sparkgate's allow-list (docs/profiles.md)"
    )


def optimizations_model(registry: dict) -> type[Frozen]:
    """`optimizations:` of a profile: one section per registered optimization, its module's Settings."""
    sections = {key: (module.Settings, module.Settings()) for key, module in registry.items()}
    return create_model("Optimizations", __base__=Frozen, **sections)


Optimizations = optimizations_model(REGISTRY)


class Calibration(Frozen):
    """Bounded functional probe the gate runs before admitting traffic."""

    # Upper bounds keep a verification inside minutes (docs/profiles.md "Bounds").
    prompts: Annotated[int, Field(strict=True, gt=0, le=16)] = Field(3, description="Fixed prompts sent at temperature 0")
    max_new_tokens: Annotated[int, Field(strict=True, gt=0, le=2048)] = Field(128, description="Token budget per prompt")
    time_budget_s: Annotated[float, Field(strict=True, gt=0, le=600)] = Field(10.0, description="Engine seconds the calibration may spend (its requests' own e2e_latency, summed)")


class Watch(Frozen):
    """What the sentinel watches after admission (docs/checks/host.md, docs/checks/engine.md). The defaults are
    values a healthy Spark meets; a profile may tighten them, never loosen them (sparkgate/profile/rules.py)."""

    min_mem_available_gib: Annotated[float, Field(strict=True, gt=0, le=128)] = Field(
        host_memory.MIN_AVAILABLE_GIB, description="Host MemAvailable floor (GiB); may only be raised")
    max_swap_growth_mib: Annotated[float, Field(strict=True, ge=0, le=65536)] = Field(
        host_memory.MAX_SWAP_GROWTH_MIB, description="Swap growth allowed since admission (MiB); may only be lowered")
    stall_after_s: Annotated[float, Field(strict=True, gt=0, le=3600)] = Field(
        stall.STALL_AFTER_S, description="Seconds of requests running with no token before the gate closes; "
        "may only be lowered")


class Gate(Frozen):
    """What the gate must see beyond the per-optimization evidence."""

    baseline_decode_tok_s: Annotated[float, Field(strict=True, gt=0, le=1000)] | None = Field(
        None, description="Measured baseline decode speed on this hardware; a stacked profile slower than it is refused"
    )
    min_decode_tok_s: Annotated[float, Field(strict=True, gt=0, le=1000)] | None = Field(None, description="Absolute decode-speed floor")
    calibration: Calibration = Calibration()
    watch: Watch = Watch()


class GatewaySettings(Frozen):
    """The gateway in front of the engine (templates/gateway/haproxy.cfg.j2)."""

    # A 256K-token prompt is about 1-2.5 MB of JSON (text, JSON-escaped text or input_ids): 16 MiB leaves room for
    # long multi-turn chats and still refuses a body no request needs before a byte reaches the engine. At least
    # 64 KiB: below that even a short chat is refused (a tiny float would round to a 0-byte limit).
    max_body_mib: Annotated[float, Field(strict=True, ge=0.0625, le=256)] = Field(
        16.0, description="Largest request body the gateway passes (MiB); larger ones get 413 from the gateway")


class Profile(Frozen):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", description="Equals the file name without .yaml")
    description: str = Field(min_length=1, description="One line shown by `invoke profiles`")
    extends: tuple[str, ...] = Field((), description="Parent profiles, merged in order before this file")
    image: str = Field("spark-fork", description="Engine image key in images.lock.yaml")
    batch_size: PositiveInt = Field(1, description="Concurrent requests the deployment is tuned for")
    model: ModelSource = ModelSource()
    sglang: SGLangArgs = SGLangArgs()
    optimizations: Optimizations = Optimizations()
    env: dict[str, str] = Field(default_factory=dict, description="Extra engine environment (same rules apply)")
    gate: Gate = Gate()
    gateway: GatewaySettings = GatewaySettings()

    @field_validator("description")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if "\n" in value.strip():
            raise ValueError("must be a single line")
        return value.strip()

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not _ENV_NAME.fullmatch(key):
                raise ValueError(f"{key!r} is not a valid environment variable name (ASCII letters, digits, _)")
        return dict(sorted(value.items()))

    def requested(self) -> list[str]:
        """Optimization keys this profile asks for, in canonical order."""
        return [key for key, settings in self.optimizations if settings.enabled]
