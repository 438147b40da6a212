"""Defaults typed once. The CLI, the render and the invoke tasks read them from here; invoke also exposes
them as configuration (`sparkgate.*`, e.g. INVOKE_SPARKGATE_GATEWAY_PORT=18100 or an invoke.yaml), which is
where a task's option falls back to when not given."""

from __future__ import annotations

# The simulator runs this many engine seconds per wall second unless told otherwise (0.05 = 20x faster).
SIM_TIME_SCALE = 0.05
# The gateway: the only published port, on loopback unless an API key is given.
GATEWAY_BIND = "127.0.0.1"
GATEWAY_PORT = 18000
GATEWAY_CONTAINER_PORT = 8080
# The `monitoring` profile's Prometheus web port, published on 127.0.0.1 only (docs/monitoring.md).
PROMETHEUS_PORT = 19090
# The sentinel inside the stack: its status API, and the port that answers for a closed gate.
SENTINEL_PORT = 8081
SENTINEL_CLOSED_PORT = 8082
# Seconds between the sentinel's re-checks; the gateway closes within one period.
RECHECK_PERIOD_S = 5.0


def invoke_config() -> dict:
    return {
        "sim_time_scale": SIM_TIME_SCALE,
        "gateway_bind": GATEWAY_BIND,
        "gateway_port": GATEWAY_PORT,
        "prometheus_port": PROMETHEUS_PORT,
        "recheck_period_s": RECHECK_PERIOD_S,
    }
