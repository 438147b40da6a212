"""SGLang 0.5.23's own memory and startup accounting, read from an engine log: what tests/unit/bench/test_sizing.py
holds sparkgate.bench.sizing's model to (the H200 records)."""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import Field

from sparkgate.bench.sizing import GIB, Frozen
from sparkgate.evidence import logs
from sparkgate.sglang import conformance as C

NonNegative = Annotated[float, Field(ge=0)]


class LoadedModel(Frozen):
    model_class: str
    avail_before_gib: NonNegative | None
    avail_after_gib: NonNegative
    usage_gib: NonNegative


class KVPool(Frozen):
    tokens: Annotated[int, Field(ge=0)]
    size_gib: NonNegative
    avail_after_gib: NonNegative | None  # the "Memory pool end" line that follows it

    @property
    def bytes_per_token(self) -> float:
        return self.size_gib * GIB / self.tokens if self.tokens else math.nan


class MambaPool(Frozen):
    slots: Annotated[int, Field(ge=0)]  # max_mamba_cache_size as logged; the pool holds one more
    conv_gib: NonNegative
    ssm_gib: NonNegative


class LoggedSizing(Frozen):
    """SGLang's own memory and startup accounting for one launch: target first, then the draft."""

    models: tuple[LoadedModel, ...]
    kv_pools: tuple[KVPool, ...]
    mamba: MambaPool | None
    graphs_gib: tuple[NonNegative, ...]
    startup_s: dict[str, NonNegative]

    @property
    def weights_gib(self) -> float:
        return sum(m.usage_gib for m in self.models)

    @property
    def pools_gib(self) -> float:
        """What the static pools (KV and Mamba) took: free after the weights minus free after the last pool."""
        ends = [p.avail_after_gib for p in self.kv_pools if p.avail_after_gib is not None]
        return self.models[-1].avail_after_gib - ends[-1] if self.models and ends else math.nan


def _number(value: str | None) -> float | None:
    """A finite, non-negative number as SGLang prints it; anything else is not one of its sizing lines."""
    try:
        number = float(value) if value is not None and len(value) < 40 else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) and number >= 0 else None


def read_log(log: logs.EngineLog) -> LoggedSizing:
    """The sizing lines of an SGLang 0.5.23 log, in the order printed. Lines that do not parse are left out."""
    patterns = {key: (C.log_pattern(key), C.log_fields(key)) for key in (
        "load_weight_begin", "load_weight_end", "kv_cache_allocated", "memory_pool_end", "mamba_cache_allocated",
        "capture_end", "capture_draft_decode_end", "capture_draft_extend_end", "startup_timings")}
    models: list[LoadedModel] = []
    pools: list[KVPool] = []
    mamba = None
    graphs: list[float] = []
    startup: dict[str, float] = {}
    before: float | None = None
    for message in log.messages():
        key, fields = next(((k, f.match(message)) for k, (p, f) in patterns.items() if p.match(message)), (None, None))
        if fields is None:
            continue
        values = fields.groupdict()
        if key == "load_weight_begin":
            before = _number(values["avail"])
        elif key == "load_weight_end":
            after, usage = _number(values["avail"]), _number(values["usage"])
            if after is not None and usage is not None:
                models.append(LoadedModel(model_class=values["model_class"][:200], avail_before_gib=before,
                                          avail_after_gib=after, usage_gib=usage))
        elif key == "kv_cache_allocated":
            size = _number(values["size"])
            if values["tokens"].isdecimal() and len(values["tokens"]) < 19 and size is not None:
                pools.append(KVPool(tokens=int(values["tokens"]), size_gib=size, avail_after_gib=None))
        elif key == "memory_pool_end" and pools and pools[-1].avail_after_gib is None:
            pools[-1] = pools[-1].model_copy(update={"avail_after_gib": _number(values["avail"])})
        elif key == "mamba_cache_allocated":
            conv, ssm = _number(values["conv"]), _number(values["ssm"])
            if values["size"].isdecimal() and len(values["size"]) < 19 and conv is not None and ssm is not None:
                mamba = MambaPool(slots=int(values["size"]), conv_gib=conv, ssm_gib=ssm)
        elif key.startswith("capture"):
            usage = _number(values["usage"])
            if usage is not None:
                graphs.append(usage)
        elif key == "startup_timings":
            startup = {name: value for name in ("load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e")
                       if (value := _number(values[name])) is not None}
            for part in values["cuda_graph"].split(", "):
                name, _, seconds = part.partition("=")
                if re.fullmatch(r"[a-z_]{1,40}", name) and (value := _number(seconds)) is not None:
                    startup[f"cuda_graph.{name}"] = value
    return LoggedSizing(models=tuple(models), kv_pools=tuple(pools), mamba=mamba, graphs_gib=tuple(graphs),
                        startup_s=startup)
