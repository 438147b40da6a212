"""Rendered bundles: deterministic, atomic, parseable, schema-valid, and in sync with the committed files."""

from __future__ import annotations

import json
import shutil
import subprocess
from importlib import resources

import jsonschema
import pytest
import yaml

from sparkgate.bundle import render, schema
from sparkgate.images import load_lock
from sparkgate.profile import loading as profiles
from sparkgate.sglang import flags as F

SHIPPED = profiles.available_profiles()
TARGETS = render.TARGETS


@pytest.fixture(scope="module")
def compose_spec():
    text = resources.files("check_jsonschema").joinpath("builtin_schemas/vendor/compose-spec.json").read_text()
    return json.loads(text)


def rendered(name, target="spark"):
    return render.render_files(profiles.load(name), render.RenderOptions(target=target))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", SHIPPED)
def test_render_is_deterministic_and_complete(name, target):
    first, second = rendered(name, target), rendered(name, target)
    assert first == second
    assert set(first) == {
        "compose.yaml", "engine-env.json", "argv.json", "expectations.json", "manifest.json",
        "haproxy.cfg", "gateway-gate.lua", "gateway-503.http", "prometheus.yml", "sparkgate-rules.yml",
        *(["preflight.json"] if target == "spark" else []),
    }
    for text in first.values():
        assert "{{" not in text and "{%" not in text


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", SHIPPED)
def test_compose_matches_compose_spec(name, target, compose_spec):
    document = yaml.safe_load(rendered(name, target)["compose.yaml"])
    jsonschema.validate(document, compose_spec)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", SHIPPED)
def test_bundle_contents_agree(name, target):
    files = rendered(name, target)
    loaded = profiles.load(name)
    compose = yaml.safe_load(files["compose.yaml"])
    engine = compose["services"]["engine"]
    argv = json.loads(files["argv.json"])
    assert argv == list(loaded.plan.argv)
    assert engine["command"] == argv
    assert "ports" not in engine, "the engine must not publish a port"
    # Opt-in profiles aside (monitoring: Prometheus on 127.0.0.1 only, tests/unit/test_monitoring.py).
    published = {name: svc.get("ports") for name, svc in compose["services"].items()
                 if svc.get("ports") and not svc.get("profiles")}
    assert list(published) == ["gateway"], "the gateway is the only published service"
    assert published["gateway"] == ["${SPARKGATE_GATEWAY_BIND:-127.0.0.1}:${SPARKGATE_GATEWAY_PORT:-18000}:8080"]
    assert engine["pid"] == "service:sentinel"
    assert compose["networks"]["engine"]["internal"] is True
    assert engine["networks"] == ["engine"] and compose["services"]["sentinel"]["networks"] == ["engine"]
    assert engine["restart"] == "no"
    assert engine["healthcheck"]["test"][0] == "CMD"
    assert "env_file" not in engine, "the engine environment lives in compose.yaml, not in a dotenv file"
    environment = json.loads(files["engine-env.json"])
    assert environment == loaded.plan.env_map()
    assert {k: v for k, v in engine["environment"].items() if not k.startswith("SPARKGATE_SIM_")} == environment
    expectations = json.loads(files["expectations.json"])
    assert expectations["profile"] == name and expectations["requested"] == loaded.profile.requested()
    manifest = json.loads(files["manifest.json"])
    assert manifest["generated_from"] == f"profiles/{name}.yaml"
    import hashlib

    for file_name, digest in manifest["files"].items():
        assert hashlib.sha256(files[file_name].encode()).hexdigest() == digest
    assert files["compose.yaml"].startswith(f'# "generated from profiles/{name}.yaml')
    assert "do not edit" in files["compose.yaml"].splitlines()[0]


def test_spark_engine_shape():
    engine = yaml.safe_load(rendered("all-three")["compose.yaml"])["services"]["engine"]
    devices = engine["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert engine["ipc"] == "host"
    assert engine["ulimits"] == {"memlock": -1, "stack": 67108864}
    model_mount = [v for v in engine["volumes"] if v.endswith(":ro")]
    assert len(model_mount) == 1 and ":/models/Ling-3.0-flash-fp4:ro" in model_mount[0]
    targets = {v.split(":")[-1] if not v.endswith(":ro") else None for v in engine["volumes"]}
    assert {"/root/.humming", "/root/.cache/flashinfer", "/root/.cache/huggingface", "/var/log/sparkgate"} <= targets
    start = engine["healthcheck"]["start_period"]
    assert start.endswith("m") and int(start[:-1]) >= 15


def test_sim_target_has_no_gpu_keys_and_same_launch():
    spark = yaml.safe_load(rendered("all-three", "spark")["compose.yaml"])["services"]["engine"]
    sim = yaml.safe_load(rendered("all-three", "sim")["compose.yaml"])["services"]["engine"]
    assert "deploy" not in sim and "memlock" not in sim["ulimits"]
    assert sim["command"] == spark["command"]
    assert sim["environment"]["SPARKGATE_SIM_IMAGE"] == "fork"
    assert rendered("all-three", "sim")["engine-env.json"] == rendered("all-three")["engine-env.json"]
    assert {k: v for k, v in sim["environment"].items() if not k.startswith("SPARKGATE_SIM_")} == spark["environment"]


def test_expectations_carry_gate_thresholds():
    expectations = json.loads(rendered("all-three")["expectations.json"])
    assert expectations["optimizations"]["mtp"]["min_accept_length"] == 2.0
    assert expectations["optimizations"]["mtp"]["module_sharing_required"] is True
    assert expectations["speed"]["baseline_decode_tok_s"] == 37.81
    assert expectations["speed"]["must_beat_baseline"] is True
    baseline = json.loads(rendered("baseline")["expectations.json"])
    assert baseline["requested"] == [] and baseline["cuda_graph"]["decode_required"] is True


def test_render_writes_atomically_and_keeps_old_bundle_on_failure(tmp_path, monkeypatch):
    out = tmp_path / "bundle"
    render.render(profiles.load("baseline"), render.RenderOptions(), out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    render.render(profiles.load("baseline"), render.RenderOptions(), out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # byte-identical re-render

    def broken_write(self, text, encoding=None):
        raise OSError("disk full")

    monkeypatch.setattr("pathlib.Path.write_text", broken_write)
    with pytest.raises(OSError):
        render.render(profiles.load("all-three"), render.RenderOptions(), out)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["bundle"], "no temp directories left behind"


def test_top_level_compose_files_are_the_all_three_render(repo):
    expected = render.top_level_files(profiles.load("all-three"))
    assert set(expected) == {"compose.yaml", "compose.sim.yaml"}
    for name, text in expected.items():
        assert (repo / name).read_text() == text, f"{name} is stale: run `invoke render-top-level`"
    compose = yaml.safe_load(expected["compose.yaml"])
    engine = compose["services"]["engine"]
    assert engine["environment"] == profiles.load("all-three").plan.env_map()
    assert engine["command"] == list(profiles.load("all-three").plan.argv)
    # Every service builds what it runs from this checkout: the engine from the top-level Dockerfile, the
    # runtime image (sentinel, gateway) from docker/runtime.Dockerfile on the digest-pinned registry base.
    assert engine["build"] == {"context": ".", "dockerfile": "Dockerfile"}
    base = load_lock().base_images["runtime-base"]
    for service in ("sentinel", "gateway"):
        build = compose["services"][service]["build"]
        assert build["context"] == "." and build["dockerfile"] == "docker/runtime.Dockerfile"
        assert build["args"] == {"BASE_IMAGE": f"${{SPARKGATE_RUNTIME_BASE:-{base.ref}@{base.digest}}}"}
        assert build["network"] == "${SPARKGATE_BUILD_NETWORK:-default}"


def test_per_deploy_renders_have_no_build_sections():
    """`invoke deploy` runs `up --no-build` on images built beforehand; only the top-level files build."""
    for target in TARGETS:
        services = yaml.safe_load(rendered("all-three", target)["compose.yaml"])["services"]
        assert not [name for name, service in services.items() if "build" in service]


@pytest.mark.parametrize("target", TARGETS)
def test_compose_is_self_contained(target):
    """The files the sentinel and the gateway read travel inside compose.yaml as configs: no service mounts
    a host path, and each config holds exactly the rendered file (Compose-escaped)."""
    files = rendered("all-three", target)
    compose = yaml.safe_load(files["compose.yaml"])
    for name, service in compose["services"].items():
        host_paths = [v for v in service.get("volumes", []) if v.startswith((".", "/"))]
        assert name == "engine" or not host_paths, f"{name} mounts {host_paths}"
    mounted = {
        name: {c["target"]: c["source"] for c in service.get("configs", [])}
        for name, service in compose["services"].items()
    }
    assert mounted["sentinel"] == {f"/bundle/{n}": n for n in ("argv.json", "engine-env.json", "expectations.json")}
    assert mounted["gateway"] == {f"/bundle/{n}": n for n in ("haproxy.cfg", "gateway-gate.lua", "gateway-503.http")}
    if target == "spark":  # the host preflight the engine's entrypoint runs (deploy/engine_preflight.py)
        assert mounted["engine"] == {"/bundle/preflight.json": "preflight.json"}
    else:
        assert "configs" not in compose["services"]["engine"]
    for source in {*mounted["sentinel"].values(), *mounted["gateway"].values()}:
        assert compose["configs"][source] == {"content": render.compose_literal(files[source])}
    assert "/bundle/haproxy.cfg" in compose["services"]["gateway"]["entrypoint"]


def test_committed_schema_is_current(repo):
    assert (repo / schema.SCHEMA_PATH).read_text() == schema.schema_text(), "stale: run `invoke schema`"


def test_schema_rejects_unknown_keys(repo):
    document = json.loads((repo / schema.SCHEMA_PATH).read_text())
    assert document["additionalProperties"] is False
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "x", "description": "y", "optimisations": {}}, document)


@pytest.mark.compose
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", SHIPPED)
def test_docker_compose_config_accepts_render(name, target, tmp_path):
    docker = shutil.which("docker")
    assert docker, "docker CLI missing"
    out = render.render(profiles.load(name), render.RenderOptions(target=target), tmp_path / name)
    result = subprocess.run(
        [docker, "compose", "-f", str(out / "compose.yaml"), "config", "-q"],
        capture_output=True, text=True, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin:/usr/local/bin"},
    )
    assert result.returncode == 0, result.stderr


def test_fp32_flag_never_meets_fp8_env_in_any_shipped_bundle():
    for name in SHIPPED:
        for target in TARGETS:
            files = rendered(name, target)
            fp8 = json.loads(files["engine-env.json"]).get(F.FP8_LM_HEAD_ENV) == "1"
            fp32 = F.ENABLE_FP32_LM_HEAD in json.loads(files["argv.json"])
            assert not (fp8 and fp32), name


def test_every_template_substitution_goes_through_tojson(repo):
    """Templates only substitute, and only JSON-encoded values: a value can never end a quoted string,
    start a YAML key or a new config line, whatever it contains."""
    import re

    expression = re.compile(r"{{(.*?)}}", re.S)
    offenders = []
    for template in sorted((repo / "templates").rglob("*.j2")):
        for match in expression.finditer(template.read_text()):
            if not re.search(r"\|\s*tojson(\(.*\))?\s*$", match.group(1).strip()):
                offenders.append(f"{template.relative_to(repo)}: {{{{{match.group(1)}}}}}")
    assert not offenders, "\n".join(offenders)


def _compose_config(*files, cwd) -> dict:
    argv = ["docker", "compose", "-p", "sparkgate-config-check"]
    for name in files:
        argv += ["-f", str(name)]
    result = subprocess.run([*argv, "config", "--format", "json"], capture_output=True, text=True, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.compose
def test_top_level_compose_files_need_nothing_rendered(repo, tmp_path):
    """The committed compose files alone, in an otherwise empty directory (no build/, no bundle): Compose
    accepts them, with and without the simulator override."""
    for name in ("compose.yaml", "compose.sim.yaml"):
        shutil.copy(repo / name, tmp_path / name)
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin:/usr/local/bin"}
    for files in (["compose.yaml"], ["compose.yaml", "compose.sim.yaml"]):
        argv = ["docker", "compose", *sum((["-f", f] for f in files), []), "config", "-q"]
        result = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env)
        assert result.returncode == 0, f"{files}: {result.stderr}"


@pytest.mark.compose
def test_sim_override_merges_into_the_sim_render(repo, tmp_path):
    """compose.yaml + compose.sim.yaml is, service by service, the sim target's render of all-three: the
    override adds nothing the sim render lacks and leaves nothing of the Spark engine behind (GPU, ipc,
    memlock, model bind mount)."""
    sim = render.render_files(profiles.load("all-three"), render.RenderOptions(target="sim", build_sections=True))
    (tmp_path / "compose.yaml").write_text(sim["compose.yaml"])
    merged = _compose_config("compose.yaml", "compose.sim.yaml", cwd=repo)
    expected = _compose_config("compose.yaml", cwd=tmp_path)
    for model in (merged, expected):
        for service in model["services"].values():
            service["build"]["context"] = "<checkout>"
    assert merged["services"] == expected["services"]
    assert merged["configs"] == expected["configs"]
    assert "deploy" not in merged["services"]["engine"] and "ipc" not in merged["services"]["engine"]


def test_top_level_render_refuses_an_unpinned_runtime_base(monkeypatch):
    """No digest, no top-level compose file: it would otherwise build on whatever the tag points at today."""
    from sparkgate.errors import Refusal

    lock = load_lock()
    base = lock.base_images["runtime-base"].model_copy(update={"digest": None})
    unpinned = lock.model_copy(update={"base_images": {**lock.base_images, "runtime-base": base}})
    monkeypatch.setattr(render, "load_lock", lambda: unpinned)
    with pytest.raises(Refusal) as refused:
        render.top_level_files(profiles.load("all-three"))
    message = str(refused.value)
    assert "\n" not in message
    assert "base_images.runtime-base.digest: observed null" in message and "Fix: run `invoke images.lock`" in message
    # Per-deploy renders build nothing, so they do not need the pin.
    assert render.render_files(profiles.load("all-three"), render.RenderOptions(target="sim"))["compose.yaml"]


def test_dspark_drafter_is_a_second_read_only_model_mount():
    spark = yaml.safe_load(rendered("dspark", "spark")["compose.yaml"])
    read_only = [v for v in spark["services"]["engine"]["volumes"] if v.endswith(":ro")]
    assert read_only == [
        "${SPARKGATE_MODEL_DIR:-${HOME}/models/Ling-3.0-flash-fp4}:/models/Ling-3.0-flash-fp4:ro",
        "${SPARKGATE_DSPARK_DIR:-${HOME}/models/Ling-3.0-flash-dspark}:/models/Ling-3.0-flash-dspark:ro",
    ]
    sim = yaml.safe_load(rendered("dspark", "sim")["compose.yaml"])
    assert "sim-dspark-drafter:/models/Ling-3.0-flash-dspark:ro" in sim["services"]["engine"]["volumes"]
    assert sim["volumes"]["sim-dspark-drafter"] == {}
    # The drafter path the engine is told is the path it is mounted at.
    argv = json.loads(rendered("dspark")["argv.json"])
    assert argv[argv.index(F.SPECULATIVE_DRAFT_MODEL_PATH) + 1] == "/models/Ling-3.0-flash-dspark"


@pytest.mark.parametrize("target", TARGETS)
def test_no_drafter_mount_without_dspark(target):
    compose = yaml.safe_load(rendered("all-three", target)["compose.yaml"])
    assert not [v for v in compose["services"]["engine"]["volumes"] if "dspark" in v.lower()]
    assert "sim-dspark-drafter" not in compose["volumes"]


def test_the_gateway_body_limit_comes_from_the_profile(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text("name: small\ndescription: a 1 MiB body limit\nextends: [all-three]\ngateway:\n  max_body_mib: 1\n")
    files = render.render_files(profiles.load(str(path)), render.RenderOptions(target="sim"))
    limits = [line for line in files["haproxy.cfg"].splitlines() if "status 413" in line]
    assert len(limits) == 1 and limits[0].endswith("{ req.hdr_val(content-length) gt 1048576 }")
    shipped = render.render_files(profiles.load("all-three"), render.RenderOptions(target="sim"))
    assert "gt 16777216 }" in shipped["haproxy.cfg"]
