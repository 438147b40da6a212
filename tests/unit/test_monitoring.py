"""The `monitoring` compose profile: the Prometheus services in every render (opt-in, hardened, loopback only,
scraping only inside the stack), the sentinel's metrics in the Prometheus text format with hostile label values,
the alert rules checked and unit-tested by promtool (in the Prometheus image when the host has none), and the
image's pins."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from sparkgate.bundle import image_build, monitoring, render
from sparkgate.deploy import deploy as deploy_mod
from sparkgate.deploy import docker_cli
from sparkgate.images import load_lock
from sparkgate.profile import loading as profiles
from sparkgate.sentinel import http as sentinel_http
from sparkgate.sentinel.state import OPEN, GateState
from tests.plugins.simproc import free_port

REPO = Path(__file__).resolve().parents[2]
SHIPPED = profiles.available_profiles()
GIB = 1024**3


def rendered(name: str = "baseline", target: str = "sim", **options) -> dict[str, str]:
    return render.render_files(profiles.load(name), render.RenderOptions(target=target, **options))


def services(files: dict[str, str]) -> dict:
    return yaml.safe_load(files["compose.yaml"])["services"]


# --- the compose profile ----------------------------------------------------------------------------


@pytest.mark.parametrize("target", render.TARGETS)
@pytest.mark.parametrize("name", SHIPPED)
def test_prometheus_is_opt_in_hardened_and_loopback_only(name, target):
    files = rendered(name, target)
    compose = yaml.safe_load(files["compose.yaml"])
    prometheus, config = compose["services"]["prometheus"], compose["services"]["prometheus-config"]
    assert prometheus["profiles"] == ["monitoring"] and config["profiles"] == ["monitoring"]
    assert [n for n, s in compose["services"].items() if s.get("profiles")] == ["prometheus-config", "prometheus"]
    assert prometheus["image"] == config["image"] == load_lock().local_images["prometheus"]
    # Published on loopback, whatever the gateway binds; no other port of the stack is.
    assert prometheus["ports"] == ["127.0.0.1:${SPARKGATE_PROMETHEUS_PORT:-19090}:9090"]
    assert "ports" not in config and config["network_mode"] == "none"
    # The same hardening everywhere: read-only root filesystem (the one-shot receives the inline configs, which
    # Compose can only write into a writable one), no capabilities, no privilege gain, no restart loop.
    assert prometheus["read_only"] is True
    for service in (prometheus, config):
        assert service["cap_drop"] == ["ALL"] and service["security_opt"] == ["no-new-privileges:true"]
        assert service["restart"] == "no"
    assert prometheus["volumes"] == [f"prometheus-config:{monitoring.CONFIG_DIR}:ro", "prometheus-data:/var/lib/prometheus"]
    assert config["volumes"] == [f"prometheus-config:{monitoring.CONFIG_DIR}"]
    assert {"prometheus-config", "prometheus-data"} <= set(compose["volumes"])
    assert prometheus["depends_on"]["prometheus-config"] == {"condition": "service_completed_successfully"}
    assert prometheus["healthcheck"]["test"][:2] == ["CMD", "bash"] and "/-/ready" in prometheus["healthcheck"]["test"][3]
    # Scrapes inside the stack: the internal engine network, plus edge only to publish its port.
    assert prometheus["networks"] == ["engine", "edge"] and compose["networks"]["engine"]["internal"] is True
    # Nothing that could change Prometheus from the published port.
    command = " ".join(prometheus["entrypoint"])
    assert "--web.enable-admin-api" not in command and "--web.enable-lifecycle" not in command
    assert f"--config.file={monitoring.CONFIG_DIR}/prometheus.yml" in command
    # The rendered files travel inline (Compose-escaped) into the one-shot, which checks them with promtool.
    assert {c["source"]: c["target"] for c in config["configs"]} == {
        n: f"{monitoring.INBOX_DIR}/{n}" for n in monitoring.BUNDLE_FILES}
    for source in monitoring.BUNDLE_FILES:
        assert compose["configs"][source] == {"content": render.compose_literal(files[source])}
    assert "promtool check config" in config["entrypoint"][-1]


@pytest.mark.compose
def test_compose_starts_prometheus_only_with_the_profile(tmp_path, repo):
    out = render.render(profiles.load("baseline"), render.RenderOptions(target="sim"), tmp_path / "bundle")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin:/usr/local/bin"}
    listed = {}
    for extra in ([], ["--profile", "monitoring"]):
        argv = ["docker", "compose", "-f", str(out / "compose.yaml"), *extra, "config", "--services"]
        result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        assert result.returncode == 0, result.stderr
        listed[bool(extra)] = set(result.stdout.split())
    assert listed[False] == {"engine", "sentinel", "gateway"}
    assert listed[True] == listed[False] | {"prometheus-config", "prometheus"}
    # The committed top-level files too (their `build:` takes docker/prometheus.Dockerfile's registry path).
    argv = ["docker", "compose", "-f", "compose.yaml", "-f", "compose.sim.yaml", "--profile", "monitoring", "config", "-q"]
    result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=repo, check=False)
    assert result.returncode == 0, result.stderr


def test_scrape_targets_are_the_sentinel_and_the_engine_by_their_stack_names():
    config = yaml.safe_load(rendered("dspark", "spark")["prometheus.yml"])
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    port = profiles.load("dspark").profile.sglang.port
    assert {name: job["static_configs"] for name, job in jobs.items()} == {
        "sparkgate-sentinel": [{"targets": ["sentinel:8081"]}], "sparkgate-engine": [{"targets": [f"engine:{port}"]}]}
    assert all(job["metrics_path"] == "/metrics" for job in jobs.values())
    assert config["global"] == {"scrape_interval": "15s", "scrape_timeout": "10s", "evaluation_interval": "15s"}
    assert config["rule_files"] == [f"{monitoring.CONFIG_DIR}/sparkgate-rules.yml"]


def test_scrape_interval_and_alert_for_are_render_options():
    files = rendered(scrape_interval_s=2.0, alert_for_s=3.0)
    config = yaml.safe_load(files["prometheus.yml"])
    # A timeout may not exceed the interval: a short interval shortens it.
    assert config["global"] == {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "2s"}
    assert {rule["for"] for rule in yaml.safe_load(files["sparkgate-rules.yml"])["groups"][0]["rules"]} == {"3s"}
    assert [monitoring.duration(s) for s in (0, 0.5, 2, 15, 60, 90, 120)] == [
        "0s", "500ms", "2s", "15s", "1m", "90s", "2m"]


def test_alert_rules_name_what_failed_and_link_the_docs(repo):
    rules = yaml.safe_load(rendered("all-three")["sparkgate-rules.yml"])["groups"][0]["rules"]
    by_name = [(r["alert"], r["expr"], r["for"], r["labels"]["severity"]) for r in rules]
    assert by_name == [
        ("SparkgateGateClosed", 'sparkgate_gate_open == 0 and on (job, instance) '
         'sparkgate_full_verifications_total{job="sparkgate-sentinel"} > 0', "1m", "critical"),
        ("SparkgateEngineStalled", 'sparkgate_check_passed{check="engine.stalled"} == 0', "0s", "critical"),
        ("SparkgateLowMemory", f"sparkgate_host_mem_available_bytes < {8 * GIB}", "1m", "warning"),
        ("SparkgateLowMemory", 'sparkgate_check_passed{check="host.memory_headroom"} == 0', "0s", "critical"),
        ("SparkgateSpeculationNotPaying", "sparkgate_speculation_pays == 0", "10m", "warning"),
        ("SparkgateSentinelDown", 'up{job="sparkgate-sentinel"} == 0', "1m", "critical"),
    ]
    docs = (repo / "docs" / "monitoring.md").read_text(encoding="utf-8")
    anchors = {line.lstrip("#").strip().lower() for line in docs.splitlines() if line.startswith("### ")}
    for rule in rules:
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook"}
        page, _, anchor = annotations["runbook"].partition("#")
        assert page == "docs/monitoring.md" and anchor in anchors, f"{rule['alert']}: no heading for #{anchor}"
        # Where to look, with the profile's own command; plain text (no Go template runs in Prometheus).
        assert rule["alert"] == "SparkgateSentinelDown" or "invoke status --profile all-three" in annotations["description"]
        assert "{{" not in str(annotations)
    assert "all-three" in rules[0]["annotations"]["summary"]


def test_low_memory_thresholds_follow_the_profiles_floor(tmp_path):
    source = (REPO / "profiles" / "baseline.yaml").read_text(encoding="utf-8")
    document = yaml.safe_load(source)
    document["name"] = "baseline-tight"
    document.setdefault("gate", {}).setdefault("watch", {})["min_mem_available_gib"] = 10
    path = tmp_path / "baseline-tight.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    files = render.render_files(profiles.load(str(path)), render.RenderOptions(target="sim"))
    exprs = [r["expr"] for r in yaml.safe_load(files["sparkgate-rules.yml"])["groups"][0]["rules"]]
    assert f"sparkgate_host_mem_available_bytes < {20 * GIB}" in exprs


# --- the deploy option -------------------------------------------------------------------------------


def test_deploy_option_selects_the_profile_and_the_port():
    on = deploy_mod.DeployOptions(profile="baseline", monitoring=True, prometheus_port=19191)
    off = deploy_mod.DeployOptions(profile="baseline")
    assert deploy_mod.compose_env(on)["COMPOSE_PROFILES"] == "monitoring"
    assert deploy_mod.compose_env(on)["SPARKGATE_PROMETHEUS_PORT"] == "19191"
    # Set even when off, so a COMPOSE_PROFILES in the caller's environment cannot start Prometheus.
    assert deploy_mod.compose_env(off)["COMPOSE_PROFILES"] == ""
    assert deploy_mod.prometheus_url(on) == "http://127.0.0.1:19191"
    # `down` must see every profile, or a previous deploy's Prometheus keeps running (and holding its port).
    project = docker_cli.Project("p", Path("c.yaml"), deploy_mod.compose_env(off))
    assert deploy_mod.every_profile(project).env["COMPOSE_PROFILES"] == "*"
    assert project.env["COMPOSE_PROFILES"] == ""


def test_a_deploy_stops_every_profile_then_starts_only_the_requested_ones(monkeypatch, tmp_path):
    """Against a fake docker CLI: the `down` before `up` sees every profile (a previous deploy's Prometheus goes),
    `up` only the requested one; with monitoring the image and the port are preflighted."""
    calls: list[tuple[str, str | None]] = []
    inspected: list[str] = []

    def fake_run(argv, *, check=True, timeout=600, env=None):
        def done(stdout=""):
            return subprocess.CompletedProcess(argv, 0, stdout, "")

        if argv[:2] == ["compose", "version"]:
            return done("2.40.3\n")
        if argv[:1] == ["version"]:
            return done("20.10.24\n")
        if argv[:2] == ["image", "inspect"]:
            inspected.append(argv[-1])
            return done("sha256:" + "0" * 64 + "\n")
        if argv[:1] == ["ps"]:
            return done("")
        if argv[:1] == ["compose"]:
            calls.append((argv[argv.index("-f") + 2], (env or {}).get("COMPOSE_PROFILES")))
            return done()
        raise AssertionError(f"unexpected docker call {argv}")

    monkeypatch.setattr(docker_cli, "run", fake_run)
    monkeypatch.setattr(deploy_mod, "_wait_and_prove", lambda options, project, *rest: deploy_mod.DeployResult(
        True, project.name, project.compose_file.parent, "url", "admitted"))
    monkeypatch.setattr(deploy_mod, "_write_record", lambda *args, **kwargs: None)
    for requested, profiles_up in ((True, "monitoring"), (False, "")):
        calls.clear()
        inspected.clear()
        lines: list[str] = []
        options = deploy_mod.DeployOptions(profile="baseline", target="sim", project="sparkgate-t-mon",
                                           out=tmp_path / "bundle", port=free_port(), monitoring=requested,
                                           prometheus_port=free_port())
        assert deploy_mod.deploy(options, say=lines.append).admitted
        assert calls == [("down", "*"), ("up", profiles_up)]
        assert (load_lock().local_images["prometheus"] in inspected) is requested
        assert any("prometheus port" in line for line in lines) is requested


# --- the sentinel's /metrics ---------------------------------------------------------------------------

HOSTILE = ['back\\slash', 'double"quote', "new\nline", 'all\\" of\n them\\n', "plain.check"]


def families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_metrics_escape_hostile_label_values_and_parse_back():
    state = GateState(profile='pro"file\\\nx')
    state.set(OPEN, "all checks passed")
    state.full = {"passed": True, "verification": {"checks": [
        {"name": name, "passed": i % 2 == 0, "observed": {}} for i, name in enumerate(HOSTILE)]},
        "infra": {"passed": True}, "smoke": {"passed": False}}
    state.recheck = {"checks": [{"name": 'engine."stalled"\n', "passed": False, "observed": {}}]}
    text = sentinel_http._metrics(state)
    parsed = families(text)
    assert [s.labels["profile"] for s in parsed["sparkgate_gate_open"]] == ['pro"file\\\nx']
    assert parsed["sparkgate_gate_open"][0].value == 1
    checks = {s.labels["check"]: s.value for s in parsed["sparkgate_check_passed"]}
    assert checks == {**{name: float(i % 2 == 0) for i, name in enumerate(HOSTILE)},
                      'engine."stalled"\n': 0.0, "suite.infra": 1.0, "suite.smoke": 0.0}
    # One line per sample: no label value broke a line.
    assert len([line for line in text.splitlines() if line.startswith("sparkgate_check_passed{")]) == len(checks)


def test_each_check_is_one_series_the_recheck_superseding_the_verdict():
    state = GateState(profile="baseline")
    state.full = {"passed": True, "verification": {"checks": [
        {"name": "engine.health", "passed": True}, {"name": "engine.health", "passed": True},
        {"name": "host.memory_headroom", "passed": True, "observed": {"mem_available_gib": 20.0}}]}}
    state.recheck = {"checks": [{"name": "host.memory_headroom", "passed": False,
                                 "observed": {"mem_available_gib": 1.5}}]}
    parsed = families(sentinel_http._metrics(state))
    assert [(s.labels["check"], s.value) for s in parsed["sparkgate_check_passed"]] == [
        ("engine.health", 1.0), ("host.memory_headroom", 0.0)]
    # The gauge follows the latest reading: the re-check's.
    assert [s.value for s in parsed["sparkgate_host_mem_available_bytes"]] == [1.5 * GIB]


@pytest.mark.parametrize("headroom", [
    None,  # no verdict yet
    {"name": "host.memory_headroom", "passed": False, "observed": "no such file"},  # meminfo unreadable
    {"name": "host.memory_headroom", "passed": True, "observed": {"mem_available_gib": None}},
    {"name": "host.memory_headroom", "passed": True, "observed": {"mem_available_gib": "12"}},
])
def test_host_memory_gauge_is_nan_without_a_reading(headroom):
    state = GateState(profile="baseline")
    if headroom:
        state.full = {"passed": False, "verification": {"checks": [headroom]}}
    (sample,) = families(sentinel_http._metrics(state))["sparkgate_host_mem_available_bytes"]
    assert math.isnan(sample.value)


def test_host_memory_gauge_reads_the_verdict_before_any_recheck():
    state = GateState(profile="baseline")
    state.full = {"passed": True, "verification": {"checks": [
        {"name": "host.memory_headroom", "passed": True, "observed": {"mem_available_gib": 19.86}}]}}
    (sample,) = families(sentinel_http._metrics(state))["sparkgate_host_mem_available_bytes"]
    assert sample.value == pytest.approx(19.86 * GIB)


# --- promtool ------------------------------------------------------------------------------------------

PROMTOOL_TESTS = """
rule_files: [sparkgate-rules.yml]
evaluation_interval: 15s
tests:
  - name: the gate closes after admission
    interval: 15s
    input_series:
      - series: 'sparkgate_gate_open{job="sparkgate-sentinel", instance="sentinel:8081", profile="all-three"}'
        values: '1 1 1 0x12'
      - series: 'sparkgate_full_verifications_total{job="sparkgate-sentinel", instance="sentinel:8081"}'
        values: '1x15'
    alert_rule_test:
      - {eval_time: 30s, alertname: SparkgateGateClosed, exp_alerts: []}
      - {eval_time: 90s, alertname: SparkgateGateClosed, exp_alerts: []}  # closed 45 s: pending, not firing
      - eval_time: 2m
        alertname: SparkgateGateClosed
        exp_alerts:
          - exp_labels: {severity: critical, job: sparkgate-sentinel, instance: "sentinel:8081", profile: all-three}
            exp_annotations: @GATE_CLOSED@
  - name: open, or closed before the first verdict (starting), is no alert
    interval: 15s
    input_series:
      - series: 'sparkgate_gate_open{job="sparkgate-sentinel", instance="sentinel:8081", profile="all-three"}'
        values: '1x20'
      - series: 'sparkgate_gate_open{job="sparkgate-sentinel", instance="other:8081", profile="all-three"}'
        values: '0x20'
      - series: 'sparkgate_full_verifications_total{job="sparkgate-sentinel", instance="sentinel:8081"}'
        values: '1x20'
      - series: 'sparkgate_full_verifications_total{job="sparkgate-sentinel", instance="other:8081"}'
        values: '0x20'
      - series: 'up{job="sparkgate-sentinel", instance="sentinel:8081"}'
        values: '1x20'
      - series: 'sparkgate_host_mem_available_bytes{job="sparkgate-sentinel", instance="sentinel:8081"}'
        values: '21324512624x20'
      - series: 'sparkgate_check_passed{job="sparkgate-sentinel", instance="sentinel:8081", check="engine.stalled"}'
        values: '1x20'
    alert_rule_test:
      - {eval_time: 5m, alertname: SparkgateGateClosed, exp_alerts: []}
      - {eval_time: 5m, alertname: SparkgateSentinelDown, exp_alerts: []}
      - {eval_time: 5m, alertname: SparkgateLowMemory, exp_alerts: []}
      - {eval_time: 5m, alertname: SparkgateEngineStalled, exp_alerts: []}
  - name: a stall fires at once (the check itself waited stall_after_s)
    interval: 15s
    input_series:
      - series: 'sparkgate_check_passed{job="sparkgate-sentinel", instance="sentinel:8081", check="engine.stalled"}'
        values: '1 1 0 0'
    alert_rule_test:
      - {eval_time: 15s, alertname: SparkgateEngineStalled, exp_alerts: []}
      - eval_time: 30s
        alertname: SparkgateEngineStalled
        exp_alerts:
          - exp_labels: {severity: critical, job: sparkgate-sentinel, instance: "sentinel:8081", check: engine.stalled}
            exp_annotations: @STALLED@
  - name: low memory warns before the floor, and the failed headroom check is critical at once
    interval: 15s
    input_series:
      - series: 'sparkgate_host_mem_available_bytes{job="sparkgate-sentinel", instance="sentinel:8081"}'
        values: '21324512624 7000000000x10'
      - series: 'sparkgate_check_passed{job="sparkgate-sentinel", instance="sentinel:8081", check="host.memory_headroom"}'
        values: '1 1 1 1 0x8'
    alert_rule_test:
      - eval_time: 45s
        alertname: SparkgateLowMemory
        exp_alerts: []
      - eval_time: 60s
        alertname: SparkgateLowMemory
        exp_alerts:
          - exp_labels: {severity: critical, job: sparkgate-sentinel, instance: "sentinel:8081", check: host.memory_headroom}
            exp_annotations: @HEADROOM@
      - eval_time: 90s
        alertname: SparkgateLowMemory
        exp_alerts:
          - exp_labels: {severity: warning, job: sparkgate-sentinel, instance: "sentinel:8081"}
            exp_annotations: @LOW@
          - exp_labels: {severity: critical, job: sparkgate-sentinel, instance: "sentinel:8081", check: host.memory_headroom}
            exp_annotations: @HEADROOM@
  - name: speculation that stops paying in one band warns once sustained; an unjudged band (NaN) never does
    interval: 1m
    input_series:
      - series: 'sparkgate_speculation_pays{job="sparkgate-sentinel", instance="sentinel:8081", band="4k-16k"}'
        values: '1 1 0x15'
      - series: 'sparkgate_speculation_pays{job="sparkgate-sentinel", instance="sentinel:8081", band="0-1k"}'
        values: '1x17'
      - series: 'sparkgate_speculation_pays{job="sparkgate-sentinel", instance="sentinel:8081", band="64k+"}'
        values: 'NaN NaN NaN NaN NaN NaN NaN NaN NaN NaN NaN NaN NaN NaN NaN NaN NaN'
    alert_rule_test:
      - {eval_time: 8m, alertname: SparkgateSpeculationNotPaying, exp_alerts: []}
      - eval_time: 13m
        alertname: SparkgateSpeculationNotPaying
        exp_alerts:
          - exp_labels: {severity: warning, job: sparkgate-sentinel, instance: "sentinel:8081", band: 4k-16k}
            exp_annotations: @NOT_PAYING@
  - name: a sentinel that stops answering
    interval: 15s
    input_series:
      - series: 'up{job="sparkgate-sentinel", instance="sentinel:8081"}'
        values: '1 0x10'
    alert_rule_test:
      - {eval_time: 45s, alertname: SparkgateSentinelDown, exp_alerts: []}
      - eval_time: 90s
        alertname: SparkgateSentinelDown
        exp_alerts:
          - exp_labels: {severity: critical, job: sparkgate-sentinel, instance: "sentinel:8081"}
            exp_annotations: @DOWN@
"""


def promtool(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """promtool on the host when it has one, else inside the Prometheus image with no network."""
    if shutil.which("promtool"):
        argv = ["promtool", *args]
    else:
        tag = load_lock().local_images["prometheus"]
        if docker_cli.image_id(tag) is None:
            pytest.fail(f"{tag} is missing and the host has no promtool: run `invoke images.prometheus` "
                        "(python -m sparkgate.tasks.images prometheus)")
        argv = ["docker", "run", "--rm", "--network", "none", "--user", "65534:65534", "-v", f"{workdir}:/w:ro",
                "-w", "/w", "--entrypoint", "promtool", tag, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, cwd=workdir)


@pytest.fixture
def rule_files(tmp_path) -> Path:
    """The all-three render's prometheus.yml and rules, the rules path made relative for promtool."""
    files = rendered("all-three", "spark")
    tmp_path.chmod(0o755)
    (tmp_path / "prometheus.yml").write_text(files["prometheus.yml"].replace(f"{monitoring.CONFIG_DIR}/", ""))
    (tmp_path / "sparkgate-rules.yml").write_text(files["sparkgate-rules.yml"])
    return tmp_path


@pytest.mark.docker
def test_promtool_accepts_the_rendered_config_and_rules(rule_files):
    for args in (("check", "config", "prometheus.yml"), ("check", "rules", "sparkgate-rules.yml")):
        result = promtool(rule_files, *args)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS" in result.stdout + result.stderr
    assert "6 rules found" in promtool(rule_files, "check", "rules", "sparkgate-rules.yml").stdout


@pytest.mark.docker
def test_promtool_unit_tests_the_alert_rules(rule_files):
    """Gate closed fires after its `for` and not while open or starting; a stall and a failed headroom check
    at once; the early low-memory warning after its `for`; a sentinel down."""
    rules = yaml.safe_load((rule_files / "sparkgate-rules.yml").read_text())["groups"][0]["rules"]
    annotations = {(r["alert"], r["labels"]["severity"]): r["annotations"] for r in rules}
    text = PROMTOOL_TESTS
    for marker, key in (("@GATE_CLOSED@", ("SparkgateGateClosed", "critical")),
                        ("@STALLED@", ("SparkgateEngineStalled", "critical")),
                        ("@LOW@", ("SparkgateLowMemory", "warning")),
                        ("@HEADROOM@", ("SparkgateLowMemory", "critical")),
                        ("@NOT_PAYING@", ("SparkgateSpeculationNotPaying", "warning")),
                        ("@DOWN@", ("SparkgateSentinelDown", "critical"))):
        text = text.replace(marker, yaml.safe_dump(annotations[key], default_flow_style=True, width=10_000).strip())
    (rule_files / "tests.yml").write_text(text)
    result = promtool(rule_files, "test", "rules", "tests.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


# --- the image -----------------------------------------------------------------------------------------


def test_image_pins_the_debian_package_in_the_tag_the_lock_and_the_dockerfile():
    lock = load_lock()
    tag, version = image_build.prometheus_pin()
    assert version == lock.debian_packages["prometheus"] == "2.42.0+ds-5+deb12u1"
    assert tag == f"sparkgate/prometheus:{version.replace('+', '-')}" and not tag.endswith(":latest")
    dockerfile = (REPO / image_build.PROMETHEUS_DOCKERFILE).read_text(encoding="utf-8")
    assert f"ARG PROMETHEUS_VERSION={version}\n" in dockerfile
    # The registry path's base is the runtime image's digest-pinned one.
    base = lock.base_images["runtime-base"]
    assert f"ARG BASE_IMAGE={base.ref}@{base.digest}\n" in dockerfile
    build = render.prometheus_build()
    assert build["context"] == "docker" and build["dockerfile"] == "prometheus.Dockerfile"
    assert build["args"]["PROMETHEUS_VERSION"] == version


def test_offline_build_has_no_network_and_host_apt_is_confined(tmp_path):
    tag, version = image_build.prometheus_pin()
    argv = image_build.prometheus_build_argv(tag, version, tmp_path)
    assert argv[:4] == ["docker", "build", "--network", "none"]
    assert f"BASE_IMAGE={image_build.BASE_TAG}" in argv and f"PROMETHEUS_VERSION={version}" in argv
    assert argv[argv.index("--tag") + 1] == tag
    apt = image_build.apt_argv(tmp_path, "update")
    options = dict(apt[i + 1].split("=", 1) for i, arg in enumerate(apt) if arg == "-o")
    for key in ("Dir::Etc::SourceList", "Dir::Etc::SourceParts", "Dir::State", "Dir::State::status", "Dir::Cache"):
        assert options[key].startswith(str(tmp_path)), key  # never the host's own apt state
    assert options["APT::Install-Recommends"] == "false"
    sources = image_build.debian_sources()
    assert sources.count("[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]") == 3
    assert {line.split()[-2] for line in sources.splitlines()} == {"bookworm", "bookworm-updates", "bookworm-security"}


@pytest.mark.docker
def test_the_image_holds_the_pinned_prometheus_and_promtool():
    tag, version = image_build.prometheus_pin()
    if docker_cli.image_id(tag) is None:
        pytest.fail(f"{tag} is missing: run `invoke images.prometheus` (python -m sparkgate.tasks.images prometheus)")
    run = ["docker", "run", "--rm", "--network", "none"]
    reported = subprocess.run([*run, tag, "--version"], capture_output=True, text=True, check=True, timeout=60)
    assert f"revision: {version}" in reported.stdout + reported.stderr
    dpkg = subprocess.run([*run, "--entrypoint", "dpkg-query", tag, "-W", "-f", "${Version}", "prometheus"],
                          capture_output=True, text=True, check=True, timeout=60)
    assert dpkg.stdout == version
    user = subprocess.run([*run, "--entrypoint", "id", tag, "-un"], capture_output=True, text=True, check=True, timeout=60)
    assert user.stdout.strip() == "prometheus"
