"""DSpark block speculation: a separate dense drafter (`LingDSparkModel`) proposes a block of `block_size`
tokens per step, projected through the target's own LM-head module, and the target verifies
`block_size + 1` positions; the target's linear-attention layers keep a spec-verify ring.

The drafter is a second model directory, mounted read-only at `draft_model_path` and pinned to a
revision that preflight checks (sparkgate/deploy/preflight.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, StrictBool

from sparkgate.bench.published import PUBLISHED
from sparkgate.evidence.calibration import accept_length_check
from sparkgate.evidence.gather import Evidence, shown
from sparkgate.evidence.probe_report import draft_sharing_problems
from sparkgate.evidence.results import CheckResult, checked, failed
from sparkgate.evidence.stages import Stage
from sparkgate.frozen import Frozen
from sparkgate.optimizations import humming, mtp, mtp_recheck
from sparkgate.profile.safe_types import ClassName, ContainerPath, GitRevision, HubRepo
from sparkgate.sglang import conformance
from sparkgate.sglang import flags as F

if TYPE_CHECKING:
    from sparkgate.evidence.recheck import RecheckContext
    from sparkgate.profile.context import RuleContext
    from sparkgate.profile.model import Profile
    from sparkgate.profile.problems import Problem

KEY = "dspark"
DOCS = "dspark.md"
ALGORITHM = conformance.string_("spec_algorithm_dspark")  # SGLang does not alias DSPARK: /server_info says it
OWNED_ENV: tuple[str, ...] = ()
# --speculative-algorithm DSPARK and every DSpark-only flag: elsewhere the gate would never check the drafter.
# (The generic speculative flags, draft path and draft-token count, are optimizations.mtp's when it is off;
# rules.py lets an enabled optimization's own module produce them.)
OWNED_FLAGS: dict[str, tuple[str, ...] | None] = {
    F.SPECULATIVE_ALGORITHM: (ALGORITHM,),
    **{flag: None for flag in F.DSPARK_FLAGS},
}
# The SGLang facts rules() reads (options, "section.key" fixture entries), for `invoke sglang.diff`.
RULE_READS = (F.ENABLE_LINEAR_REPLAYSSM, F.ENABLE_LINEAR_REPLAYSSM_SPEC, F.LINEAR_ATTN_DECODE_BACKEND,
              "classes.dspark_draft", "log_formats.dspark_ring_not_power_of_two", "log_formats.dspark_ring_too_small")
GATE_WOULD_MISS = "that the DSpark drafter loaded, shares the target's LM head and accepts enough"
CHECKS = {
    "dspark.config_echo": Stage.CONFIGURATION,
    "dspark.draft_loaded": Stage.PROBE_REPORT,
    "dspark.lm_head_module_shared": Stage.PROBE_REPORT,
    "dspark.log_runner_initialized": Stage.ENGINE_LOG,
    "dspark.drafter_config_read": Stage.ENGINE_LOG,
    "dspark.draft_cuda_graph": Stage.ENGINE_LOG,
    "dspark.proposal_not_eager": Stage.ENGINE_LOG,
    "dspark.accept_length": Stage.CALIBRATION,
    "dspark.speed_over_nextn": Stage.CALIBRATION,
}
# After admission: MTP's acceptance re-check (sentinel probe + collapse window), judged against DSpark's floor,
# under DSpark's own names (a check name belongs to one module in the catalog).
RECHECK_NAMES = {name: name.replace("sentinel.", "sentinel.dspark_", 1) for name in mtp_recheck.CHECKS}
CHECKS.update({RECHECK_NAMES[name]: stage for name, stage in mtp_recheck.CHECKS.items()})
# The SGLang facts each check reads: "section.key" (conformance fixture) or "probe.<field>" (the probe report).
# evidence/catalog.py validates them; tests/unit/test_declared_reads.py proves them on the recorded captures.
READS = {
    'dspark.config_echo': (
        'server_args.enable_linear_replayssm_spec', 'server_args.linear_replayssm_cache_len',
        'server_args.speculative_algorithm', 'server_args.speculative_draft_model_path',
        'server_args.speculative_dspark_block_size', 'server_args.speculative_num_draft_tokens',
        'strings.spec_algorithm_dspark',
    ),
    'dspark.draft_loaded': ('classes.dspark_draft', 'strings.server_info_internal_states', 'probe.draft'),
    'dspark.lm_head_module_shared': (
        'strings.server_info_internal_states', 'probe.hooks_called', 'probe.lm_head_sharing',
    ),
    'dspark.log_runner_initialized': ('classes.dspark_draft', 'log_formats.dspark_runner_initialized'),
    'dspark.drafter_config_read': ('log_formats.dspark_draft_config_unreadable',),
    'dspark.draft_cuda_graph': ('log_formats.dspark_draft_graph_disabled',),
    'dspark.proposal_not_eager': ('log_formats.dspark_proposal_eager',),
    'dspark.accept_length': (
        'strings.meta_completion_tokens', 'strings.meta_e2e_latency', 'strings.meta_finish_reason',
        'strings.meta_first_token_latency', 'strings.meta_spec_verify_ct',
    ),
    'dspark.speed_over_nextn': (
        'strings.meta_completion_tokens', 'strings.meta_e2e_latency', 'strings.meta_finish_reason',
        'strings.meta_first_token_latency',
    ),
    **{RECHECK_NAMES[name]: reads for name, reads in mtp_recheck.READS.items()},
}
FIGURES = {"accept_length": ("dspark.accept_length", RECHECK_NAMES["sentinel.accept_probe"])}  # as mtp.FIGURES
# No GAUGES: the calibration accept length is already a sentinel gauge (sparkgate_accept_length) for every profile.
SERVER_ARGS = {
    "algorithm": conformance.server_arg("speculative_algorithm"),
    "num_draft_tokens": conformance.server_arg("speculative_num_draft_tokens"),
    "block_size": conformance.server_arg("speculative_dspark_block_size"),
    "draft_model_path": conformance.server_arg("speculative_draft_model_path"),
    "ring_enable": conformance.server_arg("enable_linear_replayssm_spec"),
    "ring_cache_len": conformance.server_arg("linear_replayssm_cache_len"),
}
# /server_info fields recorded with every verdict (`engine` in the verdict JSON; bench reads them). The
# algorithm and draft-token count are recorded through optimizations.mtp's keys already.
CONFIG_KEYS = tuple(SERVER_ARGS[name] for name in ("block_size", "draft_model_path", "ring_enable", "ring_cache_len"))
DRAFT_MODEL_CLASS = conformance.class_name("dspark_draft")
WORKER_INIT_HOOK = "dspark_worker_init"  # the probe's name for its hook on DSparkWorkerV2.__init__
# The published all-three (NEXTN) decode speed on GSM8K: DSpark earns its place only above it.
NEXTN_DECODE_TOK_S = PUBLISHED["all-three"].decode_tok_s
# The least accept length a profile may ask the gate for (docs/gate.md "Floors"), as for MTP: a broken
# drafter reads 1.00.
MIN_ACCEPT_LENGTH_FLOOR = mtp.MIN_ACCEPT_LENGTH_FLOOR
RING_DECODE_BACKENDS = ("triton", "flashinfer")  # the ring's decode kernels (arg_groups/attention_hook.py)


class Ring(Frozen):
    """The KDA spec-verify ring (`--enable-linear-replayssm-spec`, `--linear-replayssm-cache-len`)."""

    enable: StrictBool = True
    cache_len: Annotated[int, Field(strict=True, ge=1, le=65536)] = Field(
        32, description="Ring length: a power of two and at least twice num_draft_tokens"
    )


class Settings(Frozen):
    enabled: StrictBool = False
    algorithm: Literal["DSPARK"] = "DSPARK"
    draft_model_path: ContainerPath = Field(
        "/models/Ling-3.0-flash-dspark", description="Drafter directory inside the engine (mounted read-only)"
    )
    block_size: Annotated[int, Field(strict=True, ge=1, le=64)] = Field(8, description="Draft tokens per block (gamma)")
    num_draft_tokens: Annotated[int, Field(strict=True, ge=2, le=65)] = Field(9, description="Verify window: block_size + 1")
    ring: Ring = Ring()
    linear_attn_decode_backend: Literal["triton", "flashinfer"] = "triton"
    drafter_repo: HubRepo = Field("inclusionAI/Ling-3.0-flash-dspark", description="Hub repository of the drafter")
    drafter_revision: GitRevision = Field(
        "8e5d9988c9b09de13f1f7c9d999ff2bfa533a149", description="Pinned drafter commit; preflight checks the download"
    )
    drafter_architecture: ClassName = Field(DRAFT_MODEL_CLASS, description="Drafter class the engine must load")
    min_accept_length: Annotated[float, Field(strict=True, gt=1.0, le=65)] = Field(
        3.0, description="Gate floor for the calibration accept length; a broken drafter reads 1.00"
    )
    min_decode_tok_s: Annotated[float, Field(strict=True, gt=0.0, le=1000)] = Field(
        NEXTN_DECODE_TOK_S, description="Calibration decode floor: the all-three (NEXTN) figure; may only rise"
    )


def flags(profile: Profile) -> dict[str, object]:
    settings = profile.optimizations.dspark
    if not settings.enabled:
        return {}
    return {
        F.SPECULATIVE_ALGORITHM: settings.algorithm,
        F.SPECULATIVE_DRAFT_MODEL_PATH: settings.draft_model_path,
        F.SPECULATIVE_DSPARK_BLOCK_SIZE: settings.block_size,
        F.SPECULATIVE_NUM_DRAFT_TOKENS: settings.num_draft_tokens,
        F.ENABLE_LINEAR_REPLAYSSM_SPEC: settings.ring.enable,
        F.LINEAR_REPLAYSSM_CACHE_LEN: settings.ring.cache_len if settings.ring.enable else None,
        F.LINEAR_ATTN_DECODE_BACKEND: settings.linear_attn_decode_backend,
    }


# --- rules ---------------------------------------------------------------------------------------


def rules(ctx: RuleContext) -> list[Problem]:
    settings = ctx.profile.optimizations.dspark
    if not settings.enabled:
        return []  # DSpark flags set elsewhere: refused through OWNED_FLAGS (rules.py)
    return [
        *_exclusive_problems(ctx),
        *_floor_problems(ctx),
        *_window_problems(ctx),
        *_ring_problems(ctx),
        *_batch_problems(ctx),
        *_draft_path_problems(ctx),
        *_drafter_class_problems(ctx),
    ]


def _drafter_class_problems(ctx: RuleContext) -> list[Problem]:
    """The gate identifies the drafter by its class; a profile could otherwise name any class it likes (the
    generic DSparkDraftModel, or the target's own) and the checks would look for that instead."""
    named = ctx.profile.optimizations.dspark.drafter_architecture
    if named == DRAFT_MODEL_CLASS:
        return []
    return [ctx.problem(
        ["optimizations.dspark.drafter_architecture"],
        f"{named!r} is not the drafter SGLang {conformance.SGLANG_VERSION} loads for a Ling-3.0-flash target: "
        f"sglang/srt/models/dspark.py registers it as {DRAFT_MODEL_CLASS}, and the gate checks for that class",
        f"remove optimizations.dspark.drafter_architecture (default {DRAFT_MODEL_CLASS})",
    )]


def _exclusive_problems(ctx: RuleContext) -> list[Problem]:
    if not ctx.profile.optimizations.mtp.enabled:
        return []
    return [ctx.problem(
        ["optimizations.dspark.enabled", "optimizations.mtp.enabled"],
        "NEXTN (optimizations.mtp) and DSpark are both enabled, but SGLang runs one speculative algorithm per "
        "engine: one would silently replace the other's flags",
        "keep one: set optimizations.mtp.enabled: false for DSpark (extend humming and fp8-lm-head, not "
        "all-three or mtp), or optimizations.dspark.enabled: false for NEXTN",
    )]


def _floor_problems(ctx: RuleContext) -> list[Problem]:
    settings = ctx.profile.optimizations.dspark
    problems = []
    if settings.min_accept_length < MIN_ACCEPT_LENGTH_FLOOR:
        problems.append(ctx.problem(
            ["optimizations.dspark.min_accept_length"],
            f"{settings.min_accept_length} is below the gate's minimum {MIN_ACCEPT_LENGTH_FLOOR}: a healthy "
            "DSpark drafter accepts about 5 on the calibration prompts, a broken one 1.00",
            f"set optimizations.dspark.min_accept_length to {MIN_ACCEPT_LENGTH_FLOOR} or more (a profile may only "
            "tighten the gate)",
        ))
    if settings.min_decode_tok_s < NEXTN_DECODE_TOK_S:
        problems.append(ctx.problem(
            ["optimizations.dspark.min_decode_tok_s"],
            f"{settings.min_decode_tok_s} tok/s is below the all-three (NEXTN) figure {NEXTN_DECODE_TOK_S} tok/s: "
            "a DSpark stack slower than NEXTN on the calibration prompts should run all-three instead",
            f"set optimizations.dspark.min_decode_tok_s to {NEXTN_DECODE_TOK_S} or more (a profile may only "
            "tighten the gate)",
        ))
    return problems


def _window_problems(ctx: RuleContext) -> list[Problem]:
    settings = ctx.profile.optimizations.dspark
    if settings.num_draft_tokens == settings.block_size + 1:
        return []
    return [ctx.problem(
        ["optimizations.dspark.num_draft_tokens", "optimizations.dspark.block_size"],
        f"the verify window is block_size + 1 = {settings.block_size + 1}, got num_draft_tokens "
        f"{settings.num_draft_tokens} (SGLang refuses to start: arg_groups/speculative_hook.py)",
        f"set num_draft_tokens: {settings.block_size + 1}",
    )]


def _ring_problems(ctx: RuleContext) -> list[Problem]:
    settings = ctx.profile.optimizations.dspark
    if not settings.ring.enable:
        return []
    problems = []
    length, window = settings.ring.cache_len, settings.num_draft_tokens
    # SGLang checks these only when it allocates the memory pool, minutes into a start.
    if length & (length - 1) != 0:
        problems.append(ctx.problem(
            ["optimizations.dspark.ring.cache_len"],
            f"{length} is not a power of two; SGLang would fail late, at memory-pool setup, with "
            f"'{conformance.log_line('dspark_ring_not_power_of_two', length=length)}'",
            f"set it to a power of two at least 2 x num_draft_tokens, e.g. {_ring_length(window)}",
        ))
    if length < 2 * window:
        problems.append(ctx.problem(
            ["optimizations.dspark.ring.cache_len", "optimizations.dspark.num_draft_tokens"],
            f"{length} is below 2 x num_draft_tokens = {2 * window}; SGLang would fail late, at memory-pool setup, "
            f"with '{conformance.log_line('dspark_ring_too_small', length=length, num_draft_tokens=window)}'",
            f"set optimizations.dspark.ring.cache_len: {_ring_length(window)}",
        ))
    backend = ctx.plan.value_of(F.LINEAR_ATTN_DECODE_BACKEND)
    if backend and backend[-1] not in RING_DECODE_BACKENDS:
        field = ctx.plan.options_for(F.LINEAR_ATTN_DECODE_BACKEND)[-1].field
        problems.append(ctx.problem(
            [field, "optimizations.dspark.ring.enable"],
            f"the spec-verify ring needs the {' or '.join(RING_DECODE_BACKENDS)} linear-attention decode backend, "
            f"got {backend[-1]!r} (SGLang refuses to start: arg_groups/attention_hook.py)",
            "set optimizations.dspark.linear_attn_decode_backend: triton",
        ))
    for occurrence in ctx.plan.options_for(F.ENABLE_LINEAR_REPLAYSSM):
        problems.append(ctx.problem(
            [occurrence.field, "optimizations.dspark.ring.enable"],
            f"{F.ENABLE_LINEAR_REPLAYSSM} and the spec-verify ring ({F.ENABLE_LINEAR_REPLAYSSM_SPEC}) are mutually "
            "exclusive: they share the ring storage with incompatible cursors (arg_groups/attention_hook.py)",
            f"remove {F.ENABLE_LINEAR_REPLAYSSM}",
        ))
    return problems


def _ring_length(window: int) -> int:
    """The least valid ring for a verify window: a power of two, at least twice the window."""
    length = 1
    while length < 2 * window:
        length *= 2
    return length


def _batch_problems(ctx: RuleContext) -> list[Problem]:
    # --max-running-requests other than 1 is refused for every batch-1 profile (rules.py); DSpark is
    # tuned and gated for batch 1 only, so the batch size itself is fixed too.
    if ctx.profile.batch_size == 1:
        return []
    return [ctx.problem(
        ["batch_size", "optimizations.dspark.enabled"],
        f"DSpark is launched and gated for batch 1 (one request, --max-running-requests 1; unset, SGLang resets "
        f"it to 48 for speculative decoding), got batch_size {ctx.profile.batch_size}",
        "set batch_size: 1 and sglang.max_running_requests: 1",
    )]


def _draft_path_problems(ctx: RuleContext) -> list[Problem]:
    draft = PurePosixPath(ctx.profile.optimizations.dspark.draft_model_path)
    model = PurePosixPath(ctx.profile.model.path)
    problems = []
    if draft == model or model in draft.parents or draft in model.parents:
        problems.append(ctx.problem(
            ["optimizations.dspark.draft_model_path", "model.path"],
            f"the drafter directory {draft} and the checkpoint {model} would be the same mount or nested mounts; "
            "the drafter is its own model directory (inclusionAI/Ling-3.0-flash-dspark), mounted read-only",
            "use a directory of its own, e.g. /models/Ling-3.0-flash-dspark",
        ))
    reserved = [PurePosixPath(r) for r in humming.RESERVED_MOUNTS if r != "/models"]
    if len(draft.parts) < 3 or any(draft == r or r in draft.parents for r in reserved):
        problems.append(ctx.problem(
            ["optimizations.dspark.draft_model_path"],
            f"the drafter is mounted at {draft}, which is not a place a mount may go",
            "use a directory at least two levels below / outside system paths, e.g. /models/Ling-3.0-flash-dspark",
        ))
    return problems


def expectations(profile: Profile) -> dict:
    settings = profile.optimizations.dspark
    return {
        "requested": settings.enabled,
        "algorithm": settings.algorithm,
        "draft_model_path": settings.draft_model_path,
        "block_size": settings.block_size,
        "num_draft_tokens": settings.num_draft_tokens,
        "ring": {"enable": settings.ring.enable, "cache_len": settings.ring.cache_len},
        "draft_model_class": settings.drafter_architecture,
        "drafter": {"repo": settings.drafter_repo, "revision": settings.drafter_revision},
        "min_accept_length": settings.min_accept_length,
        "min_decode_tok_s": settings.min_decode_tok_s,
    }


# --- evidence ------------------------------------------------------------------------------------


def probe_report_problems(report: dict) -> list[str]:
    """DSpark's parts of the probe report: the drafter's record and the LM-head sharing facts."""
    return draft_sharing_problems(report, WORKER_INIT_HOOK)


def start_rechecks(ctx: RecheckContext) -> None:
    mtp_recheck.start(ctx)


def rechecks(ctx: RecheckContext) -> list[CheckResult]:
    """MTP's acceptance re-check (it reads this optimization's min_accept_length), under DSpark's names."""
    return [dataclasses.replace(c, name=RECHECK_NAMES.get(c.name, c.name)) for c in mtp_recheck.rechecks(ctx)]


def checks(ev: Evidence) -> list[CheckResult]:
    want = ev.expectations["optimizations"][KEY]
    return [
        _config_echo(ev, want),
        _draft_loaded(ev, want),
        _lm_head_module_shared(ev),
        *_log_checks(ev, want),
        _accept_length(ev, want),
        _speed_over_nextn(ev, want),
    ]


def _expected_echo(want: dict) -> dict:
    ring = want.get("ring") or {}
    expected = {
        "algorithm": ALGORITHM, "num_draft_tokens": want.get("num_draft_tokens"),
        "block_size": want.get("block_size"), "draft_model_path": want.get("draft_model_path"),
        "ring_enable": ring.get("enable"), "ring_cache_len": ring.get("cache_len"),
    }
    if ring.get("enable") is False:
        del expected["ring_cache_len"]  # SGLang reports its default length for a ring it never builds
    return expected


def _config_echo(ev: Evidence, want: dict) -> CheckResult:
    expected = _expected_echo(want)
    echo = {name: ev.server_arg(SERVER_ARGS[name]) for name in expected}
    return checked(
        "dspark.config_echo", echo == expected, {k: shown(v) for k, v in echo.items()}, expected,
        "GET /server_info " + ", ".join(SERVER_ARGS[name] for name in expected),
        "the engine was not launched with the profile's DSpark flags (another algorithm, block size, ring or "
        "drafter path): redeploy the rendered bundle; `invoke show --profile dspark` prints the argv it must run",
    )


def _draft_loaded(ev: Evidence, want: dict) -> CheckResult:
    draft = (ev.engagement() or {}).get("draft")
    draft_class = draft.get("model_class") if isinstance(draft, dict) else None
    return checked(
        "dspark.draft_loaded", draft_class is not None and draft_class == want.get("draft_model_class"), draft_class,
        want.get("draft_model_class"), "/server_info internal_states[0].engagement draft.model_class",
        "no DSpark drafter was loaded, or another class was: the drafter directory is missing, incomplete or "
        "another model (check preflight's drafter finding and the log's second 'Load weight end' line)",
    )


def _lm_head_module_shared(ev: Evidence) -> CheckResult:
    report = ev.engagement() or {}
    sharing = report.get("lm_head_sharing")
    module_shared = sharing.get("module_shared") if isinstance(sharing, dict) else None
    called = report.get("hooks_called")
    hook_ran = isinstance(called, list) and WORKER_INIT_HOOK in called
    return checked(
        "dspark.lm_head_module_shared", module_shared is True and hook_ran,
        {"lm_head_sharing": sharing, f"{WORKER_INIT_HOOK} ran": hook_ran},
        {"lm_head_sharing": {"module_shared": True}, f"{WORKER_INIT_HOOK} ran": True},
        "/server_info internal_states[0].engagement lm_head_sharing, hooks_called",
        "the drafter does not project through the target's LM-head module, so the FP8 head is not what drafts: "
        "with the hook absent the probe never saw DSparkWorkerV2 start (probe plugin or image mismatch); with "
        "module_shared false the drafter uses its own head (its checkpoint ships lm_head weights, see "
        f"'{conformance.log_format('dspark_own_vocab_modules')}' in the log) - use the pinned drafter revision",
    )


def _log_checks(ev: Evidence, want: dict) -> list[CheckResult]:
    block, tokens, model = want.get("block_size"), want.get("num_draft_tokens"), want.get("draft_model_class")
    runner = conformance.log_pattern("dspark_runner_initialized", model=str(model), gamma=str(block),
                                     verify_num_draft_tokens=str(tokens))
    wanted = [
        ("dspark.log_runner_initialized", runner, 1,
         f"exactly 1x '{conformance.log_format('dspark_runner_initialized')}' with model={model}, gamma={block}, "
         f"verify_num_draft_tokens={tokens}",
         "0 means the DSpark runner never initialized with this drafter and window (engine still starting, the "
         "drafter failed to load, or another block size was resolved); more than 1 means the log holds several "
         "starts: read the current engine's log only"),
        ("dspark.drafter_config_read", conformance.log_pattern("dspark_draft_config_unreadable"), 0,
         f"0x '{conformance.log_format('dspark_draft_config_unreadable')}'",
         "SGLang could not read the drafter's config.json (directory missing, not mounted, or corrupt): the "
         "engine exits at draft load; run preflight and re-download the pinned drafter"),
        ("dspark.draft_cuda_graph", conformance.log_pattern("dspark_draft_graph_disabled"), 0,
         f"0x '{conformance.log_format('dspark_draft_graph_disabled')}'",
         "the drafter runs without CUDA graphs because too little memory was left after the target: lower "
         "sglang.mem_fraction_static or free memory held by other processes, then redeploy"),
        ("dspark.proposal_not_eager", conformance.log_pattern("dspark_proposal_eager"), 0,
         f"0x '{conformance.log_format('dspark_proposal_eager')}'",
         "the draft proposal runs eagerly (the reason is on the line): decode loses much of DSpark's speed; fix "
         "the reason given (often a DSpark env knob or an unsupported sampling setting) and redeploy"),
    ]
    if ev.log is None or ev.log.text is None:
        return [failed(name, ev.log.error if ev.log else "no log", expected, "engine log",
                       "give the engine log (--log-file/--container): without it DSpark's startup cannot be proven")
                for name, _pattern, _count, expected, _hint in wanted]
    results = []
    for name, pattern, count, expected, hint in wanted:
        lines = ev.log.matching(pattern)
        observed = f"{len(lines)}x" + (f": {lines[0].strip()[:200]}" if lines and count == 0 else "")
        results.append(checked(name, len(lines) == count, observed, expected, ev.log.source, hint))
    return results


def _accept_length(ev: Evidence, want: dict) -> CheckResult:
    return accept_length_check(
        "dspark.accept_length", ev.calibration, want.get("min_accept_length"),
        "missing means the engine reports no speculative fields (DSpark not running); ~1.00 means every drafted "
        "token is rejected (wrong drafter revision, or a drafter that does not read the target's head); between "
        "that and the floor, check the drafter download and block size",
    )


def _speed_over_nextn(ev: Evidence, want: dict) -> CheckResult:
    # The same measurement as engine.speed_floor: calibration decode tokens over decode time, in engine time.
    measured = ev.calibration.decode_tok_s() if ev.calibration else None
    floor = want.get("min_decode_tok_s")
    return checked(
        "dspark.speed_over_nextn", measured is not None and floor is not None and measured >= floor,
        None if measured is None else round(measured, 2), f">= {floor} tok/s (the all-three NEXTN figure)",
        "calibration decode tok/s",
        "DSpark decodes the calibration prompts no faster than NEXTN would: a degraded mode (see "
        "dspark.draft_cuda_graph, dspark.proposal_not_eager), low acceptance (dspark.accept_length), or a "
        "fallback in another optimization; for this traffic run all-three instead",
    )
