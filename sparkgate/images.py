"""images.lock.yaml: image pins and engine-image capabilities, validated once."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import Field, ValidationError

from sparkgate.frozen import Frozen
from sparkgate.paths import repo_root


class BaseImage(Frozen):
    ref: str
    platform: str
    digest: str | None = Field(None, pattern=r"^sha256:[0-9a-f]{64}$")

    @property
    def pinned_ref(self) -> str:
        return f"{self.ref}@{self.digest}" if self.digest else self.ref


class SGLangFork(Frozen):
    repo: str
    branch: str
    commit: str = Field(pattern=r"^[0-9a-f]{7,40}$")
    version: str


class Capabilities(Frozen):
    declared_env: tuple[str, ...] = ()
    nextn_lm_head_module_sharing: bool = False
    humming_kernels: bool = False


class SGLangFacts(Frozen):
    """An engine image's SGLang facts: files in sparkgate/sglang/data/ (sparkgate/sglang/facts.py reads them)."""

    fixture: str = Field(pattern=r"^sglang-conformance-[A-Za-z0-9.+_-]+\.json$")
    flags: str = Field(pattern=r"^sglang-cli-[A-Za-z0-9.+_-]+\.json$")
    env: str = Field(pattern=r"^sglang-env-[A-Za-z0-9.+_-]+\.json$")
    # How the facts were established for this image: measured from its SGLang, or assumed from its base.
    provenance: str


class EngineImage(Frozen):
    description: str
    tag: str
    digest: str | None = Field(None, pattern=r"^sha256:[0-9a-f]{64}$")
    sglang_version: str
    capabilities: Capabilities
    sglang_facts: SGLangFacts


class ImageLock(Frozen):
    lock_version: int
    base_images: dict[str, BaseImage]
    sglang_fork: SGLangFork
    python_packages: dict[str, str]
    engine_images: dict[str, EngineImage]
    local_images: dict[str, str]
    # Debian packages pinned to an exact version for a local image (the Prometheus image's `prometheus`).
    debian_packages: dict[str, str] = {}

    def engine_ref(self, key: str) -> str:
        image = self.engine_images[key]
        return f"{image.tag}@{image.digest}" if image.digest else image.tag


LOCK_FILE = "images.lock.yaml"


@lru_cache(maxsize=4)
def load_lock(path: Path | None = None) -> ImageLock:
    path = path or repo_root() / LOCK_FILE
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return ImageLock.model_validate(data)
    except FileNotFoundError:
        raise SystemExit(f"{path}: missing; it pins every image sparkgate uses") from None
    except (yaml.YAMLError, ValidationError) as exc:
        first = str(exc).splitlines()[0:3]
        raise SystemExit(f"{path}: invalid image lock: {' '.join(first)}") from None
