"""The committed SGLang CLI manifest is exactly what the pinned sglang produces, and SGLang's own
parser (strict: allow_abbrev=False) accepts every shipped profile's argv."""

from __future__ import annotations

import json

import pytest

from sparkgate.profile import loading as profiles
from sparkgate.sglang import parser as sglang_parser

pytestmark = pytest.mark.sglang


def test_installed_sglang_is_the_pinned_release():
    import sglang

    assert sglang.__version__ == sglang_parser.SGLANG_VERSION


def test_committed_manifest_equals_regenerated():
    regenerated = sglang_parser.manifest_text(sglang_parser.generate_manifest())
    committed = sglang_parser.manifest_text(sglang_parser.committed_manifest())
    assert regenerated == committed, "stale manifest: run `invoke manifest`"


def test_manifest_knows_the_recipe_flags():
    options = sglang_parser.committed_manifest()["options"]
    assert options["--enable-fp32-lm-head"]["kind"] == "store_true"
    assert "humming" in options["--moe-runner-backend"]["choices"]
    assert options["--cuda-graph-bs-decode"]["nargs"] == "+"


@pytest.mark.parametrize("name", profiles.available_profiles())
def test_sglang_parser_accepts_shipped_argv(name):
    parser = sglang_parser.build_sglang_parser(with_fork_options=True)
    namespace = parser.parse_args(list(profiles.load(name).plan.argv))
    assert namespace.max_running_requests == 1
    assert namespace.model_path == profiles.load(name).profile.model.path


def test_sglang_parser_agrees_with_our_abbreviation_refusal():
    parser = sglang_parser.build_sglang_parser(with_fork_options=False)
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--model-path", "/m", "--enable-fp32-lm"])
    assert exited.value.code == 2
    spec, exact = sglang_parser.resolve_spelling("--enable-fp32-lm")
    assert spec is not None and spec.option == "--enable-fp32-lm-head" and not exact


def test_every_manifest_choice_roundtrips_through_sglang():
    """Spot-check the manifest against the live parser: choices and kinds of every option agree."""
    parser = sglang_parser.build_sglang_parser(with_fork_options=False)
    live = json.loads(sglang_parser.manifest_text(sglang_parser.manifest_from_parser(parser, "x")))["options"]
    assert live == sglang_parser.committed_manifest()["options"]
