"""One module per optimization: everything sparkgate knows about it lives in its module.

Each module exposes:
- KEY, DOCS (its page under docs/checks/), Settings (its `optimizations.KEY` profile section);
- launch: flags(profile), env(profile);
- ownership: OWNED_ENV (variables only it may set) and OWNED_FLAGS (flag -> values, None for any value,
  only it may ask SGLang for), GATE_WOULD_MISS (what the gate could not check if they were set elsewhere);
- rules(ctx): its conflict rules; expectations(profile): what expectations.json records for it;
- evidence: CHECKS (name -> stage, evidence/stages.py, for every check it can emit), checks(ev),
  probe_report_problems(report) (its parts of the probe report);
- CONFIG_KEYS: its /server_info fields recorded with every verdict; FIGURES (optional): figure -> the checks
  whose `observed[figure]` carries it (the sentinel's history and status page);
- after admission: start_rechecks(ctx), rechecks(ctx) (evidence/recheck.py), GAUGES (sentinel metrics).

A new optimization is its module, a REGISTRY entry, model.Optimizations (built from REGISTRY), a profile
and its docs page; evidence/, sentinel/ and rules.py read everything else from here.
"""

from sparkgate.evidence.stages import Stage
from sparkgate.optimizations import dspark, fp8_lm_head, humming, mtp

REGISTRY = {
    humming.KEY: humming,
    fp8_lm_head.KEY: fp8_lm_head,
    mtp.KEY: mtp,
    dspark.KEY: dspark,
}


def figure_checks(figure: str, stage: Stage | None = None) -> tuple[str, ...]:
    """Every optimization's checks that observe `figure` (its FIGURES), in registry order; of `stage` when given."""
    return tuple(name for module in REGISTRY.values() for name in getattr(module, "FIGURES", {}).get(figure, ())
                 if stage is None or module.CHECKS[name] == stage)
