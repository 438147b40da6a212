"""The harness itself: stand-ins stay out of this process, start failures fail fast, teardown leaves nothing.

Runs before test_engine_starts.py (file order) while no server is up; none of these reaches READY.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import socket
import subprocess
import sys
import time

import pytest

from tests.real.engine import (
    CPU_PLATFORM_PLUGIN,
    HOST,
    NO_PLUGINS,
    PROBE_PLUGIN,
    EngineStartError,
    RealEngine,
    active_engine,
    alive,
    start_engine,
    tree_pids,
)

pytestmark = pytest.mark.real

# Run with the server's env (its PYTHONPATH): the stand-ins import, the plugin is an entry point, and the
# torch attention ops agree with PyTorch's own SDPA (GQA, causal extend over a cached prefix, decode).
_STAND_IN_CHECK = r"""
import importlib.metadata, json
import torch, torch.nn.functional as F
import sgl_kernel, sgl_kernel.speculative

eps = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="sglang.srt.plugins")}
torch.manual_seed(0)
H, HKV, D, PREFIX, EXT = 4, 2, 16, 5, 3
total = PREFIX + EXT
q = torch.randn(EXT, H, D)
k_all, v_all = torch.randn(total, HKV, D), torch.randn(total, HKV, D)
k_buf, v_buf = torch.zeros(32, HKV, D), torch.zeros(32, HKV, D)
slots = torch.tensor([7, 3, 9, 11, 2, 20, 21, 5])
k_buf[slots], v_buf[slots] = k_all, v_all
req_to_token = torch.zeros(2, 64, dtype=torch.int32)
req_to_token[1, :total] = slots.int()
out = torch.empty(EXT, H, D)
torch.ops.sgl_kernel.extend_attention_cpu(
    q, k_all[PREFIX:], v_all[PREFIX:], out, k_buf, v_buf, 1.0, 1.0, req_to_token, torch.tensor([1]),
    torch.tensor([total]), torch.tensor([EXT], dtype=torch.int32), torch.tensor([0], dtype=torch.int32), EXT,
    D ** -0.5, 0.0, False, 0, None, None, None, True)
mask = torch.arange(total).view(1, -1) <= (PREFIX + torch.arange(EXT)).view(-1, 1)
ref = F.scaled_dot_product_attention(q.transpose(0, 1), k_all.transpose(0, 1), v_all.transpose(0, 1),
                                     attn_mask=mask, enable_gqa=True).transpose(0, 1)
extend_err = (out - ref).abs().max().item()

new_k, new_v, q1 = torch.randn(1, HKV, D), torch.randn(1, HKV, D), torch.randn(1, H, D)
req_to_token[1, total] = 30
out1 = torch.empty(1, H, D)
torch.ops.sgl_kernel.decode_attention_cpu(
    q1, k_buf, v_buf, 1.0, 1.0, out1, new_k, new_v, torch.tensor([30]), torch.zeros(1, H, 8, D + 1),
    req_to_token, torch.tensor([1]), torch.tensor([total + 1]), D ** -0.5, 0.0, False, 0, None, None)
keys, values = torch.cat([k_all, new_k]), torch.cat([v_all, new_v])
ref1 = F.scaled_dot_product_attention(q1.transpose(0, 1), keys.transpose(0, 1), values.transpose(0, 1),
                                      enable_gqa=True).transpose(0, 1)
decode_err = (out1 - ref1).abs().max().item()

# A chain of 4 draft tokens, 2 of them right: accept 2, predicts = target at the accepted slots.
predicts = torch.full((4,), -1, dtype=torch.int32)
accept_index = torch.full((1, 4), -1, dtype=torch.int32)
accept_num = torch.zeros(1, dtype=torch.int32)
sgl_kernel.verify_tree_greedy_cpu(
    predicts=predicts, accept_index=accept_index, accept_token_num=accept_num,
    candidates=torch.tensor([[10, 11, 12, 13]]), retrive_index=torch.tensor([[0, 1, 2, 3]]),
    retrive_next_token=torch.tensor([[1, 2, 3, -1]]), retrive_next_sibling=torch.tensor([[-1, -1, -1, -1]]),
    target_predict=torch.tensor([[11, 12, 99, 7]]))
print(json.dumps({
    "stand_in": sgl_kernel.STAND_IN, "entry_points": eps, "extend_err": extend_err, "decode_err": decode_err,
    "cache_written": bool(torch.equal(k_buf[30], new_k[0])), "accept_num": accept_num.tolist(),
    "accept_index": accept_index.tolist(), "predicts": predicts.tolist(),
}))
"""


def test_stand_ins_are_invisible_to_pytest():
    assert importlib.util.find_spec("sgl_kernel") is None
    assert importlib.util.find_spec(CPU_PLATFORM_PLUGIN) is None
    names = {ep.name for ep in importlib.metadata.entry_points(group="sglang.srt.plugins")}
    assert PROBE_PLUGIN in names and CPU_PLATFORM_PLUGIN not in names


def test_argv_and_env_of_a_launch(tmp_path, dense_launch):
    engine = RealEngine(dense_launch, tmp_path)  # not started
    assert engine.argv[:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert engine.argv[engine.argv.index("--host") + 1] == HOST
    assert engine.argv[engine.argv.index("--port") + 1] == str(engine.port)
    assert engine.argv[engine.argv.index("--attention-backend") + 1] == "torch_native"
    assert engine.env["SGLANG_PLUGINS"] == PROBE_PLUGIN
    assert engine.env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert RealEngine(dataclasses.replace(dense_launch, probe=False), tmp_path / "b").env["SGLANG_PLUGINS"] == NO_PLUGINS
    amx = RealEngine(dataclasses.replace(dense_launch, cpu_amx=True, metrics=False), tmp_path / "c")
    assert amx.env["SGLANG_PLUGINS"] == f"{PROBE_PLUGIN},{CPU_PLATFORM_PLUGIN}"
    assert "intel_amx" in amx.argv and "--enable-metrics" not in amx.argv


def test_stand_ins_in_the_server_env(tmp_path, dense_launch):
    engine = RealEngine(dense_launch, tmp_path)  # not started: only its env and site dir
    result = subprocess.run(
        [sys.executable, "-c", _STAND_IN_CHECK], env=engine.env, cwd=tmp_path, capture_output=True, text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert facts["stand_in"] is True
    assert facts["entry_points"][CPU_PLATFORM_PLUGIN] == f"{CPU_PLATFORM_PLUGIN}:register"
    assert facts["entry_points"][PROBE_PLUGIN] == "sparkgate_probe.plugin:register"
    assert facts["extend_err"] < 1e-5 and facts["decode_err"] < 1e-5
    assert facts["cache_written"] is True
    assert facts["accept_num"] == [2]
    assert facts["accept_index"] == [[0, 1, 2, -1]]
    assert facts["predicts"] == [11, 12, 99, -1]


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


def test_a_bad_flag_fails_fast_with_the_log_tail(tmp_path, dense_launch):
    launch = dataclasses.replace(dense_launch, extra_args=("--no-such-flag",))
    t0 = time.monotonic()
    with pytest.raises(EngineStartError) as failure:
        start_engine(launch, tmp_path)
    assert time.monotonic() - t0 < 90  # the process exits at argument parsing; no waiting for the timeout
    message = str(failure.value)
    assert "exited with 2" in message  # argparse's exit status
    tail = message.split("--- log tail ---", 1)[1]
    assert "error: unrecognized arguments: --no-such-flag" in tail
    assert active_engine() is None


def test_start_timeout_stops_the_tree_and_one_server_at_a_time(tmp_path, dense_launch):
    first = RealEngine(dataclasses.replace(dense_launch, start_timeout_s=300), tmp_path / "first").start()
    try:
        with pytest.raises(RuntimeError, match="one real SGLang server at a time"):
            RealEngine(dense_launch, tmp_path / "second").start()
        # Wait for SGLang's own children (scheduler, detokenizer), then make it time out before READY. Imports
        # alone take 10-20 s here, and much longer while the other lanes load the host.
        deadline = time.monotonic() + 240
        while len(tree_pids(first.proc.pid, first.proc.pid)) < 3 and time.monotonic() < deadline:
            first._check_alive("before spawning its subprocesses")
            time.sleep(0.2)
        seen = tree_pids(first.proc.pid, first.proc.pid)
        assert len(seen) >= 3, "SGLang spawned no subprocesses within 240 s"
        first.launch = dataclasses.replace(first.launch, start_timeout_s=time.monotonic() - first.started_at)
        with pytest.raises(EngineStartError, match="not ready after"):
            first.wait_ready()
    finally:
        first.stop()
    assert first.leftover_pids == set()
    assert not [pid for pid in seen if alive(pid)], "a process of the stopped tree is still alive"
    assert not _port_open(first.port)
    assert active_engine() is None
