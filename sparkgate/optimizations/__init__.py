"""One module per optimization: its settings, launch flags/env, conflict rules and evidence checks.

Each module exposes: KEY, Settings, flags(profile), env(profile), OWNED_ENV, rules(ctx),
expectations(profile).
"""

from sparkgate.optimizations import fp8_lm_head, humming, mtp

REGISTRY = {
    humming.KEY: humming,
    fp8_lm_head.KEY: fp8_lm_head,
    mtp.KEY: mtp,
}
