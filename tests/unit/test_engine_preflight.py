"""`docker compose up` on a Spark: the engine's entrypoint runs the host preflight the render wrote into the bundle
(preflight.json) before SGLang starts, and refuses with the deploy's one-line reasons."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkgate.bundle import render
from sparkgate.deploy import engine_preflight, preflight
from sparkgate.profile import loading as profiles
from sparkgate.runtime import engine_entrypoint, engine_run
from tests.plugins import checkpoints as ck


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A Spark-like host: the pinned checkpoint, a writable cache, 120 GiB available; preflight.json pointing at them."""
    made = ck.build(tmp_path / "model")
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setattr(preflight, "mem_available_gib", lambda: 120.0)
    rendered = json.loads(render.render_files(profiles.load("all-three"),
                                              render.RenderOptions(target="spark"))["preflight.json"])
    rendered.update(model_dir=str(made.directory), cache_dirs={"humming": str(cache)})
    rendered["checkpoint"].update(repo=ck.REPO, revision=ck.REVISION, architecture=ck.ARCHITECTURE)
    path = tmp_path / "preflight.json"
    path.write_text(json.dumps(rendered))
    return path, made


def run(path, tmp_path, capsys) -> tuple[int, str]:
    # `launcher` sim with a log file nowhere: only the guard runs before this test's refusal (or the launch would).
    code = engine_entrypoint.run("sim", None, ["--model-path", "/m"], admin_dir=tmp_path / "nowhere",
                                 preflight_file=path)
    return code, capsys.readouterr().err.strip()


def test_the_rendered_file_holds_the_profiles_floor_and_pins():
    files = render.render_files(profiles.load("all-three"), render.RenderOptions(target="spark"))
    plan = engine_preflight.Plan.model_validate_json(files["preflight.json"])
    assert plan.mem_min_gib == preflight.memory_floor(profiles.load("all-three").profile)[0]
    assert plan.model_dir == "/models/Ling-3.0-flash-fp4" and plan.checkpoint.mtp and plan.checkpoint.humming
    assert plan.drafter is None
    dspark = render.render_files(profiles.load("dspark"), render.RenderOptions(target="spark"))
    assert engine_preflight.Plan.model_validate_json(dspark["preflight.json"]).drafter.architecture == "LingDSparkModel"
    assert "preflight.json" not in render.render_files(profiles.load("all-three"), render.RenderOptions(target="sim"))


def test_a_healthy_host_passes(host):
    path, _ = host
    assert engine_preflight.refusal(path) is None


def test_too_little_memory_refuses_before_the_engine_starts(host, tmp_path, capsys, monkeypatch):
    path, _ = host
    monkeypatch.setattr(preflight, "mem_available_gib", lambda: 90.0)
    code, err = run(path, tmp_path, capsys)
    assert code == engine_run.EXIT_REFUSED
    floor = preflight.memory_floor(profiles.load("all-three").profile)[0]
    assert err.startswith(f"sparkgate engine preflight failed: memory: MemAvailable 90.0 GiB < {floor:g} GiB (")
    assert "\n" not in err and not (tmp_path / "nowhere").exists(), "nothing made before the refusal"


def test_a_broken_checkpoint_refuses_with_the_deploys_line(host, tmp_path, capsys):
    path, made = host
    (made.directory / ck.shard_name(0, 3)).unlink()
    code, err = run(path, tmp_path, capsys)
    assert code == engine_run.EXIT_REFUSED
    assert err.startswith("sparkgate engine preflight failed: model checkpoint: ") and "Fix:" in err


def test_several_failures_name_the_first_and_count_the_rest(host, tmp_path, capsys, monkeypatch):
    path, made = host
    monkeypatch.setattr(preflight, "mem_available_gib", lambda: None)
    (made.directory / "config.json").unlink()
    _, err = run(path, tmp_path, capsys)
    assert err.startswith("sparkgate engine preflight failed: memory: cannot read MemAvailable")
    assert err.endswith(" more)")


@pytest.mark.parametrize("content", [b"", b"{", b"[]", json.dumps({"mem_min_gib": "lots"}).encode()])
def test_a_damaged_file_refuses_in_one_line_naming_it(tmp_path, content):
    path = tmp_path / "preflight.json"
    path.write_bytes(content)
    line = engine_preflight.refusal(path)
    assert line.startswith(f"sparkgate engine preflight failed: {path}") and "\n" not in line and "re-render" in line


def test_a_missing_file_refuses_with_the_line_the_start_judgement_reads(tmp_path):
    from sparkgate.evidence import startup

    line = engine_preflight.refusal(tmp_path / "absent.json")
    assert line.startswith("sparkgate engine preflight failed: cannot read")
    assert startup.likely_cause(line + "\n", [], 78).name == "the engine's host preflight refused the start"


@given(st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=6))
def test_hostile_json_never_passes(document):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "preflight.json"
        path.write_text(json.dumps(document))
        line = engine_preflight.refusal(path)
    assert line is not None and "\n" not in line


def test_a_refused_start_leaves_its_own_records_and_is_judged_as_the_preflights(host, tmp_path, capsys, monkeypatch):
    """Not the previous start's: the sentinel captures this one, named by its own records (engine_run)."""
    from sparkgate.evidence import startup
    from sparkgate.runtime import engine_run

    path, _ = host
    monkeypatch.setattr(preflight, "mem_available_gib", lambda: 90.0)
    logs_dir = tmp_path / "logs"
    logs_dir.mkdir()
    (logs_dir / engine_run.EXIT_FILE).write_text("an earlier start's record")
    code = engine_entrypoint.run("sim", logs_dir / "engine.log", ["--model-path", "/m"], admin_dir=tmp_path / "nowhere",
                                 preflight_file=path)
    assert code == engine_run.EXIT_REFUSED
    record = engine_run.EngineRun.model_validate_json((logs_dir / engine_run.EXIT_FILE).read_text())
    assert record.exit_code == engine_run.EXIT_REFUSED and record.phases == []
    text = (logs_dir / "engine.log").read_text()
    assert text.startswith("sparkgate engine preflight failed: memory: MemAvailable 90.0 GiB")
    cause = startup.likely_cause(text, [], record.exit_code, record.signal)
    assert cause.name == "the engine's host preflight refused the start" and "MemAvailable 90.0 GiB" in cause.hint


@pytest.mark.parametrize("value", [float("-inf"), -1.0, 0.0, float("nan"), 1e300])
def test_a_floor_that_is_no_floor_refuses(host, value):
    path, _ = host
    document = json.loads(path.read_text())
    document["mem_min_gib"] = value
    path.write_text(json.dumps(document))
    line = engine_preflight.refusal(path)
    assert line is not None and "mem_min_gib" in line and "re-render" in line
