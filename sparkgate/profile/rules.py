"""Cross-field rules over the *final* launch (argv + env), so modelled fields, `sglang.extra_args` and
`env:` are judged the same way. Optimization-specific rules live with their optimization."""

from __future__ import annotations

from sparkgate.bench.published import PUBLISHED
from sparkgate.bundle.launch import GATE_ENV, GATE_ORIGIN, modelled_flags
from sparkgate.evidence import host_memory, stall
from sparkgate.optimizations import REGISTRY, part
from sparkgate.profile.context import RuleContext
from sparkgate.profile.model import SGLangArgs
from sparkgate.profile.problems import Problem
from sparkgate.sglang import conformance
from sparkgate.sglang import env as sglang_env
from sparkgate.sglang import flags as F
from sparkgate.sglang import parser as sglang_parser
from sparkgate.sglang.parser import SGLANG_VERSION, strict_problems

# The SGLang facts these rules read, for `invoke sglang.diff` (facts.py): options, variables and `PREFIX*` globs.
RULE_READS = (
    F.MODEL_PATH, F.SERVED_MODEL_NAME, F.ENABLE_METRICS, F.CONFIG, *F.SECRET_FLAGS, *F.EXTRA_ARGS_REFUSAL_REASONS,
    F.MAX_RUNNING_REQUESTS, F.CUDA_GRAPH_MAX_BS_DECODE, F.CUDA_GRAPH_BS_DECODE, F.DISABLE_CUDA_GRAPH,
    F.CUDA_GRAPH_BACKEND_DECODE, *(flag for module in REGISTRY.values() for flag in module.OWNED_FLAGS),
    *F.ENV_REFUSED_NAMES, *F.ENV_REFUSAL_REASONS, *(f"{prefix}*" for prefix in F.ENV_REFUSED_PREFIXES),
    *F.ENV_ALLOWED_SGLANG,
)

# The least the gate accepts (docs/gate.md "Floors"); profiles may only raise them.
GATE_MINIMUMS = {
    "calibration_prompts": 3,
    "calibration_max_new_tokens": 128,
    "baseline_decode_tok_s": PUBLISHED["baseline"].decode_tok_s,  # published Spark baseline, GSM8K
}

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
                    "sparkgate/sglang/data/sglang-cli-*.json lists every flag)",
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


def _outside_owner_problems(ctx: RuleContext) -> list[Problem]:
    """A flag an optimization owns (its OWNED_FLAGS), asked for while that optimization is off: SGLang would
    run it and the gate would never check it. The owner's own settings produce it when enabled; so may
    another ENABLED optimization's module (DSpark's draft path is a speculative flag MTP owns), whose own
    rules and checks gate it. A flag owned for one value (--speculative-algorithm DSPARK) is judged by that
    owner alone, not also by an owner of any value."""
    enabled = {f"optimizations.{key}" for key in ctx.profile.requested()}
    problems = []
    for occurrence in ctx.plan.options:
        if occurrence.field in enabled or occurrence.option is None:
            continue
        owners = _owners_of(occurrence)
        specific = [(key, module) for key, module in owners if module.OWNED_FLAGS[occurrence.option] is not None]
        for key, module in specific or owners:
            if not getattr(ctx.profile.optimizations, key).enabled:
                problems.append(_outside_owner(ctx, key, module, occurrence))
    return problems


def _owners_of(occurrence) -> list[tuple[str, object]]:
    """Optimizations owning this flag, for any value (None) or for exactly the value asked."""
    owners = []
    for key, module in REGISTRY.items():
        if occurrence.option not in module.OWNED_FLAGS:
            continue
        owned_values = module.OWNED_FLAGS[occurrence.option]
        if owned_values is None or occurrence.parsed.values == owned_values:
            owners.append((key, module))
    return owners


def _outside_owner(ctx: RuleContext, key: str, module, occurrence) -> Problem:
    asked = " ".join((occurrence.option, *occurrence.parsed.values))
    return ctx.problem(
        [occurrence.field],
        f"asks SGLang for {asked} outside optimizations.{key}, so the gate would never check "
        f"{module.GATE_WOULD_MISS}",
        f"remove it and set optimizations.{key}.enabled: true instead",
    )


def _owned_env(ctx: RuleContext) -> dict[str, str]:
    """Canonical env name -> who sets it (the gate, or an optimization whether enabled or not)."""
    owned = {name: GATE_ORIGIN for name in GATE_ENV}
    for key, module in REGISTRY.items():
        owned.update({name: f"optimizations.{key}" for name in module.OWNED_ENV})
    return owned


def _env_entry_problem(ctx: RuleContext, entry, owned: dict[str, str], known: dict[str, str]) -> Problem | None:
    name, canonical = entry.name, entry.canonical
    owner = owned.get(canonical)
    if owner is not None:
        # Whatever the value: "0" would switch the optimization off unseen, "1" would bypass its rules, and
        # SGLang's SGL_ -> SGLANG_ rewrite at import overwrites the rendered value.
        spelled = f" (SGLang reads {name} as {canonical})" if name != canonical else ""
        if owner == GATE_ORIGIN:
            return ctx.problem([entry.field], f"{canonical} is set by sparkgate so the gate can read its evidence"
                               f"{spelled}", "remove it from env:")
        return ctx.problem([entry.field], f"{canonical} is managed by {owner}{spelled}; a profile may not set it, "
                           "whatever the value", f"remove it from env: and configure {owner} instead")
    if name.startswith(F.LEGACY_ENV_PREFIX) and name != canonical:
        return ctx.problem([entry.field], f"SGLang rewrites {name} to {canonical} at import and overwrites "
                           f"{canonical} with it", f"write it as {canonical}")
    # A name's own reason first: it says more than its prefix's (SGLANG_DSPARK_FP32_LM_HEAD).
    if name in F.ENV_REFUSED_NAMES:
        return ctx.problem([entry.field], f"{name} is refused: {F.ENV_REFUSED_NAMES[name]}", "remove it from env:")
    if name in F.ENV_REFUSAL_REASONS:
        return ctx.problem([entry.field], f"{name} is refused: it {F.ENV_REFUSAL_REASONS[name]}",
                           "remove it from env: (docs/profiles.md lists what a profile may set)")
    for prefix, why in F.ENV_REFUSED_PREFIXES.items():
        if name.startswith(prefix):
            return ctx.problem([entry.field], f"{name}: {prefix}* variables are refused: {why}", "remove it from env:")
    declared_name = name in known
    if name.startswith(F.ENV_PREFIX) and not declared_name:
        close = sglang_env.suggestions(name, known)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        return ctx.problem(
            [entry.field],
            f"{name} is not declared by SGLang {SGLANG_VERSION} in image {ctx.profile.image!r}, which would ignore "
            "it without a word",
            f"{hint}remove it, or use a name from sparkgate/sglang/data/{sglang_env.MANIFEST_RESOURCE}",
        )
    if not declared_name:
        return None  # read by another library (CUDA, NCCL, Humming, FlashInfer...), not by SGLang
    note = sglang_env.deprecation_note(name)
    if note is not None:
        return ctx.problem([entry.field], f"{name} is deprecated in SGLang {SGLANG_VERSION}: {note}".rstrip(": "),
                           "remove it")
    if sglang_env.is_secret(name):
        return ctx.problem([entry.field], f"{name} holds a secret, which would be written into the bundle",
                           "do not put secrets in a profile")
    why = sglang_env.value_problem(known[name], entry.value)
    if why:
        return ctx.problem([entry.field], f"{why}; SGLang would warn and use its default", "give a value SGLang parses")
    if name.startswith(F.ENV_PREFIX) and name not in F.ENV_ALLOWED_SGLANG:
        return ctx.problem(
            [entry.field],
            f"{name} is declared by SGLang {SGLANG_VERSION} but is not one of the SGLang variables a profile may set: "
            "SGLang reads hundreds of knobs, many of which change speculation, kernels or accounting without a log "
            "line the gate reads",
            f"remove it; the allowed ones are {', '.join(sorted(F.ENV_ALLOWED_SGLANG))} "
            "(docs/profiles.md says how to propose another)",
        )
    return None


def _env_problems(ctx: RuleContext) -> list[Problem]:
    owned = _owned_env(ctx)
    known = sglang_env.declared(ctx.image.capabilities.declared_env)
    problems = []
    seen: dict[str, str] = {}
    for entry in ctx.plan.env:
        if not entry.field.startswith("env."):
            continue
        problem = _env_entry_problem(ctx, entry, owned, known)
        if problem is not None:
            problems.append(problem)
            continue
        if entry.canonical in seen:
            problems.append(ctx.problem([entry.field, seen[entry.canonical]],
                                        f"{entry.canonical} is set twice", "keep one of them"))
        seen.setdefault(entry.canonical, entry.field)
    return problems


def _owned_field_problems(ctx: RuleContext) -> list[Problem]:
    """A modelled sglang field an optimization sets may not say something else: the optimization's value
    would silently win (and the user would believe their own setting ran)."""
    problems = []
    for key, module in REGISTRY.items():
        for flag, value in part(module, "flags")(ctx.profile).items():
            field = flag[2:].replace("-", "_")
            if field not in SGLangArgs.model_fields:
                continue
            user = getattr(ctx.profile.sglang, field)
            if user is None or F.dict2args({flag: user}) == F.dict2args({flag: value}):
                continue
            problems.append(ctx.problem(
                [f"sglang.{field}", f"optimizations.{key}"],
                f"optimizations.{key} sets {flag} {value}, but sglang.{field} says {user!r}",
                f"remove sglang.{field} (write `{field}: null` to clear an inherited value)",
            ))
    return problems


def _extra_args_policy_problems(ctx: RuleContext, already: set[str]) -> list[Problem]:
    problems = []
    for occurrence in ctx.plan.options:
        option = occurrence.option
        if not occurrence.field.startswith("sglang.extra_args") or option is None:
            continue
        if option in F.EXTRA_ARGS_ALLOWED or any(occurrence.field in f for f in already):
            continue
        reason = F.EXTRA_ARGS_REFUSAL_REASONS.get(option)
        reason = f"is refused: it {reason}" if reason else (
            "is not on sparkgate's extra_args allow-list: it may change what is loaded or run, and no check "
            "would notice")
        problems.append(ctx.problem(
            [occurrence.field],
            f"{option} {reason}",
            "remove it; extra_args takes only the flags listed in docs/profiles.md (logging, timeouts, scheduling)",
        ))
    return problems


def _gate_floor_problems(ctx: RuleContext) -> list[Problem]:
    """A profile may tighten the gate, never loosen it below the documented minimums (docs/gate.md)."""
    gate = ctx.profile.gate
    problems = []
    floors = [
        ("gate.calibration.prompts", gate.calibration.prompts, GATE_MINIMUMS["calibration_prompts"],
         "fewer fixed prompts make one lucky request enough"),
        ("gate.calibration.max_new_tokens", gate.calibration.max_new_tokens, GATE_MINIMUMS["calibration_max_new_tokens"],
         "a short budget makes the accept length meaningless (2 tokens in 1 verify step read as 2.0 whatever the draft does)"),
    ]
    for field, value, minimum, why in floors:
        if value < minimum:
            problems.append(ctx.problem([field], f"{value} is below the gate's minimum {minimum}: {why}",
                                        f"set {field} to {minimum} or more (a profile may only tighten the gate)"))
    watch = gate.watch
    # (field, value, default, tighter is larger, why the default is the loosest the gate accepts)
    watched = [
        ("gate.watch.min_mem_available_gib", watch.min_mem_available_gib, host_memory.MIN_AVAILABLE_GIB, True,
         "with less left a unified-memory Spark wedges before the gate can close"),
        ("gate.watch.max_swap_growth_mib", watch.max_swap_growth_mib, host_memory.MAX_SWAP_GROWTH_MIB, False,
         "a Spark swapping more than that since admission is minutes from a stall"),
        ("gate.watch.stall_after_s", watch.stall_after_s, stall.STALL_AFTER_S, False,
         "a hung engine would keep its gate open longer than a minute"),
    ]
    for field, value, default, raise_only, why in watched:
        if (value < default) if raise_only else (value > default):
            bound = "or more" if raise_only else "or less"
            problems.append(ctx.problem(
                [field], f"{value:g} loosens the gate's default {default:g}: {why}",
                f"set {field} to {default:g} {bound}, or remove it (a profile may only tighten the gate)"))
    if watch.stall_after_s < stall.MIN_STALL_AFTER_S:
        problems.append(ctx.problem(
            ["gate.watch.stall_after_s"],
            f"{watch.stall_after_s:g} s is below {stall.MIN_STALL_AFTER_S:g} s: a single slow sentinel period "
            "would read as a stall and close a healthy gate",
            f"set gate.watch.stall_after_s between {stall.MIN_STALL_AFTER_S:g} and {stall.STALL_AFTER_S:g}"))
    baseline = gate.baseline_decode_tok_s
    minimum = GATE_MINIMUMS["baseline_decode_tok_s"]
    if baseline is None or baseline < minimum:
        problems.append(ctx.problem(
            ["gate.baseline_decode_tok_s"],
            f"{'unset' if baseline is None else baseline} is below the published Spark baseline {minimum} tok/s, "
            "which would let a stacked profile slower than the baseline through",
            f"set it to {minimum} or more; on a slower host record a measured floor instead "
            "(`invoke bench --profile baseline --record-floor`), which the gate uses in its place",
        ))
    return problems


# SGLang's speculative hooks replace an unset --max-running-requests with 48 (arg_groups/speculative_hook.py).
UNSET_RUNNING_REQUESTS = ": SGLang would pick its own, 48 with speculative decoding"


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
                    f"batch-1 profiles need {flag} {' '.join(want)}, got {' '.join(got) if got else 'unset'}"
                    + (UNSET_RUNNING_REQUESTS if got is None and flag == F.MAX_RUNNING_REQUESTS else ""),
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


def _facts_problems(ctx: RuleContext) -> list[Problem]:
    """The profile's engine image must pin the SGLang facts this sparkgate's rules, checks and simulator read:
    a gate holding another SGLang to 0.5.23's strings would refuse a healthy engine, or pass a broken one."""
    facts = ctx.image.sglang_facts
    known = {"fixture": conformance.FIXTURE, "flags": sglang_parser.MANIFEST_RESOURCE, "env": sglang_env.MANIFEST_RESOURCE}
    wrong = {name: getattr(facts, name) for name, file in known.items() if getattr(facts, name) != file}
    if not wrong:
        return []
    listed = ", ".join(f"{name} {file}" for name, file in sorted(wrong.items()))
    return [ctx.problem(
        ["image"],
        f"engine image {ctx.profile.image!r} pins SGLang facts {listed} in images.lock.yaml, but this sparkgate's "
        f"checks are held to {', '.join(known[n] for n in sorted(wrong))}",
        "use a sparkgate release whose checks know that SGLang, or pick an image on the pinned facts "
        "(docs/upgrade.md)",
    )]


def check(ctx: RuleContext) -> list[Problem]:
    problems: list[Problem] = []
    problems.extend(_facts_problems(ctx))
    # Conflict rules first: they name both settings, which is the most useful message.
    problems.extend(_outside_owner_problems(ctx))
    for module in REGISTRY.values():
        problems.extend(module.rules(ctx))
    problems.extend(_argv_problems(ctx))
    problems.extend(_duplicate_problems(ctx))
    problems.extend(_owned_field_problems(ctx))
    problems.extend(_env_problems(ctx))
    problems.extend(_batch_problems(ctx))
    problems.extend(_cuda_graph_problems(ctx))
    problems.extend(_gate_floor_problems(ctx))
    # Last: a flag another rule already refused needs no second "not on the allow-list" line.
    problems.extend(_extra_args_policy_problems(ctx, {field for p in problems for field in p.fields}))
    unique: dict[str, Problem] = {}
    for problem in problems:
        unique.setdefault(str(problem), problem)
    return list(unique.values())
