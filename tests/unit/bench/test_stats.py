import pytest

from sparkgate.bench import stats


def rec(i, tokens, ttft, decode, verify=None, correct=None, error=None, chunks=None, finish="stop"):
    return {"item_id": f"q{i}", "completion_tokens": tokens, "ttft_s": ttft, "decode_s": decode,
            "e2e_s": None if ttft is None else ttft + decode, "spec_verify_ct": verify, "expected": None if correct is None else "1",
            "correct": correct, "error": error, "text_chunks": chunks or tokens, "finish_reason": finish}


def test_aggregate_decode_speed_is_token_weighted():
    # (101 - 1) tokens in 2.0 s and (401 - 1) in 10.0 s: 500 / 12 = 41.67 tok/s, not the mean of 50 and 40
    summary = stats.summarize([rec(0, 101, 0.2, 2.0), rec(1, 401, 0.2, 10.0)])
    assert summary["decode_tok_s"] == pytest.approx(500 / 12)
    assert summary["tpot_ms"] == pytest.approx(1000 * 12 / 500)
    assert summary["mean_e2e_s"] == pytest.approx((2.2 + 10.2) / 2)
    assert summary["accept_length"] is None and summary["accuracy"] is None


def test_percentiles_interpolate():
    assert stats.percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert stats.percentile([10.0, 20.0, 30.0, 40.0, 50.0], 95) == pytest.approx(48.0)
    assert stats.percentile([], 50) is None and stats.percentile([7.0], 95) == 7.0


def test_accept_length_needs_every_request_and_is_token_weighted():
    full = stats.summarize([rec(0, 100, 0.2, 1.0, verify=40), rec(1, 300, 0.2, 3.0, verify=110)])
    assert full["accept_length"] == pytest.approx(400 / 150)
    partial = stats.summarize([rec(0, 100, 0.2, 1.0, verify=40), rec(1, 300, 0.2, 3.0)])
    assert partial["accept_length"] is None and partial["accept_length_reported"] == "1/2"


def test_errors_count_as_wrong_and_are_excluded_from_speed():
    records = [rec(0, 100, 0.2, 2.0, correct=True), rec(1, 100, 0.2, 2.0, correct=False),
               {**rec(2, 0, None, None, correct=False), "error": "HTTP 503", "e2e_s": None}]
    summary = stats.summarize(records)
    assert (summary["completed"], summary["errors"], summary["correct"], summary["scored"]) == (2, 1, 1, 3)
    assert summary["accuracy"] == pytest.approx(1 / 3)
    assert summary["decode_tok_s"] == pytest.approx(99 / 2)


def test_tokens_per_chunk_shows_why_chunks_are_not_tokens():
    summary = stats.summarize([rec(0, 268, 0.2, 5.0, verify=100, chunks=100)])
    assert summary["tokens_per_chunk"] == pytest.approx(2.68)
