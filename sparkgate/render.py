"""Render a validated profile into build/<profile>/: compose.yaml, engine-env.json, argv.json,
expectations.json and manifest.json. Decisions are made here; templates only substitute.

Writes are atomic (a staged directory swapped into place, see sparkgate.atomic) and deterministic (no
timestamps), so a re-render is byte-identical and a failed render leaves the previous bundle untouched.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from sparkgate import admin_key, atomic, defaults, expectations, gateway_routes
from sparkgate import sglang_flags as F
from sparkgate.images import load_lock
from sparkgate.paths import build_dir, templates_dir
from sparkgate.profiles import LoadedProfile

TARGETS = ("spark", "sim")
ENGINE_LOG = "/var/log/sparkgate/engine.log"
# The simulator runs this much faster than real time unless told otherwise (CI, demos).
DEFAULT_SIM_TIME_SCALE = defaults.SIM_TIME_SCALE


SENTINEL_PORT = defaults.SENTINEL_PORT
SENTINEL_CLOSED_PORT = defaults.SENTINEL_CLOSED_PORT
GATEWAY_CONTAINER_PORT = defaults.GATEWAY_CONTAINER_PORT
DEFAULT_GATEWAY_PORT = defaults.GATEWAY_PORT
ADMIN_KEY_VOLUME = "engine-admin"
ADMIN_KEY_TMPFS_OPTIONS = "mode=0700,uid=0,gid=0,size=64k,noexec,nosuid,nodev"


@dataclass(frozen=True)
class RenderOptions:
    target: str = "spark"
    sim_time_scale: float = DEFAULT_SIM_TIME_SCALE
    # Path from the compose file's directory to the bundle files (env_file etc.).
    bundle_dir: str = "."
    # Seconds between the sentinel's re-checks; the gateway closes within one period.
    recheck_period_s: float = defaults.RECHECK_PERIOD_S
    # Simulator faults (sim target only), e.g. ("draft-lm-head-unshared",); empty for a healthy engine.
    sim_faults: tuple[str, ...] = ()
    sim_admin: bool = False
    # Simulated startup length in engine seconds (None: the simulator's Spark-like default, ~8 min).
    sim_startup_s: float | None = None
    # Drills only: make the simulator behave as another image than the profile's ("stock" / "fork").
    sim_image: str | None = None


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


def _bundle_path(options: RenderOptions, name: str) -> str:
    return name if options.bundle_dir == "." else str(PurePosixPath(options.bundle_dir) / name)


def compose_literal(text: str) -> str:
    """Text Compose must take literally: it interpolates `$VAR`/`${VAR}` in every value, and `$$` is a `$`."""
    return text.replace("$", "$$")


def compose_context(loaded: LoadedProfile, options: RenderOptions) -> dict:
    profile = loaded.profile
    lock = load_lock()
    engine_image = lock.engine_ref(profile.image) if options.target == "spark" else lock.local_images["sim"]
    model_dir_name = PurePosixPath(profile.model.path).name
    humming_root = str(PurePosixPath(profile.optimizations.humming.cache_dir).parent)
    capabilities = lock.engine_images[profile.image].capabilities
    engine_url = f"http://engine:{profile.sglang.port}"
    runtime_image = lock.local_images["sentinel"]
    sim_environment = {
        # The simulator mirrors the engine image the profile names: fork or stock SGLang.
        "SPARKGATE_SIM_IMAGE": options.sim_image
        or ("fork" if F.FP8_LM_HEAD_ENV in capabilities.declared_env else "stock"),
        "SPARKGATE_SIM_TIME_SCALE": str(options.sim_time_scale),
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
        ],
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
        "bundle_mount": f"{'./' if options.bundle_dir == '.' else './' + options.bundle_dir.rstrip('/') + '/'}:/bundle:ro",
        "sim_model_mount": f"sim-model:{profile.model.path}:ro",
        "engine_image": engine_image,
        "engine_entrypoint": [
            "sparkgate", "engine", "--launcher", options.target, "--log-file", ENGINE_LOG, "--",
        ],
        # Profile text reaches Compose only through these two: `$$` keeps Compose from interpolating it.
        "argv": [compose_literal(token) for token in loaded.plan.argv],
        "engine_environment": {
            name: compose_literal(value)
            for name, value in {**loaded.plan.env_map(), **(sim_environment if options.target == "sim" else {})}.items()
        },
        "model_mount": f"${{SPARKGATE_MODEL_DIR:-${{HOME}}/models/{model_dir_name}}}:{profile.model.path}:ro",
        "humming_cache_mount": f"${{SPARKGATE_CACHE_DIR:-${{HOME}}/.cache/sparkgate}}/humming:{humming_root}",
        "sim_humming_cache_mount": f"humming-cache:{humming_root}",
        "healthcheck": [
            "CMD", "sparkgate", "healthcheck", "--url", f"http://127.0.0.1:{profile.sglang.port}/health",
        ],
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
        f"generated from {loaded.source} by `sparkgate render --profile {profile.name} "
        f"--target {options.target}` - do not edit"
    )
    time_scale = options.sim_time_scale if options.target == "sim" else 1.0
    compose = compose_context(loaded, options)
    files = {
        "compose.yaml": env.get_template(f"compose/{options.target}.yaml.j2").render(header=header, **compose),
        # The engine's environment as data (what compose.yaml's `environment:` says, before `$$` escaping).
        "engine-env.json": env.get_template("engine-env.json.j2").render(environment=loaded.plan.env_map()),
        "argv.json": env.get_template("argv.json.j2").render(argv=list(loaded.plan.argv)),
        "expectations.json": env.get_template("expectations.json.j2").render(
            expectations=expectations.build(loaded, options.target, time_scale)
        ),
    }
    gateway = gateway_context(loaded, options)
    for name in ("haproxy.cfg", "gateway-gate.lua", "gateway-503.http"):
        files[name] = env.get_template(f"gateway/{name}.j2").render(header=header, **gateway)
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


def write_atomically(directory: Path, files: dict[str, str], keep_retired: bool = False) -> Path | None:
    """Replace `directory` with exactly `files`; the path never goes missing (see sparkgate.atomic)."""
    return atomic.replace_directory(directory, files, keep_retired=keep_retired)


write_file_atomically = atomic.write_text_atomically


def render(loaded: LoadedProfile, options: RenderOptions, out: Path | None = None,
           keep_retired: bool = False) -> Path:
    """Render into `out` atomically. With `keep_retired`, the previous bundle stays next to it (as
    `.<name>.old.*`) for a stack that still bind-mounts it; `deploy` removes it after `compose down`."""
    out = out or build_dir() / loaded.profile.name
    write_atomically(out, render_files(loaded, options), keep_retired=keep_retired)
    return out


# The committed top-level compose.yaml: the all-three spark render, pointing at build/all-three/.
TOP_LEVEL_PROFILE = "all-three"


def top_level_compose(loaded: LoadedProfile) -> str:
    options = RenderOptions(target="spark", bundle_dir=f"build/{loaded.profile.name}")
    return render_files(loaded, options)["compose.yaml"]
