"""Rendered bundles: deterministic, atomic, parseable, schema-valid, and in sync with the committed files."""

from __future__ import annotations

import json
import shutil
import subprocess
from importlib import resources

import jsonschema
import pytest
import yaml

from sparkgate import profiles, render, schema
from sparkgate import sglang_flags as F

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
        "haproxy.cfg", "gateway-gate.lua", "gateway-503.http",
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
    published = {name: svc.get("ports") for name, svc in compose["services"].items() if svc.get("ports")}
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


def test_top_level_compose_is_the_all_three_render(repo):
    expected = render.top_level_compose(profiles.load("all-three"))
    assert (repo / "compose.yaml").read_text() == expected, "stale: run `invoke render-top-level`"
    engine = yaml.safe_load(expected)["services"]["engine"]
    assert engine["environment"] == profiles.load("all-three").plan.env_map()
    assert engine["command"] == list(profiles.load("all-three").plan.argv)


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
