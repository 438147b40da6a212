"""Refuse early, with one actionable line, anything that would make a deploy fail later or hurt the host."""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparkgate import paths
from sparkgate.deploy import checkpoint, docker_cli, drafter

# Ling-3.0-flash needs ~60-66 GB of weights plus KV cache and graphs in unified memory; another model
# still resident (or memory not yet released by a crashed engine) wedges the GB10 driver instead of OOMing.
SPARK_MIN_MEM_AVAILABLE_GIB = 85
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@dataclass(frozen=True)
class PreflightFinding:
    check: str
    ok: bool
    detail: str  # observed value, or the refusal with its fix

    def __str__(self) -> str:
        return f"[{'ok' if self.ok else 'FAIL'}] {self.check}: {self.detail}"


def docker_reachable() -> PreflightFinding:
    try:
        result = docker_cli.run(["version", "--format", "{{.Server.Version}}"], check=False, timeout=20)
    except docker_cli.DockerError as exc:
        return PreflightFinding("docker", False, str(exc))
    if result.returncode != 0:
        return PreflightFinding("docker", False, "Docker engine not reachable. Fix: start dockerd (see docs/runbook.md) "
                                "and check `docker version`")
    compose = docker_cli.run(["compose", "version", "--short"], check=False, timeout=20)
    if compose.returncode != 0:
        return PreflightFinding("docker", False, "Compose v2 missing (`docker compose`). Fix: run `bash scripts/bootstrap`")
    return PreflightFinding("docker", True, f"engine {result.stdout.strip()}, compose {compose.stdout.strip()}")


def _listeners(port: int, proc_net: Path = Path("/proc/net")) -> list[str]:
    """Local addresses with a socket in LISTEN state on `port`, from the kernel's own tables."""
    found = []
    for table, width in (("tcp", 8), ("tcp6", 32)):
        try:
            lines = (proc_net / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != "0A":  # 0A = TCP_LISTEN
                continue
            address, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) == port and len(address) == width:
                found.append(_address(address))
    return found


def _address(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    # /proc/net prints each 32-bit word in host (little-endian) order.
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if len(words) == 4 else socket.AF_INET6, words)


def port_free(bind: str, port: int, proc_net: Path = Path("/proc/net")) -> PreflightFinding:
    """Free means no socket listens there (on this address or a wildcard) and no container publishes it.
    Connections in TIME_WAIT, which a stack just taken down leaves for a minute, do not count: they are
    not listeners, and a bind-probe would trip over them."""
    wildcard = {"0.0.0.0", "::", bind}
    holders = [a for a in _listeners(port, proc_net) if a in wildcard or bind in ("0.0.0.0", "::")]
    if not holders and not proc_net.is_dir():
        # No /proc (not Linux): fall back to a bind probe.
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((bind, port))
            except OSError:
                holders = [bind]
    if holders:
        return PreflightFinding("gateway port", False, f"{bind}:{port} is in use (a listener on "
                                f"{', '.join(sorted(set(holders)))}). Fix: `invoke down` the stack holding it, or pass --port")
    publishers = docker_cli.containers_publishing(port)
    if publishers:
        return PreflightFinding("gateway port", False, f"{bind}:{port} is published by container(s) "
                                f"{', '.join(publishers)}. Fix: stop them, or pass --port")
    return PreflightFinding("gateway port", True, f"{bind}:{port} free")


def gateway_port(bind: str, port: int, project: docker_cli.Project | None = None) -> PreflightFinding:
    """The gateway port is free, or held by this same project's gateway (which the redeploy stops first)."""
    own = project is not None and port in project.published_ports("gateway")
    finding = port_free(bind, port)
    if finding.ok or project is None:
        return finding
    if own:
        return PreflightFinding("gateway port", True, f"{bind}:{port} held by {project.name}'s own gateway, which "
                                "keeps serving until this deploy has rendered, then is replaced")
    return finding


def prometheus_port(port: int, project: docker_cli.Project | None = None) -> PreflightFinding:
    """The monitoring profile's Prometheus port on 127.0.0.1: free, or held by this project's own Prometheus."""
    finding = port_free("127.0.0.1", port)
    if finding.ok:
        return PreflightFinding("prometheus port", True, f"127.0.0.1:{port} free")
    if project is not None and port in project.published_ports("prometheus"):
        return PreflightFinding("prometheus port", True, f"127.0.0.1:{port} held by {project.name}'s own Prometheus, "
                                "which is replaced with the stack")
    return PreflightFinding("prometheus port", False, finding.detail.replace("or pass --port", "or pass --monitoring-port"))


def api_key(bind: str, key_file: str | None) -> PreflightFinding:
    if bind in LOOPBACK:
        return PreflightFinding("api key", True, "loopback only; no key required")
    if not key_file or not Path(key_file).is_file() or not Path(key_file).read_text().strip():
        return PreflightFinding("api key", False, f"binding {bind} exposes the gateway beyond this host. Fix: pass "
                                "--api-key-file FILE (a file holding the key)")
    return PreflightFinding("api key", True, f"key from {key_file}")


def images_present(references: list[str]) -> PreflightFinding:
    missing = [ref for ref in references if docker_cli.image_id(ref) is None]
    if missing:
        return PreflightFinding("images", False, f"missing {', '.join(missing)}. Fix: `invoke images.runtime` builds "
                                "the runtime image (after `invoke images.base` on a new host); `invoke images.spark` "
                                "builds the Spark engine image on the Spark")
    return PreflightFinding("images", True, ", ".join(references))


def spark_host(model_dir: Path, cache_dir: Path, mem_min_gib: float = SPARK_MIN_MEM_AVAILABLE_GIB,
               memory_held_by_own_engine: bool = False, mem_why: str = "") -> list[PreflightFinding]:
    """Host facts. With `memory_held_by_own_engine` (a redeploy) the memory check waits until the old stack
    has stopped: its engine holds the memory the new one needs, and it keeps serving until then."""
    findings = []
    arch = platform.machine()
    findings.append(PreflightFinding("arch", arch in ("aarch64", "arm64"), arch if arch in ("aarch64", "arm64") else
                                     f"{arch}: the Spark image is linux/arm64. Fix: deploy on the DGX Spark, or use --target sim"))
    runtimes = docker_cli.run(["info", "--format", "{{json .Runtimes}}"], check=False).stdout
    has_nvidia = "nvidia" in runtimes
    findings.append(PreflightFinding("nvidia runtime", has_nvidia, "nvidia runtime registered" if has_nvidia else
                                     "Docker has no nvidia runtime. Fix: install nvidia-container-toolkit and "
                                     "`nvidia-ctk runtime configure --runtime=docker`, then restart dockerd"))
    has_model = (model_dir / "config.json").is_file()
    findings.append(PreflightFinding("model", has_model, str(model_dir) if has_model else
                                     f"{model_dir}/config.json missing. Fix: `invoke model.pull --profile <profile>` "
                                     "downloads the pinned checkpoint there, or set SPARKGATE_MODEL_DIR to where it is"))
    if memory_held_by_own_engine:
        findings.append(PreflightFinding("memory", True, "deferred: this project's running engine holds it; checked "
                                         "after that stack stops"))
    else:
        findings.append(memory(mem_min_gib, mem_why))
    for sub in ("humming", "flashinfer"):
        path = cache_dir / sub
        # Checked without creating anything (a dry run must not touch the host): the directory, or the
        # nearest existing parent it would be created in, must be writable.
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        ok = existing.is_dir() and os.access(existing, os.W_OK)
        findings.append(PreflightFinding(f"{sub} cache", ok, str(path) if ok else
                                         f"{path} not writable. Fix: chown it or set SPARKGATE_CACHE_DIR"))
    return findings


def model_dir(model_path: str) -> Path:
    """The host directory rendered compose.yaml mounts at model.path (SPARKGATE_MODEL_DIR)."""
    return paths.model_dir(model_path).host()


def model_checkpoint(profile, reference: str, directory: Path | None = None,
                     say: Callable[[str], None] = lambda _: None) -> list[PreflightFinding]:
    """The target checkpoint directory (sparkgate/deploy/checkpoint.py): config fields, index, shard headers and
    download records, without hashing the weights; one finding per fault, or one passing finding."""
    directory = directory or model_dir(profile.model.path)
    expect = checkpoint.Expect.from_profile(profile, reference)
    report = checkpoint.check(directory, expect, say=say)
    if report.problems:
        return [PreflightFinding("model checkpoint", False, line) for line in report.problems]
    return [PreflightFinding("model checkpoint", True, report.summary(directory, expect))]


def dspark_drafter_dir(draft_model_path: str) -> Path:
    """The host directory rendered compose.yaml mounts at the drafter path (SPARKGATE_DSPARK_DIR)."""
    return paths.dspark_dir(draft_model_path).host()


def dspark_drafter(profile, say: Callable[[str], None] = lambda _: None,
                   directory: Path | None = None) -> list[PreflightFinding]:
    """The DSpark drafter directory, when the profile enables DSpark: one finding per fault (see
    sparkgate/deploy/drafter.py), or one passing finding."""
    pin = drafter.Pin.of(profile.optimizations.dspark, profile.sglang.context_length)
    if pin is None:
        return []
    directory = directory or dspark_drafter_dir(profile.optimizations.dspark.draft_model_path)
    found = drafter.problems(directory, pin, say)
    if found:
        return [PreflightFinding("dspark drafter", False, line) for line in found]
    return [PreflightFinding("dspark drafter", True, f"{directory}: {pin.architecture} at {pin.revision[:12]}, every "
                             "file as downloaded, none added")]


def memory(mem_min_gib: float = SPARK_MIN_MEM_AVAILABLE_GIB, why: str = "") -> PreflightFinding:
    """`why`: what the threshold is made of (the profile's memory plan, sparkgate/bench/sizing.py)."""
    available = mem_available_gib()
    need = f"{mem_min_gib:g} GiB" + (f" ({why})" if why else "")
    if available is None:
        return PreflightFinding("memory", False, f"cannot read MemAvailable from /proc/meminfo (needs {need}): "
                                "without it nothing proves the memory is free. Fix: run on the Spark's own Linux, "
                                "with /proc mounted")
    if available >= mem_min_gib:
        return PreflightFinding("memory", True, f"MemAvailable {available:.1f} GiB >= {need}")
    return PreflightFinding("memory", False, f"MemAvailable {available:.1f} GiB < {need}: another model is "
                            "still resident or memory is not yet released, or the profile asks for more than this "
                            "host has. Fix: stop it, wait, `sync; echo 3 > /proc/sys/vm/drop_caches`, retry; or "
                            "lower max_mamba_cache_size / raise mem_fraction_static in the profile")


def memory_floor(profile) -> tuple[float, str]:
    """The MemAvailable a Spark start needs for `profile`: the resident-model guard, or, where higher, the free
    memory below which SGLang cannot size a KV pool for the profile's weights (the memory plan)."""
    from sparkgate.bench.sizing import start_floor_gib

    floor, why = start_floor_gib(profile)
    if floor <= SPARK_MIN_MEM_AVAILABLE_GIB:
        return SPARK_MIN_MEM_AVAILABLE_GIB, "no other model resident"
    return floor, why


def mem_available_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / (1024 * 1024)
    except OSError:
        return None
    return None
