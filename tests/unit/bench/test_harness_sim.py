"""The harness against a simulator subprocess (20x faster than real time): its numbers must reproduce the
simulator's configured speed and accept length, and the broken-draft fault must show up as a regression.

Tolerances: through `/generate` every duration is the engine's own meta_info timing, which the simulator
computes, so decode speed is the configured figure up to the per-prompt accept jitter (+-0.05 on the accept
length: about 1 %), whatever the host's load; no re-measuring. Accept length within 0.10: SGLang's definition
counts the first token too, so 96 tokens in 35.4 verify steps read 2.71. A chat run has only the client's
stopwatch (SGLang's streamed chat carries no engine timing): its figure is bounded, not matched.
"""

from __future__ import annotations

import pytest

from sparkgate import floor
from sparkgate.bench import compare_runs, runs
from sparkgate.bench import run as bench_run

SCALE = 0.05
FAST_START = {"SPARKGATE_SIM_STARTUP_S": "4"}
SPEED_TOLERANCE = 0.03
ACCEPT_TOLERANCE = 0.10
ITEMS, MAX_TOKENS = 6, 96

WANT = {"baseline": (37.81, None), "humming-fp8": (41.0, None), "all-three": (53.89, 2.68)}


def bench(sim, name, tmp_path, *, api="generate", items=ITEMS, **extra):
    options = bench_run.BenchOptions(
        profile=name, workload="arith", count=items, sampling="greedy", api=api, max_tokens=MAX_TOKENS,
        url=sim.base_url, time_scale=SCALE, target="sim", out_root=tmp_path / "runs", progress=False, **extra,
    )
    return bench_run.bench(options, say=lambda _line: None)


@pytest.mark.parametrize("name", list(WANT))
def test_reproduces_configured_speed_and_accept_length(start_profile, tmp_path, name):
    tok_s, accept = WANT[name]
    sim = start_profile(name, FAST_START, scale=SCALE)
    result = bench(sim, name, tmp_path)
    numbers = result.summary["results"]
    assert (numbers["completed"], numbers["errors"]) == (ITEMS, 0)
    assert numbers["timing"] == "engine" and numbers["client_decode_tok_s"] is not None
    assert numbers["decode_tok_s"] == pytest.approx(tok_s, rel=SPEED_TOLERANCE)
    assert numbers["tpot_ms"] == pytest.approx(1000 / tok_s, rel=SPEED_TOLERANCE)
    assert numbers["completion_tokens"] == ITEMS * MAX_TOKENS  # from meta_info, never from chunks
    if accept is None:
        assert numbers["accept_length"] is None
    else:
        assert numbers["accept_length"] == pytest.approx(accept, abs=ACCEPT_TOLERANCE)
    # the run directory: every request on its own line, the summary written last, nothing partial left
    run = runs.load(result.run_dir)
    assert len(run.records) == ITEMS and not (result.run_dir / "requests.jsonl.partial").exists()
    assert run.summary["complete"] and run.summary["environment"]["engine"]["version"] == "0.5.23"
    assert run.summary["protocol"]["tokens_from"] == "meta_info.completion_tokens"
    assert 0.4 < run.summary["roofline"]["fraction_of_estimate"] < 0.9
    # the arith workload is scored, but the simulator's pseudo-word answers are not a measurement
    assert numbers["accuracy"] is None and numbers["accuracy_not_measured"] == "simulator"
    assert "accuracy n/a (simulator)" in bench_run._one_line(run.summary)


def test_chat_api_counts_usage_tokens_not_chunks(start_profile, tmp_path):
    sim = start_profile("all-three", FAST_START, scale=SCALE)
    bad_config = tmp_path / "config.json"
    bad_config.write_text("{")
    result = bench(sim, "all-three", tmp_path, api="chat", items=4, config=bad_config)
    assert "cannot read" in result.summary["roofline"]["error"]  # the measured run is kept all the same
    numbers = result.summary["results"]
    assert numbers["completion_tokens"] == 4 * MAX_TOKENS  # usage.completion_tokens
    # SGLang's streamed chat carries no engine timing: the run says its speeds are the client's stopwatch (which moves
    # with the host's load, so no figure of it is asserted here)
    assert numbers["timing"] == "client" and numbers["decode_tok_s"] > 0
    # one chunk per verify step: counting chunks would report ~2.6x fewer tokens
    assert numbers["tokens_per_chunk"] == pytest.approx(2.68, abs=0.15)
    # accept length from SGLang's sglext.spec_tokens_details on the final chunk (asked for by the harness)
    assert numbers["accept_length"] == pytest.approx(2.68, abs=0.15)
    flags = compare_runs.compare([runs.load(result.run_dir)]).rows[0].flags
    assert not any("accept length not reported" in flag for flag in flags)


def test_broken_draft_is_slower_than_baseline_and_flagged(start_profile, tmp_path):
    base_sim = start_profile("baseline", FAST_START, scale=SCALE)
    base = bench(base_sim, "baseline", tmp_path, items=8, record_floor=True)
    base_sim.stop()
    recorded = floor.recorded_baseline_tok_s("sim")
    assert recorded == pytest.approx(base.summary["results"]["decode_tok_s"], abs=0.001)

    broken_sim = start_profile("all-three", {**FAST_START, "SPARKGATE_SIM_FAULTS": "draft-lm-head-unshared"},
                               scale=SCALE)
    broken = bench(broken_sim, "all-three", tmp_path, items=8, label="all-three [draft-lm-head-unshared]")
    numbers = broken.summary["results"]
    assert numbers["decode_tok_s"] == pytest.approx(24.0, rel=SPEED_TOLERANCE)
    assert numbers["accept_length"] == pytest.approx(1.0, abs=0.05)
    assert numbers["decode_tok_s"] < recorded  # what the gate refuses once expectations read the floor

    comparison = compare_runs.compare([runs.load(base.run_dir), runs.load(broken.run_dir)])
    assert comparison.baseline.run.profile == "baseline"
    row = comparison.rows[1]
    assert row.delta_pct["decode_tok_s"] < -30
    assert any("slower than the baseline" in flag for flag in row.flags)
    assert any("accept length 1.0" in flag for flag in row.flags)
    assert len(comparison.regressions) == 2
    text = compare_runs.render(comparison)
    assert "REGRESSION" in text and "all-three [draft-lm-head-unshared]" in text


@pytest.mark.parametrize("name", ["all-three", "dspark"])
def test_code_and_prose_in_one_bench_one_run_each(start_profile, tmp_path, name):
    from sparkgate.bench import workloads

    sim = start_profile(name, FAST_START, scale=SCALE)
    options = bench_run.BenchOptions(profile=name, count=3, api="chat", max_tokens=48, url=sim.base_url,
                                     time_scale=SCALE, target="sim", out_root=tmp_path / "runs", progress=False)
    results = bench_run.bench_each(options, workloads.expand("code,prose"), say=lambda _line: None)
    assert [r.summary["workload"]["name"] for r in results] == ["code", "prose"]
    for result, built in zip(results, (workloads.code(3), workloads.prose(3)), strict=True):
        summary = runs.load(result.run_dir).summary
        assert summary["complete"] and summary["workload"]["fingerprint"] == built.fingerprint()
        assert summary["protocol"]["sampling"]["name"] == "greedy"  # the speed workloads' default
        assert not summary["workload"]["scored"] and summary["results"]["scored"] == 0
        assert summary["results"]["completion_tokens"] == 3 * 48
        # asked for, because both speculate (NEXTN or DSpark), and flagged if it were missing
        assert summary["results"]["accept_length"] is not None
        assert not any("accept length" in flag for flag in compare_runs.compare([runs.load(result.run_dir)]).rows[0].flags)
