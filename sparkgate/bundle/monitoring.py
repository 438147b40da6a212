"""The `monitoring` compose profile: a Prometheus inside the stack that scrapes the sentinel's `/metrics` and the
engine's `sglang:*` metrics on the internal `engine` network, and evaluates sparkgate's alert rules.

Everything is decided here and rendered into the bundle as two files, `prometheus.yml` and `sparkgate-rules.yml`
(sparkgate/bundle/render.py carries them inline in compose.yaml like haproxy.cfg), YAML dumped from the data below (so
PromQL's `<` stays as written). The annotations are plain text written at render time, with the profile's name
and thresholds in them: no Go template runs in Prometheus. docs/monitoring.md explains each alert; its anchors
are the alert names in lower case.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from sparkgate import defaults

PROMETHEUS_CONTAINER_PORT = 9090
DEFAULT_PROMETHEUS_PORT = defaults.PROMETHEUS_PORT
DEFAULT_SCRAPE_INTERVAL_S = 15.0
# Prometheus's own default scrape timeout; a shorter interval shortens it (a timeout may not exceed the interval).
MAX_SCRAPE_TIMEOUT_S = 10.0
RETENTION = "15d"
SENTINEL_JOB = "sparkgate-sentinel"
ENGINE_JOB = "sparkgate-engine"
CONFIG_FILE = "prometheus.yml"
RULES_FILE = "sparkgate-rules.yml"
BUNDLE_FILES = (CONFIG_FILE, RULES_FILE)
# Where Prometheus reads them (a read-only volume), and where the one-shot `prometheus-config` receives them.
CONFIG_DIR = "/etc/prometheus/sparkgate"
INBOX_DIR = "/etc/prometheus/sparkgate-in"
DATA_DIR = "/var/lib/prometheus/metrics2"
DOCS_PAGE = "docs/monitoring.md"
GIB = 1024**3
# The early low-memory warning fires at this multiple of the gate's MemAvailable floor (gate.watch).
LOW_MEMORY_WARN_FACTOR = 2.0


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_s: float
    severity: str
    summary: str
    description: str

    def rule(self, for_s: float | None = None) -> dict:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": duration(self.for_s if for_s is None else for_s),
            "labels": {"severity": self.severity},
            "annotations": {
                "summary": self.summary,
                "description": self.description,
                "runbook": f"{DOCS_PAGE}#{self.name.lower()}",
            },
        }


def duration(seconds: float) -> str:
    """A Prometheus duration: whole seconds as `15s` / `1m`, anything finer in milliseconds."""
    millis = round(seconds * 1000)
    if millis % 60_000 == 0 and millis:
        return f"{millis // 60_000}m"
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def alerts(profile: str, min_mem_available_gib: float) -> list[Alert]:
    """sparkgate's alerts for one profile's stack, in the order docs/monitoring.md lists them (default `for`)."""
    floor = min_mem_available_gib
    warn_gib = floor * LOW_MEMORY_WARN_FACTOR
    verdict = f"the gate's /sparkgate/verdict (`invoke status --profile {profile}`)"
    return [
        Alert(
            "SparkgateGateClosed",
            # Only after a first verdict: the gate is closed by design while the engine starts (8 min on a Spark).
            f'sparkgate_gate_open == 0 and on (job, instance) sparkgate_full_verifications_total{{job="{SENTINEL_JOB}"}} > 0',
            60.0, "critical",
            f"sparkgate gate closed for {profile}: no client request reaches the engine",
            f"The sentinel closed the gate of profile {profile} after a verdict (a failed re-check or a refused "
            "verification) and it has stayed closed: clients get 503. The reason and the failing checks are in "
            f"{verdict}; sparkgate_check_passed == 0 names them here too. Each check's fix is in docs/checks/.",
        ),
        Alert(
            "SparkgateEngineStalled",
            'sparkgate_check_passed{check="engine.stalled"} == 0',
            0.0, "critical",
            "sparkgate engine stalled: requests running with no token produced",
            "The sentinel's re-check engine.stalled failed: requests were pending while the engine's progress "
            "counter sglang:realtime_tokens_total stood still for the profile's stall_after_s (a CUDA hang that "
            f"/health does not see). The gate is closed. See {verdict} and docs/checks/engine.md; the engine "
            "usually needs a restart (`invoke deploy` again).",
        ),
        Alert(
            "SparkgateLowMemory",
            f"sparkgate_host_mem_available_bytes < {int(warn_gib * GIB)}",
            60.0, "warning",
            f"host MemAvailable below {warn_gib:g} GiB (the gate closes at {floor:g} GiB)",
            "The host's MemAvailable, as the sentinel's latest host.memory_headroom check read it "
            f"(sparkgate_host_mem_available_bytes), is below {warn_gib:g} GiB, twice the gate's {floor:g} GiB floor. "
            "On a unified-memory Spark the next allocation burst can wedge the machine. Find what holds the memory "
            f"(largest_processes of host.memory_headroom in {verdict}) and stop it before the gate closes.",
        ),
        Alert(
            "SparkgateLowMemory",
            'sparkgate_check_passed{check="host.memory_headroom"} == 0',
            0.0, "critical",
            f"host MemAvailable below the gate's {floor:g} GiB floor: host.memory_headroom failed",
            f"The sentinel's host.memory_headroom check failed (MemAvailable below {floor:g} GiB, or unreadable) "
            f"and the gate is closed. What is left and who holds it: {verdict}, docs/checks/host.md.",
        ),
        Alert(
            "SparkgateSpeculationNotPaying",
            # Informational (the gate stays open): sustained, so one burst of long prompts does not page anyone.
            "sparkgate_speculation_pays == 0",
            600.0, "warning",
            "speculation not paying in a context band: requests of that length decode slower than without it",
            "The sentinel's sentinel.accept_by_context read (informational: the gate stays open): in the context "
            "band named by the `band` label, the accept length client traffic gets is at or below the break-even "
            "(sparkgate_speculation_break_even_accept_length: what one verify step costs in plain decode steps), "
            f"so MTP/DSpark slows those requests down. Per-band figures: {verdict}; compare a profile without "
            "speculation for that workload (`invoke compare`, docs/bench.md).",
        ),
        Alert(
            "SparkgateSentinelDown",
            f'up{{job="{SENTINEL_JOB}"}} == 0',
            60.0, "critical",
            "sparkgate sentinel not answering /metrics",
            "Prometheus cannot scrape the sentinel (sentinel:8081/metrics on the engine network). Without it the "
            "gateway answers 503 to everything, and the engine shares its PID namespace, so it is likely gone too. "
            "Look at `invoke status` and `invoke logs --service sentinel`.",
        ),
    ]


def rules(profile: str, min_mem_available_gib: float, alert_for_s: float | None = None) -> dict:
    """The rules file: one group; `alert_for_s` replaces every alert's default `for` (tests, drills)."""
    group = [a.rule(alert_for_s) for a in alerts(profile, min_mem_available_gib)]
    return {"groups": [{"name": "sparkgate", "rules": group}]}


def prometheus_config(sentinel_address: str, engine_address: str, scrape_interval_s: float) -> dict:
    """Scrape the sentinel and the engine by their names on the stack's internal network, nothing else."""
    interval = duration(scrape_interval_s)
    return {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": duration(min(scrape_interval_s, MAX_SCRAPE_TIMEOUT_S)),
            "evaluation_interval": interval,
        },
        "rule_files": [f"{CONFIG_DIR}/{RULES_FILE}"],
        "scrape_configs": [
            {"job_name": SENTINEL_JOB, "metrics_path": "/metrics", "static_configs": [{"targets": [sentinel_address]}]},
            {"job_name": ENGINE_JOB, "metrics_path": "/metrics", "static_configs": [{"targets": [engine_address]}]},
        ],
    }


def dump(header: str, what: str, document: dict) -> str:
    comment = f"# {header}\n# {what}\n"
    return comment + yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=120)


def bundle_files(header: str, profile: str, sentinel_address: str, engine_address: str, min_mem_available_gib: float,
                 scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S, alert_for_s: float | None = None) -> dict[str, str]:
    return {
        CONFIG_FILE: dump(header, "Prometheus of the `monitoring` compose profile (docs/monitoring.md)",
                          prometheus_config(sentinel_address, engine_address, scrape_interval_s)),
        RULES_FILE: dump(header, "sparkgate's alert rules (docs/monitoring.md)",
                         rules(profile, min_mem_available_gib, alert_for_s)),
    }


def config_command() -> list[str]:
    """The one-shot `prometheus-config`: Compose writes inline configs only into a writable root filesystem, so
    this container receives them, hands them to the read-only config volume Prometheus mounts, and checks them
    with promtool there (a bad file stops the profile before Prometheus starts)."""
    script = (f"set -eu; rm -f {CONFIG_DIR}/*; "
              + "; ".join(f"cp {INBOX_DIR}/{name} {CONFIG_DIR}/{name}" for name in BUNDLE_FILES)
              + f"; exec promtool check config {CONFIG_DIR}/{CONFIG_FILE}")
    return ["/bin/sh", "-c", script]


def prometheus_command() -> list[str]:
    # No --web.enable-admin-api and no --web.enable-lifecycle: the published port can query, never change
    # anything (no TSDB deletes, no config reload, no shutdown).
    return ["/usr/bin/prometheus", f"--config.file={CONFIG_DIR}/{CONFIG_FILE}", f"--storage.tsdb.path={DATA_DIR}",
            f"--storage.tsdb.retention.time={RETENTION}", f"--web.listen-address=:{PROMETHEUS_CONTAINER_PORT}"]


def healthcheck() -> list[str]:
    """GET /-/ready over bash's /dev/tcp (the image has no HTTP client); 200 only once the TSDB is open."""
    probe = (f"exec 3<>/dev/tcp/127.0.0.1/{PROMETHEUS_CONTAINER_PORT} && "
             "printf 'GET /-/ready HTTP/1.0\\r\\n\\r\\n' >&3 && grep -q '^HTTP/1.0 200' <&3")
    return ["CMD", "bash", "-c", probe]
