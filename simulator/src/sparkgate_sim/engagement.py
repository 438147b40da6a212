"""What actually runs inside the simulated engine, and the engagement-probe report that shows it.

`requested` (argv + env) says what was asked for; the image and the load-time faults decide what
engaged. Everything observable (logs, probe report, speed, acceptance) is derived from `Engaged`, so
a fault changes exactly the evidence its real counterpart changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkgate.sglang import conformance as C
from sparkgate_sim import faults, sglang_env
from sparkgate_sim.image import FP8_LM_HEAD_ENV, Image
from sparkgate_sim.resolve import MODEL_ARCH, Requested

PROBE_PLUGIN = "engagement_probe"  # the probe's entry-point name (probe/pyproject.toml)
PROBE_VERSION = 1
PLUGINS_ENV = C.env("plugins")
FOLDED_PROPOSAL_ENV = C.env("dspark_folded_proposal")
TARGET_MOE_LAYERS = 31
DRAFT_MOE_LAYERS = 1
DRAFT_MODEL_CLASS = C.class_name("nextn_draft")
DSPARK_DRAFT_CLASS = C.class_name("dspark_draft")
# The probe's AFTER hooks (sparkgate_probe.hooks.HOOK_TARGETS) and the event each records when it runs.
HOOK_TARGETS = tuple(C.hook_target(k) for k in ("load_model", "init_lm_head", "dspark_worker_init", "get_internal_state"))
LM_HEAD_CLASS = C.class_name("lm_head")
LM_HEAD_SHAPE = [157184, 2560]  # Ling-3.0-flash: vocab x hidden
# The probe's head record (sparkgate_probe/facts.py describe_lm_head): class, method, dtype, shape, scale.
BF16_HEAD = {"quant_method": C.class_name("unquantized_embedding_method"), "weight_dtype": C.dtype("bf16"),
             "weight_shape": LM_HEAD_SHAPE, "has_weight_scale": False, "weight_scale_attr": None}
# The fork builds the head with Fp8Config (online, dynamic activation scales): an FP8 linear method whose
# module carries the per-channel scale.
FP8_HEAD = {"quant_method": C.class_name("fp8_linear_method"), "weight_dtype": C.dtype("fp8_e4m3fn"),
            "weight_shape": LM_HEAD_SHAPE, "has_weight_scale": True,
            "weight_scale_attr": C.fork_only("fp8_lm_head_weight_scale")}


def _moe_key(method: str, backend: str) -> str:
    """The probe's "<QuantMethodClass>/<runner_backend>" key of a FusedMoE layer."""
    return f"{C.class_name(method)}/{C.string_(backend)}"


HUMMING_MOE_KEY = _moe_key("mxfp4_humming_moe_method", "moe_backend_humming")
TRITON_FALLBACK_MOE_KEY = _moe_key("unquantized_fused_moe_method", "moe_backend_triton")
# SM120/121 routes the MXFP4 experts of flashinfer_mxfp4 to the CUTLASS MXFP8xMXFP4 method.
FLASHINFER_MOE_KEY = _moe_key("mxfp4_flashinfer_cutlass_moe_method", "moe_backend_flashinfer_mxfp4")


@dataclass(frozen=True)
class Engaged:
    humming: bool  # Humming MoE kernels really run
    moe_key: str  # "<QuantMethodClass>/<runner_backend>" of every target FusedMoE layer
    fp8_lm_head: bool  # the target's LM head is FP8 with scales
    draft_loaded: bool  # a draft model loaded (speculation active): the NEXTN layer or the DSpark drafter
    module_shared: bool  # the draft uses the target's LM-head module (not only its weight tensor)
    cuda_graph: bool  # decode runs from captured CUDA graphs
    probe_installed: bool  # SGLANG_PLUGINS names the engagement probe
    dspark: bool = False  # the draft is the DSpark drafter (DSparkWorkerV2), not NEXTN
    dspark_draft_graph: bool = False  # DSpark: the drafter captured its CUDA graph
    dspark_proposal_folded: bool = False  # DSpark: the block proposal is folded into that graph

    @property
    def draft_reads_fp8_without_scales(self) -> bool:
        """The NEXTN trap: an FP8 target head whose tensor the draft's BF16 method reads without scales."""
        return self.draft_loaded and not self.dspark and self.fp8_lm_head and not self.module_shared

    @property
    def draft_broken(self) -> bool:
        """Drafts that (almost) never match: the NEXTN trap above, or a DSpark drafter on its own vocab
        modules (its checkpoint ships no trained LM head: SGLang skips `lm_head.*` weights)."""
        if self.dspark:
            return self.draft_loaded and not self.module_shared
        return self.draft_reads_fp8_without_scales


def _resolved_moe_key(req: Requested, backend: str, fallback: bool) -> str:
    if req.humming:
        return TRITON_FALLBACK_MOE_KEY if fallback else HUMMING_MOE_KEY
    if backend == C.string_("moe_backend_flashinfer_mxfp4"):
        return FLASHINFER_MOE_KEY
    return f"{C.class_name('mxfp4_moe_method')}/{backend}"


def decide(
    req: Requested, image: Image, board: faults.FaultBoard, env: Mapping[str, str], resolved_backend: str
) -> Engaged:
    fallback = board.loaded_with(faults.HUMMING_FALLBACK)
    fp8 = req.fp8_lm_head and image.knows(FP8_LM_HEAD_ENV) and not board.loaded_with(faults.FP8_ENV_IGNORED)
    unshared = board.loaded_with(faults.DRAFT_LM_HEAD_UNSHARED)
    cuda_graph = req.cuda_graph and not board.loaded_with(faults.CUDA_GRAPH_OFF)
    plugins = [p.strip() for p in env.get(PLUGINS_ENV, "").split(",")]
    if req.dspark:
        # Stock DSparkWorkerV2 attaches the target's own embedding and LM-head modules (no fork patch);
        # an empty drafter directory stops the engine before anything engages (startup.py).
        draft, shared = True, not unshared
        draft_graph = cuda_graph and not board.loaded_with(faults.DSPARK_DRAFT_GRAPH_DISABLED)
        # SGLANG_DSPARK_FOLDED_PROPOSAL=0 keeps the proposal out of the graph without a log line.
        folded = (draft_graph and not board.loaded_with(faults.DSPARK_PROPOSAL_EAGER)
                  and sglang_env.is_true(env, FOLDED_PROPOSAL_ENV, default=True))
    else:
        draft = req.mtp and not board.loaded_with(faults.MTP_DRAFT_MISSING)
        shared = draft and image.draft_shares_lm_head_module and not req.token_map and not unshared
        draft_graph = folded = False
    return Engaged(
        humming=req.humming and not fallback,
        moe_key=_resolved_moe_key(req, resolved_backend, fallback),
        fp8_lm_head=fp8,
        draft_loaded=draft,
        module_shared=shared,
        cuda_graph=cuda_graph,
        probe_installed=PROBE_PLUGIN in plugins,
        dspark=req.dspark,
        dspark_draft_graph=draft_graph,
        dspark_proposal_folded=folded,
    )


def _head_record(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {"module_class": LM_HEAD_CLASS, **{k: list(v) if isinstance(v, list) else v for k, v in fields.items()}}


def hooks_called(engaged: Engaged) -> list[str]:
    """The probe's hook events in first-call order (sparkgate_probe.report)."""
    called = ["load_model/target"]
    if engaged.draft_loaded:
        called += ["load_model/draft", "dspark_worker_init" if engaged.dspark else "init_lm_head"]
    return [*called, "get_internal_state"]


def probe_report(engaged: Engaged) -> dict[str, Any]:
    """The `engagement` dict the probe plugin adds to `internal_states[0]` (format v1)."""
    target_head = _head_record(FP8_HEAD if engaged.fp8_lm_head else BF16_HEAD)
    report: dict[str, Any] = {
        "probe_version": PROBE_VERSION,
        "target": {
            "model_class": MODEL_ARCH,
            "lm_head": target_head,
            "moe_layers": {engaged.moe_key: TARGET_MOE_LAYERS},
        },
        "draft": None,
        "lm_head_sharing": None,
        "hooks_registered": list(HOOK_TARGETS),  # registration order (sparkgate_probe/plugin.py register)
        "hooks_attached": dict.fromkeys(HOOK_TARGETS, True),
        "hooks_called": hooks_called(engaged),
        "errors": [],
    }
    if engaged.dspark:
        # A dense drafter: no MoE layers. Shared: the target's head module itself (FP8 when engaged);
        # otherwise its own BF16 embedding and head, with their own tensors.
        report["draft"] = {
            "model_class": DSPARK_DRAFT_CLASS,
            "lm_head": dict(target_head) if engaged.module_shared else _head_record(BF16_HEAD),
            "moe_layers": {},
        }
        report["lm_head_sharing"] = {"module_shared": engaged.module_shared, "weight_shared": engaged.module_shared}
    elif engaged.draft_loaded:
        if engaged.module_shared:
            draft_head = dict(target_head)
        else:
            # Its own BF16 module around the target's tensor: dtype follows the tensor, scales do not.
            draft_head = _head_record({**BF16_HEAD, "weight_dtype": target_head["weight_dtype"]})
        report["draft"] = {
            "model_class": DRAFT_MODEL_CLASS,
            "lm_head": draft_head,
            "moe_layers": {engaged.moe_key: DRAFT_MOE_LAYERS},  # inherits the (resolved) runner choice
        }
        report["lm_head_sharing"] = {"module_shared": engaged.module_shared, "weight_shared": True}
    return report
