"""Cross-field rules over the *final* launch (argv + env), so modelled fields, `sglang.extra_args` and
`env:` are judged the same way. Optimization-specific rules live with their optimization."""

from __future__ import annotations

from sparkgate import sglang_flags as F
from sparkgate.context import RuleContext
from sparkgate.launch import GATE_ENV, GATE_ORIGIN, modelled_flags
from sparkgate.optimizations import REGISTRY
from sparkgate.problems import Problem
from sparkgate.sglang_cli import strict_problems


def _argv_problems(ctx: RuleContext) -> list[Problem]:
    problems = []
    if ctx.plan.argv_error:
        field, message = ctx.plan.argv_error
        problems.append(ctx.problem([field], message, "give each flag as '--flag value' or '--flag=value'"))
    for occurrence in ctx.plan.options:
        for message in strict_problems(occurrence.parsed):
            problems.append(
                ctx.problem(
                    [occurrence.field],
                    message,
                    "use a flag and value from SGLang's manifest (`invoke show` lists the argv; "
                    "sparkgate/data/sglang-cli-*.json lists every flag)",
                )
            )
    return problems


def _duplicate_problems(ctx: RuleContext) -> list[Problem]:
    """extra_args may not restate a flag a modelled field owns: two sources for one setting is how
    'the flag is on' stops being true."""
    owners = modelled_flags(ctx.profile)
    problems = []
    for occurrence in ctx.plan.options:
        if not occurrence.field.startswith("sglang.extra_args") or occurrence.option is None:
            continue
        owner = owners.get(occurrence.option)
        if owner is not None:
            problems.append(
                ctx.problem(
                    [occurrence.field, owner],
                    f"{occurrence.option} is modelled by {owner}",
                    f"set {owner} instead of repeating the flag in extra_args",
                )
            )
    return problems


def _env_problems(ctx: RuleContext) -> list[Problem]:
    owned = {name: GATE_ORIGIN for name in GATE_ENV}
    for key, module in REGISTRY.items():
        owned.update({name: f"optimizations.{key}" for name in module.OWNED_ENV})
    problems = []
    seen: dict[str, str] = {}
    for entry in ctx.plan.env:
        owner = owned.get(entry.canonical)
        if entry.field.startswith("env.") and owner is not None:
            if entry.canonical in _CONFLICT_CHECKED_ENV:
                continue  # the owning optimization's rule gives the specific message
            why = "set by sparkgate so the gate can read its evidence" if owner == GATE_ORIGIN else f"managed by {owner}"
            problems.append(
                ctx.problem(
                    [entry.field],
                    f"{entry.canonical} is {why}",
                    "remove it from env:" + ("" if owner == GATE_ORIGIN else f" and configure {owner} instead"),
                )
            )
            continue
        if entry.canonical in seen and seen[entry.canonical] != entry.field:
            problems.append(
                ctx.problem(
                    [entry.field, seen[entry.canonical]],
                    f"{entry.canonical} is set twice (SGLang reads {F.LEGACY_ENV_PREFIX}* as {F.ENV_PREFIX}*)",
                    "keep one of them",
                )
            )
        seen.setdefault(entry.canonical, entry.field)
    return problems


# Handled by the owning optimization's own rule, which gives a more specific message.
_CONFLICT_CHECKED_ENV = {F.FP8_LM_HEAD_ENV}


def _batch_problems(ctx: RuleContext) -> list[Problem]:
    if ctx.profile.batch_size != 1:
        return []
    problems = []
    expected = {
        F.MAX_RUNNING_REQUESTS: ("1",),
        F.CUDA_GRAPH_MAX_BS_DECODE: ("1",),
        F.CUDA_GRAPH_BS_DECODE: ("1",),
    }
    for flag, want in expected.items():
        got = ctx.plan.value_of(flag)
        if got != want:
            field = ctx.plan.options_for(flag)[-1].field if got is not None else f"sglang.{flag[2:].replace('-', '_')}"
            problems.append(
                ctx.problem(
                    [field, "batch_size"],
                    f"batch-1 profiles need {flag} {' '.join(want)}, got {' '.join(got) if got else 'unset'}",
                    f"set {field} to {want[0] if flag != F.CUDA_GRAPH_BS_DECODE else '[1]'}",
                )
            )
    return problems


def _cuda_graph_problems(ctx: RuleContext) -> list[Problem]:
    problems = []
    for occurrence in ctx.plan.options_for(F.DISABLE_CUDA_GRAPH):
        problems.append(
            ctx.problem(
                [occurrence.field],
                "CUDA graphs are off; batch-1 decode without them loses most of its speed and the gate refuses it",
                f"remove {F.DISABLE_CUDA_GRAPH}",
            )
        )
    if ctx.plan.value_of(F.CUDA_GRAPH_BACKEND_DECODE) == ("disabled",):
        problems.append(
            ctx.problem(
                [ctx.plan.options_for(F.CUDA_GRAPH_BACKEND_DECODE)[-1].field],
                "decode CUDA graphs are disabled; the gate requires decode CUDA-graph passes",
                "set cuda_graph_backend_decode: full",
            )
        )
    return problems


def check(ctx: RuleContext) -> list[Problem]:
    problems: list[Problem] = []
    # Conflict rules first: they name both settings, which is the most useful message.
    for module in REGISTRY.values():
        problems.extend(module.rules(ctx))
    problems.extend(_argv_problems(ctx))
    problems.extend(_duplicate_problems(ctx))
    problems.extend(_env_problems(ctx))
    problems.extend(_batch_problems(ctx))
    problems.extend(_cuda_graph_problems(ctx))
    unique: dict[str, Problem] = {}
    for problem in problems:
        unique.setdefault(str(problem), problem)
    return list(unique.values())
