"""Profile -> the engine's argv and environment, with every item traced back to the profile field
that produced it (so a refusal can name the field, whichever way a setting was expressed)."""

from __future__ import annotations

from dataclasses import dataclass

from sparkgate.optimizations import REGISTRY, part
from sparkgate.profile.model import Profile, SGLangArgs
from sparkgate.sglang import flags as F
from sparkgate.sglang.parser import ArgvError, ParsedOption, option_table, parse_argv

# Set on every engine: the gate's evidence depends on them (see docs/gate.md).
GATE_ENV = {
    F.EXPOSE_OWN_ENV_VARS_ENV: "1",
    F.PLUGINS_ENV: "engagement_probe",
}
GATE_FLAGS = {F.ENABLE_METRICS: True}
GATE_ORIGIN = "(sparkgate gate evidence)"


@dataclass(frozen=True)
class PlannedOption:
    parsed: ParsedOption
    field: str  # dotted profile path that produced it

    @property
    def option(self) -> str | None:
        return self.parsed.spec.option if self.parsed.spec else None


@dataclass(frozen=True)
class PlannedEnv:
    name: str
    value: str
    field: str

    @property
    def canonical(self) -> str:
        return F.canonical_env_name(self.name)


@dataclass(frozen=True)
class LaunchPlan:
    argv: tuple[str, ...]
    options: tuple[PlannedOption, ...]
    env: tuple[PlannedEnv, ...]
    argv_error: tuple[str, str] | None = None  # (field, message) when the argv could not be split

    def options_for(self, flag: str) -> list[PlannedOption]:
        canonical = option_table()[flag].option if flag in option_table() else flag
        return [o for o in self.options if o.option == canonical]

    def value_of(self, flag: str) -> tuple[str, ...] | None:
        """Values of the last occurrence (argparse semantics); () for a bare flag, None if absent."""
        found = self.options_for(flag)
        return found[-1].parsed.values if found else None

    def env_for(self, canonical_name: str) -> list[PlannedEnv]:
        return [e for e in self.env if e.canonical == canonical_name]

    def env_map(self) -> dict[str, str]:
        return {e.name: e.value for e in self.env}


def _modelled_fields(profile: Profile) -> dict[str, tuple[object, str]]:
    """flag -> (value, origin field), in a stable order: model, sglang fields, optimizations, gate."""
    fields: dict[str, tuple[object, str]] = {
        F.MODEL_PATH: (profile.model.path, "model.path"),
        F.SERVED_MODEL_NAME: (profile.model.served_name, "model.served_name"),
    }
    for name in SGLangArgs.model_fields:
        if name == "extra_args":
            continue
        fields[F.field_flag(name)] = (getattr(profile.sglang, name), f"sglang.{name}")
    for key, module in REGISTRY.items():
        for flag, value in part(module, "flags")(profile).items():
            fields[flag] = (value, f"optimizations.{key}")
    for flag, value in GATE_FLAGS.items():
        fields[flag] = (value, GATE_ORIGIN)
    return fields


def modelled_flags(profile: Profile) -> dict[str, str]:
    """Flags produced by modelled fields (set or not) -> their field; extra_args may not repeat them."""
    return {flag: origin for flag, (_, origin) in _modelled_fields(profile).items()}


def plan_launch(profile: Profile) -> LaunchPlan:
    tokens: list[str] = []
    token_fields: list[str] = []
    for flag, (value, origin) in _modelled_fields(profile).items():
        emitted = F.dict2args({flag: value})
        tokens.extend(emitted)
        token_fields.extend([origin] * len(emitted))
    for index, token in enumerate(profile.sglang.extra_args):
        tokens.append(token)
        token_fields.append(f"sglang.extra_args[{index}]")

    argv_error = None
    try:
        parsed = parse_argv(tokens)
    except ArgvError as exc:
        parsed = []
        argv_error = (token_fields[exc.index], str(exc))
    options = tuple(PlannedOption(p, token_fields[p.index]) for p in parsed)

    env: list[PlannedEnv] = [PlannedEnv(k, v, GATE_ORIGIN) for k, v in GATE_ENV.items()]
    for key, module in REGISTRY.items():
        env.extend(PlannedEnv(k, v, f"optimizations.{key}") for k, v in part(module, "env")(profile).items())
    env.extend(PlannedEnv(k, v, f"env.{k}") for k, v in profile.env.items())
    env.sort(key=lambda e: (e.name, e.field))
    return LaunchPlan(tuple(tokens), options, tuple(env), argv_error)
