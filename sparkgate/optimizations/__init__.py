"""One module per optimization: everything sparkgate knows about it lives in its module.

Each module exposes:
- KEY, DOCS (its page under docs/checks/), Settings (its `optimizations.KEY` profile section);
- ownership: OWNED_ENV (variables only it may set) and OWNED_FLAGS (flag -> values, None for any value,
  only it may ask SGLang for), GATE_WOULD_MISS (what the gate could not check if they were set elsewhere);
- rules(ctx): its conflict rules, RULE_READS (the SGLang options, variables and fixture entries they read);
  expectations(profile): what expectations.json records for it;
- evidence: CHECKS (name -> stage, evidence/stages.py, for every check it can emit), READS (name -> the SGLang
  facts it reads, "section.key" or "probe.<field>", proven by tests/unit/test_declared_reads.py), checks(ev);
- CONFIG_KEYS: its /server_info fields recorded with every verdict;
and, only where it has them (OPTIONAL: what leaving one out means; read them with part()):
- launch: flags(profile) (SGLang options, spelled in sglang/flags.py), env(profile) (variables);
- probe_report_problems(report) (its parts of the probe report);
- after admission: start_rechecks(ctx), rechecks(ctx) (evidence/recheck.py), GAUGES (sentinel metrics);
- FIGURES: figure -> the checks whose `observed[figure]` carries it (the sentinel's history and status page);
- LOAD_CENSUS_CHECKS: its checks of the probe report's MoE census, which a start that died after loading is still
  judged by (the probe logs the census at load: evidence/startup.py).

A new optimization is its module, a REGISTRY entry, model.Optimizations (built from REGISTRY), a profile
and its docs page; evidence/, sentinel/ and rules.py read everything else from here.
"""

from types import ModuleType
from typing import Any

from sparkgate.evidence.stages import Stage
from sparkgate.optimizations import dspark, fp8_lm_head, humming, mtp

# What a module that leaves out one of these parts has: nothing of its own there (its checks are re-checked
# with the common stages, evidence/recheck.py).
OPTIONAL: dict[str, Any] = {
    "flags": lambda profile: {},
    "env": lambda profile: {},
    "probe_report_problems": lambda report: [],
    "start_rechecks": lambda ctx: None,
    "rechecks": lambda ctx: [],
    "GAUGES": {},
    "FIGURES": {},
    "LOAD_CENSUS_CHECKS": (),
}

REGISTRY = {
    humming.KEY: humming,
    fp8_lm_head.KEY: fp8_lm_head,
    mtp.KEY: mtp,
    dspark.KEY: dspark,
}


def figure_checks(figure: str, stage: Stage | None = None) -> tuple[str, ...]:
    """Every optimization's checks that observe `figure` (its FIGURES), in registry order; of `stage` when given."""
    return tuple(name for module in REGISTRY.values() for name in part(module, "FIGURES").get(figure, ())
                 if stage is None or module.CHECKS[name] == stage)


def part(module: ModuleType, name: str) -> Any:
    """One of a module's OPTIONAL parts: its own, or what leaving it out means."""
    return getattr(module, name, OPTIONAL[name])
