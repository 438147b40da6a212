"""A GPU-less stand-in for the SGLang 0.5.23 engine serving Ling-3.0-flash on a DGX Spark.

Run it exactly like the real engine (`python -m sparkgate_sim <argv>` with the engine's environment).
It validates the argv against the committed SGLang CLI manifest, derives which optimizations were
requested from argv + env alone, and then reproduces the evidence the real engine would produce: log
lines, `/server_info`, the engagement-probe report, Prometheus metrics, per-request speculative stats
and a decode speed that follows a documented timing model (see `timing.py` and docs/simulator.md).
Faults (`faults.py`) change exactly the evidence the matching real failure changes.
"""
