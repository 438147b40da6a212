"""The GPU lane (tests/gpu, marker `gpu`): the real SGLang 0.5.23 on CUDA with CUDA graphs, judged by the gate.

Run on a CUDA machine with `bash tests/gpu/run` (or `invoke test.gpu`); never collected by `pytest tests` elsewhere
(tests/conftest.py ignores this folder unless SPARKGATE_GPU_LANE=1), and without CUDA it fails, never skips.

Each launch starts once (session fixture, one server at a time through tests/real's EngineSlot), is judged with the
product's own `verify` through a recording client, and its evidence is written at once (tests/gpu/records.py), so
a later failing assertion never loses what the engine printed. The tests then assert on those results.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from sparkgate.evidence import logs
from sparkgate.evidence.client import EngineClient
from sparkgate.evidence.recheck import RecheckContext
from sparkgate.evidence.recording import Recording, RecordingClient
from sparkgate.evidence.results import Verdict
from sparkgate.evidence.verify import verify
from sparkgate.optimizations import mtp_recheck
from sparkgate.sglang import flags as F
from tests.gpu import records
from tests.gpu.dspark_drafter import VARIANTS as DSPARK_VARIANTS
from tests.gpu.dspark_drafter import build_dspark_drafter
from tests.gpu.v3_checkpoints import VARIANTS as V3_VARIANTS
from tests.gpu.v3_checkpoints import build_tiny_v3, launch_args
from tests.real import differential as D
from tests.real import gate
from tests.real.checkpoints import DUMMY_WEIGHTS_ARGS, build_tiny_bailing_v2, build_tiny_llama
from tests.real.engine import NEXTN_ARGS, STARTED, EngineSlot, EngineStartError, Launch, RealEngine, standalone_args

SGLANG_VERSION = version("sglang")
DRAFT_TRAP_SEED = 1  # another tiny llama's weights: a draft that never agrees with its target
RECHECK_PERIOD_S = 1.0
RUN_ID = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())  # one per lane run: records of two runs never mix


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/gpu/" in str(item.path):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session", autouse=True)
def cuda_present():
    import torch

    assert torch.cuda.is_available(), "the GPU lane needs CUDA (it never skips): run it on a CUDA machine"


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    return {
        "llama": build_tiny_llama(root / "tiny-llama"),
        "llama-other-seed": build_tiny_llama(root / "tiny-llama-other-seed", seed=DRAFT_TRAP_SEED),
        "bailing": build_tiny_bailing_v2(root / "tiny-bailing-v2"),
    }


@pytest.fixture(scope="session")
def v3_paths(tmp_path_factory) -> dict[str, Path]:
    """The tiny Ling-3.0-flash checkpoints (tests/gpu/v3_checkpoints.py) and the Humming kernel cache they share."""
    root = tmp_path_factory.mktemp("v3")
    paths = {variant: build_tiny_v3(root / f"tiny-v3-{variant}", variant) for variant in V3_VARIANTS}
    for variant in DSPARK_VARIANTS:
        paths[f"dspark-{variant}"] = build_dspark_drafter(root / f"dspark-{variant}", variant)
    cache = root / "humming-cache"
    cache.mkdir()  # as the product's mount: the directory exists and is empty before the first start
    return {**paths, "humming-cache": cache}


@dataclass(frozen=True)
class GpuLaunch:
    """One launch of the lane: how it starts, the profiles it is judged against, what it is."""

    name: str
    launch: Launch
    profiles: tuple[str, ...]
    architecture: str
    speculative: bool = False
    humming_cache: Path | None = None  # the launch's HUMMING_CACHE_DIR: its files are counted before and after


def launches(paths: dict[str, Path]) -> dict[str, GpuLaunch]:
    llama = Launch(model_path=paths["llama"], served_model_name="tiny-llama", max_running_requests=1, device="cuda")
    bailing = Launch(model_path=paths["bailing"], served_model_name="tiny-bailing-v2", max_running_requests=1,
                     device="cuda", extra_args=(*DUMMY_WEIGHTS_ARGS, "--moe-runner-backend", "triton"))
    dense = "LlamaForCausalLM"
    return {g.name: g for g in (
        GpuLaunch("dense-graphs", llama, ("baseline",), dense),
        GpuLaunch("dense-eager", dataclasses.replace(
            llama, extra_args=("--cuda-graph-backend-decode", "disabled")), ("baseline",), dense),
        GpuLaunch("standalone-self", dataclasses.replace(
            llama, extra_args=standalone_args(paths["llama"])), ("mtp",), dense, speculative=True),
        GpuLaunch("standalone-other-seed", dataclasses.replace(
            llama, extra_args=standalone_args(paths["llama-other-seed"])), ("mtp",), dense, speculative=True),
        GpuLaunch("moe-nextn", dataclasses.replace(
            bailing, extra_args=(*bailing.extra_args, *NEXTN_ARGS)), ("mtp",), "BailingMoeV2ForCausalLM",
            speculative=True),
        GpuLaunch("dense-fp8", dataclasses.replace(
            llama, extra_args=("--quantization", "fp8")), ("baseline",), dense),
    )}


V3 = "BailingMoeV3ForCausalLM"


def dspark_args(drafter: Path) -> tuple[str, ...]:
    """The dspark profile's own DSpark flags (sparkgate/optimizations/dspark.py), the tiny drafter as the draft."""
    from sparkgate.optimizations import dspark
    from sparkgate.profile import loading

    flags = {**dspark.flags(loading.load("dspark").profile), F.SPECULATIVE_DRAFT_MODEL_PATH: str(drafter)}
    return tuple(F.dict2args(flags))


def v3_launches(paths: dict[str, Path]) -> dict[str, GpuLaunch]:
    """The tiny Ling-3.0-flash launches (issue #32): Humming engaged (cold then warm kernel cache), the FP8 head on
    stock, a NEXTN draft that agrees and one that never does; then the silent fallbacks (`bash tests/gpu/run v3` and
    `v3-fallbacks`); DSpark with the tiny drafter that agrees and one that never does (`v3-dspark`)."""
    cache = paths["humming-cache"]
    humming_env = {F.HUMMING_COMPILER_ENV: "nvrtc", F.HUMMING_CACHE_DIR_ENV: str(cache)}

    def v3(variant: str, *extra: str, runner: str = "humming", nextn: bool = False, **fields: Any) -> Launch:
        return Launch(model_path=paths[variant], served_model_name="tiny-ling-v3", max_running_requests=1,
                      device="cuda", env=humming_env, extra_args=(*launch_args(paths[variant], runner, nextn), *extra),
                      **fields)

    agree = v3("agree")
    return {g.name: g for g in (
        GpuLaunch("v3-humming-cold", agree, ("humming",), V3, humming_cache=cache),
        GpuLaunch("v3-humming-warm-fp8-env", dataclasses.replace(agree, env={**humming_env, F.FP8_LM_HEAD_ENV: "1"}),
                  ("humming", "fp8-lm-head"), V3, humming_cache=cache),
        GpuLaunch("v3-nextn-agree", v3("agree", nextn=True), ("mtp", "all-three"), V3, speculative=True,
                  humming_cache=cache),
        GpuLaunch("v3-nextn-random", v3("random", nextn=True), ("mtp",), V3, speculative=True, humming_cache=cache),
        GpuLaunch("v3-humming-unimportable", v3("agree", unimportable=("humming",)), ("humming",), V3),
        # Marlin builds its MoE kernel in the first decode-graph capture (ready in 231 s on an H100): past the 180 s default.
        GpuLaunch("v3-marlin", v3("agree", runner="marlin", start_timeout_s=400.0), ("humming",), V3),
        GpuLaunch("v3-bf16-humming", v3("bf16"), ("humming",), V3, humming_cache=cache),
        # The first DSpark start compiles the KDA kernels while /health waits (92 s to its first 200 on 2026-12-06).
        *(GpuLaunch(f"v3-dspark-{variant}", v3("agree", *dspark_args(paths[f"dspark-{variant}"]), start_timeout_s=400.0),
                    ("dspark",), V3,
                    speculative=True, humming_cache=cache) for variant in DSPARK_VARIANTS),
    )}


# Which launches each tiny Ling-3.0-flash run starts (`bash tests/gpu/run SET`), in order; its records land in
# tests/fixtures/<set> (tests/gpu/records.py SETS) and tests/unit/test_gpu_v3_records.py replays them.
V3_SETS = {
    "gpu-v3": ("v3-humming-cold", "v3-humming-warm-fp8-env", "v3-nextn-agree", "v3-nextn-random"),
    "gpu-v3-fallbacks": ("v3-humming-cold", "v3-humming-unimportable", "v3-bf16-humming", "v3-marlin"),
    "gpu-v3-dspark": tuple(f"v3-dspark-{variant}" for variant in DSPARK_VARIANTS),
}


@dataclass
class LaunchResult:
    """What one launch gave: its verdicts by profile, the re-checks, or the reason it never served."""

    spec: GpuLaunch
    engine_error: str | None = None
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    rechecks: list[dict[str, Any]] = field(default_factory=list)
    startup_s: float | None = None
    verify_s: dict[str, float] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)

    def checks(self, profile: str) -> dict:
        assert self.engine_error is None, f"{self.spec.name} never served:\n{self.engine_error[-3000:]}"
        return gate.by_name(self.verdicts[profile])


def identity(spec: GpuLaunch) -> dict:
    launch = spec.launch
    return {"model_path": str(launch.model_path), "served_model_name": launch.served_model_name,
            "sglang_version": SGLANG_VERSION, "architecture": spec.architecture}


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0)


def run_rechecks(engine: RealEngine, expectations: dict) -> list[dict[str, Any]]:
    """The sentinel's MTP re-checks after admission: a window opens, a client sends traffic, the engine goes idle,
    the re-check probes (the same calls the sentinel makes, sparkgate/optimizations/mtp_recheck.py)."""
    ctx = RecheckContext("mtp", EngineClient(engine.url, timeout=30.0), RECHECK_PERIOD_S, expectations)
    mtp_recheck.start(ctx)
    for prompt in ("The quick brown fox", "Sphinx of black quartz"):
        engine.generate(prompt, max_new_tokens=32)
    results = [c.as_dict() for c in mtp_recheck.rechecks(ctx)]  # traffic in the window: not idle
    time.sleep(RECHECK_PERIOD_S)
    results += [c.as_dict() for c in mtp_recheck.rechecks(ctx)]  # idle after client traffic: the probe runs
    return results


def run_launch(slot: EngineSlot, spec: GpuLaunch) -> LaunchResult:
    out = records.record_dir() / spec.name
    result = LaunchResult(spec)
    cache_before = cache_listing(spec.humming_cache)
    started = time.monotonic()
    try:
        engine = slot.fresh(spec.launch)
    except EngineStartError as exc:
        result.engine_error = str(exc)
        # The server that died (start_engine keeps it in STARTED before it waits): its log records what stock did.
        failed = STARTED[-1] if STARTED and STARTED[-1].launch == spec.launch else None
        if failed is not None:
            records.keep_log(failed.log_path, out)
        records.write_json(out / "launch.json", {
            "name": spec.name, "error": records.head_and_tail(str(exc)), "profiles": list(spec.profiles),
            "sglang_version": SGLANG_VERSION,
            "architecture": spec.architecture, "gpu": _gpu_name(), "run": RUN_ID,
            "argv": failed.argv[failed.argv.index("sglang.launch_server") + 1:] if failed is not None else None})
        return result
    result.startup_s = round(time.monotonic() - started, 2)
    try:
        # The differential's real side (tests/real/differential.py Side): observe.py's requests, sent when the slot
        # started it, the extra ones, then what the engine shows after them.
        side = {"seen": dataclasses.asdict(slot.observation(spec.launch)), "extra": D.extra_requests(engine),
                "server_info": engine.server_info(), "metrics_text": engine.metrics_text(),
                "log_text": engine.log_text()}
        records.write_json(out / "side.json", side)
        for profile in spec.profiles:
            expectations = gate.expectations_for(profile, engine, **identity(spec))
            client = RecordingClient(engine.url, timeout=30.0)
            log = logs.from_file(str(engine.log_path))
            began = time.monotonic()
            verdict = verify(engine.url, expectations, log, client=client)
            result.verify_s[profile] = round(time.monotonic() - began, 2)
            result.verdicts[profile] = verdict
            records.write_json(out / f"{profile}.recording.json",
                               Recording.of(client, expectations, log, verdict).model_dump(mode="json"))
            if spec.speculative and profile == "mtp":
                result.rechecks = run_rechecks(engine, expectations)
                records.write_json(out / "rechecks.json", result.rechecks)
        result.after = {"server_info": engine.server_info(), "metrics": engine.metrics_text()}
        records.write_json(out / "after.json", result.after)
    finally:
        slot.stop()
        records.keep_log(engine.log_path, out)
        records.write_json(out / "launch.json", {
            "name": spec.name, "argv": engine.argv[engine.argv.index("sglang.launch_server") + 1:],
            "sglang_version": SGLANG_VERSION, "gpu": _gpu_name(), "startup_s": result.startup_s,
            "verify_s": result.verify_s, "profiles": list(spec.profiles), "architecture": spec.architecture,
            "run": RUN_ID, "listen_s": engine.startup_s, "first_health_s": engine.first_health_s,
            "humming_cache": {"before": cache_before, "after": cache_listing(spec.humming_cache)}
            if spec.humming_cache is not None else None,
        })
    return result


def cache_listing(root: Path | None) -> dict[str, Any] | None:
    """Files and bytes under a kernel cache directory, and a digest of every file's path, size and mtime: equal
    digests before and after a start mean it read the cache and wrote nothing (None: no such directory)."""
    import hashlib

    if root is None or not root.is_dir():
        return None
    files = sorted(p for p in root.rglob("*") if p.is_file())
    stats = [(str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    return {"files": len(files), "bytes": sum(size for _, size, _ in stats),
            "digest": hashlib.sha256(repr(stats).encode()).hexdigest()}


@pytest.fixture(scope="session")
def gpu_slot(tmp_path_factory):
    slot = EngineSlot(tmp_path_factory.mktemp("gpu-sglang"))
    yield slot
    slot.stop()


_RESULTS: dict[str, LaunchResult] = {}


@pytest.fixture
def launch_result(request, gpu_slot):
    """launch_result(name): that launch's result, started on first use (the lane's modules go launch by launch);
    only the checkpoints of the launches asked for are built (the tiny V3 ones for `v3-*`)."""

    def get(name: str) -> LaunchResult:
        if name not in _RESULTS:
            table = (v3_launches(request.getfixturevalue("v3_paths")) if name.startswith("v3-")
                     else launches(request.getfixturevalue("checkpoints")))
            _RESULTS[name] = run_launch(gpu_slot, table[name])
        return _RESULTS[name]

    return get


def pytest_terminal_summary(terminalreporter):
    if not _RESULTS:
        return
    terminalreporter.write_sep("-", "GPU lane launches (start -> ready, verify per profile, decode tok/s)")
    humming = {}  # launch -> its engine-timed decode speed judged as the humming profile
    for name, result in _RESULTS.items():
        speeds = {p: v.calibration.get("decode_tok_s") for p, v in result.verdicts.items()}
        failing = {p: sorted(gate.failing(v)) for p, v in result.verdicts.items()}
        terminalreporter.write_line(f"{name}: ready {result.startup_s} s, verify {result.verify_s}, decode tok/s "
                                    f"{speeds}, failing {failing}" + (" NEVER SERVED" if result.engine_error else ""))
        if speeds.get("humming"):
            humming[name] = speeds["humming"]
    # Humming against each runner that served the same checkpoint instead, engine-timed, one run, one GPU.
    reference = humming.pop("v3-humming-cold", None)
    for name, speed in humming.items() if reference else ():
        terminalreporter.write_line(f"decode ratio humming/{name}: {reference} / {speed} = {reference / speed:.2f}")
