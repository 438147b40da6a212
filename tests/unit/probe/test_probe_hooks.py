"""The probe's hooks, run by calling the real SGLang methods that load_plugins() patched.

How the original bodies are handled:
- EagleDraftWorker.init_lm_head and SchedulerInternalStateController.get_internal_state run their
  real 0.5.23 bodies, on a real instance (created without __init__) or a real controller over a
  stub scheduler. init_lm_head therefore does the real tensor/module sharing on tiny CPU models.
- ModelRunner.load_model's real body loads a checkpoint onto a device, so before load_plugins()
  the class attribute is replaced by a stand-in that does the one thing the hook depends on,
  ``self.model = <loaded model>``. HookRegistry then resolves and wraps that attribute through
  the same code path as in the engine; test_probe_hook_targets checks the real method is wrapped.
"""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.sglang
import msgspec  # noqa: E402
import sglang  # noqa: E402,F401 - needs sglang==0.5.23 (requirements/sglang-cpu.txt); missing is an error, never a skip
from sglang.srt.managers.io_struct import GetInternalStateReq, GetInternalStateReqOutput  # noqa: E402
from sglang.srt.managers.scheduler_components.internal_state import SchedulerInternalStateController  # noqa: E402
from sglang.srt.model_executor.model_runner import ModelRunner  # noqa: E402
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

from sparkgate_probe import hooks  # noqa: E402
from sparkgate_probe.plugin import HOOK_TARGETS, LOAD_MODEL  # noqa: E402
from tests.unit.probe import tiny_models as tm  # noqa: E402

HUMMING = {"HummingMoEMethod/humming": 3}
FP8_HEAD = {
    "module_class": "ParallelLMHead",
    "quant_method": "ModelOptFp8LinearMethod",
    "weight_dtype": "torch.float8_e4m3fn",
    "weight_shape": [tm.VOCAB, tm.HIDDEN],
    "has_weight_scale": True,
    "weight_scale_attr": "weight_scale",
}


def make_stand_in_load_model():
    # Built per test: HookRegistry also rebinds module globals that are the wrapped function
    # (_propagate_patch), so a module-level stand-in would come back already wrapped next time.
    def load_model(self):
        """What the hook needs from the real body: the loaded model ends up in self.model."""
        self.model = self.model_to_load

    return load_model


@pytest.fixture
def engine(sandbox, cpu_runtime_context):
    """load_plugins() has run with SGLANG_PLUGINS=engagement_probe, as in the scheduler process."""
    sandbox.replace_original(LOAD_MODEL, make_stand_in_load_model())
    sandbox.load_plugins("engagement_probe")
    return sandbox


def runner(model, is_draft_worker):
    runner = ModelRunner.__new__(ModelRunner)
    runner.is_draft_worker = is_draft_worker
    runner.model_to_load = model
    return runner


def draft_worker(target_model, draft_model):
    """A real EagleDraftWorker with just the state init_lm_head reads (EAGLE/NEXTN, no token map)."""
    worker = EagleDraftWorker.__new__(EagleDraftWorker)
    worker.target_worker = SimpleNamespace(
        model_runner=SimpleNamespace(
            model=target_model, model_config=SimpleNamespace(model_path="dummy", revision=None), load_config=None
        )
    )
    worker.draft_runner = SimpleNamespace(model=draft_model)
    worker.hot_token_id = None
    worker.speculative_algorithm = SpeculativeAlgorithm.EAGLE
    return worker


def controller():
    """A real controller over a stub scheduler carrying the fields its readback reads."""
    scheduler = SimpleNamespace(
        startup_time=0.0,
        max_running_requests=1,
        metrics_reporter=SimpleNamespace(last_gen_throughput=0.0),
        draft_worker=None,
        tp_worker=SimpleNamespace(model_runner=SimpleNamespace(weight_load_mem_usage=1.0), graph_memory_usage=None),
        token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: SimpleNamespace(mem_usage=0.5)),
        startup_available_gpu_memory_gb=10.0,
        max_total_num_tokens=128,
        swa_tokens_per_layer=None,
        spec_algorithm=SpeculativeAlgorithm.NONE,
        rust_server=None,
    )
    return SchedulerInternalStateController(scheduler, record_step_time=False)


def server_info_engagement():
    out = controller().get_internal_state(GetInternalStateReq())
    assert isinstance(out, GetInternalStateReqOutput)
    assert "world_size" in out.internal_state  # SGLang's own readback is intact
    return out.internal_state["engagement"]


def start_engine(target_model, draft_model):
    """The scheduler-process order: target load, draft load, init_lm_head."""
    runner(target_model, False).load_model()
    runner(draft_model, True).load_model()
    draft_worker(target_model, draft_model).init_lm_head()


def test_before_the_target_loads_the_report_is_empty_but_present(engine):
    engagement = server_info_engagement()
    assert engagement["probe_version"] == 1
    assert engagement["target"] is None
    assert engagement["draft"] is None
    assert engagement["lm_head_sharing"] is None
    assert engagement["hooks_called"] == ["get_internal_state"]
    assert engagement["hooks_attached"] == {target: True for target in HOOK_TARGETS}
    assert engagement["errors"] == []


def test_all_three_engaged(engine):
    target = tm.TinyLingTarget(tm.fp8_lm_head(), [tm.humming_moe_layer(i) for i in range(3)])
    draft = tm.TinyNextNDraftSharingHead([tm.humming_moe_layer(i) for i in range(3)])
    start_engine(target, draft)
    assert draft.lm_head is target.lm_head  # the real init_lm_head shared the module

    engagement = server_info_engagement()
    assert engagement["target"] == {"model_class": "TinyLingTarget", "lm_head": FP8_HEAD, "moe_layers": HUMMING}
    assert engagement["draft"] == {
        "model_class": "TinyNextNDraftSharingHead",
        "lm_head": FP8_HEAD,
        "moe_layers": HUMMING,
    }
    assert engagement["lm_head_sharing"] == {"module_shared": True, "weight_shared": True}
    assert engagement["hooks_called"] == ["load_model/target", "load_model/draft", "init_lm_head", "get_internal_state"]
    assert engagement["errors"] == []


def test_bailing_tensor_only_share_is_visible(engine):
    # Stock 0.5.23 NextN draft: init_lm_head swaps in the target's FP8 tensor but the draft keeps
    # its own UnquantizedEmbeddingMethod head without the scale.
    target = tm.TinyLingTarget(tm.fp8_lm_head(), [tm.humming_moe_layer(i) for i in range(3)])
    draft = tm.TinyNextNDraft([tm.humming_moe_layer(0)])
    start_engine(target, draft)

    engagement = server_info_engagement()
    assert engagement["lm_head_sharing"] == {"module_shared": False, "weight_shared": True}
    draft_head = engagement["draft"]["lm_head"]
    assert draft_head["quant_method"] == "UnquantizedEmbeddingMethod"
    assert draft_head["weight_dtype"] == "torch.float8_e4m3fn"
    assert draft_head["has_weight_scale"] is False
    assert engagement["target"]["lm_head"] == FP8_HEAD


def test_humming_fallback_is_visible(engine):
    target = tm.TinyLingTarget(tm.bf16_lm_head(), [tm.triton_moe_layer(0), tm.triton_moe_layer(1)])
    runner(target, False).load_model()

    engagement = server_info_engagement()
    assert engagement["target"]["moe_layers"] == {"UnquantizedFusedMoEMethod/triton": 2}
    assert engagement["target"]["lm_head"]["weight_dtype"] == "torch.bfloat16"
    assert engagement["draft"] is None
    assert engagement["lm_head_sharing"] is None


def test_engagement_is_plain_msgpack_builtins(engine):
    target = tm.TinyLingTarget(tm.fp8_lm_head(), [tm.humming_moe_layer(0)])
    start_engine(target, tm.TinyNextNDraft([tm.humming_moe_layer(0)]))
    engagement = server_info_engagement()
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(engagement)) == engagement
    assert json.loads(json.dumps(engagement)) == engagement


def test_load_and_init_hooks_log_engagement_lines(engine, caplog):
    caplog.set_level(logging.INFO, logger="sparkgate_probe")
    target = tm.TinyLingTarget(tm.fp8_lm_head(), [tm.humming_moe_layer(0)])
    start_engine(target, tm.TinyNextNDraft([tm.humming_moe_layer(0)]))

    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ENGAGEMENT ")]
    events = [json.loads(line.split(" ", 1)[1]) for line in lines]
    assert [(e["event"], e.get("role")) for e in events] == [
        ("load_model", "target"),
        ("load_model", "draft"),
        ("init_lm_head", None),
    ]
    assert events[0]["lm_head"] == FP8_HEAD
    assert events[2]["lm_head_sharing"] == {"module_shared": False, "weight_shared": True}


def test_a_failing_hook_never_raises_into_sglang_and_is_reported(engine, caplog):
    caplog.set_level(logging.INFO, logger="sparkgate_probe")
    broken = ModelRunner.__new__(ModelRunner)  # no is_draft_worker
    broken.model_to_load = tm.TinyLingTarget(tm.bf16_lm_head(), [])
    assert broken.load_model() is None
    no_modules = runner(object(), False)
    assert no_modules.load_model() is None

    engagement = server_info_engagement()
    assert engagement["target"] is None
    assert len(engagement["errors"]) == 2
    assert engagement["errors"][0].startswith("load_model: ProbeError: runner.is_draft_worker is None")
    assert engagement["errors"][1].startswith("load_model: AttributeError:")
    assert engagement["hooks_called"] == ["load_model/target", "get_internal_state"]
    assert any(r.levelno == logging.ERROR and r.getMessage().startswith("ENGAGEMENT hook load_model failed") for r in caplog.records)


def test_init_lm_head_hook_failure_is_reported(report):
    assert hooks.after_init_lm_head(None, object()) is None
    snapshot = report.snapshot()
    assert snapshot["hooks_called"] == ["init_lm_head"]
    assert snapshot["lm_head_sharing"] is None
    assert snapshot["errors"][0].startswith("init_lm_head: AttributeError:")


# --- DSpark: the hook on DSparkWorkerV2.__init__ ---------------------------------------------------


def make_stand_in_dspark_init(share: bool):
    """What DSparkWorkerV2.__init__ does that the hook depends on (its real body builds draft TP workers on a
    GPU): keep the target worker, load the drafter into self.draft_model, then either hand it the target's
    embedding and head through the drafter's real attach_shared_modules, or keep its checkpoint-local ones."""
    from sglang.srt.lora.layers import unwrap_lora_layer

    def __init__(self, target_worker, draft_model):
        self._target_worker = target_worker
        self.draft_model = draft_model
        if share:
            target_model = target_worker.model_runner.model
            draft_model.attach_shared_modules(
                embed_tokens=target_model.model.word_embeddings, lm_head=unwrap_lora_layer(target_model.lm_head)
            )

    return __init__


def tiny_dspark_draft(own_head=None):
    """A real LingDSparkModel object without its checkpoint (only the attributes attach_shared_modules reads)."""
    from sglang.srt.models.dspark import LingDSparkModel
    from torch import nn

    draft = LingDSparkModel.__new__(LingDSparkModel)
    nn.Module.__init__(draft)
    draft.is_nemotron_35_draft = False
    draft.lm_head = own_head
    return draft


def start_dspark_engine(sandbox, target_model, draft_model, share: bool):
    from sglang.srt.speculative.dspark_components.dspark_worker_v2 import DSparkWorkerV2

    from sparkgate_probe.plugin import DSPARK_WORKER_INIT

    sandbox.replace_original(LOAD_MODEL, make_stand_in_load_model())
    sandbox.replace_original(DSPARK_WORKER_INIT, make_stand_in_dspark_init(share))
    sandbox.load_plugins("engagement_probe")
    runner(target_model, False).load_model()
    runner(draft_model, True).load_model()
    target_worker = SimpleNamespace(model_runner=SimpleNamespace(model=target_model))
    return DSparkWorkerV2(target_worker, draft_model)


def test_dspark_draft_projecting_through_the_target_fp8_head_is_proven(sandbox, cpu_runtime_context):
    target = tm.TinyLingTarget(tm.fp8_lm_head(), [tm.humming_moe_layer(i) for i in range(3)])
    draft = tiny_dspark_draft()
    start_dspark_engine(sandbox, target, draft, share=True)
    assert draft.lm_head is target.lm_head  # the drafter's real attach_shared_modules ran

    engagement = server_info_engagement()
    assert engagement["draft"] == {"model_class": "LingDSparkModel", "lm_head": FP8_HEAD, "moe_layers": {}}
    assert engagement["lm_head_sharing"] == {"module_shared": True, "weight_shared": True}
    assert engagement["hooks_called"] == [
        "load_model/target", "load_model/draft", "dspark_worker_init", "get_internal_state",
    ]
    assert engagement["errors"] == []


def test_dspark_draft_keeping_its_own_head_is_visible(sandbox, cpu_runtime_context):
    # "DSpark draft uses its checkpoint-local embedding and LM head": the FP8 target head is bypassed.
    target = tm.TinyLingTarget(tm.fp8_lm_head(), [tm.humming_moe_layer(0)])
    draft = tiny_dspark_draft(own_head=tm.bf16_lm_head())
    start_dspark_engine(sandbox, target, draft, share=False)

    engagement = server_info_engagement()
    assert engagement["lm_head_sharing"] == {"module_shared": False, "weight_shared": False}
    assert engagement["draft"]["lm_head"]["weight_dtype"] == "torch.bfloat16"
    assert engagement["target"]["lm_head"] == FP8_HEAD


def test_dspark_worker_without_a_draft_is_an_error_not_a_pass(report):
    worker = SimpleNamespace(target_worker=SimpleNamespace(model_runner=SimpleNamespace(model=object())))
    assert hooks.after_dspark_worker_init(None, worker) is None
    snapshot = report.snapshot()
    assert snapshot["lm_head_sharing"] is None
    assert snapshot["draft"] is None
    assert snapshot["errors"] == ["dspark_worker_init: ProbeError: DSparkWorkerV2 has no draft_model after __init__"]
