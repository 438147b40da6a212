"""`invoke compare A,B` by profile: the newest run of each profile per workload, paired item by item, a paired
t-test on per-item decode rates, and a recommendation that follows from the test alone (synthetic runs)."""

from __future__ import annotations

import json
import math

import pytest

from sparkgate.bench import per_workload, per_workload_report, stats

from .runfactory import make_speed_run

N = 20


def wobble(centre: float, amplitude: float, phase: float = 0.0) -> list[float]:
    """Deterministic per-item spread around a centre: prompts differ, the pairs share that difference."""
    return [centre + amplitude * math.sin(1.7 * i + phase) for i in range(N)]


@pytest.fixture
def mixed(tmp_path):
    """DSpark faster on code, slower on prose, a tie on arith: the issue's picture, plus a dead heat."""
    root = tmp_path / "runs"
    make_speed_run(root, "a-code", "all-three", "code", wobble(55.2, 2.0), accept=2.68, age_s=60)
    make_speed_run(root, "b-code", "dspark", "code", [r * 68.4 / 55.2 for r in wobble(55.2, 2.0)], accept=6.5)
    make_speed_run(root, "a-prose", "all-three", "prose", wobble(45.0, 1.5), accept=2.68, age_s=60)
    make_speed_run(root, "b-prose", "dspark", "prose", [r - 1.6 + 0.2 * math.cos(i) for i, r in
                                                        enumerate(wobble(45.0, 1.5))], accept=3.5)
    tie_a = wobble(50.0, 2.0)
    make_speed_run(root, "a-arith", "all-three", "arith", tie_a, accept=2.68, age_s=60, sampling="sampled",
                   max_tokens=1024)
    make_speed_run(root, "b-arith", "dspark", "arith", [r + (0.8 if i % 2 else -0.8) for i, r in enumerate(tie_a)],
                   accept=5.0, sampling="sampled", max_tokens=1024)
    return root


def by_name(comparison: per_workload.ProfileComparison) -> dict[str, per_workload.WorkloadComparison]:
    return {w.workload: w for w in comparison.workloads}


def test_paired_t_against_hand_computed_values():
    # differences 1, 2, 3, 4: mean 2.5, sd sqrt(5/3), se 0.6455, t = 3.873 with 3 df; t(0.975, 3) = 3.182446
    result = stats.paired_difference([10, 10, 10, 10], [11, 12, 13, 14])
    assert (result.n, result.df, result.mean_difference) == (4, 3, 2.5)
    assert result.t == pytest.approx(2.5 / math.sqrt(5 / 3 / 4))
    assert result.p_value == pytest.approx(0.03047, abs=5e-5)
    half = 3.182446 * math.sqrt(5 / 3 / 4)
    assert (result.ci_low, result.ci_high) == (pytest.approx(2.5 - half, abs=1e-5), pytest.approx(2.5 + half, abs=1e-5))
    # the t distribution itself: published two-sided critical values and tail
    assert stats.t_critical(0.95, 19) == pytest.approx(2.093024, abs=1e-6)
    assert stats.t_critical(0.95, 1) == pytest.approx(12.706205, abs=1e-5)
    assert stats.t_two_sided_p(2.0, 10) == pytest.approx(0.073388, abs=1e-6)
    # too few pairs: no test at all, rather than a test that cannot reject
    assert stats.paired_difference([10.0, 11.0], [12.0, 13.0]).p_value is None


def test_recommends_per_workload_from_the_paired_test(mixed):
    result = by_name(per_workload.compare_profiles(["all-three", "dspark"], mixed))
    code, prose, arith = result["code"], result["prose"], result["arith"]
    assert [w.status for w in (code, prose, arith)] == ["compared"] * 3

    assert code.recommendation.profile == "dspark" and code.recommendation.verdict == "dspark faster"
    assert code.paired.n == N and code.paired.p_value < 1e-6 and code.paired.ci_low > 0
    assert code.recommendation.speedup_pct == pytest.approx(100 * (68.4 / 55.2 - 1), abs=0.05)
    assert code.sides[1].numbers["accept_length"] == pytest.approx(6.5, abs=0.05)

    assert prose.recommendation.profile == "all-three" and prose.paired.ci_high < 0 and prose.paired.p_value < 1e-6
    assert prose.recommendation.speedup_pct > 0  # the winner's margin, stated positively
    assert "prose: run all-three:" in prose.recommendation.text and "dspark - all-three -1.59 tok/s" in prose.recommendation.text

    assert arith.recommendation.profile is None and arith.recommendation.verdict == per_workload.NO_DIFFERENCE
    assert arith.paired.p_value > 0.05 and arith.paired.ci_low < 0 < arith.paired.ci_high


def test_output_table_json_and_recommendation_section(mixed, tmp_path):
    comparison = per_workload.compare_profiles(["all-three", "dspark"], mixed)
    out, text = per_workload_report.write(comparison, tmp_path / "cmp")
    data = json.loads((out / "compare.json").read_text())
    assert data["recommendations"] == {"code": "dspark", "prose": "all-three", "arith": None}
    assert data["difference"] == "dspark - all-three" and data["confidence"] == pytest.approx(0.95)
    code = data["workloads"]["code"]
    assert code["results"]["dspark"]["decode_tok_s"] == pytest.approx(68.4, rel=0.02)
    assert code["results"]["all-three"]["tpot_ms"] == pytest.approx(1000 / 55.2, rel=0.02)
    assert code["results"]["dspark"]["accept_length_median_request"] == pytest.approx(6.5)
    assert code["paired"]["p_value"] < 1e-6 and code["results"]["dspark"]["n"] == N
    assert (out / "compare.txt").read_text() == text
    assert "Recommendation" in text and "code: run dspark" in text and "prose: run all-three" in text
    assert f"arith: {per_workload.NO_DIFFERENCE} between all-three" in text
    assert "measured on target: sim" in text


def test_the_newest_run_of_each_profile_is_used(mixed):
    # an older all-three code run that was much slower must not be the one paired
    make_speed_run(mixed, "a-code-old", "all-three", "code", wobble(20.0, 1.0), age_s=3600)
    code = by_name(per_workload.compare_profiles(["all-three", "dspark"], mixed))["code"]
    assert code.sides[0].run.id == "a-code"


def test_a_missing_workload_names_the_command_that_produces_it(mixed):
    make_speed_run(mixed, "a-synth", "all-three", "synthetic", wobble(53.0, 1.0), sampling="sampled", max_tokens=256)
    synthetic = by_name(per_workload.compare_profiles(["all-three", "dspark"], mixed))["synthetic"]
    assert synthetic.status == "missing" and "no synthetic run of dspark" in synthetic.detail
    assert synthetic.produce == [f"invoke bench --profile dspark --workload synthetic --count {N} --sampled "
                                 "--max-tokens 256"]
    assert "produce it: invoke bench --profile dspark --workload synthetic" in per_workload_report.render(
        per_workload.compare_profiles(["all-three", "dspark"], mixed))


def test_different_prompt_sets_protocols_or_incomplete_runs_are_not_paired(tmp_path):
    root = tmp_path / "runs"
    make_speed_run(root, "a-code", "all-three", "code", wobble(55.0, 1.0), age_s=60)
    make_speed_run(root, "b-code", "dspark", "code", wobble(68.0, 1.0)[:8], fingerprint="fp-other")
    make_speed_run(root, "a-prose", "all-three", "prose", wobble(45.0, 1.0), age_s=60)
    make_speed_run(root, "b-prose", "dspark", "prose", wobble(43.0, 1.0), sampling="sampled")
    make_speed_run(root, "a-arith", "all-three", "arith", wobble(45.0, 1.0), age_s=60, complete=False)
    make_speed_run(root, "b-arith", "dspark", "arith", wobble(43.0, 1.0))
    make_speed_run(root, "a-synthetic", "all-three", "synthetic", wobble(45.0, 1.0), age_s=60)
    make_speed_run(root, "b-synthetic", "dspark", "synthetic", wobble(60.0, 1.0), failed=(0, 5))
    result = by_name(per_workload.compare_profiles(["all-three", "dspark"], root))
    assert result["code"].status == "not comparable" and "different prompt sets" in result["code"].detail
    assert result["code"].produce == [f"invoke bench --profile dspark --workload code --count {N} --greedy "
                                      "--max-tokens 512"]
    assert "sampling: all-three greedy, dspark sampled" in result["prose"].detail
    assert "all-three's run a-arith did not complete" in result["arith"].detail
    # failed requests leave their items out of the pairs, and the output says so
    synthetic = result["synthetic"]
    assert synthetic.status == "compared" and synthetic.paired.n == N - 2 and synthetic.excluded_items == 2
    assert synthetic.recommendation.profile == "dspark"


@pytest.mark.parametrize(
    ("setup", "profiles", "message"),
    [
        ("dspark-missing", ["all-three", "dspark"],
         "no finished bench run labelled 'dspark' under .*: deploy it \\(invoke deploy --profile dspark\\) and run "
         "invoke bench --profile dspark --workload code --count 20 --greedy --max-tokens 512"),
        ("nothing-shared", ["all-three", "dspark"],
         "no workload to compare between all-three and dspark: code: no code run of dspark .* run: invoke bench "
         "--profile dspark --workload code"),
        ("dspark-missing", ["all-three", "dspark", "mtp"], "takes two different profiles"),
        ("dspark-missing", ["all-three", "all-three"], "takes two different profiles"),
    ],
)
def test_errors_name_what_is_missing_and_the_command(tmp_path, setup, profiles, message):
    root = tmp_path / "runs"
    make_speed_run(root, "a-code", "all-three", "code", wobble(55.0, 1.0))
    if setup == "nothing-shared":
        make_speed_run(root, "b-prose", "dspark", "prose", wobble(43.0, 1.0))
    with pytest.raises(per_workload.ProfileCompareError, match=message):
        per_workload.compare_profiles(profiles, root)


# --------------------------------------------------------------------- the tested quantity is the reported one
def test_per_item_and_aggregate_disagreeing_is_no_clear_winner(tmp_path):
    # 8 short answers on which dspark is faster, 2 long ones on which all-three is: per item dspark wins
    # significantly, token-weighted all-three does; printing "run dspark" next to a slower aggregate is refused
    root = tmp_path / "runs"
    tokens = [21] * 8 + [2001, 2001]
    make_speed_run(root, "a-code", "all-three", "code", [40 + 0.1 * i for i in range(8)] + [60.0, 60.5],
                   tokens=tokens, age_s=60)
    make_speed_run(root, "b-code", "dspark", "code", [60 + 0.13 * i for i in range(8)] + [50.0, 50.5],
                   tokens=tokens)
    comparison = per_workload.compare_profiles(["all-three", "dspark"], root)
    code = by_name(comparison)["code"]
    a, b = code.sides
    assert code.paired.p_value < 0.05 and code.paired.mean_difference > 0  # the test: dspark faster per item
    assert b.numbers["decode_tok_s"] < a.numbers["decode_tok_s"]  # the aggregate: all-three faster
    rec = code.recommendation
    assert (rec.profile, rec.verdict, rec.speedup_pct) == (None, per_workload.NO_CLEAR_WINNER, None)
    for number in (b.item_mean_tok_s, a.item_mean_tok_s, a.numbers["decode_tok_s"], b.numbers["decode_tok_s"]):
        assert f"{number:.2f}" in rec.text
    assert "in aggregate all-three is" in rec.text
    out, text = per_workload_report.write(comparison, tmp_path / "cmp")
    data = json.loads((out / "compare.json").read_text())
    assert data["recommendations"] == {"code": None}
    assert data["workloads"]["code"]["results"]["dspark"]["item_mean_decode_tok_s"] == pytest.approx(b.item_mean_tok_s)
    assert "code: no clear winner" in text


def test_a_recommended_profile_is_faster_in_every_number_printed(mixed):
    for w in per_workload.compare_profiles(["all-three", "dspark"], mixed).workloads:
        if w.recommendation.profile is None:
            continue
        winner, loser = sorted(w.sides, key=lambda side: side.profile != w.recommendation.profile)
        assert winner.item_mean_tok_s > loser.item_mean_tok_s
        assert winner.numbers["decode_tok_s"] > loser.numbers["decode_tok_s"]
        assert w.recommendation.aggregate_speedup_pct > 0 and w.recommendation.speedup_pct > 0
        # the gain stated is of the tested quantity, the per-item means
        assert w.recommendation.speedup_pct == pytest.approx(
            100 * (winner.item_mean_tok_s / loser.item_mean_tok_s - 1))
        assert f"per-item mean {winner.item_mean_tok_s:.2f} vs {loser.item_mean_tok_s:.2f} tok/s" in \
            w.recommendation.text


# ------------------------------------------------------------------------------ multiple-comparison control
def test_holm_bonferroni_against_hand_computed_values():
    # sorted 0.01, 0.03, 0.04 -> 3 * 0.01, 2 * 0.03, max(0.06, 1 * 0.04): monotone, in the input's order
    assert stats.holm_adjust([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm_adjust([0.02]) == [0.02]
    assert stats.holm_adjust([0.5, 0.6]) == [1.0, 1.0]


def weak_edge(root, workload: str, delta: float) -> None:
    """dspark a little faster: a raw p between 0.017 and 0.05 at n = 20."""
    base = wobble(50.0, 2.0)
    make_speed_run(root, f"a-{workload}", "all-three", workload, base, age_s=60)
    make_speed_run(root, f"b-{workload}", "dspark", workload,
                   [r + delta + math.sin(2.3 * i + 0.4) for i, r in enumerate(base)])


def test_three_weak_edges_are_not_recommended_after_holm(tmp_path):
    root = tmp_path / "runs"
    for workload, delta in (("code", 0.34), ("prose", 0.36), ("arith", 0.38)):
        weak_edge(root, workload, delta)
    comparison = per_workload.compare_profiles(["all-three", "dspark"], root)
    for w in comparison.workloads:
        assert 0.017 < w.paired.p_value < 0.05  # each would have been "dspark faster" on its own
        assert w.p_adjusted > 0.05 and w.recommendation.verdict == per_workload.NO_DIFFERENCE
        assert "Holm-adjusted over 3 workloads" in w.recommendation.text
    raw = [w.paired.p_value for w in comparison.workloads]
    assert [w.p_adjusted for w in comparison.workloads] == pytest.approx(stats.holm_adjust(raw))
    out, text = per_workload_report.write(comparison, tmp_path / "cmp")
    data = json.loads((out / "compare.json").read_text())
    assert data["recommendations"] == {"code": None, "prose": None, "arith": None}
    assert data["multiple_comparisons"]["method"] == "holm-bonferroni" and data["multiple_comparisons"]["m"] == 3
    for name, w in data["workloads"].items():
        assert w["paired"]["p_value"] == pytest.approx(by_name(comparison)[name].paired.p_value)
        assert w["paired"]["p_value_adjusted"] > 0.05
    assert "p Holm-Bonferroni adjusted over 3 workloads" in text and "Holm-Bonferroni adjusted over the 3" in text


def test_one_workload_is_not_adjusted_and_a_weak_edge_then_stands(tmp_path):
    root = tmp_path / "runs"
    weak_edge(root, "code", 0.34)
    code = by_name(per_workload.compare_profiles(["all-three", "dspark"], root))["code"]
    assert code.p_adjusted == code.paired.p_value < 0.05
    assert code.recommendation.profile == "dspark" and "one workload, no adjustment" in code.recommendation.text


def test_strong_differences_survive_holm(mixed):
    result = by_name(per_workload.compare_profiles(["all-three", "dspark"], mixed))
    assert result["code"].p_adjusted < 1e-6 and result["prose"].p_adjusted < 1e-6
    assert result["arith"].p_adjusted >= result["arith"].paired.p_value


# ------------------------------------------------------------------------------------------- mislabelled runs
def test_a_run_whose_gate_verified_another_profile_is_not_paired(tmp_path):
    # bench all-three after the project's stack was switched to dspark: the run recorded the dspark gate
    root = tmp_path / "runs"
    make_speed_run(root, "a-code", "all-three", "code", wobble(68.0, 1.0), gate_profile="dspark", age_s=60)
    make_speed_run(root, "b-code", "dspark", "code", wobble(68.0, 1.0), gate_profile="dspark")
    make_speed_run(root, "a-prose", "all-three", "prose", wobble(45.0, 1.0), gate_profile="all-three", age_s=60)
    make_speed_run(root, "b-prose", "dspark", "prose", wobble(43.0, 1.0), gate_profile="dspark")
    result = by_name(per_workload.compare_profiles(["all-three", "dspark"], root))
    code = result["code"]
    assert code.status == "not comparable" and code.recommendation is None
    assert "all-three's run a-code is mislabelled: its gate had verified profile 'dspark', not 'all-three'" in \
        code.detail
    assert code.produce == [f"invoke deploy --profile all-three && invoke bench --profile all-three --workload code "
                            f"--count {N} --greedy --max-tokens 512"]
    assert result["prose"].status == "compared"  # the runs that measured their own profile still pair


@pytest.mark.parametrize(("engine_a", "engine_b", "status"), [
    ({"speculative_algorithm": "DSPARK"}, {"speculative_algorithm": "DSPARK"}, "not comparable"),
    ({"speculative_algorithm": "EAGLE"}, {"speculative_algorithm": "DSPARK"}, "compared"),
    (None, {"speculative_algorithm": "DSPARK"}, "compared"),  # not recorded: nothing to check against
])
def test_same_recorded_algorithm_under_different_claims_is_not_paired(tmp_path, engine_a, engine_b, status):
    root = tmp_path / "runs"
    make_speed_run(root, "a-code", "all-three", "code", wobble(68.0, 1.0), requested=("humming", "fp8_lm_head", "mtp"),
                   engine=engine_a, age_s=60)
    make_speed_run(root, "b-code", "dspark", "code", wobble(68.2, 1.0), requested=("humming", "fp8_lm_head", "dspark"),
                   engine=engine_b)
    if status == "compared":
        assert by_name(per_workload.compare_profiles(["all-three", "dspark"], root))["code"].status == status
        return
    with pytest.raises(per_workload.ProfileCompareError,
                       match="both engines recorded speculative_algorithm 'DSPARK', but all-three requests mtp and "
                             "dspark requests dspark: one run measured the other's engine.* invoke deploy --profile "
                             "all-three && invoke bench --profile all-three --workload code"):
        per_workload.compare_profiles(["all-three", "dspark"], root)


def test_a_workload_in_a_band_where_speculation_does_not_pay_gets_a_note(tmp_path):
    """Long-context requests whose accept length sits below the break-even (2.26): the recommendation still follows
    the paired test, and says that the speculative profile's speculation does not pay at that context."""
    root = tmp_path / "runs"
    make_speed_run(root, "a-long", "humming-fp8", "prose", wobble(41.0, 1.0), age_s=60, prompt_tokens=6000)
    make_speed_run(root, "b-long", "all-three", "prose", wobble(30.0, 1.0), accept=1.6, prompt_tokens=6000)
    make_speed_run(root, "a-short", "humming-fp8", "code", wobble(41.0, 1.0), age_s=60, prompt_tokens=200)
    make_speed_run(root, "b-short", "all-three", "code", wobble(55.0, 1.0), accept=2.7, prompt_tokens=200)
    comparison = per_workload.compare_profiles(["humming-fp8", "all-three"], root)
    long, short = by_name(comparison)["prose"].recommendation, by_name(comparison)["code"].recommendation
    assert long.profile == "humming-fp8" and short.profile == "all-three"
    [note] = long.speculation
    assert "band 4k-16k" in note and "all-three's speculation does not pay" in note and "1.60 <= break-even 2.26" in note
    assert short.speculation == []
    dumped = json.loads(json.dumps(comparison.as_dict()))
    assert dumped["workloads"]["prose"]["recommendation"]["speculation"] == [note]
    assert " ".join(f"note: {note}".split()) in " ".join(per_workload_report.render(comparison).split())


def test_no_speculation_note_without_prompt_token_counts(mixed):
    comparison = per_workload.compare_profiles(["all-three", "dspark"], mixed)
    assert all(w.recommendation.speculation == [] for w in comparison.workloads if w.recommendation)
