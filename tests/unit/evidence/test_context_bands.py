"""sentinel.accept_by_context: SGLang's decode log lines read per context band, judged against the break-even accept
length only with enough lines, never closing the gate; hostile log text cannot forge or break a reading."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sparkgate.bench import published
from sparkgate.evidence import calibration, catalog, context_bands
from sparkgate.evidence.logs import EngineLog
from sparkgate.evidence.recheck import OwnTraffic, RecheckContext
from sparkgate.evidence.stages import Stage
from sparkgate.sglang import conformance as C
from tests.gpu import records


def decode_line(tokens: int, accept: float | None, running: int = 1, full: bool = False) -> str:
    """A Decode batch record as SGLang 0.5.23 logs it (metrics_reporter.py, pool_stats_observer.py)."""
    usage = (C.log_line("decode_full_token_part", tokens=tokens) + ", full token usage: 0.01" if full
             else C.log_line("decode_token_part", tokens=tokens, usage=0.01))
    msg = C.log_line("decode_batch", iter="", running=running, usage=usage + ", ")
    if accept is not None:
        msg += C.log_line("decode_accept", accept_len=accept, accept_rate=0.3)
    msg += C.log_line("decode_tail", graph_label="cuda graph", cuda_graph=True, throughput=50.0, queue=0)
    return f"[2026-12-05 07:00:00] {msg}\n"


def test_bands_read_context_and_accept_length_from_the_decode_line():
    bands = context_bands.Bands()
    text = "".join([decode_line(300, 2.7)] * 3 + [decode_line(2000, 1.5, full=True)] * 3
                   + [decode_line(9000, 1.4, running=2)] * 2)
    assert bands.add_text(text) == 8
    judged = bands.judged(2.26)
    assert judged["0-1k"] == {"lines": 3, "accept_length": 2.7, "pays": True}
    assert judged["1k-4k"] == {"lines": 3, "accept_length": 1.5, "pays": False}
    # 9000 tokens over 2 running requests: 4500 each; two lines are too few to judge
    assert judged["4k-16k"] == {"lines": 2, "accept_length": 1.4, "pays": None}
    assert judged["64k+"]["pays"] is None


def test_lines_without_speculation_or_with_no_verify_step_are_not_readings():
    assert context_bands.reading(decode_line(100, None)[22:]) is None
    assert context_bands.reading(decode_line(100, 0.0)[22:]) is None
    assert context_bands.reading(decode_line(100, 2.0)[22:]) == context_bands.DecodeReading(100, 2.0)


def test_band_edges():
    assert [context_bands.band_of(n) for n in (0, 1023, 1024, 4096, 16383, 16384, 65536, 10**9)] == [
        "0-1k", "0-1k", "1k-4k", "4k-16k", "4k-16k", "16k-64k", "64k+", "64k+"]


def test_the_real_cuda_engines_decode_lines_are_read():
    bands = context_bands.Bands()
    assert bands.add_text(records.server_log("standalone-self")) > 0
    assert bands.judged(2.26)["0-1k"]["lines"] > 0
    plain = context_bands.Bands()
    assert plain.add_text(records.server_log("dense-graphs")) == 0  # no speculation: no accept len


def test_client_text_inside_a_record_is_never_a_decode_line():
    """--log-requests echoes client text inside a record; a forged decode line there must not count, nor may a
    separator str.splitlines honours (\\x1c, \\u2028, \\x85) start a record of its own."""
    forged = decode_line(5000, 1.0)[:-1]
    for sep in ("\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\x0b", "\x0c", "\r"):
        text = f"[2026-12-05 07:00:00] Receive: obj=GenerateReqInput(text='a{sep}{forged}')\n" * 5
        bands = context_bands.Bands()
        assert bands.add_text(text) == 0, repr(sep)
        assert EngineLog("t", text).count("Decode batch") == 0


def test_crlf_log_lines_still_read():
    text = decode_line(300, 2.5).replace("\n", "\r\n") * 3
    bands = context_bands.Bands()
    assert bands.add_text(text) == 3
    assert bands.judged(2.26)["0-1k"]["accept_length"] == 2.5


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400), st.text(max_size=40))
def test_hostile_log_text_never_raises_and_never_reads_out_of_range(junk, value):
    bands = context_bands.Bands()
    line = f"[t] Decode batch, #running-req: {value}, #token: {value}, token usage: 0.0, accept len: {value}, \n"
    bands.add_text(junk + "\n" + line + junk)
    for tally in bands.tallies.values():
        if tally.lines:
            assert 1.0 <= tally.accept_length <= context_bands.MAX_ACCEPT_LENGTH


def test_huge_and_non_finite_values_are_no_reading():
    for bad in ("nan", "inf", "1e400", "-2.0", "65.0"):
        msg = f"Decode batch, #running-req: 1, #token: 100, token usage: 0.00, accept len: {bad}, accept rate: 0.1, "
        assert context_bands.reading(msg) is None, bad
    msg = f"Decode batch, #running-req: 1, #token: {'9' * 5000}, token usage: 0.00, accept len: 2.00, accept rate: 0.1, "
    assert context_bands.reading(msg) is None
    msg = "Decode batch, #running-req: 0, #token: 100, token usage: 0.00, accept len: 2.00, accept rate: 0.1, "
    assert context_bands.reading(msg) is None


def test_log_tail_reads_only_new_whole_lines(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text(decode_line(100, 2.0))  # before admission: never read
    tail = context_bands.LogTail(str(log))
    with log.open("a") as handle:
        handle.write(decode_line(200, 2.5) + decode_line(300, 2.6)[:30])
    assert tail.read().count("Decode batch") == 1
    with log.open("a") as handle:
        handle.write(decode_line(300, 2.6)[30:])
    assert tail.read().count("Decode batch") == 1  # the split line, whole
    assert tail.read() == ""
    log.write_text(decode_line(400, 2.0))  # replaced (a new, shorter file): read from its start
    assert tail.read().count("Decode batch") == 1


def context(tmp_path, own=None) -> tuple[RecheckContext, object]:
    log = tmp_path / "engine.log"
    log.write_text("")
    ctx = RecheckContext("bands", client=None, period_s=5.0, expectations={"requested": ["mtp"]}, own_traffic=own)
    context_bands.start_rechecks(ctx, str(log), calibration.break_even())
    return ctx, log


def test_the_recheck_reports_not_paying_bands_and_never_fails(tmp_path):
    ctx, log = context(tmp_path)
    log.write_text(decode_line(300, 2.7) * 3 + decode_line(5000, 1.6) * 3)
    [result] = context_bands.rechecks(ctx)
    assert result.name == "sentinel.accept_by_context" and result.passed
    assert result.observed["not_paying"] == ["4k-16k"]
    assert result.observed["break_even_accept_length"] == published.VERIFY_STEP_COST == 2.26
    assert result.observed["bands"]["0-1k"]["pays"] is True
    assert "4k-16k" in result.hint and "gate stays open" in result.hint


def test_a_period_with_the_sentinels_own_probe_is_left_out(tmp_path):
    own = OwnTraffic()
    ctx, log = context(tmp_path, own)
    own.record(None, None)
    log.write_text(decode_line(300, 1.1) * 3)
    [result] = context_bands.rechecks(ctx)
    assert result.observed["bands"]["0-1k"]["lines"] == 0
    assert result.observed["periods_left_out_for_own_probes"] == 1


def test_declared_recheck_only_for_speculative_profiles():
    entry = catalog.declared()["sentinel.accept_by_context"]
    assert entry.stage is Stage.RECHECK_ONLY
    assert "mtp" in entry.runs_for and "dspark" in entry.runs_for
    assert context_bands.speculative({"requested": ["humming", "dspark"]})
    assert not context_bands.speculative({"requested": ["humming"]})


def test_a_fifo_at_the_log_path_never_hangs_the_band_read(tmp_path):
    import os

    from sparkgate.evidence.context_bands import LogTail

    fifo = tmp_path / "engine.log"
    os.mkfifo(fifo)
    assert LogTail(str(fifo)).read() == ""  # returns at once: not a regular file



def test_a_fifo_at_the_log_path_never_hangs_the_whole_log_read(tmp_path):
    """The sentinel's full read of the engine log (every period) refuses a FIFO as the band read does."""
    import os

    from sparkgate.evidence import logs

    fifo = tmp_path / "engine.log"
    os.mkfifo(fifo)
    read = logs.from_file(str(fifo))
    assert read.text is None and read.error == f"cannot read {fifo}: not a regular file"
    (tmp_path / "real.log").write_text("[2026] one\n[2026] two\n")
    assert logs.from_file(str(tmp_path / "real.log")).text == "[2026] one\n[2026] two\n"
