"""The simulator honours `--config FILE` the way SGLang merges it (differential against SGLang's own
ConfigArgumentMerger) and enforces an admin key given that way, like sglang/srt/utils/auth.py."""

from __future__ import annotations

import json

import pytest
import yaml

from sparkgate_sim import admin_routes, cli
from tests.plugins.simproc import profile_launch

KEY = "adm1n-Key_from-config"

CONFIGS = [
    {"admin-api-key": KEY},
    {"admin_api_key": KEY},  # an underscore key becomes `--admin_api_key`, which argparse then refuses
    {"enable-metrics": True, "disable-radix-cache": False, "port": 30001},
    {"enable_metrics": True},
    {"cuda-graph-bs-decode": [1, 2], "json-model-override-args": {"a": 1}, "uvicorn-access-log-exclude-prefixes": []},
    {"lora-paths": ["a=/x"]},  # a custom action: refused
    {"disable-cuda-graph": True},  # a deprecated store_true: refused
    {"monokernel-backend": "amd"},  # a one-value store_const: usable
    {"trust-remote-code": True, "served-model-name": "x", "random-seed": 7, "mem-fraction-static": 0.5},
    {"enable-tf32-matmul": True},  # a BooleanOptionalAction: SGLang refuses it in a config file
    {},
]


def sglang_merger():
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger

    from sparkgate.sglang.parser import build_sglang_parser

    return ConfigArgumentMerger(build_sglang_parser(with_fork_options=True))


def sglang_merge(argv: list[str]):
    merger = sglang_merger()
    try:
        return merger.merge_config_with_args(list(argv))
    except ValueError as exc:
        return f"ValueError: {exc}"


def sim_merge(argv: list[str]):
    try:
        return cli.merge_config(list(argv))
    except cli.ConfigFileError as exc:
        return f"ValueError: {exc}"


@pytest.mark.sglang
def test_config_key_table_is_sglangs():
    """Which YAML keys are flags without a value, and which are refused, over every flag SGLang has."""
    merger = sglang_merger()
    store_true, unsupported = cli.config_key_table()
    assert store_true == set(merger.store_true_actions)
    assert unsupported == {key: type(action).__name__ for key, action in merger.unsupported_actions.items()}


@pytest.mark.sglang
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: ",".join(c) or "empty")
def test_merge_matches_sglang(tmp_path, config):
    path = tmp_path / "engine.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = ["--model-path", "/m", "--config", str(path), "--port", "30000"]
    assert sim_merge(argv) == sglang_merge(argv)


@pytest.mark.sglang
@pytest.mark.parametrize("name, text", [("c.json", "{}"), ("c.yaml", "- 1\n- 2\n"), ("missing.yaml", None)])
def test_bad_config_files_fail_like_sglang(tmp_path, name, text):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    argv = ["--model-path", "/m", "--config", str(path)]
    ours, theirs = sim_merge(argv), sglang_merge(argv)
    assert isinstance(ours, str) and ours == theirs


@pytest.mark.sglang
@pytest.mark.parametrize("argv", [["--config"], ["--config", "a.yaml", "--config", "b.yaml"], ["--config=a.yaml"], []])
def test_config_flag_placement_like_sglang(argv):
    full = ["--model-path", "/m", *argv]
    assert sim_merge(full) == sglang_merge(full)


def test_the_merged_key_lands_first_so_the_command_line_wins(tmp_path):
    path = tmp_path / "engine.yaml"
    path.write_text(yaml.safe_dump({"admin-api-key": KEY, "port": 1}))
    merged = cli.merge_config(["--model-path", "/m", "--port", "2", "--config", str(path)])
    assert merged == ["--admin-api-key", KEY, "--port", "1", "--model-path", "/m", "--port", "2"]
    args = cli.parse_engine_argv(merged)
    assert args.get("admin_api_key") == KEY and args.get("port") == 2


def _with_config(tmp_path, argv: list[str], config: dict) -> list[str]:
    path = tmp_path / "engine-admin.yaml"
    path.write_text(yaml.safe_dump(config))
    return [*argv, "--config", str(path)]


def test_sim_enforces_an_admin_key_from_the_config_file(start_sim, tmp_path):
    argv, env = profile_launch("baseline")
    sim = start_sim(_with_config(tmp_path, argv, {"admin-api-key": KEY}), env)
    admin = {"Authorization": f"Bearer {KEY}"}
    assert sim.request("GET", "/hicache/storage-backend").status == 401
    assert sim.request("GET", "/hicache/storage-backend", headers={"Authorization": "Bearer wrong"}).status == 401
    answer = sim.request("GET", "/hicache/storage-backend", headers=admin)
    assert answer.status == 200 and answer.json() == admin_routes.HICACHE_FIELDS
    assert sim.request("POST", "/flush_cache").status == 401
    assert sim.request("POST", "/flush_cache", headers=admin).status == 200
    assert sim.request("POST", "/update_weights_from_disk", {"model_path": "/x"}).status == 401
    # Normal routes stay open with only an admin key (SGLang's rule), health and metrics always.
    assert sim.request("GET", "/v1/models").status == 200
    assert sim.request("GET", "/health").status == 200
    # Like SGLang, the engine itself reports the key (the merged argv is the launch_command): this is why
    # the entrypoint and the sentinel redact, and why /server_info never passes the gateway.
    info = sim.request("GET", "/server_info").json()
    assert info["admin_api_key"] == KEY and info["launch_command"].startswith(f"--admin-api-key {KEY} ")
    assert "--config" not in info["launch_command"]


def test_without_an_admin_key_the_probe_route_is_refused_as_sglang_does(start_sim):
    argv, env = profile_launch("baseline")
    sim = start_sim(argv, env)
    answer = sim.request("GET", "/hicache/storage-backend")
    assert answer.status == 400 and "requires admin API key" in json.dumps(answer.json())
    assert sim.request("POST", "/flush_cache").status == 200  # no key configured: admin routes are open


def test_a_bad_config_file_exits_1_with_sglangs_message(start_sim, tmp_path):
    argv, env = profile_launch("baseline")
    bad = tmp_path / "engine.json"
    bad.write_text("{}")
    sim = start_sim([*argv, "--config", str(bad)], env, ready=False)
    assert sim.wait_exit() == 1
    assert "ValueError: Config file must be YAML format, got: .json" in sim.log() + sim.stderr()
