"""engine.stalled: requests running while SGLang's per-forward-pass counter stands still close the gate after the
documented time; a long healthy stream, an idle engine and a queue that drains never do; the watch can only be
tightened by a profile."""

from __future__ import annotations

import pytest

from sparkgate.bundle import expectations as expectations_mod
from sparkgate.evidence import catalog, stall
from sparkgate.evidence.recheck import PeriodScrape, RecheckContext
from sparkgate.evidence.stages import Stage
from sparkgate.profile import loading as profiles
from sparkgate.profile.problems import ProfileError

PERIOD_S = 5.0


class Engine:
    """What SGLang's /metrics publishes: the progress counter (every mode) and the request gauges."""

    def __init__(self):
        self.decode = 1000.0
        self.prefill = 500.0
        self.running = 0
        self.queued = 0
        self.metrics_up = True
        self.reads = 0

    def get_text(self, path: str) -> str:
        assert path == "/metrics"
        self.reads += 1
        if not self.metrics_up:
            from sparkgate.evidence.client import EngineUnreachable

            raise EngineUnreachable("GET /metrics: HTTP 404")
        return (f'sglang:realtime_tokens_total{{model_name="m",mode="decode"}} {self.decode}\n'
                f'sglang:realtime_tokens_total{{model_name="m",mode="prefill_compute"}} {self.prefill}\n'
                f'sglang:num_running_reqs{{model_name="m"}} {self.running}\n'
                f'sglang:num_queue_reqs{{model_name="m"}} {self.queued}\n')


class Watch:
    """The stall re-check on a fake clock, one call per sentinel period."""

    def __init__(self, engine: Engine, after_s: float | None = None, time_scale: float = 1.0):
        expectations = {"time_scale": time_scale, "stall": {"after_s": after_s} if after_s else {}}
        self.ctx = RecheckContext("stall", engine, PERIOD_S, expectations)
        self.now = 0.0
        stall.start_rechecks(self.ctx, clock=lambda: self.now)

    def period(self, wall_s: float = PERIOD_S):
        self.now += wall_s
        [result] = stall.rechecks(self.ctx)
        return result


def test_the_check_is_declared_and_documented_as_a_recheck():
    entry = catalog.declared()["engine.stalled"]
    assert entry.stage is Stage.RECHECK_ONLY and entry.docs == "engine.md" and entry.runs_for == "every profile"


def test_a_long_healthy_stream_never_trips_it():
    engine = Engine()
    watch = Watch(engine)
    engine.running = 1
    for _ in range(200):  # 1000 s of one stream, far past the threshold
        engine.decode += 250  # about 50 tokens a second
        result = watch.period()
        assert result.passed, result.observed
    assert result.observed["seconds_without_a_token"] == 0.0


def test_a_long_prefill_moves_the_counter_chunk_by_chunk():
    engine = Engine()
    watch = Watch(engine)
    engine.running = 0
    engine.queued = 1  # SGLang publishes the request as queued while its chunks prefill
    for _ in range(30):
        engine.prefill += 8192
        assert watch.period().passed


def test_running_with_no_token_closes_the_gate_after_the_documented_time_with_the_counters_shown():
    engine = Engine()
    watch = Watch(engine)
    engine.running = 1
    engine.decode += 100
    assert watch.period().passed  # the stream made tokens in this period
    seen = []
    for _ in range(int(stall.STALL_AFTER_S / PERIOD_S)):
        seen.append(watch.period())  # nothing moves from here on
    assert all(r.passed for r in seen[:-1]) and not seen[-1].passed
    failed = seen[-1]
    assert failed.observed == {"requests_running": 1.0, "requests_queued": 0.0, "progress_tokens": 1600.0,
                               "seconds_without_a_token": stall.STALL_AFTER_S}
    assert failed.expected.startswith(f"< {stall.STALL_AFTER_S:g} s")
    assert "sglang:realtime_tokens_total" in failed.source and "restart the engine" in failed.hint.lower()
    engine.decode += 1  # it moved again: the watch starts over
    assert watch.period().passed


def test_an_idle_engine_is_never_stalled_however_long_nothing_moves():
    engine = Engine()
    watch = Watch(engine)
    for _ in range(100):
        assert watch.period().passed


def test_a_request_arriving_after_a_long_idle_time_gets_the_whole_budget():
    engine = Engine()
    watch = Watch(engine, after_s=20)
    for _ in range(10):
        watch.period()  # 50 s idle, counter flat
    engine.running = 1  # published running, no token yet (the gauge came before the first token)
    seen = [watch.period() for _ in range(5)]  # busy from the first of these reads on
    assert [r.passed for r in seen] == [True, True, True, True, False]  # 20 s busy without a token
    assert [r.observed["seconds_without_a_token"] for r in seen] == [0.0, 5.0, 10.0, 15.0, 20.0]


def test_the_profile_threshold_is_in_engine_seconds_so_a_fast_simulator_trips_sooner_in_wall_time():
    engine = Engine()
    watch = Watch(engine, after_s=20, time_scale=0.25)  # the simulator at 4x: 20 engine s are 5 wall s
    engine.running = 1
    seen = [watch.period(wall_s=2.0) for _ in range(4)]
    assert [r.observed["seconds_without_a_token"] for r in seen] == [0.0, 8.0, 16.0, 24.0]
    assert [r.passed for r in seen] == [True, True, True, False]


@pytest.mark.parametrize("gone", ["metrics_down", "series_missing"])
def test_counters_that_cannot_be_read_fail_closed(gone):
    engine = Engine()
    watch = Watch(engine)
    if gone == "metrics_down":
        engine.metrics_up = False
    else:
        engine.get_text = lambda path: 'sglang:num_running_reqs{model_name="m"} 0\n'
    result = watch.period()
    assert not result.passed
    assert result.observed == ("GET /metrics: HTTP 404" if gone == "metrics_down"
                               else "no sglang:realtime_tokens_total, sglang:num_queue_reqs in /metrics")


def test_one_metrics_read_per_period_is_shared_by_every_recheck():
    engine = Engine()
    scrape = PeriodScrape(engine)
    for _ in range(4):
        scrape()
    assert engine.reads == 1 and scrape.reads == 1


def test_a_failed_read_costs_one_request_per_period_not_one_per_recheck():
    engine = Engine()
    engine.metrics_up = False
    scrape = PeriodScrape(engine)
    for _ in range(3):
        with pytest.raises(Exception, match="404"):
            scrape()
    assert engine.reads == 1


# --- the profile may tighten the watch, never loosen it ----------------------------------------------------


def user_profile(tmp_path, watch: str) -> str:
    path = tmp_path / "user.yaml"
    path.write_text(f"name: user\ndescription: test\nextends: [all-three]\ngate:\n  watch:\n{watch}")
    return str(path)


def refusal(reference: str) -> str:
    with pytest.raises(ProfileError) as refused:
        profiles.load(reference)
    return str(refused.value)


@pytest.mark.parametrize("field, value, says", [
    ("min_mem_available_gib", 2, "loosens the gate's default 4"),
    ("max_swap_growth_mib", 1024, "loosens the gate's default 256"),
    ("stall_after_s", 120, "loosens the gate's default 60"),
    ("stall_after_s", 2, "below 5 s"),
])
def test_loosening_the_watch_is_refused_naming_the_field(tmp_path, field, value, says):
    message = refusal(user_profile(tmp_path, f"    {field}: {value}\n"))
    assert f"gate.watch.{field}" in message and says in message


@pytest.mark.parametrize("field, value", [("min_mem_available_gib", 1e9), ("max_swap_growth_mib", 1e12),
                                          ("stall_after_s", 1e9), ("stall_after_s", -1)])
def test_absurd_watch_values_are_refused_by_their_bounds(tmp_path, field, value):
    message = refusal(user_profile(tmp_path, f"    {field}: {value}\n"))
    assert f"gate.watch.{field}" in message and "\n" not in message.strip()


def test_a_tightened_watch_reaches_the_sentinels_expectations(tmp_path):
    loaded = profiles.load(user_profile(tmp_path, "    min_mem_available_gib: 16\n    max_swap_growth_mib: 0\n"
                                                  "    stall_after_s: 20\n"))
    want = expectations_mod.build(loaded, "spark", 1.0)
    assert want["host"] == {"min_mem_available_gib": 16.0, "max_swap_growth_mib": 0.0}
    assert want["stall"] == {"after_s": 20.0}
