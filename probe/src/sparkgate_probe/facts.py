"""Read engagement facts off live model objects.

Everything here only reads attributes: the probe must never change the model
or trigger GPU work. Functions take the objects (and the FusedMoE class) as
arguments so they stay independent of how SGLang is imported.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# FP8 LM heads carry their per-channel/per-tensor scale under one of these
# names (ModelOpt-style heads use ``weight_scale``, block-FP8 heads
# ``weight_scale_inv``). Either counts as "the head has a scale".
SCALE_ATTRS = ("weight_scale", "weight_scale_inv")


def describe_lm_head(head: Any) -> dict[str, Any] | None:
    """The report record for one LM-head module, or None when there is no head."""
    if head is None:
        return None
    weight = getattr(head, "weight", None)
    quant_method = getattr(head, "quant_method", None)
    scale_attr = next(
        (name for name in SCALE_ATTRS if getattr(head, name, None) is not None), None
    )
    return {
        "module_class": type(head).__name__,
        "quant_method": None if quant_method is None else type(quant_method).__name__,
        "weight_dtype": None if weight is None else str(weight.dtype),
        "weight_shape": None if weight is None else [int(d) for d in weight.shape],
        "has_weight_scale": scale_attr is not None,
        "weight_scale_attr": scale_attr,
    }


def weight_ptr(head: Any) -> int | None:
    """Address of the head's weight storage; None when it has none.

    A zero pointer (meta or empty tensor) is reported as None so that two
    unallocated weights never look "shared".
    """
    weight = getattr(head, "weight", None)
    if weight is None:
        return None
    ptr = weight.data_ptr()
    return ptr or None


def moe_layer_key(layer: Any) -> str:
    """``"<QuantMethodClass>/<runner_backend>"``, e.g. ``HummingMoEMethod/humming``."""
    quant_method = getattr(layer, "quant_method", None)
    backend = getattr(layer, "runner_backend", None)
    backend_name = "none" if backend is None else str(getattr(backend, "value", backend))
    return f"{type(quant_method).__name__}/{backend_name}"


def count_moe_layers(modules: Iterable[Any], fused_moe_cls: type) -> dict[str, int]:
    """Count FusedMoE layers by key; isinstance keeps look-alike modules out."""
    counts: dict[str, int] = {}
    for module in modules:
        if isinstance(module, fused_moe_cls):
            key = moe_layer_key(module)
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def describe_model(model: Any, lm_head: Any, fused_moe_cls: type) -> dict[str, Any]:
    """The per-role record: model class, LM head and MoE layer census."""
    return {
        "model_class": type(model).__name__,
        "lm_head": describe_lm_head(lm_head),
        "moe_layers": count_moe_layers(model.modules(), fused_moe_cls),
    }


def lm_head_sharing(target_head: Any, draft_head: Any) -> dict[str, bool]:
    """Whether the draft uses the target's head module, or only its weight tensor.

    Module sharing is what makes a quantized head work for the draft: sharing
    only the tensor leaves the draft's own (unquantized) quant_method in charge.
    """
    target_ptr = None if target_head is None else weight_ptr(target_head)
    draft_ptr = None if draft_head is None else weight_ptr(draft_head)
    return {
        "module_shared": target_head is not None and draft_head is target_head,
        "weight_shared": target_ptr is not None and target_ptr == draft_ptr,
    }
