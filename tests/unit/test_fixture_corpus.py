"""The valid/invalid profile corpus: each invalid file states its single fault and what the refusal
must say (`# expect:` lines); each valid file loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkgate.profile import loading as profiles
from sparkgate.profile.problems import ProfileError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "profiles"
VALID = sorted((FIXTURES / "valid").glob("*.yaml"))
INVALID = sorted((FIXTURES / "invalid").glob("*.yaml"))


def comment_values(path: Path, key: str) -> list[str]:
    prefix = f"# {key}:"
    return [line[len(prefix) :].strip() for line in path.read_text().splitlines() if line.startswith(prefix)]


def test_corpus_is_not_empty():
    assert len(VALID) >= 3 and len(INVALID) >= 20


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_fixture_loads(path):
    assert profiles.load(str(path)).profile.name == path.stem


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_fixture_is_refused_for_its_fault(path):
    faults = comment_values(path, "fault")
    expects = comment_values(path, "expect")
    assert len(faults) == 1, f"{path.name} must document exactly one fault"
    assert expects, f"{path.name} must say what the refusal contains"
    with pytest.raises(ProfileError) as refused:
        profiles.load(str(path))
    message = str(refused.value)
    shown = str(path.relative_to(FIXTURES.parent.parent.parent))
    for line in message.splitlines():
        assert "Fix:" in line, f"every refusal says how to fix it: {line}"
    assert any(line.startswith(shown) for line in message.splitlines()), message
    for expected in expects:
        assert expected in message
