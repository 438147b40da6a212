import json
import sys
from pathlib import Path

import pytest

from sparkgate.bench import compare_runs, runs

from .runfactory import make_run

ALL = ("humming", "fp8_lm_head", "mtp")


def test_compare_against_the_baseline(tmp_path):
    correct = [True] * 90 + [False] * 10
    base = make_run(tmp_path, "r1-baseline", "baseline", speed=37.8, correct=correct)
    fast = make_run(tmp_path, "r2-all", "all-three", speed=53.9, accept=2.68, requested=ALL, correct=correct)
    comparison = compare_runs.compare([runs.load(fast), runs.load(base)])  # baseline picked by profile, not order
    assert comparison.baseline.run.id == "r1-baseline"
    row = next(r for r in comparison.rows if r.run.id == "r2-all")
    assert row.delta_pct["decode_tok_s"] == pytest.approx(100 * (53.9 - 37.8) / 37.8, rel=1e-6)
    assert row.mcnemar.verdict == "identical on these questions"
    assert not comparison.regressions and not row.flags
    text = compare_runs.render(comparison)
    assert "+42.6%" in text and "37.81" in text and "53.89" in text  # measured delta and the published rows


def test_regressions_are_flagged(tmp_path):
    base_correct = [True] * 100
    worse = [True] * 88 + [False] * 12  # 12 discordant pairs, all one way: p = 2 / 4096
    base = make_run(tmp_path, "r1", "baseline", speed=37.8, correct=base_correct)
    broken = make_run(tmp_path, "r2", "all-three", speed=24.0, accept=1.0, requested=ALL, correct=worse,
                      label="all-three [draft-lm-head-unshared]")
    comparison = compare_runs.compare([runs.load(base), runs.load(broken)])
    flags = comparison.rows[1].flags
    assert any("slower than the baseline" in f for f in flags)
    assert any("accept length 1.00 < 2.0" in f for f in flags)
    assert any("accuracy significantly worse" in f for f in flags)
    assert len(comparison.regressions) == 3
    assert comparison.rows[1].mcnemar.p_value == pytest.approx(2 / 4096)


def test_different_prompt_sets_are_not_paired(tmp_path):
    base = make_run(tmp_path, "r1", "baseline", speed=37.8, correct=[True] * 5, fingerprint="a")
    other = make_run(tmp_path, "r2", "humming-fp8", speed=41.0, correct=[True] * 5, fingerprint="b",
                     requested=("humming", "fp8_lm_head"))
    comparison = compare_runs.compare([runs.load(base), runs.load(other)])
    assert comparison.rows[1].mcnemar is None
    assert any("different prompt set" in note for note in comparison.notes)


def test_write_produces_text_json_and_png(tmp_path):
    base = make_run(tmp_path, "r1", "baseline", speed=37.8, correct=[True] * 5)
    fast = make_run(tmp_path, "r2", "all-three", speed=53.9, accept=2.68, requested=ALL, correct=[True] * 5)
    out, text = compare_runs.write(compare_runs.compare([runs.load(base), runs.load(fast)]), tmp_path / "cmp")
    assert (out / "compare.txt").read_text() == text
    data = json.loads((out / "compare.json").read_text())
    assert data["baseline"] == "r1" and data["published"]["all-three"]["decode_tok_s"] == 53.89
    png = (out / "compare.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_without_matplotlib_the_table_is_written_and_the_missing_png_said(tmp_path, monkeypatch):
    base = make_run(tmp_path, "r1", "baseline", speed=37.8, correct=[True] * 5)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # a deploy-only venv
    out, text = compare_runs.write(compare_runs.compare([runs.load(base)]), tmp_path / "cmp")
    assert (out / "compare.json").is_file() and not (out / "compare.png").exists()
    assert text.endswith("compare.png not drawn: matplotlib is not installed here (install the bench extra: "
                         "`python -m pip install -e '.[bench]'` in the checkout)\n")


def test_the_bench_extra_pins_the_matplotlib_the_tests_draw_with():
    import tomllib

    repo = Path(__file__).resolve().parents[3]
    extra = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["optional-dependencies"]["bench"]
    tested = [line for line in (repo / "requirements" / "test.txt").read_text().splitlines()
              if line.startswith("matplotlib==")]
    assert extra == tested == ["matplotlib==3.11.2"]


def test_incomplete_runs_are_refused(tmp_path):
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "requests.jsonl.partial").write_text("{}\n")
    with pytest.raises(runs.RunError, match="did not finish"):
        runs.load(tmp_path / "half")
    with pytest.raises(runs.RunError, match="no run"):
        runs.load("nope", tmp_path)


def test_a_run_timed_by_another_clock_than_the_baselines_is_flagged(tmp_path):
    base = make_run(tmp_path, "b", "baseline", speed=37.8, correct=[True] * 4)
    client = make_run(tmp_path, "c", "all-three", speed=53.9, correct=[True] * 4, accept=2.68,
                      requested=("humming", "fp8_lm_head", "mtp"), timing="client")
    rows = compare_runs.compare([runs.load(base), runs.load(client)]).rows
    assert not any("timing differs" in flag for flag in rows[0].flags)
    assert any("timing differs from the baseline's (client vs engine)" in flag for flag in rows[1].flags)
