"""Hostile text in every free-text profile field: the profile is either refused naming that field, or it
renders into files whose parsed structure is exactly the intended one - no extra Compose keys, mounts,
environment lines or argv tokens, and nothing Compose would interpolate.

Property-based (hypothesis): quotes, `$`, `${VAR}`, YAML/Jinja syntax, backslashes, newlines, NUL, bidi
overrides and non-ASCII letters, in each field in turn. The fast test parses the render with PyYAML; the
`compose` test asks `docker compose config` itself what it would run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import PurePosixPath

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkgate.bundle import render
from sparkgate.profile import loading as profiles
from sparkgate.profile.problems import ProfileError

# dotted field -> how to place the value into a profile document extending all-three.
FIELDS = {
    "description": lambda v: {"description": v},
    "model.path": lambda v: {"model": {"path": v}},
    "model.served_name": lambda v: {"model": {"served_name": v}},
    "model.architecture": lambda v: {"model": {"architecture": v}},
    # The Hub pin: shown in preflight's and model.pull's download command, recorded in the deploy record.
    "model.repo": lambda v: {"model": {"repo": v}},
    "model.revision": lambda v: {"model": {"revision": v}},
    "sglang.host": lambda v: {"sglang": {"host": v}},
    "sglang.reasoning_parser": lambda v: {"sglang": {"reasoning_parser": v}},
    "sglang.tool_call_parser": lambda v: {"sglang": {"tool_call_parser": v}},
    "sglang.attention_backend": lambda v: {"sglang": {"attention_backend": v}},
    "sglang.fp8_gemm_backend": lambda v: {"sglang": {"fp8_gemm_backend": v}},
    # A free-text (nargs "*", str) flag on the extra_args allow-list.
    "sglang.extra_args": lambda v: {"sglang": {"extra_args": ["--uvicorn-access-log-exclude-prefixes", v]}},
    "optimizations.humming.cache_dir": lambda v: {"optimizations": {"humming": {"cache_dir": v}}},
    # A declared EnvStr variable (free text as far as SGLang is concerned).
    "env.SGLANG_FP8_IGNORED_LAYERS": lambda v: {"env": {"SGLANG_FP8_IGNORED_LAYERS": v}},
    "env (name)": lambda v: {"env": {v: "1"}},
    # DSpark's free-text fields: the drafter mount point (a Compose volume target) and the drafter pin
    # (shown in preflight's download command).
    "optimizations.dspark.draft_model_path": lambda v: {"optimizations": {"dspark": {"draft_model_path": v}}},
    "optimizations.dspark.drafter_repo": lambda v: {"optimizations": {"dspark": {"drafter_repo": v}}},
    "optimizations.dspark.drafter_revision": lambda v: {"optimizations": {"dspark": {"drafter_revision": v}}},
    "optimizations.dspark.drafter_architecture": lambda v: {
        "optimizations": {"dspark": {"drafter_architecture": v}}},
}
# The shipped profile each field is placed into (all-three unless the field needs DSpark enabled).
BASES = {field: "dspark" for field in FIELDS if field.startswith("optimizations.dspark.")}

NASTY = [
    '"', "'", "$", "${HOME}", "$$", "${SPARKGATE_API_KEY_FILE:-/etc/shadow}", "{{ 7*7 }}", "{% raw %}", "\\", "\n",
    "\r\n", "\x00", "\t", "#", ": ", "- ", "[", "]", "{", "}", ",", "&a", "*a", "!!python/object", "\u202e",
    "\u2028", "é", "/", "..", " ", "=", "--api-key", "\\n", "'\n      - \"/:/host", "\"\n    privileged: true\n",
]
hostile_text = st.lists(st.one_of(st.sampled_from(NASTY), st.text(max_size=6)), min_size=1, max_size=5).map("".join)


def _write(tmp_path, field: str, value: str):
    document = {"name": "hostile", "extends": [BASES.get(field, "all-three")], "description": "hostile input"}
    for key, part in FIELDS[field](value).items():
        if isinstance(part, dict) and isinstance(document.get(key), dict):
            document[key].update(part)
        else:
            document[key] = part
    path = tmp_path / "hostile.yaml"
    path.write_text(yaml.safe_dump(document, allow_unicode=True))
    return path


def _literal(value):
    """What Compose makes of a rendered value: `$$` is a literal `$`; a lone `$` would be interpolation."""
    if isinstance(value, list):
        return [_literal(v) for v in value]
    assert "$" not in value.replace("$$", ""), f"unescaped $ would be interpolated by Compose: {value!r}"
    return value.replace("$$", "$")


def _load_or_refusal(tmp_path, field, value):
    path = _write(tmp_path, field, value)
    try:
        return profiles.load(str(path)), None
    except ProfileError as refused:
        return None, str(refused)


def _field_named(field: str, message: str) -> bool:
    shown = field.split(" ")[0]
    return any(shown in line for line in message.splitlines())


def _expected_volumes(loaded, target: str) -> list[str]:
    """The shipped parent's engine volumes, with only the model path, the Humming cache root and the DSpark
    drafter path moved."""
    reference = profiles.load(loaded.profile.extends[0])
    shipped = yaml.safe_load(render.render_files(reference, render.RenderOptions(target=target))["compose.yaml"])
    moves = {
        reference.profile.model.path: loaded.profile.model.path,
        str(PurePosixPath(reference.profile.optimizations.humming.cache_dir).parent):
            str(PurePosixPath(loaded.profile.optimizations.humming.cache_dir).parent),
        reference.profile.optimizations.dspark.draft_model_path: loaded.profile.optimizations.dspark.draft_model_path,
    }
    expected = []
    for volume in shipped["services"]["engine"]["volumes"]:
        source, target_dir, *mode = volume.rsplit(":", 2) if volume.endswith(":ro") else volume.rsplit(":", 1)
        moved = moves.get(target_dir, target_dir)
        if moved != target_dir and source.startswith("${"):  # a host default named after the mount point
            source = source.replace(f"/{PurePosixPath(target_dir).name}}}", f"/{PurePosixPath(moved).name}}}")
        expected.append(":".join([source, moved, *mode]))
    return expected


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(sorted(FIELDS)), value=hostile_text, target=st.sampled_from(render.TARGETS))
def test_hostile_text_is_refused_or_rendered_exactly(tmp_path, field, value, target):
    loaded, refusal = _load_or_refusal(tmp_path, field, value)
    if refusal is not None:
        assert _field_named(field, refusal), refusal
        assert all("Fix:" in line for line in refusal.splitlines())
        return
    files = render.render_files(loaded, render.RenderOptions(target=target))
    compose = yaml.safe_load(files["compose.yaml"])
    assert set(compose) == {"name", "services", "networks", "secrets", "volumes", "configs"}
    assert set(compose["services"]) == {"engine", "sentinel", "gateway", "prometheus-config", "prometheus"}
    # The bundle files travel inside compose.yaml as configs: each arrives as exactly the rendered file.
    assert {name: _literal(config["content"]) for name, config in compose["configs"].items()} == {
        name: files[name] for name in compose["configs"]
    }
    engine = compose["services"]["engine"]
    assert _literal(engine["command"]) == list(loaded.plan.argv) == json.loads(files["argv.json"])
    environment = {name: _literal(value) for name, value in engine["environment"].items()}
    assert {k: v for k, v in environment.items() if not k.startswith("SPARKGATE_SIM_")} == loaded.plan.env_map()
    assert json.loads(files["engine-env.json"]) == loaded.plan.env_map()
    assert engine["volumes"] == _expected_volumes(loaded, target)
    assert "privileged" not in engine and "cap_add" not in engine
    # The value itself arrives intact where it was meant to go.
    if field == "sglang.extra_args":
        assert list(loaded.plan.argv[-2:]) == ["--uvicorn-access-log-exclude-prefixes", value]
    if field.startswith("env.SGLANG"):
        assert loaded.plan.env_map()["SGLANG_FP8_IGNORED_LAYERS"] == value


@pytest.mark.compose
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=hostile_text, field=st.sampled_from(["sglang.extra_args", "env.SGLANG_FP8_IGNORED_LAYERS", "description"]))
def test_docker_compose_sees_exactly_the_intended_launch(tmp_path, value, field):
    loaded, refusal = _load_or_refusal(tmp_path, field, value)
    if refusal is not None:
        assert _field_named(field, refusal), refusal
        return
    out = render.render(loaded, render.RenderOptions(target="sim"), tmp_path / "bundle")
    docker = shutil.which("docker")
    assert docker, "docker CLI missing"
    result = subprocess.run(
        [docker, "compose", "-f", str(out / "compose.yaml"), "config", "--format", "json"],
        capture_output=True, text=True, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin:/usr/local/bin"},
    )
    assert result.returncode == 0, result.stderr
    model = json.loads(result.stdout)
    engine = model["services"]["engine"]
    for name, config in model["configs"].items():
        assert _literal(config["content"]) == (out / name).read_text(), name
    # `config` prints the model re-escaped for reuse as a compose file (a literal `$` as `$$`), after
    # interpolating everything else: had any profile text been interpolated, it would differ here.
    assert [_literal(token) for token in engine["command"]] == list(loaded.plan.argv)
    environment = {k: _literal(v) for k, v in engine["environment"].items() if not k.startswith("SPARKGATE_SIM_")}
    assert environment == loaded.plan.env_map()
    assert sorted(v["target"] for v in engine["volumes"]) == sorted(
        v.rsplit(":", 2)[1] if v.endswith(":ro") else v.rsplit(":", 1)[1] for v in _expected_volumes(loaded, "sim")
    )


@pytest.mark.parametrize("character", ["\x85", "\u2028", "\u2029", "\u202e"])
@pytest.mark.parametrize("field", ["sglang.extra_args", "description"])
def test_a_raw_character_yaml_would_fold_is_refused_before_yaml_reads_it(tmp_path, field, character):
    """YAML folds a raw U+0085/U+2028/U+2029 inside a quoted value into a space: checked after parsing, the value
    would be a different, harmless-looking one (found by the property test above)."""
    loaded, refusal = _load_or_refusal(tmp_path, field, f"a{character}b")
    assert loaded is None and _field_named(field, refusal), refusal
    assert f"U+{ord(character):04X}" in refusal and len(refusal.splitlines()) == 1


# Numeric fields a profile may set that reach the gate's thresholds and the gateway's body limit. Each hostile
# value is refused naming its field, or loads as a finite number inside its documented bounds, tightening only.
NUMERIC_FIELDS = {
    "gate.watch.min_mem_available_gib": (lambda v: {"gate": {"watch": {"min_mem_available_gib": v}}}, 4, 128),
    "gate.watch.max_swap_growth_mib": (lambda v: {"gate": {"watch": {"max_swap_growth_mib": v}}}, 0, 256),
    "gate.watch.stall_after_s": (lambda v: {"gate": {"watch": {"stall_after_s": v}}}, 5, 60),
    "gateway.max_body_mib": (lambda v: {"gateway": {"max_body_mib": v}}, 0.0625, 256),
}
hostile_number = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-(10**400), max_value=10**400),
    st.booleans(), st.none(), st.sampled_from(["5", "1e3", "nan", "inf", "0x10", "5; rm -rf /", "", "${HOME}"]),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=1),
)


def _numeric_value(loaded, field: str):
    section, *rest = field.split(".")
    value = getattr(loaded.profile, section)
    for part in rest:
        value = getattr(value, part)
    return value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(sorted(NUMERIC_FIELDS)), value=hostile_number)
def test_hostile_numbers_are_refused_or_load_inside_their_bounds(tmp_path, field, value):
    place, low, high = NUMERIC_FIELDS[field]
    path = tmp_path / "hostile.yaml"
    document = {"name": "hostile", "extends": ["all-three"], "description": "hostile number", **place(value)}
    path.write_text(yaml.safe_dump(document, allow_unicode=True))
    try:
        loaded = profiles.load(str(path))
    except ProfileError as refused:
        message = str(refused)
        assert _field_named(field, message) and len(message.splitlines()) == 1 and "Fix:" in message, message
        return
    # Only a YAML number is a number: `true`, `"5"` or `.inf` are mistakes, never quietly read as 1, 5 or "no limit".
    assert isinstance(value, (int, float)) and not isinstance(value, bool), (field, value)
    got = _numeric_value(loaded, field)
    assert isinstance(got, float) and not isinstance(got, bool) and low <= got <= high, (field, value, got)
    files = render.render_files(loaded, render.RenderOptions(target="sim"))
    expectations = json.loads(files["expectations.json"])
    if field == "gateway.max_body_mib":
        # The limit reaches HAProxy as one integer byte count, at least one byte.
        limit = [line for line in files["haproxy.cfg"].splitlines() if "req.hdr_val(content-length) gt" in line]
        assert len(limit) == 1 and limit[0].split(" gt ")[1].rstrip(" }") == str(int(got * 1024 * 1024))
    elif field == "gate.watch.stall_after_s":
        assert expectations["stall"] == {"after_s": got}
    else:
        assert expectations["host"][field.rsplit(".", 1)[1]] == got
