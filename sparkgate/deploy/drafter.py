"""Preflight for the DSpark drafter directory: present, the drafter the profile names, the pinned revision,
every file still what the download wrote, and nothing the download did not write.

`hf download REPO --revision REV --local-dir DIR` (huggingface_hub's `_local_folder.py`) leaves, for every
file it wrote, `DIR/.cache/huggingface/download/<file>.metadata`: line 1 the commit the file came from,
line 2 its etag, line 3 a timestamp. The etag is the Hub's `X-Linked-Etag` header, else its `ETag`
(huggingface_hub `file_download.py`: `get_hf_file_metadata`): for LFS files such as `*.safetensors` the
SHA-256 of the content (64 hex), for the other files such as `config.json` the git blob SHA-1 of the content
(40 hex; `utils/sha.py`: `git_hash`). Those records are the only proof of which revision a directory holds
and of what each file held, so a file without one is refused: SGLang reads the drafter's config with
`trust_remote_code`, so an unrecorded `*.py` named by an edited `config.json` would run in the engine.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sparkgate.deploy import fileproof
from sparkgate.deploy.fileproof import MAX_METADATA_BYTES, MAX_NAME_CHARS, MAX_VALUE_CHARS, METADATA_DIR, shown
from sparkgate.deploy.fileproof import name as _name

CONFIG = "config.json"
WEIGHTS_GLOB = "*.safetensors"
MAX_CONFIG_BYTES = 1 << 20
# Read at each call (tests lower them): how many unrecorded files are named, the hash chunk, the progress step.
MAX_UNRECORDED_LISTED = fileproof.MAX_UNRECORDED_LISTED
HASH_CHUNK = fileproof.HASH_CHUNK
PROGRESS_EVERY = fileproof.PROGRESS_EVERY
KIND = "drafter"
REVISION_FIELD = "optimizations.dspark.drafter_revision"
# The proof itself is shared with the target checkpoint's preflight (sparkgate/deploy/fileproof.py).
__all__ = ["CONFIG", "MAX_CONFIG_BYTES", "MAX_METADATA_BYTES", "MAX_NAME_CHARS", "MAX_VALUE_CHARS", "METADATA_DIR",
           "Pin", "WEIGHTS_GLOB", "problems", "shown"]


@dataclass(frozen=True)
class Pin:
    """What the profile expects of the drafter (optimizations.dspark)."""

    repo: str
    revision: str
    architecture: str
    block_size: int
    context_length: int | None = None  # sglang.context_length: the drafter's context may not be shorter

    @classmethod
    def of(cls, settings, context_length: int | None = None) -> Pin | None:
        """The pin of a profile's `optimizations.dspark` settings (and its sglang.context_length); None when DSpark
        is off."""
        if not settings.enabled:
            return None
        return cls(settings.drafter_repo, settings.drafter_revision, settings.drafter_architecture, settings.block_size,
                   context_length)

    def download_command(self, directory: Path) -> str:
        return shlex.join(["hf", "download", self.repo, "--revision", self.revision, "--local-dir", str(directory)])

    def clean_download_command(self, directory: Path) -> str:
        """Re-download into an empty directory: `hf download --local-dir` keeps a file whose recorded etag
        matches the Hub's without re-hashing it (huggingface_hub `file_download.py`,
        `_hf_hub_download_to_local_dir`), and never deletes a file the repository lacks."""
        aside = shlex.join(["mv", "--", str(directory), f"{directory}.refused"])
        return f"{aside} && {self.download_command(directory)}"


def problems(directory: Path, pin: Pin, say: Callable[[str], None] = lambda _: None) -> list[str]:
    """One line per fault (observed, expected, fix); empty when the directory is the pinned drafter."""
    if not str(directory).isprintable():
        return [f"{_name(directory)}: the drafter directory's name holds control characters (expected a plain "
                "path, which the fix command can name on one line). Fix: download into a plain path and set "
                "SPARKGATE_DSPARK_DIR to it"]
    if not directory.is_dir():
        return [f"{_name(directory)}: no drafter directory (expected {pin.repo} at {pin.revision[:12]}). "
                f"Fix: {pin.download_command(directory)} (or point SPARKGATE_DSPARK_DIR at it)"]
    # Every other fault is fixed by a download into an empty directory: a download over this one would keep
    # edited files, stray files and another revision's leftovers.
    fix = f"Fix: move the directory aside and re-download: {pin.clean_download_command(directory)}"
    root = directory.resolve()
    present, unlisted = fileproof.present(root)
    recorded = fileproof.recorded(root)
    weights = sorted(name for name in present if PurePosixPath(name).match(WEIGHTS_GLOB))
    found, unreadable = fileproof.shape_problems(root, directory, present, fix, KIND)
    found += fileproof.unlisted_problems(unlisted, fix)
    if CONFIG not in unreadable:
        found += _config_problems(root, directory, present, pin, fix)
    if not weights:
        found.append(f"{_name(directory)}: no {WEIGHTS_GLOB} files (expected the drafter's weights). {fix}")
    for relative in sorted({CONFIG, *weights, *recorded}):
        found += fileproof.revision_problems(root, directory, relative, pin.revision, REVISION_FIELD, fix)
    found += fileproof.missing_problems(directory, sorted(recorded - present - {CONFIG}), fix)
    found += fileproof.unrecorded_problems(directory, sorted(present - recorded - {CONFIG, *weights} - unreadable),
                                           fix, KIND, MAX_UNRECORDED_LISTED)
    for relative in sorted((recorded & present) - unreadable):
        found += fileproof.checksum_problems(root, directory, relative, fix, say, KIND, HASH_CHUNK, PROGRESS_EVERY)
    return found


def _config_problems(root: Path, shown_dir: Path, present: set[str], pin: Pin, fix: str) -> list[str]:
    where = _name(shown_dir / CONFIG)
    if CONFIG not in present:
        return [f"{where}: missing (expected the drafter's config naming {pin.architecture}). {fix}"]
    try:
        with (root / CONFIG).open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            return [f"{where}: larger than {MAX_CONFIG_BYTES} bytes (expected a model config). {fix}"]
        config = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return [f"{where}: not readable JSON ({type(exc).__name__}: {shown(str(exc))}). {fix}"]
    if not isinstance(config, dict):
        return [f"{where}: a JSON {type(config).__name__}, expected an object. {fix}"]
    found = []
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or pin.architecture not in architectures:
        found.append(f"{where}: architectures {shown(architectures)}, expected to contain {pin.architecture!r} "
                     f"(another model in the drafter directory). {fix}")
    block = _block_size(config)
    if block is not None and block != pin.block_size:
        found.append(f"{where}: block_size {shown(block)}, expected {pin.block_size} "
                     "(optimizations.dspark.block_size; SGLang only warns and runs the mismatched block). "
                     f"{fix}, or set block_size to the drafter's")
    try:
        context = _context_length(config)
    except ValueError as exc:
        found.append(f"{where}: {exc}, so the drafter's context cannot be read (SGLang would read it there). {fix}")
        context = None
    if pin.context_length is not None and context is not None and context < pin.context_length:
        found.append(f"{where}: the drafter's context is {context} tokens, expected at least sglang.context_length "
                     f"{pin.context_length}: the engine would draft past the positions the drafter knows (SGLang "
                     "refuses to start it, \"Target model's context_length ... is greater than the derived "
                     "context_length\", configs/model_config.py _derive_context_length, unless "
                     "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, which the profiles set, stretches it; sparkgate "
                     "refuses it either way). Fix: a drafter revision made for this context, or set "
                     f"sglang.context_length to {context}")
    return found


# What SGLang derives (sglang/srt/utils/hf_transformers/common.py): get_hf_text_config's sub-config when there is one
# (this priority), then get_context_length: the first of CONTEXT_LENGTH_KEYS present, times the rope scaling factor,
# which is 1 when the scaling records original_max_position_embeddings or is llama3. transformers 5 records that
# key itself for llama3, yarn and longrope (modeling_rope_utils.py standardize_rope_params), and reads rope_scaling
# and rope_parameters as one.
SUB_CONFIGS = ("thinker_config", "llm_config", "language_config", "text_config")
CONTEXT_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")
UNSCALED_ROPE_TYPES = ("llama3", "yarn", "longrope")


def _positive(value: object, name: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return value
    raise ValueError(f"{name} is {shown(value)}, not a positive number")


def _context_length(config: dict) -> int | None:
    """The context SGLang derives from the drafter's config; None when no key it reads is there (then the model
    class's own default decides, which a file cannot show). ValueError when one is there but is no positive number:
    refused, not guessed."""
    text, where = config, ""
    for name in SUB_CONFIGS:
        sub = config.get(name)
        if name == "thinker_config" and isinstance(sub, dict) and sub.get("text_config") is not None:
            sub, name = sub["text_config"], "thinker_config.text_config"
        if sub is not None:
            if not isinstance(sub, dict):
                raise ValueError(f"{name} is {shown(sub)}, not an object")
            text, where = sub, f"{name}."
            break
    key = next((k for k in CONTEXT_LENGTH_KEYS if text.get(k) is not None), None)
    if key is None:
        return None
    value = _positive(text[key], where + key)
    scaling = text.get("rope_parameters") if text.get("rope_parameters") is not None else text.get("rope_scaling")
    factor: float = 1
    if isinstance(scaling, dict):
        kind = scaling.get("rope_type", scaling.get("type"))
        if scaling.get("factor") is not None and "original_max_position_embeddings" not in scaling \
                and kind not in UNSCALED_ROPE_TYPES:
            factor = _positive(scaling["factor"], where + "rope_scaling.factor")
    elif scaling:
        raise ValueError(f"{where}rope_scaling is {shown(scaling)}, not an object")
    return int(factor * value)


def _block_size(config: dict) -> object:
    """The drafter's own block size as SGLang resolves it (speculative/dspark_components/dspark_config.py:
    `dspark_block_size`, then `dflash_config.block_size`, then top-level `block_size`); None when absent."""
    nested = config.get("dflash_config")
    for value in (config.get("dspark_block_size"),
                  nested.get("block_size") if isinstance(nested, dict) else None,
                  config.get("block_size")):
        if value is not None:
            return value
    return None
