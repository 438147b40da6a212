"""`invoke model.pull` against a stand-in for the Hub's file API on 127.0.0.1 (tests/plugins/hub.py), with the real
huggingface_hub 1.33 `snapshot_download` doing the download: a clean pull, a transfer cut mid-way and resumed
with a Range request, a pull stopped part-way and finished by the next, a download whose bytes do not hash to
their etag (repaired when it was transient, refused naming the file when it is not), the refusals before any
byte moves, and the task itself. Nothing connects beyond 127.0.0.1; HF_HOME and every cache are in tmp."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys

import huggingface_hub
import pytest
from huggingface_hub import constants

from sparkgate.deploy import checkpoint, drafter, fileproof, pull
from sparkgate.profile import loading as profiles
from tests.conftest import REPO as CHECKOUT
from tests.plugins import checkpoints as ck
from tests.plugins.hub import Repo, StandInHub

SECOND = ck.shard_name(1, 3)
DRAFTER_REPO = "inclusionAI/Ling-3.0-flash-dspark"
DRAFTER_REVISION = "8e5d9988c9b09de13f1f7c9d999ff2bfa533a149"
NEW_REVISION = "1" * 40


@pytest.fixture(autouse=True)
def hub_home(tmp_path, monkeypatch):
    """huggingface_hub pointed at tmp and kept off the network: its caches, token and telemetry (whose agent
    detection would fetch from the real Hub), and a connect guard that fails any address but 127.0.0.1."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 1024)  # small chunks: a cut transfer resumes mid-file
    for name in ("HF_TOKEN", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo
    loopback = ("127.0.0.1", "::1", "localhost")

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in loopback:
            raise AssertionError(f"a test tried to reach {address!r}")
        return real_connect(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if host not in loopback:
            raise AssertionError(f"a test tried to resolve {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def repo_files(directory) -> dict[str, bytes]:
    return {path.relative_to(directory).as_posix(): path.read_bytes() for path in sorted(directory.rglob("*"))
            if path.is_file() and ".cache" not in path.relative_to(directory).parts}


@pytest.fixture
def source(tmp_path):
    """The files of a fake checkpoint as the Hub holds them (shards of ~20 kB: a cut lands mid-file)."""
    return repo_files(ck.build(tmp_path / "upstream", tensor_bytes=300).directory)


def drafter_files() -> dict[str, bytes]:
    weights = ck.safetensors_bytes({"layers.0.weight": b"\x01" * 64, "fc.weight": b"\x02" * 64})
    return {"config.json": json.dumps({"architectures": ["LingDSparkModel"], "block_size": 8}).encode(),
            "model.safetensors": weights}


def run(hub, tmp_path, profile="all-three", revision=ck.REVISION, **extra):
    lines: list[str] = []
    pull.pull(profiles.load(profile), profile, revision=revision, directory=tmp_path / "model",
              endpoint=hub.url, say=lines.append, interval_s=0.05, **extra)
    return lines


def refused(hub, tmp_path, **extra) -> str:
    with pytest.raises(pull.PullRefused) as caught:
        run(hub, tmp_path, **extra)
    message = str(caught.value)
    assert "\n" not in message
    return message


EXPECT = checkpoint.Expect(ck.REPO, ck.REVISION, ck.ARCHITECTURE, mtp=True, humming=True, pull="x")


def test_a_pull_downloads_every_file_and_proves_it(tmp_path, source):
    with StandInHub({ck.REPO: Repo(ck.REVISION, source)}) as hub:
        lines = run(hub, tmp_path)
    model = tmp_path / "model"
    assert repo_files(model) == source
    assert checkpoint.problems(model, EXPECT, full=True) == []
    assert lines[0] == f"pulling checkpoint {ck.REPO} at {ck.REVISION} from {hub.url} into {model}"
    assert any(line.strip().startswith("downloaded checkpoint inclusionAI/Ling-3.0-flash-fp4: ") and
               line.endswith("(100%), 8 of 8 files") or "(100%)," in line for line in lines)
    proved = next(line for line in lines if "proved checkpoint" in line)
    assert proved.strip().startswith(f"proved checkpoint {ck.REPO} at {ck.REVISION[:12]}: 8 files, ")
    assert "GB/s); every file as the Hub recorded it, none added" in proved
    assert sorted(path for path, _ in hub.gets()) == sorted(source), "each file fetched once"


def test_the_records_are_the_ones_the_preflight_reads(tmp_path, source):
    with StandInHub({ck.REPO: Repo(ck.REVISION, source)}) as hub:
        run(hub, tmp_path)
    record = (tmp_path / "model" / fileproof.METADATA_DIR / f"{SECOND}.metadata").read_text().splitlines()
    assert record[:2] == [ck.REVISION, hashlib.sha256(source[SECOND]).hexdigest()]
    config = (tmp_path / "model" / fileproof.METADATA_DIR / "config.json.metadata").read_text().splitlines()
    assert config[1] == huggingface_hub.utils.sha.git_hash(source["config.json"])


def test_a_transfer_cut_mid_way_is_resumed_with_a_range_request(tmp_path, source):
    with StandInHub({ck.REPO: Repo(ck.REVISION, source)}, cut_once={(ck.REPO, SECOND)}) as hub:
        run(hub, tmp_path)
    fetches = [rng for path, rng in hub.gets() if path == SECOND]
    assert fetches[0] is None and fetches[1].startswith("bytes=") and fetches[1] != "bytes=0-", fetches
    assert int(fetches[1][6:-1]) <= len(source[SECOND]) // 2, "resumed where the cut transfer stopped"
    assert (tmp_path / "model" / SECOND).read_bytes() == source[SECOND]
    assert checkpoint.problems(tmp_path / "model", EXPECT, full=True) == []


def test_a_pull_stopped_part_way_is_finished_by_the_next_which_fetches_only_the_rest(tmp_path, source):
    model = tmp_path / "model"
    with StandInHub({ck.REPO: Repo(ck.REVISION, source)}, fail_once={(ck.REPO, SECOND): 403}) as hub:
        message = refused(hub, tmp_path)
        assert message.startswith(f"download of {ck.REPO} at {ck.REVISION[:12]} into {model} stopped: HfHubHTTPError: ")
        assert message.endswith(f"Fix: rerun `invoke model.pull --profile all-three --dir {model}` (files already "
                                "downloaded are kept and not fetched again)")
        assert not (model / SECOND).exists() and (model / ck.shard_name(0, 3)).is_file()
        first = len(hub.log)
        run(hub, tmp_path)
        assert [path for method, _, path, _ in hub.log[first:] if method == "GET"] == [SECOND]
    assert checkpoint.problems(model, EXPECT, full=True) == []


def test_bytes_that_do_not_hash_to_their_etag_are_refused_naming_the_file(tmp_path, source):
    model = tmp_path / "model"
    with StandInHub({ck.REPO: Repo(ck.REVISION, source)}, corrupt={(ck.REPO, SECOND)}) as hub:
        with pytest.raises(pull.PullRefused) as caught:
            lines: list[str] = []
            pull.pull(profiles.load("all-three"), "all-three", revision=ck.REVISION, directory=model,
                      endpoint=hub.url, say=lines.append, interval_s=0.05)
        served = source[SECOND][:-1] + bytes([source[SECOND][-1] ^ 0xFF])
        assert str(caught.value) == (
            f"the pulled checkpoint is not proven: {str(model / SECOND)!r}: SHA-256 "
            f"{hashlib.sha256(served).hexdigest()}, expected {hashlib.sha256(source[SECOND]).hexdigest()} as "
            f"downloaded (corrupt or edited file). Fix: invoke model.pull --profile all-three --dir {model}")
        assert [path for path, _ in hub.gets()].count(SECOND) == 2, "fetched once more before refusing"
    assert f"      {SECOND}: its content differs from what the Hub recorded for it; removing it and fetching it " \
           "again" in lines
    assert any(line.startswith(f"      [FAIL] {str(model / SECOND)!r}: SHA-256 ") for line in lines)


def test_bytes_corrupted_once_are_fetched_again_and_then_proven(tmp_path, source):
    with StandInHub({ck.REPO: Repo(ck.REVISION, source)}, corrupt_once={(ck.REPO, SECOND)}) as hub:
        lines = run(hub, tmp_path)
        assert [path for path, _ in hub.gets()].count(SECOND) == 2
    assert (tmp_path / "model" / SECOND).read_bytes() == source[SECOND]
    proved = next(line for line in lines if "proved checkpoint" in line)
    assert ": 9 files, " in proved, "the 8 files, and the one fetched again hashed once more"


def test_a_pull_over_an_older_revision_updates_it_and_names_what_the_new_one_lacks(tmp_path, source):
    model = tmp_path / "model"
    with StandInHub({ck.REPO: Repo(ck.REVISION, source)}) as hub:
        run(hub, tmp_path)
    newer = {**source, "README.md": b"# Ling-3.0-flash-fp4, updated\n"}
    del newer["generation_config.json"]
    with StandInHub({ck.REPO: Repo(NEW_REVISION, newer)}) as hub:
        message = refused(hub, tmp_path, revision=NEW_REVISION)
        assert sorted(path for path, _ in hub.gets()) == ["README.md"], "unchanged files are not fetched again"
    assert message == (f"the pulled checkpoint is not proven: {str(model / 'generation_config.json')!r}: downloaded at "
                       f"revision {ck.REVISION!r}, expected {NEW_REVISION} (model.revision). Fix: invoke model.pull "
                       f"--profile all-three --dir {model}")
    assert (model / "README.md").read_bytes() == newer["README.md"]


def test_the_dspark_profile_pulls_and_proves_the_drafter_too(tmp_path, source, monkeypatch):
    monkeypatch.setenv("SPARKGATE_DSPARK_DIR", str(tmp_path / "drafter"))
    repos = {ck.REPO: Repo(ck.REVISION, source), DRAFTER_REPO: Repo(DRAFTER_REVISION, drafter_files())}
    with StandInHub(repos) as hub:
        lines = run(hub, tmp_path, profile="dspark")
    assert f"pulling drafter {DRAFTER_REPO} at {DRAFTER_REVISION} from {hub.url} into {tmp_path / 'drafter'}" in lines
    assert any(line.strip().startswith(f"proved drafter {DRAFTER_REPO} at 8e5d9988c9b0: 2 files, ") for line in lines)
    pin = drafter.Pin(DRAFTER_REPO, DRAFTER_REVISION, "LingDSparkModel", 8)
    assert drafter.problems(tmp_path / "drafter", pin) == []


# --- refused before a byte moves ---------------------------------------------------------------------------------


def test_no_pinned_commit_is_refused_with_how_to_find_one(tmp_path):
    with pytest.raises(pull.PullRefused) as caught:
        pull.sources(profiles.load("all-three"))
    assert str(caught.value) == (
        "profiles/all-three.yaml: model.revision is not set, and model.pull downloads only a pinned commit (a branch "
        "such as main moves under a download). Fix: look the commit up with `hf models info "
        "inclusionAI/Ling-3.0-flash-fp4 --expand sha` (or the Hub's commit history, "
        "https://huggingface.co/inclusionAI/Ling-3.0-flash-fp4/commits/main), then pass --revision <40-hex> or set "
        "model.revision in the profile")


@pytest.mark.parametrize("revision", ["main", "v1.0", ck.REVISION[:12], ck.REVISION.upper()])
def test_a_branch_tag_or_short_hash_is_refused(revision):
    with pytest.raises(pull.PullRefused, match=rf"^--revision '{revision}' is not a full commit hash"):
        pull.sources(profiles.load("all-three"), revision)


def test_a_commit_the_hub_does_not_have_is_refused(tmp_path, source):
    with StandInHub({ck.REPO: Repo(ck.REVISION, source)}) as hub:
        message = refused(hub, tmp_path, revision=NEW_REVISION)
    assert message.startswith(f"{ck.REPO} has no commit {NEW_REVISION} on the Hub. Fix: check the pin (model.revision "
                              "or --revision): look the commit up with `hf models info ")


def test_offline_mode_is_refused(tmp_path, monkeypatch, source):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with StandInHub({ck.REPO: Repo(ck.REVISION, source)}) as hub:
        assert refused(hub, tmp_path).startswith("HF_HUB_OFFLINE is set, and model.pull needs the Hub")
        assert hub.log == []


def test_another_huggingface_hub_version_is_refused(tmp_path, monkeypatch, source):
    monkeypatch.setattr(huggingface_hub, "__version__", "1.34.0")
    with StandInHub({ck.REPO: Repo(ck.REVISION, source)}) as hub:
        assert refused(hub, tmp_path) == (
            f"huggingface_hub 1.34.0 is installed, expected 1.33.0 (the version whose download records the preflight "
            f"proof is tested against). Fix: {sys.executable} -m pip install 'huggingface_hub==1.33.0' "
            "(pyproject.toml extra `model`)")


def test_the_pinned_version_is_pyprojects():
    import tomllib

    extras = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert f"huggingface_hub=={pull.HUB_VERSION}" in extras["model"]
    assert "huggingface_hub" not in " ".join(extras["runtime"]), "the runtime image does not download models"


def test_a_directory_holding_another_model_is_not_pulled_into(tmp_path, source):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({"architectures": ["Qwen3MoeForCausalLM"]}))
    with StandInHub({ck.REPO: Repo(ck.REVISION, source)}) as hub:
        message = refused(hub, tmp_path)
        assert hub.log == []
    assert message.startswith(f"{str(tmp_path / 'model' / 'config.json')!r}: architectures ['Qwen3MoeForCausalLM'], "
                              "expected ['BailingMoeV3ForCausalLM']: the directory holds another model")


def test_a_parent_directory_is_not_pulled_into(tmp_path, source):
    (tmp_path / "model" / "Ling-2.6-flash").mkdir(parents=True)
    with StandInHub({ck.REPO: Repo(ck.REVISION, source)}) as hub:
        message = refused(hub, tmp_path)
        assert hub.log == []
    assert "holds files but neither a config.json nor a download's .cache/huggingface/download/" in message


# --- the tasks ---------------------------------------------------------------------------------------------------


def invoke(*argv, env):
    return subprocess.run([sys.executable, "-m", "invoke", *argv], capture_output=True, text=True, cwd=CHECKOUT,
                          timeout=120, env=env)


def test_the_tasks_pull_then_verify_offline(tmp_path, source, capsys):
    from invoke import Context, Exit

    from sparkgate.tasks import model as model_tasks

    model = tmp_path / "model"
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "0",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    env.pop("HF_TOKEN", None)
    with StandInHub({ck.REPO: Repo(ck.REVISION, source)}) as hub:
        pulled = invoke("model.pull", "--profile", "all-three", "--revision", ck.REVISION, "--dir", str(model),
                        env={**env, "HF_ENDPOINT": hub.url})
    assert pulled.returncode == 0, pulled.stderr
    assert f"proved checkpoint {ck.REPO} at {ck.REVISION[:12]}: 8 files" in pulled.stdout
    # Offline, on the directory as it would be copied to an air-gapped host (the task body, in this process).
    model_tasks.verify(Context(), profile="all-three", dir=str(model), revision=ck.REVISION)
    shown = capsys.readouterr().out
    assert "verified 8 files" in shown and "      [ok] " in shown
    (model / "modeling_evil.py").write_text("")
    with pytest.raises(Exit) as caught:
        model_tasks.verify(Context(), profile="all-three", dir=str(model), revision=ck.REVISION)
    assert caught.value.code == 1
    assert str(caught.value.message).startswith(
        f"sparkgate model.verify: not proven: {str(model / 'modeling_evil.py')!r}: not written by the download")
