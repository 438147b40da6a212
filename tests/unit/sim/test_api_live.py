"""HTTP surface: auth, OpenAI shapes (through the real `openai` client), determinism, image variants,
metrics/admin switches, restarts."""

from __future__ import annotations

import time

import pytest

from sparkgate_sim import timing
from tests.plugins.simproc import decode_speed, metric_total, profile_launch

PROMPT = "Question: Tom has three times as many marbles as Ann. Together they have 48. How many has Tom?"


def _argv_with(name: str, *extra: str, drop: tuple[str, ...] = ()) -> tuple[list[str], dict]:
    argv, env = profile_launch(name)
    argv = [a for a in argv if a not in drop]
    return argv + list(extra), env


def test_api_key_is_enforced_on_api_routes_only(start_sim):
    sim = start_sim(*_argv_with("baseline", "--api-key", "sk-sim-test"))
    auth = {"authorization": "Bearer sk-sim-test"}
    for path in ("/health", "/health_generate", "/ready", "/metrics"):
        assert sim.get(path).status == 200, path
    for path in ("/v1/models", "/server_info", "/model_info", "/get_server_info"):
        assert sim.get(path).status == 401, path
        assert sim.get(path, headers={"authorization": "Bearer wrong"}).status == 401
        assert sim.get(path, headers=auth).status == 200, path
    denied = sim.post("/generate", {"text": PROMPT})
    assert (denied.status, denied.json()) == (401, {"error": "Unauthorized"})
    assert sim.post("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 3}}, headers=auth).status == 200


def test_openai_client_streaming_and_usage(start_profile):
    import openai  # pinned in requirements/test.txt (3.57.0)

    sim = start_profile("all-three")
    client = openai.OpenAI(base_url=sim.base_url + "/v1", api_key="unused", max_retries=0)
    models = client.models.list()
    assert [m.id for m in models.data] == ["ling-v3-flash-fp4"]

    # separate_reasoning off: the raw text (think tags included) is the content, token for token.
    raw = {"separate_reasoning": False}
    stream = client.chat.completions.create(
        model="ling-v3-flash-fp4", messages=[{"role": "user", "content": PROMPT}], max_tokens=40, temperature=0,
        stream=True, stream_options={"include_usage": True}, extra_body=raw,
    )
    pieces, usage, finish = [], None, None
    for event in stream:
        if event.usage is not None:
            usage = event.usage
        for choice in event.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    text = "".join(pieces)
    assert finish == "length"
    assert usage.completion_tokens == 40 == len(text.split())
    assert usage.total_tokens == usage.prompt_tokens + 40

    whole = client.chat.completions.create(
        model="ling-v3-flash-fp4", messages=[{"role": "user", "content": PROMPT}], max_tokens=40, temperature=0,
        extra_body=raw,
    )
    assert whole.choices[0].message.content == text  # temperature 0: same prompt, same text
    assert whole.usage.prompt_tokens == usage.prompt_tokens

    completion = client.completions.create(model="ling-v3-flash-fp4", prompt=PROMPT, max_tokens=12, temperature=0)
    assert completion.usage.prompt_tokens == len(PROMPT.split())
    assert len(completion.choices[0].text.split()) == completion.usage.completion_tokens == 12
    streamed = client.completions.create(
        model="ling-v3-flash-fp4", prompt=PROMPT, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(streamed)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == completion.choices[0].text
    assert chunks[-1].usage.completion_tokens == 12

    text_metrics = sim.metrics()
    assert metric_total(text_metrics, "sglang:num_requests_total") == 4
    assert metric_total(text_metrics, "sglang:generation_tokens_total") == 40 + 40 + 12 + 12


def test_generate_is_deterministic_at_temperature_zero(start_profile):
    sim = start_profile("baseline")
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 24, "temperature": 0}}
    first, second = sim.post("/generate", body).json(), sim.post("/generate", body).json()
    other = sim.post("/generate", {**body, "text": PROMPT + " Show your work."}).json()
    assert first["text"] == second["text"] and first["output_ids"] == second["output_ids"]
    assert other["text"] != first["text"]
    assert len(first["text"].split()) == first["meta_info"]["completion_tokens"] == 24
    assert first["meta_info"]["finish_reason"] == {"type": "length", "length": 24}
    assert first["meta_info"]["prompt_tokens"] == len(PROMPT.split())
    sampled = {sim.post("/generate", {**body, "sampling_params": {"max_new_tokens": 8, "temperature": 0.8}}).json()["text"] for _ in range(3)}
    assert len(sampled) > 1  # sampling without a seed differs between requests
    streamed = [e for _, e in sim.stream("/generate", body) if e != "[DONE]"]
    assert streamed[-1]["text"] == first["text"]
    assert streamed[0]["meta_info"]["finish_reason"] is None and "e2e_latency" not in streamed[0]["meta_info"]
    assert streamed[-1]["meta_info"]["e2e_latency"] > 0.2  # simulated seconds: TTFT alone is ~0.2 s


def test_routes_and_switches(start_sim):
    argv, env = _argv_with("baseline", drop=("--enable-metrics",))
    sim = start_sim(argv, env)
    assert sim.get("/metrics").status == 404  # only with --enable-metrics
    assert sim.get("/admin/stats").status == 404  # only with SPARKGATE_SIM_ADMIN=1
    assert sim.get("/nope").status == 404
    assert sim.get("/generate").status == 405
    info = sim.get("/model_info").json()
    assert info["architectures"] == ["BailingMoeV3ForCausalLM"] and info["served_model_name"] == "ling-v3-flash-fp4"
    assert sim.get("/get_model_info").json() == info
    assert sim.get("/v1/models/ling-v3-flash-fp4").json()["max_model_len"] == 262144
    assert sim.get("/v1/models/other").status == 404


def test_stock_image_ignores_the_fp8_variable(start_profile):
    sim = start_profile("all-three", {"SPARKGATE_SIM_IMAGE": "stock"}, scale=0.04)
    healthy_no_fp8 = timing.SpeedModel(humming=True, fp8_lm_head=False, speculative=True, cuda_graph=True)
    speed, meta = decode_speed(sim, PROMPT, 120)
    state = sim.server_info()["internal_states"][0]
    assert "SGLANG_ENABLE_FP8_LM_HEAD" not in state["env_vars"]
    assert "SGLANG_PLUGINS" in state["env_vars"]
    report = state["engagement"]
    assert report["target"]["lm_head"]["weight_dtype"] == "torch.bfloat16"
    assert report["lm_head_sharing"] == {"module_shared": False, "weight_shared": True}
    assert "Online FP8 quantization" not in sim.log()
    assert meta["spec_accept_length"] > 2.4  # BF16 head: no trap, just no FP8 gain
    assert speed == pytest.approx(healthy_no_fp8.decode_tok_s(), rel=0.05)


def test_legacy_sgl_prefix_turns_the_fp8_head_on(start_sim):
    argv, env = profile_launch("humming-fp8")
    env.pop("SGLANG_ENABLE_FP8_LM_HEAD")
    sim = start_sim(argv, {**env, "SGL_ENABLE_FP8_LM_HEAD": "true"})
    state = sim.server_info()["internal_states"][0]
    assert state["env_vars"]["SGLANG_ENABLE_FP8_LM_HEAD"] == "true"
    assert state["engagement"]["target"]["lm_head"]["weight_dtype"] == "torch.float8_e4m3fn"
    assert sim.log().count("Online FP8 quantization enabled for lm_head.") == 1


def test_avg_accept_length_only_after_a_decode_log_interval(start_sim):
    argv, env = profile_launch("all-three")
    sim = start_sim(argv + ["--decode-log-interval", "10"], env)
    greedy = {"temperature": 0}
    sim.post("/generate", {"text": PROMPT, "sampling_params": {**greedy, "max_new_tokens": 12}})  # ~4 verify steps
    assert "avg_spec_accept_length" not in sim.server_info()["internal_states"][0]
    sim.post("/generate", {"text": PROMPT, "sampling_params": {**greedy, "max_new_tokens": 120}})
    state = sim.server_info()["internal_states"][0]
    assert state["avg_spec_accept_length"] == pytest.approx(2.68, abs=0.15)
    assert len([l for l in sim.log().splitlines() if "Decode batch" in l]) >= 2
    gauges = sim.metrics()
    assert metric_total(gauges, "sglang:spec_accept_length") == pytest.approx(2.68, abs=0.3)


def test_admin_faults_stats_and_restart(start_profile):
    sim = start_profile("all-three", {"SPARKGATE_SIM_ADMIN": "1"})
    sim.post("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 8}})
    stats = sim.get("/admin/stats").json()
    assert stats["requests"]["/generate"] == 1 and stats["requests"]["/health"] >= 1
    assert "/admin/stats" not in stats["requests"]

    # Runtime fault: applies to the next request.
    state = sim.post("/admin/faults", {"faults": ["degrade-after:0"]}).json()
    assert state["active"] == ["degrade-after:0"]
    meta = sim.post("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 120}}).json()["meta_info"]
    assert meta["spec_accept_length"] == pytest.approx(1.2, abs=0.05)  # (prefill token included)

    # Load-time fault: waits for a restart.
    state = sim.post("/admin/faults", {"add": ["draft-lm-head-unshared"], "remove": ["degrade-after"]}).json()
    assert state["pending_restart"] == ["draft-lm-head-unshared"]
    assert sim.engagement()["lm_head_sharing"]["module_shared"] is True
    before = sim.server_info()["startup_time"]
    assert sim.post("/admin/faults", {"faults": ["bogus"]}).status == 400

    assert sim.post("/admin/restart", {}).status == 200
    assert sim.get("/health").status == 503
    sim.wait_ready()
    assert sim.engagement()["lm_head_sharing"]["module_shared"] is False
    # A fresh start with the same phases: its durations are computed on the engine's clock, so they read the same.
    assert sim.server_info()["startup_time"] == before
    assert sim.get("/admin/stats").json()["restarts"] == 1
    assert sim.log().count("The server is fired up and ready to roll!") == 2


def test_health_is_503_with_no_body_while_starting(start_profile):
    sim = start_profile("baseline", {"SPARKGATE_SIM_STARTUP_S": "150"}, ready=False)  # 1.5 s of wall time
    sim.wait_listening()
    for path in ("/health", "/health_generate", "/ready"):
        resp = sim.get(path)
        assert (resp.status, resp.body) == (503, b""), path
    assert sim.post("/generate", {"text": PROMPT}).status == 503
    started = time.monotonic()
    sim.wait_ready()
    assert time.monotonic() - started > 0.5


def test_requests_queue_at_batch_one(start_profile):
    import threading

    # Judged by the engine's own accounting, not the wall clock: the second request is sent only once the engine
    # reports the first running, and the first is long (~16 simulated s, ~3 wall s here), so the second waits for the batch slot.
    sim = start_profile("baseline", scale=0.2)
    first: dict = {}
    long_one = threading.Thread(target=lambda: first.update(sim.post(
        "/generate", {"text": f"{PROMPT} 0", "sampling_params": {"max_new_tokens": 600}}).json()))
    long_one.start()
    while metric_total(sim.metrics(), "sglang:num_running_reqs") != 1:
        assert long_one.is_alive(), first
        time.sleep(0.01)
    second = sim.post("/generate", {"text": f"{PROMPT} 1", "sampling_params": {"max_new_tokens": 30}}).json()
    long_one.join()
    waited, own = second["meta_info"]["queue_time"], 0.2 + 29 / 37.81
    # It waited for the first, and only for the first: most of its ~16 s (a quarter leaves a loaded host ~2.4 wall s
    # between the first starting and the second arriving).
    assert 0.25 * first["meta_info"]["e2e_latency"] < waited < first["meta_info"]["e2e_latency"]
    assert second["meta_info"]["e2e_latency"] > waited + 0.9 * own  # queue time counts


def test_chat_returns_spec_tokens_details_when_asked(start_profile):
    sim = start_profile("all-three")
    body = {"model": "ling-v3-flash-fp4", "messages": [{"role": "user", "content": "add 2 and 3"}],
            "max_tokens": 40, "temperature": 0, "return_spec_tokens_details": True}
    answer = sim.post("/v1/chat/completions", body).json()
    details = answer["sglext"]["spec_tokens_details"]
    assert details["spec_accept_length"] == answer["usage"]["completion_tokens"] / details["spec_verify_ct"]
    plain = sim.post("/v1/chat/completions", {**body, "return_spec_tokens_details": False}).json()
    assert "sglext" not in plain
    events = [e for _, e in sim.stream("/v1/chat/completions", body) if e != "[DONE]"]
    carrying = [i for i, e in enumerate(events) if "sglext" in e]
    # a chunk of its own after the finish event, before the usage chunk (serving_chat.py)
    assert len(carrying) == 1 and events[carrying[0]]["choices"] == [] and events[carrying[0]]["usage"] is None
    assert events[carrying[0] - 1]["choices"][0]["finish_reason"] is not None
    assert events[carrying[0]]["sglext"]["spec_tokens_details"] == details


def test_reported_durations_are_the_engine_clock_not_the_hosts(start_profile):
    """Every duration the engine reports is computed by its timing model: the same figures whatever the host's
    pace, and the same figures again for the same request. The stream's wall-clock delivery only ever lags the
    scaled engine time (sleeps end late on a busy host, never early): measured from the request's send, since
    the client may read the first chunk late and the rest at once."""
    scale = 0.05
    sim = start_profile("baseline", scale=scale)
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 40, "temperature": 0}}
    runs = []
    for _ in range(2):
        sent = time.monotonic()
        events = [(t, e) for t, e in sim.stream("/generate", body) if e != "[DONE]"]
        runs.append((events[-1][1]["meta_info"], events[-1][0] - sent))
    model = timing.SpeedModel(humming=False, fp8_lm_head=False, speculative=False, cuda_graph=True)
    for meta, client_wall in runs:
        assert meta["first_token_latency"] == pytest.approx(timing.ttft_s(meta["prompt_tokens"]), abs=1e-9)
        decode = meta["e2e_latency"] - meta["first_token_latency"]
        assert decode == pytest.approx(39 * model.plain_step_s(), rel=1e-9)
        assert meta["decode_throughput"] == pytest.approx(model.plain_tok_s(), rel=1e-9)
        assert meta["queue_time"] == 0.0  # nothing ran before it: no simulated work to wait for
        assert client_wall >= 0.95 * meta["e2e_latency"] * scale
    assert runs[0][0]["e2e_latency"] == runs[1][0]["e2e_latency"]
