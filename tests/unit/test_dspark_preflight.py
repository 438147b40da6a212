"""Preflight of the DSpark drafter directory, on directories laid out the way `hf download --local-dir` lays
them out: the metadata files are written by huggingface_hub's own `write_download_metadata`, so the format
preflight reads is the library's, not a guess."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from huggingface_hub._local_folder import write_download_metadata

from sparkgate import profiles
from sparkgate.deploy import drafter, preflight

REVISION = "8e5d9988c9b09de13f1f7c9d999ff2bfa533a149"
OTHER_REVISION = "0" * 40
REPO = "inclusionAI/Ling-3.0-flash-dspark"
PIN = drafter.Pin(REPO, REVISION, "LingDSparkModel", 8)
WEIGHTS = b"\x00drafter weights\x01" * 64
FIX = f"Fix: hf download {REPO} --revision {REVISION} --local-dir "


def download(directory, config=None, weights=WEIGHTS, revision=REVISION, name="model.safetensors"):
    """A drafter directory as `hf download --local-dir` leaves it."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["LingDSparkModel"], "block_size": 8} if config is None else config
    (directory / "config.json").write_text(json.dumps(config))
    write_download_metadata(directory, "config.json", revision, "a16a55fda99d2f2e7b69cce5cf93ff4ad3049930")
    (directory / name).write_bytes(weights)
    write_download_metadata(directory, name, revision, hashlib.sha256(weights).hexdigest())
    return directory


def test_the_metadata_format_is_huggingface_hubs(tmp_path):
    directory = download(tmp_path / "d")
    lines = (directory / ".cache/huggingface/download/model.safetensors.metadata").read_text().splitlines()
    assert lines[0] == REVISION and lines[1] == hashlib.sha256(WEIGHTS).hexdigest()


def test_the_pinned_download_passes(tmp_path):
    assert drafter.problems(download(tmp_path / "d"), PIN) == []


def test_weights_in_a_subfolder_and_several_shards_pass(tmp_path):
    directory = download(tmp_path / "d")
    (directory / "sub").mkdir()
    shard = b"second shard"
    (directory / "sub" / "model-2.safetensors").write_bytes(shard)
    write_download_metadata(directory, "sub/model-2.safetensors", REVISION, hashlib.sha256(shard).hexdigest())
    assert drafter.problems(directory, PIN) == []


def one_fault(directory) -> str:
    found = drafter.problems(directory, PIN)
    assert len(found) == 1, found
    assert "\n" not in found[0] and FIX in found[0], found[0]
    return found[0]


def test_missing_directory(tmp_path):
    assert "no drafter directory" in one_fault(tmp_path / "absent")


def test_config_not_json(tmp_path):
    directory = download(tmp_path / "d")
    (directory / "config.json").write_text("{architectures: [LingDSparkModel]")
    assert "config.json: not readable JSON" in one_fault(directory)


def test_config_a_json_list(tmp_path):
    assert "a JSON list, expected an object" in one_fault(download(tmp_path / "d", config=["LingDSparkModel"]))


def test_another_architecture(tmp_path):
    fault = one_fault(download(tmp_path / "d", config={"architectures": ["Qwen3DSparkModel"]}))
    assert "architectures ['Qwen3DSparkModel'], expected to contain 'LingDSparkModel'" in fault


@pytest.mark.parametrize("config", [
    {"architectures": ["LingDSparkModel"], "block_size": 7},
    {"architectures": ["LingDSparkModel"], "dspark_block_size": 7, "block_size": 8},
    {"architectures": ["LingDSparkModel"], "dflash_config": {"block_size": 7}},
])
def test_another_block_size(tmp_path, config):
    assert "block_size 7, expected 8" in one_fault(download(tmp_path / "d", config=config))


def test_no_block_size_in_the_config_is_fine(tmp_path):
    assert drafter.problems(download(tmp_path / "d", config={"architectures": ["LingDSparkModel"]}), PIN) == []


def test_wrong_revision_names_both_and_the_command(tmp_path):
    found = drafter.problems(download(tmp_path / "d", revision=OTHER_REVISION), PIN)
    assert len(found) == 2  # config.json and the weights
    assert all(f"revision '{OTHER_REVISION}', expected {REVISION}" in line and FIX in line for line in found)


def test_a_copy_without_the_download_metadata_is_refused(tmp_path):
    directory = download(tmp_path / "d")
    for record in (directory / ".cache/huggingface/download").iterdir():
        record.unlink()
    found = drafter.problems(directory, PIN)
    assert len(found) == 2 and all("no download metadata" in line for line in found)


def test_corrupt_weights(tmp_path):
    directory = download(tmp_path / "d")
    (directory / "model.safetensors").write_bytes(WEIGHTS[:-1] + b"\xff")
    fault = one_fault(directory)
    assert "model.safetensors: SHA-256" in fault and f"expected {hashlib.sha256(WEIGHTS).hexdigest()}" in fault


def test_a_deleted_shard_the_download_recorded(tmp_path):
    directory = download(tmp_path / "d")
    write_download_metadata(directory, "model-2.safetensors", REVISION, "b" * 64)
    assert "model-2.safetensors: missing, but the download recorded it" in one_fault(directory)


def test_no_weights(tmp_path):
    directory = download(tmp_path / "d")
    (directory / "model.safetensors").unlink()
    (directory / ".cache/huggingface/download/model.safetensors.metadata").unlink()
    assert "no *.safetensors files" in one_fault(directory)


def test_an_etag_that_is_not_a_sha256_proves_nothing(tmp_path):
    directory = download(tmp_path / "d")
    write_download_metadata(directory, "model.safetensors", REVISION, "a16a55fda99d2f2e7b69cce5cf93ff4ad3049930")
    assert "is not a SHA-256" in one_fault(directory)


def test_symlinked_weights_escaping_the_directory(tmp_path):
    directory = download(tmp_path / "d")
    outside = tmp_path / "elsewhere.safetensors"
    outside.write_bytes(WEIGHTS)
    (directory / "model.safetensors").unlink()
    os.symlink(outside, directory / "model.safetensors")
    fault = one_fault(directory)
    assert "a symlink to" in fault and "outside the drafter directory" in fault


def test_symlinked_config_escaping_the_directory(tmp_path):
    directory = download(tmp_path / "d")
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LingDSparkModel"]}))
    (directory / "config.json").unlink()
    os.symlink(tmp_path / "config.json", directory / "config.json")
    assert "outside the drafter directory" in one_fault(directory)


def test_large_files_report_hashing_progress(tmp_path, monkeypatch):
    monkeypatch.setattr(drafter, "PROGRESS_EVERY", 256)
    monkeypatch.setattr(drafter, "HASH_CHUNK", 128)
    said = []
    assert drafter.problems(download(tmp_path / "d"), PIN, said.append) == []
    assert said[0].startswith("hashing drafter model.safetensors") and len(said) >= 3


# --- the preflight finding, from the profile ------------------------------------------------------------


def test_preflight_reads_the_pin_from_the_profile_and_the_directory_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKGATE_DSPARK_DIR", str(download(tmp_path / "drafter")))
    [finding] = preflight.dspark_drafter(profiles.load("dspark").profile)
    assert finding.ok and finding.check == "dspark drafter" and "LingDSparkModel at 8e5d9988c9b0" in finding.detail
    monkeypatch.setenv("SPARKGATE_DSPARK_DIR", str(tmp_path / "missing"))
    [refused] = preflight.dspark_drafter(profiles.load("dspark").profile)
    assert not refused.ok and str(refused).startswith("[FAIL] dspark drafter: ") and FIX in refused.detail


def test_the_default_directory_is_the_one_compose_mounts(monkeypatch, tmp_path):
    monkeypatch.delenv("SPARKGATE_DSPARK_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert preflight.dspark_drafter_dir("/models/Ling-3.0-flash-dspark") == tmp_path / "models/Ling-3.0-flash-dspark"


def test_no_drafter_finding_without_dspark():
    assert preflight.dspark_drafter(profiles.load("all-three").profile) == []


def test_the_download_command_is_quoted_for_the_shell(tmp_path):
    assert PIN.download_command(tmp_path / "my models") == (
        f"hf download {REPO} --revision {REVISION} --local-dir '{tmp_path / 'my models'}'")


# --- in a deploy ---------------------------------------------------------------------------------------------


def test_a_spark_deploy_without_the_drafter_is_refused_before_anything_is_touched(tmp_path, monkeypatch):
    from tests.unit.test_deploy_order import FakeDocker, deploy_mod, options  # the deploy-order harness

    fake = FakeDocker(gateway_port=None, running=False)
    monkeypatch.setattr(preflight.docker_cli, "run", fake)
    monkeypatch.setattr(preflight, "spark_host", lambda *a, **k: [])  # this host is no Spark; the drafter is judged
    monkeypatch.setenv("SPARKGATE_DSPARK_DIR", str(tmp_path / "no-drafter"))
    lines: list[str] = []
    with pytest.raises(deploy_mod.DeployRefused) as refused:
        deploy_mod.deploy(options(tmp_path, 1, profile="dspark", target="spark"), say=lines.append)
    message = str(refused.value)
    assert message.startswith("preflight failed: dspark drafter: ") and "no drafter directory" in message
    assert f"{FIX}{tmp_path / 'no-drafter'}" in message and "\n" not in message
    assert fake.calls == [], "nothing rendered, stopped or started"
    assert any(line.strip().startswith("[FAIL] dspark drafter:") for line in lines)
