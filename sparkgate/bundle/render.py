"""Render a validated profile into build/<profile>/: compose.yaml, engine-env.json, argv.json,
expectations.json, the gateway's files, the monitoring profile's prometheus.yml and sparkgate-rules.yml
(sparkgate/bundle/monitoring.py) and manifest.json. Decisions are made here; templates only substitute.

compose.yaml is self-contained: the files the sentinel and the gateway read under /bundle travel inside it
as Compose `configs:` with inline `content:` (Compose >= 2.23.1), so the stack needs no bind-mounted
directory. The other files stay on disk for people and host-side tools (infra suite, bench, records).

Writes are atomic (a staged directory swapped into place, see sparkgate.atomic) and deterministic (no
timestamps), so a re-render is byte-identical and a failed render leaves the previous bundle untouched.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from sparkgate import atomic, defaults, paths
from sparkgate.bundle import expectations, monitoring
from sparkgate.bundle.image_build import RUNTIME_DOCKERFILE
from sparkgate.deploy import engine_preflight
from sparkgate.errors import Refusal
from sparkgate.images import load_lock
from sparkgate.paths import build_dir, templates_dir
from sparkgate.profile.loading import LoadedProfile
from sparkgate.runtime import admin_key, gateway_routes
from sparkgate.sglang import flags as F

TARGETS = ("spark", "sim")
ENGINE_LOG = "/var/log/sparkgate/engine.log"
FLASHINFER_CACHE = "/root/.cache/flashinfer"  # the engine's FlashInfer JIT cache (a host directory on a Spark)
# The sentinel's capture files (sentinel/captures.py) on a named volume: a refusal's evidence outlives the stack.
CAPTURES_DIR = "/var/lib/sparkgate/captures"
CAPTURES_VOLUME = "sentinel-captures"
# On the simulator target the sentinel reads the simulated Spark's meminfo (written by the simulator on the
# shared log volume) instead of this machine's /proc/meminfo.
SIM_HOST_MEMINFO = "/var/log/sparkgate/sim-host-meminfo"
# The simulator runs this much faster than real time unless told otherwise (CI, demos).
DEFAULT_SIM_TIME_SCALE = defaults.SIM_TIME_SCALE


SENTINEL_PORT = defaults.SENTINEL_PORT
SENTINEL_CLOSED_PORT = defaults.SENTINEL_CLOSED_PORT
GATEWAY_CONTAINER_PORT = defaults.GATEWAY_CONTAINER_PORT
DEFAULT_GATEWAY_PORT = defaults.GATEWAY_PORT
ADMIN_KEY_VOLUME = "engine-admin"
ADMIN_KEY_TMPFS_OPTIONS = "mode=0700,uid=0,gid=0,size=64k,noexec,nosuid,nodev"
# Where the containers read the bundle, and which files each one reads (compose `configs:`).
BUNDLE_MOUNT = "/bundle"
SENTINEL_BUNDLE_FILES = ("argv.json", "engine-env.json", "expectations.json")
ENGINE_BUNDLE_FILES = (engine_preflight.FILE_NAME,)  # the Spark engine's own preflight (deploy/engine_preflight.py)
GATEWAY_BUNDLE_FILES = ("haproxy.cfg", "gateway-gate.lua", "gateway-503.http")
# The monitoring profile's files (prometheus.yml, sparkgate-rules.yml), received by its one-shot config service.
MONITORING_BUNDLE_FILES = monitoring.BUNDLE_FILES
PROMETHEUS_DOCKERFILE_CONTEXT = "docker"
# Build sections of the top-level compose files (paths relative to the repository root, where they live).
# The runtime image's base and build network come from the environment: by default the digest-pinned
# registry base (images.lock.yaml base_images.runtime-base) with network; CI sets the local mmdebstrap base
# and `none` (docs/images.md).
ENGINE_DOCKERFILE = "Dockerfile"
RUNTIME_BASE_ENV = "SPARKGATE_RUNTIME_BASE"
BUILD_NETWORK_ENV = "SPARKGATE_BUILD_NETWORK"


class UnpinnedBase(Refusal):
    """A registry base the top-level compose files build on has no digest in images.lock.yaml."""


@dataclass(frozen=True)
class RenderOptions:
    target: str = "spark"
    sim_time_scale: float = DEFAULT_SIM_TIME_SCALE
    # Seconds between the sentinel's re-checks; the gateway closes within one period.
    recheck_period_s: float = defaults.RECHECK_PERIOD_S
    # Simulator faults (sim target only), e.g. ("draft-lm-head-unshared",); empty for a healthy engine.
    sim_faults: tuple[str, ...] = ()
    sim_admin: bool = False
    # Simulated startup length in engine seconds (None: the simulator's Spark-like default, ~8 min).
    sim_startup_s: float | None = None
    # Drills only: make the simulator behave as another image than the profile's ("stock" / "fork").
    sim_image: str | None = None
    # Top-level compose files only: give each service a `build:` section (context: the repository root),
    # so `docker compose up --build` in a clone builds what it runs.
    build_sections: bool = False
    # The monitoring profile's Prometheus (rendered always, started only with the profile): its scrape and
    # evaluation interval, and a `for` replacing every alert's default (None: the defaults, docs/monitoring.md).
    scrape_interval_s: float = monitoring.DEFAULT_SCRAPE_INTERVAL_S
    alert_for_s: float | None = None


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(templates_dir())),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    # Non-ASCII text stays as UTF-8: PyYAML reads a JSON surrogate-pair escape as two lone surrogates.
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "ensure_ascii": False}
    return env


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def compose_literal(text: str) -> str:
    """Text Compose must take literally: it interpolates `$VAR`/`${VAR}` in every value, and `$$` is a `$`."""
    return text.replace("$", "$$")


def _configs_mounts(names: tuple[str, ...], directory: str = BUNDLE_MOUNT) -> list[dict[str, str]]:
    return [{"source": name, "target": f"{directory}/{name}"} for name in names]


def prometheus_build() -> dict:
    """The Prometheus image's build section (top-level compose files): docker/prometheus.Dockerfile's registry path,
    Debian's package at the lock's version on the same digest-pinned base as the runtime image."""
    build = runtime_build()
    return {**build, "context": PROMETHEUS_DOCKERFILE_CONTEXT, "dockerfile": "prometheus.Dockerfile",
            "args": {**build["args"], "PROMETHEUS_VERSION": load_lock().debian_packages["prometheus"]}}


def runtime_build() -> dict:
    """The runtime image's build section (simulator, sentinel and gateway share the image)."""
    base = load_lock().base_images["runtime-base"]
    if not base.digest:
        raise UnpinnedBase(
            f"images.lock.yaml base_images.runtime-base.digest: observed null, expected sha256:<64 hex> for "
            f"{base.ref}: the top-level compose files pull the runtime base by digest only. Fix: run "
            "`invoke images.lock` on a host that can pull, write the digest into images.lock.yaml and "
            "docker/runtime.Dockerfile's ARG BASE_IMAGE, then `invoke render-top-level`"
        )
    return {
        "context": ".",
        "dockerfile": RUNTIME_DOCKERFILE,
        "network": f"${{{BUILD_NETWORK_ENV}:-default}}",
        "args": {"BASE_IMAGE": f"${{{RUNTIME_BASE_ENV}:-{base.pinned_ref}}}"},
    }


SIM_DRAFTER_VOLUME = "sim-dspark-drafter"


def drafter_mounts(profile) -> dict:
    """The DSpark drafter, a second model directory, mounted read-only where the profile's draft path says
    (empty lists when DSpark is off). The simulator gets an empty named volume there, like its checkpoint."""
    settings = profile.optimizations.dspark
    if not settings.enabled:
        return {"drafter_mounts": [], "sim_drafter_mounts": [], "sim_drafter_volumes": []}
    return {
        "drafter_mounts": [f"{paths.dspark_dir(settings.draft_model_path).compose()}:{settings.draft_model_path}:ro"],
        "sim_drafter_mounts": [f"{SIM_DRAFTER_VOLUME}:{settings.draft_model_path}:ro"],
        "sim_drafter_volumes": [SIM_DRAFTER_VOLUME],
    }


def kernel_caches(profile) -> dict[str, str]:
    """The engine's JIT kernel caches, by the name `invoke deploy`'s preflight gives them (each a subdirectory of
    SPARKGATE_CACHE_DIR on the host): where they are mounted in the engine container."""
    return {"humming": str(PurePosixPath(profile.optimizations.humming.cache_dir).parent),
            "flashinfer": FLASHINFER_CACHE}


def compose_context(loaded: LoadedProfile, options: RenderOptions, bundle_files: dict[str, str]) -> dict:
    """`bundle_files`: the rendered files the containers read, carried inline as Compose configs."""
    profile = loaded.profile
    lock = load_lock()
    engine_image = lock.engine_ref(profile.image) if options.target == "spark" else lock.local_images["sim"]
    caches = kernel_caches(profile)
    capabilities = lock.engine_images[profile.image].capabilities
    engine_url = f"http://engine:{profile.sglang.port}"
    runtime_image = lock.local_images["sentinel"]
    sim_environment = {
        # The simulator mirrors the engine image the profile names: fork or stock SGLang.
        "SPARKGATE_SIM_IMAGE": options.sim_image
        or ("fork" if F.FP8_LM_HEAD_ENV in capabilities.declared_env else "stock"),
        "SPARKGATE_SIM_TIME_SCALE": str(options.sim_time_scale),
        "SPARKGATE_SIM_HOST_MEMINFO": SIM_HOST_MEMINFO,
    }
    if options.sim_faults:
        sim_environment["SPARKGATE_SIM_FAULTS"] = ",".join(options.sim_faults)
    if options.sim_admin:
        sim_environment["SPARKGATE_SIM_ADMIN"] = "1"
    if options.sim_startup_s is not None:
        sim_environment["SPARKGATE_SIM_STARTUP_S"] = str(options.sim_startup_s)
    return {
        "project": f"sparkgate-{profile.name}",
        "runtime_image": runtime_image,
        "sentinel_command": [
            "sparkgate", "sentinel", "--engine-url", engine_url, "--bundle", "/bundle",
            "--log-file", ENGINE_LOG, "--period", str(options.recheck_period_s),
            "--port", str(SENTINEL_PORT), "--closed-port", str(SENTINEL_CLOSED_PORT),
            "--captures", CAPTURES_DIR,
            *(["--meminfo", SIM_HOST_MEMINFO] if options.target == "sim" else []),
        ],
        "captures_mount": f"{CAPTURES_VOLUME}:{CAPTURES_DIR}",
        "sentinel_healthcheck": [
            "CMD", "sparkgate", "healthcheck", "--url", f"http://127.0.0.1:{SENTINEL_PORT}/healthz",
        ],
        "gateway_command": ["sparkgate", "gateway", "--config", "/bundle/haproxy.cfg"],
        "gateway_image": lock.local_images["gateway"],
        "gateway_secret_tmpfs": "/run/sparkgate:mode=0700,size=64k,noexec,nosuid,nodev",
        # A named volume, not a per-container tmpfs: the engine writes the key, the sentinel reads it.
        "admin_key_volume_options": {"type": "tmpfs", "device": "tmpfs", "o": ADMIN_KEY_TMPFS_OPTIONS},
        "admin_key_mount_engine": f"{ADMIN_KEY_VOLUME}:{admin_key.ADMIN_DIR}",
        "admin_key_mount_sentinel": f"{ADMIN_KEY_VOLUME}:{admin_key.ADMIN_DIR}:ro",
        "gateway_publish": (
            "${SPARKGATE_GATEWAY_BIND:-127.0.0.1}:${SPARKGATE_GATEWAY_PORT:-"
            f"{DEFAULT_GATEWAY_PORT}}}:{GATEWAY_CONTAINER_PORT}"
        ),
        "gateway_bind_expr": "${SPARKGATE_GATEWAY_BIND:-127.0.0.1}",
        "api_key_file_expr": "${SPARKGATE_API_KEY_FILE:-/dev/null}",
        # Inline: the stack needs no directory from the host, and `$$` keeps Compose from interpolating.
        "bundle_configs": {
            name: compose_literal(bundle_files[name])
            for name in (*SENTINEL_BUNDLE_FILES, *GATEWAY_BUNDLE_FILES, *MONITORING_BUNDLE_FILES,
                         *(ENGINE_BUNDLE_FILES if options.target == "spark" else ()))
        },
        "engine_configs": _configs_mounts(ENGINE_BUNDLE_FILES),
        "sentinel_configs": _configs_mounts(SENTINEL_BUNDLE_FILES),
        "gateway_configs": _configs_mounts(GATEWAY_BUNDLE_FILES),
        "runtime_build": runtime_build() if options.build_sections else None,
        **prometheus_context(options),
        "engine_build": (
            {"context": ".", "dockerfile": ENGINE_DOCKERFILE} if options.build_sections and options.target == "spark"
            else runtime_build() if options.build_sections else None
        ),
        "sim_model_mount": f"sim-model:{profile.model.path}:ro",
        **drafter_mounts(profile),
        "engine_image": engine_image,
        "engine_entrypoint": [
            "sparkgate", "engine", "--launcher", options.target, "--log-file", ENGINE_LOG,
            *(["--preflight", f"{BUNDLE_MOUNT}/{engine_preflight.FILE_NAME}"] if options.target == "spark" else []),
            "--",
        ],
        # Profile text reaches Compose only through these two: `$$` keeps Compose from interpolating it.
        "argv": [compose_literal(token) for token in loaded.plan.argv],
        "engine_environment": {
            name: compose_literal(value)
            for name, value in {**loaded.plan.env_map(), **(sim_environment if options.target == "sim" else {})}.items()
        },
        "model_mount": f"{paths.model_dir(profile.model.path).compose()}:{profile.model.path}:ro",
        "humming_cache_mount": f"{paths.CACHE_DIR.compose('humming')}:{caches['humming']}",
        "sim_humming_cache_mount": f"humming-cache:{caches['humming']}",
        "flashinfer_cache_mount": f"{paths.CACHE_DIR.compose('flashinfer')}:{caches['flashinfer']}",
        "healthcheck": [
            "CMD", "sparkgate", "healthcheck", "--url", f"http://127.0.0.1:{profile.sglang.port}/health",
        ],
    }


def prometheus_context(options: RenderOptions) -> dict:
    """The monitoring profile's two services (templates/compose/_monitoring.yaml.j2; sparkgate/bundle/monitoring.py)."""
    return {
        "prometheus_image": load_lock().local_images["prometheus"],
        "prometheus_build": prometheus_build() if options.build_sections else None,
        "prometheus_config_command": monitoring.config_command(),
        "prometheus_inbox_configs": _configs_mounts(MONITORING_BUNDLE_FILES, monitoring.INBOX_DIR),
        "prometheus_config_mount_rw": f"prometheus-config:{monitoring.CONFIG_DIR}",
        "prometheus_config_mount_ro": f"prometheus-config:{monitoring.CONFIG_DIR}:ro",
        "prometheus_data_mount": f"prometheus-data:{PurePosixPath(monitoring.DATA_DIR).parent}",
        "prometheus_command": monitoring.prometheus_command(),
        "prometheus_healthcheck": monitoring.healthcheck(),
        # Always 127.0.0.1, unlike the gateway's bind: the API reads every series of the stack.
        "prometheus_publish": (
            f"127.0.0.1:${{SPARKGATE_PROMETHEUS_PORT:-{monitoring.DEFAULT_PROMETHEUS_PORT}}}"
            f":{monitoring.PROMETHEUS_CONTAINER_PORT}"
        ),
    }


def gateway_context(loaded: LoadedProfile, options: RenderOptions) -> dict:
    return {
        "gateway_port": GATEWAY_CONTAINER_PORT,
        "engine_address": f"engine:{loaded.profile.sglang.port}",
        "sentinel_host": "sentinel",
        "sentinel_port": SENTINEL_PORT,
        "sentinel_status_address": f"sentinel:{SENTINEL_PORT}",
        "sentinel_ready_url": f"http://sentinel:{SENTINEL_PORT}/ready",
        "sentinel_closed_address": f"sentinel:{SENTINEL_CLOSED_PORT}",
        "check_interval_ms": 1000,
        "max_body_bytes": int(loaded.profile.gateway.max_body_mib * 1024 * 1024),
        "poll_interval_ms": 250,
        "poll_timeout_ms": 1000,
        **gateway_routes.haproxy_context(),
    }


def render_files(loaded: LoadedProfile, options: RenderOptions) -> dict[str, str]:
    """All bundle files as {name: text}; nothing touches the disk."""
    if options.target not in TARGETS:
        raise ValueError(f"unknown target {options.target!r}; choose from {', '.join(TARGETS)}")
    env = _environment()
    profile = loaded.profile
    header = (
        f"generated from {loaded.source} by `invoke render --profile {profile.name} "
        f"--target {options.target}` - do not edit"
    )
    time_scale = options.sim_time_scale if options.target == "sim" else 1.0
    files = {
        # The engine's environment as data (what compose.yaml's `environment:` says, before `$$` escaping).
        "engine-env.json": env.get_template("engine-env.json.j2").render(environment=loaded.plan.env_map()),
        "argv.json": env.get_template("argv.json.j2").render(argv=list(loaded.plan.argv)),
        "expectations.json": env.get_template("expectations.json.j2").render(
            expectations=expectations.build(loaded, options.target, time_scale)
        ),
    }
    if options.target == "spark":
        checks = engine_preflight.plan(profile, profile.name, kernel_caches(profile))
        files[engine_preflight.FILE_NAME] = env.get_template("preflight.json.j2").render(
            preflight=checks.model_dump(mode="json"))
    gateway = gateway_context(loaded, options)
    for name in ("haproxy.cfg", "gateway-gate.lua", "gateway-503.http"):
        files[name] = env.get_template(f"gateway/{name}.j2").render(header=header, **gateway)
    files.update(monitoring.bundle_files(
        header, profile.name, f"sentinel:{SENTINEL_PORT}", f"engine:{profile.sglang.port}",
        profile.gate.watch.min_mem_available_gib,
        options.scrape_interval_s, options.alert_for_s,
    ))
    compose = compose_context(loaded, options, files)
    files["compose.yaml"] = env.get_template(f"compose/{options.target}.yaml.j2").render(header=header, **compose)
    lock = load_lock()
    manifest = {
        "generated_from": loaded.source,
        "note": "generated - do not edit",
        "profile": profile.name,
        "target": options.target,
        "profile_sha256": _sha256(json.dumps(profile.model_dump(mode="json"), sort_keys=True)),
        "requested": profile.requested(),
        "images": {
            "engine": compose["engine_image"],
            "engine_image_key": profile.image,
            "engine_image_pinned": bool(lock.engine_images[profile.image].digest),
        },
        "sglang_fork": lock.sglang_fork.model_dump(mode="json"),
        "files": {name: _sha256(text) for name, text in sorted(files.items())},
    }
    files["manifest.json"] = env.get_template("manifest.json.j2").render(manifest=manifest)
    return files


def write_atomically(directory: Path, files: dict[str, str]) -> None:
    """Replace `directory` with exactly `files`; the path never goes missing (see sparkgate.atomic)."""
    atomic.replace_directory(directory, files)


def render(loaded: LoadedProfile, options: RenderOptions, out: Path | None = None) -> Path:
    """Render into `out` atomically. A running stack is not affected: its bundle files travel inside its
    compose.yaml as configs, copied into the containers when they were created, so nothing is bind-mounted."""
    out = out or build_dir() / loaded.profile.name
    write_atomically(out, render_files(loaded, options))
    return out


# The committed top-level compose files: the all-three spark render with build sections, and the
# simulator override that turns its engine into the simulator (compose.sim.yaml).
TOP_LEVEL_PROFILE = "all-three"
TOP_LEVEL_SIM_OVERRIDE = "compose.sim.yaml"


def top_level_compose(loaded: LoadedProfile) -> str:
    return render_files(loaded, RenderOptions(target="spark", build_sections=True))["compose.yaml"]


def sim_override(loaded: LoadedProfile) -> str:
    """compose.sim.yaml: what the sim target differs in from the spark target, as a Compose override of the
    top-level compose.yaml (`!reset`/`!override` need Compose >= 2.24.4). Merged, the two files give the
    sim render's services (tests/unit/test_render.py proves it with `docker compose config`)."""
    spark_files = render_files(loaded, RenderOptions(target="spark"))
    sim_options = RenderOptions(target="sim", build_sections=True)
    sim_files = render_files(loaded, sim_options)
    context = compose_context(loaded, sim_options, sim_files)
    # Only what differs: compose.yaml's own values stay the single source of the rest.
    changed = {name: text for name, text in context["bundle_configs"].items()
               if compose_literal(spark_files[name]) != text}
    sim_only = {k: v for k, v in context["engine_environment"].items() if k.startswith("SPARKGATE_SIM_")}
    header = (
        f"generated from {loaded.source} by `invoke render-top-level` - do not edit; "
        "use: docker compose -f compose.yaml -f compose.sim.yaml up --build"
    )
    return _environment().get_template("compose/sim-override.yaml.j2").render(
        header=header, sim_environment=sim_only, changed_configs=changed, **context
    )


def top_level_files(loaded: LoadedProfile) -> dict[str, str]:
    """{file name in the repository root: text} for `invoke render-top-level` and the drift test."""
    return {"compose.yaml": top_level_compose(loaded), TOP_LEVEL_SIM_OVERRIDE: sim_override(loaded)}
