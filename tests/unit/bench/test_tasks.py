"""The invoke collection: task names, and the tasks run end to end on local files."""

from __future__ import annotations

import json

import pytest
from invoke import Collection, Program

from sparkgate.tasks import bench as bench_tasks

from .runfactory import make_run


def invoke(argv: list[str]) -> int:
    ns = Collection()
    for name, task_obj in bench_tasks.ns.tasks.items():  # flattened, as tasks.py does
        ns.add_task(task_obj, name=name)
    try:
        Program(namespace=ns, name="invoke").run(["invoke", *argv], exit=True)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_collection_names():
    assert sorted(bench_tasks.ns.tasks) == ["bench", "compare", "roofline", "sizing"]


def test_sizing_task(capsys, monkeypatch):
    monkeypatch.setenv("SPARKGATE_MODEL_DIR", "/nonexistent")  # the published shape
    assert invoke(["sizing", "--profile", "all-three", "--free", "100,112"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "+ 0.57 GiB for the MTP steps, KV 9,216 B/token = 2.25 GiB for 262,144 tokens" in lines[1]
    assert lines[2].startswith("  100 GiB free: pool budget -0.5 GiB, does NOT start")
    assert lines[3].startswith("  112 GiB free: pool budget 7.7 GiB, fits 262,144 tokens")
    assert lines[4] == "  needs 111.6 GiB free for the whole context (preflight refuses below 108.3 GiB MemAvailable)"
    for hostile in ("nan;rm", "nan", "-5", "inf", ","):
        assert invoke(["sizing", "--profile", "all-three", "--free", hostile]) == 1, hostile


def test_roofline_task(capsys, tmp_path):
    assert invoke(["roofline", "--profile", "all-three", "--json-out", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "5.10 B active" in out and "upper bound 125.83 tok/s" in out and "estimate 83.81 tok/s" in out
    assert "published 53.89 tok/s = 43% of the bound, 64% of the estimate" in out
    assert json.loads((tmp_path / "r.json").read_text())["bytes_per_cycle_bound"] == pytest.approx(5_814_307_840)


def test_compare_task_fails_on_regression(capsys, tmp_path):
    base = make_run(tmp_path, "r1", "baseline", speed=37.8, correct=[True] * 4)
    broken = make_run(tmp_path, "r2", "all-three", speed=24.0, accept=1.0, requested=("humming", "fp8_lm_head", "mtp"),
                      correct=[True] * 4)
    out = tmp_path / "cmp"
    assert invoke(["compare", "--runs", f"{base},{broken}", "--out", str(out), "--no-png"]) == 0
    assert invoke(["compare", "--runs", f"{base},{broken}", "--out", str(out), "--no-png", "--fail-on-regression"]) == 1
    assert "REGRESSION" in capsys.readouterr().out and (out / "compare.json").is_file()


def test_bench_task_without_a_deployment(capsys, tmp_path):
    code = invoke(["bench", "--profile", "baseline", "--out", str(tmp_path / "nothing")])
    assert code == 1
    assert "no deployed stack" in capsys.readouterr().err
    assert invoke(["bench", "--profile", "baseline", "--greedy", "--sampled", "--url", "http://127.0.0.1:9"]) == 2


def test_compare_latest_picks_the_newest_run_of_each_profile(capsys, tmp_path, monkeypatch):
    from sparkgate.bench import runs as runs_mod

    monkeypatch.setattr(runs_mod, "bench_root", lambda: tmp_path)
    make_run(tmp_path, "r1", "baseline", speed=30.0, correct=[True] * 4)
    make_run(tmp_path, "r2", "baseline", speed=37.8, correct=[True] * 4)
    make_run(tmp_path, "r3", "all-three", speed=53.9, accept=2.68, requested=("humming", "fp8_lm_head", "mtp"),
             correct=[True] * 4)
    assert invoke(["compare", "--runs", "latest", "--out", str(tmp_path / "cmp"), "--no-png"]) == 0
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert sorted(row["run"] for row in data["rows"]) == ["r2", "r3"]


def test_compare_two_profiles_positional_or_runs(capsys, tmp_path):
    from .runfactory import make_speed_run

    root = tmp_path / "runs"
    make_speed_run(root, "a-code", "all-three", "code", [55.0 + i % 3 for i in range(8)], age_s=60)
    make_speed_run(root, "b-code", "dspark", "code", [68.0 + i % 3 for i in range(8)])
    for argv in (["compare", "all-three,dspark"], ["compare", "--runs", "all-three,dspark"]):
        out = tmp_path / argv[-1].replace(",", "-") / str(len(argv))
        assert invoke([*argv, "--root", str(root), "--out", str(out)]) == 0
        data = json.loads((out / "compare.json").read_text())
        assert data["kind"] == "per-workload" and data["recommendations"] == {"code": "dspark"}
        assert "code: run dspark" in capsys.readouterr().out
    # run ids still select the run-by-run table
    assert invoke(["compare", "a-code,b-code", "--root", str(root), "--out", str(tmp_path / "by-run"), "--no-png"]) == 0
    assert "rows" in json.loads((tmp_path / "by-run" / "compare.json").read_text())
    # a profile without runs: one line that names the command
    assert invoke(["compare", "all-three,mtp", "--root", str(root)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no finished bench run labelled 'mtp'" in err[0]
    assert "invoke bench --profile mtp --workload code --count 8 --greedy --max-tokens 512" in err[0]


def test_bench_workload_lists_refuse_one_workload_options(capsys, tmp_path):
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"prompt": "x"}\n')
    assert invoke(["bench", "--profile", "all-three", "--workload", "all", "--jsonl", str(jsonl)]) == 1
    assert "--jsonl applies to one workload, not to arith, code, prose" in capsys.readouterr().err
    assert invoke(["bench", "--profile", "baseline", "--workload", "code,prose", "--record-floor"]) == 1
    assert "--record-floor takes one workload run" in capsys.readouterr().err
    assert invoke(["bench", "--profile", "all-three", "--workload", "code,mmlu"]) == 2
    assert "unknown workload 'mmlu'" in capsys.readouterr().err
