"""The exact McNemar test against hand-computed values: with n = b + c discordant pairs and k = min(b, c),
p = min(1, 2 * sum_{i=0..k} C(n, i) / 2**n)."""

import pytest

from sparkgate.bench import stats


def test_no_discordant_pairs():
    assert stats.mcnemar_exact_p(0, 0) == 1.0


def test_five_to_zero():
    # n = 5, k = 0: 2 * C(5,0) / 2**5 = 2 / 32
    assert stats.mcnemar_exact_p(5, 0) == pytest.approx(2 / 32)
    assert stats.mcnemar_exact_p(0, 5) == pytest.approx(0.0625)


def test_one_to_five():
    # n = 6, k = 1: 2 * (C(6,0) + C(6,1)) / 64 = 2 * 7 / 64
    assert stats.mcnemar_exact_p(1, 5) == pytest.approx(14 / 64)


def test_ten_to_two():
    # n = 12, k = 2: 2 * (1 + 12 + 66) / 4096 = 158 / 4096 = 0.03857...
    assert stats.mcnemar_exact_p(10, 2) == pytest.approx(158 / 4096)


def test_balanced_split_caps_at_one():
    # n = 6, k = 3: 2 * (1 + 6 + 15 + 20) / 64 = 84 / 64 > 1 -> 1
    assert stats.mcnemar_exact_p(3, 3) == 1.0


def test_twenty_to_eight():
    # n = 28, k = 8: sum C(28, i) for i = 0..8 = 1 + 28 + 378 + 3276 + 20475 + 98280 + 376740 + 1184040 + 3108105
    tail = 1 + 28 + 378 + 3276 + 20475 + 98280 + 376740 + 1184040 + 3108105  # = 4791323
    assert tail == 4791323
    assert stats.mcnemar_exact_p(20, 8) == pytest.approx(2 * tail / 2**28)  # 0.0357...


def test_smallest_possible_p():
    assert stats.smallest_possible_p(5) == pytest.approx(2 / 32)  # cannot reach 0.05
    assert stats.smallest_possible_p(6) == pytest.approx(2 / 64)


def test_power_hand_computed():
    # n = 6 at alpha 0.05 rejects only the splits 6:0 and 0:6 (p = 2/64); at a 2:1 share the power is
    # (2/3)**6 + (1/3)**6 = 64/729 + 1/729 = 65/729.
    assert stats.power(6, 0.05, 2 / 3) == pytest.approx(65 / 729)
    assert stats.power(0, 0.05, 2 / 3) == 0.0


def _runs(both: int, a_only: int, b_only: int, neither: int):
    a, b, index = {}, {}, 0
    for count, (x, y) in ((both, (True, True)), (a_only, (True, False)), (b_only, (False, True)), (neither, (False, False))):
        for _ in range(count):
            a[f"q{index}"], b[f"q{index}"] = x, y
            index += 1
    return a, b


def test_pairing_counts_and_significant_regression():
    a, b = _runs(both=80, a_only=10, b_only=2, neither=8)
    result = stats.mcnemar(a, b)
    assert (result.paired, result.both_correct, result.a_only, result.b_only, result.both_wrong) == (100, 80, 10, 2, 8)
    assert result.p_value == pytest.approx(158 / 4096)
    assert result.verdict == "significant: worse"


def test_few_discordant_pairs_are_inconclusive_not_equal():
    a, b = _runs(both=90, a_only=5, b_only=0, neither=5)  # all five one way, p = 0.0625
    result = stats.mcnemar(a, b)
    assert result.verdict == "inconclusive" and "could not go below" in result.detail


def test_low_power_is_inconclusive_not_equal():
    a, b = _runs(both=90, a_only=4, b_only=3, neither=3)  # p = 1, but 7 pairs have little power
    result = stats.mcnemar(a, b)
    assert result.p_value == 1.0
    assert result.verdict == "inconclusive" and "power" in result.detail


def test_no_detectable_difference_only_with_power():
    a, b = _runs(both=1180, a_only=45, b_only=44, neither=50)  # 1,319 questions, 89 discordant pairs
    result = stats.mcnemar(a, b)
    assert result.p_value == 1.0
    assert result.power_2to1 >= stats.MIN_POWER
    assert result.verdict == "no detectable difference"


def test_published_scale_with_59_discordant_pairs_is_still_inconclusive():
    # 1,319 questions, accuracy 96.9 % vs 96.8 %, 59 discordant pairs: p = 1, yet a 2:1 split (a ~1.5 point
    # accuracy drop) would be detected only ~70 % of the time, so "no difference" would overclaim.
    a, b = _runs(both=1248, a_only=30, b_only=29, neither=12)
    result = stats.mcnemar(a, b)
    assert result.p_value == 1.0 and 0.6 < result.power_2to1 < stats.MIN_POWER
    assert result.verdict == "inconclusive"


def test_identical_correctness_and_unpaired():
    a, b = _runs(both=0, a_only=0, b_only=0, neither=6)
    assert stats.mcnemar(a, b).verdict == "identical on these questions"
    assert stats.mcnemar({"x": True}, {"y": True}).verdict == "not paired"
