"""Preflight for the target checkpoint directory (Ling-3.0-flash-fp4, 60-66 GB): in seconds, before anything
starts, everything about the directory that would otherwise be found minutes into the weight load, or never.

What it checks, each rule's SGLang source and the read bounds: docs/model.md, "What the preflight checks". Every
entry is hostile until proven otherwise: nothing outside the directory is followed, nothing but regular files opened.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sparkgate.deploy import fileproof
from sparkgate.deploy.fileproof import name, shown

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"  # an unsharded checkpoint has no index
WEIGHTS_GLOB = "*.safetensors"
KIND = "checkpoint"
MAX_CONFIG_BYTES = 1 << 20
MAX_INDEX_BYTES = 64 << 20  # the real index is ~10 MB (~130k tensors)
MAX_INDEX_ENTRIES = 2_000_000
MAX_HEADER_BYTES = 100_000_000  # safetensors' own MAX_HEADER_SIZE
MAX_TENSOR_RANK = 16
MAX_TENSOR_NAME = 512
MAX_LAYERS = 4096
MAX_EXPERTS = 65536
MAX_LISTED = 10  # findings of one kind named one per line; the rest counted in one more line
HASH_WORKERS = max(1, min(4, os.cpu_count() or 1))  # files hashed at once
QUICK_HASH_MAX_BYTES = 64 << 20  # without full=True, every recorded file but the weights is hashed up to this size
SHARD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}\.safetensors")
# safetensors dtypes and their bits per element (the safetensors crate's Dtype; F4/F6 pack below a byte).
DTYPE_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
              "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
              "C64": 64, "F64": 64, "I64": 64, "U64": 64}
REVISION_WRITER = "`invoke model.pull` (huggingface_hub's local_dir download)"
# Loaded into the NextN module itself by bailing_moe_v3.py rewrite_nextn_weight_name.
NEXTN_BRIDGE = ("eh_proj", "enorm", "hnorm", "final_layernorm")  # bailing_moe_v3.py _NEXTN_SPEC_WEIGHT_NAMES
EXPERT_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")  # FusedMoE.make_expert_params_mapping's ckpt names


@dataclass(frozen=True)
class Expect:
    """What the profile expects of the checkpoint, and the command that fixes most faults."""

    repo: str
    revision: str | None  # model.revision (or --revision); None: the directory's own commit, consistently
    architecture: str
    mtp: bool
    humming: bool
    pull: str  # `invoke model.pull --profile P [--dir D]`

    @classmethod
    def from_profile(cls, profile, reference: str, directory: Path | None = None,
                     revision: str | None = None) -> Expect:
        requested = profile.requested()
        return cls(profile.model.repo, revision or profile.model.revision, profile.model.architecture,
                   "mtp" in requested, "humming" in requested, pull_command(reference, directory))


def pull_command(reference: str, directory: Path | None = None) -> str:
    argv = ["invoke", "model.pull", "--profile", reference]
    return shlex.join([*argv, "--dir", str(directory)] if directory is not None else argv)


@dataclass
class Report:
    """The outcome: one line per fault, and what was proven (for the passing line and the verification rate)."""

    problems: list[str] = field(default_factory=list)
    commit: str | None = None
    shards: int = 0
    shard_bytes: int = 0
    tensors: int = 0
    layers: int | None = None
    experts: int | None = None
    nextn_layer: int | None = None
    files: int = 0  # files proven by their record
    tally: fileproof.Tally = field(default_factory=fileproof.Tally)
    seconds: float = 0.0
    weights_hashed: bool = False

    def summary(self, directory: Path, expect: Expect) -> str:
        layout = f"{self.layers} layers, {self.experts} experts per MoE layer"
        if self.nextn_layer is not None:
            layout += f", the NEXTN layer {self.nextn_layer}"
        pin = "" if expect.revision else " (model.revision unset: pin it to refuse any other commit)"
        hashed = ("every file hashed to its record" if self.weights_hashed else
                  "every small file hashed to its record, weights by their headers (`invoke model.verify` hashes them)")
        return (f"{directory}: {expect.architecture} at {(self.commit or '?')[:12]}{pin}; {self.shards} shards "
                f"({self.shard_bytes / 1e9:.2f} GB) whose headers account for their sizes, {self.tensors} tensors "
                f"with the embedding, the head, {layout}; {self.files} files recorded, none added, {hashed}")


@dataclass(frozen=True)
class _Shape:
    """The config fields the tensor coverage needs."""

    layers: int
    experts: int
    first_dense: int
    tied: bool
    nextn: bool  # MTP requested and the config has the one NEXTN layer


def problems(directory: Path, expect: Expect, say: Callable[[str], None] = lambda _: None,
             full: bool = False) -> list[str]:
    return check(directory, expect, say=say, full=full).problems


def check(directory: Path, expect: Expect, *, say: Callable[[str], None] = lambda _: None, full: bool = False,
          only: set[str] | None = None) -> Report:
    """Judge the directory; `full` hashes the weights too, `only` hashes just those files (a re-download)."""
    started = time.monotonic()
    report = Report(weights_hashed=full and only is None)
    fix = f"Fix: {expect.pull}"
    if not str(directory).isprintable():
        report.problems = [f"{name(directory)}: the checkpoint directory's name holds control characters (expected "
                           "a plain path, which the fix command can name on one line). Fix: download into a plain "
                           "path and set SPARKGATE_MODEL_DIR to it"]
        return report
    if not directory.is_dir():
        pinned = expect.revision[:12] if expect.revision else "its pinned commit"
        report.problems = [f"{name(directory)}: no checkpoint directory (expected {expect.repo} at {pinned}). "
                           f"{fix} (or point SPARKGATE_MODEL_DIR at it)"]
        return report
    root = directory.resolve()
    entries, unlisted = fileproof.present(root)
    records = fileproof.recorded(root)
    found, unreadable = fileproof.shape_problems(root, directory, entries, fix, KIND)
    found += fileproof.unlisted_problems(unlisted, fix)
    shape = _config(root, directory, entries, unreadable, expect, found)
    shards = _weights(root, directory, entries, unreadable, shape, report, fix, found)
    report.files = len(records & entries)

    # Revision: every file the checkpoint needs, and every file the download recorded, at the one commit.
    commits = Counter(c[0] for c in (fileproof.metadata(root, r) for r in sorted(records)) if isinstance(c, tuple))
    config_record = fileproof.metadata(root, CONFIG)
    if expect.revision:
        revision, field_name = expect.revision, "model.revision"
    else:
        revision = (config_record[0] if isinstance(config_record, tuple) else
                    commits.most_common(1)[0][0] if commits else "(unpinned)")
        field_name = "the commit config.json was downloaded at; model.revision pins none"
    report.commit = revision if revision in commits else None
    required = ({CONFIG, INDEX, *shards} & entries) - unreadable
    for relative in sorted(required | records):
        found += fileproof.revision_problems(root, directory, relative, revision, field_name, fix, REVISION_WRITER)
    found += fileproof.missing_problems(directory, sorted(records - entries - {CONFIG, INDEX, *shards}), fix)
    found += fileproof.unrecorded_problems(
        directory, sorted(entries - records - required - unreadable),
        "Fix: remove it (only what the pinned download wrote may sit in the checkpoint the engine loads)", KIND)
    hashed = [relative for relative in sorted((records & entries) - unreadable)
              if _hashed(root / relative, relative, full, only)]
    found += _checksums(root, directory, hashed, fix, say, report.tally)
    report.problems = found
    report.seconds = time.monotonic() - started
    return report


def _checksums(root: Path, shown_dir: Path, hashed: list[str], fix: str, say: Callable[[str], None],
               tally: fileproof.Tally) -> list[str]:
    """Hash the files on a few threads (hashlib releases the GIL: on a many-core host the disk bounds the rate);
    findings in file order."""
    def one(relative: str) -> tuple[list[str], fileproof.Tally]:
        own = fileproof.Tally()
        return fileproof.checksum_problems(root, shown_dir, relative, fix, say, KIND, tally=own), own

    found: list[str] = []
    with ThreadPoolExecutor(max_workers=HASH_WORKERS, thread_name_prefix="sparkgate-hash") as pool:
        for lines, own in pool.map(one, hashed):
            found += lines
            tally.files += own.files
            tally.bytes += own.bytes
            tally.mismatched += own.mismatched
    return found


def _hashed(path: Path, relative: str, full: bool, only: set[str] | None) -> bool:
    if only is not None:
        return relative in only
    if full:
        return True
    if PurePosixPath(relative).match(WEIGHTS_GLOB):
        return False
    try:
        return path.stat().st_size <= QUICK_HASH_MAX_BYTES
    except OSError:
        return True  # the hash reports it unreadable


# --- config.json -------------------------------------------------------------------------------------------


def _read_json(path: Path, limit: int, where: str, fix: str, what: str) -> tuple[object, list[str]]:
    try:
        with path.open("rb") as handle:
            raw = handle.read(limit + 1)
        if len(raw) > limit:
            return None, [f"{where}: larger than {limit} bytes (expected {what}). {fix}"]
        return json.loads(raw.decode("utf-8")), []
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, [f"{where}: not readable JSON ({type(exc).__name__}: {shown(str(exc))}). {fix}"]


def _config(root: Path, shown_dir: Path, entries: set[str], unreadable: set[str], expect: Expect,
            found: list[str]) -> _Shape | None:
    """Check config.json; the shape the tensor coverage needs, or None (then coverage is not judged)."""
    where = name(shown_dir / CONFIG)
    fix = f"Fix: {expect.pull}"
    if CONFIG in unreadable:
        return None
    if CONFIG not in entries:
        found.append(f"{where}: missing (expected the checkpoint's config naming {expect.architecture}). {fix}")
        return None
    config, problems_ = _read_json(root / CONFIG, MAX_CONFIG_BYTES, where, fix, "a model config")
    found += problems_
    if problems_:
        return None
    if not isinstance(config, dict):
        found.append(f"{where}: a JSON {type(config).__name__}, expected an object. {fix}")
        return None
    architectures = config.get("architectures")
    if not (isinstance(architectures, list) and architectures and architectures[0] == expect.architecture):
        found.append(f"{where}: architectures {shown(architectures)}, expected {[expect.architecture]!r} "
                     "(model.architecture; SGLang builds architectures[0]: another model in the checkpoint "
                     f"directory). Fix: point SPARKGATE_MODEL_DIR at the {expect.repo} checkpoint, or "
                     f"{expect.pull} into an empty directory")
    if expect.humming:
        quantization = config.get("quantization_config")
        method = quantization.get("routed_experts_quant_method") if isinstance(quantization, dict) else None
        if method != "mxfp4":
            found.append(f"{where}: quantization_config.routed_experts_quant_method {shown(method)}, expected "
                         "'mxfp4' (the MXFP4 routed experts Humming takes: SGLang hands other experts to another "
                         f"MoE method and serves without Humming). Fix: {expect.pull} ({expect.repo} ships MXFP4 "
                         "experts), or deploy a profile without humming")
    layers = _count(config, "num_hidden_layers", None, 1, MAX_LAYERS, where, fix, found)
    experts = _count(config, "num_experts", None, 1, MAX_EXPERTS, where, fix, found)
    # SGLang's BailingHybridConfig defaults (sglang/srt/configs/bailing_hybrid.py) when a field is absent.
    first_dense = _count(config, "first_k_dense_replace", 1, 0, MAX_LAYERS, where, fix, found)
    tied = config.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        found.append(f"{where}: tie_word_embeddings {shown(tied)}, expected true or false. {fix}")
        tied = None
    nextn = False
    if expect.mtp:
        count = config.get("num_nextn_predict_layers")
        if count != 1 or isinstance(count, bool):
            found.append(f"{where}: num_nextn_predict_layers {shown(count)}, expected 1 (the NEXTN layer MTP "
                         "drafts with: SGLang's Bailing NextN loader takes exactly one). "
                         f"Fix: {expect.pull} ({expect.repo} ships it), or deploy a profile without mtp")
        else:
            nextn = True
    if None in (layers, experts, first_dense, tied):
        return None
    return _Shape(layers, experts, first_dense, tied, nextn)


def _count(config: dict, key: str, default: int | None, low: int, high: int, where: str, fix: str,
           found: list[str]) -> int | None:
    value = config.get(key, default)
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    found.append(f"{where}: {key} {shown(value)}, expected an integer {low}..{high}. {fix}")
    return None


def nextn_layer_id(layers: int) -> int:
    """Where the NEXTN layer sits in the checkpoint's names (bailing_moe_v3.py `resolve_nextn_layer_id`)."""
    return 0 if layers == 1 else layers


# --- the index, the shards' headers and the tensors they hold -----------------------------------------------


def _weights(root: Path, shown_dir: Path, entries: set[str], unreadable: set[str], shape: _Shape | None,
             report: Report, fix: str, found: list[str]) -> list[str]:
    """Check the index and every shard it names; return the shard names (empty when there is no index)."""
    index_where = name(shown_dir / INDEX)
    if INDEX in unreadable:
        return []
    if INDEX not in entries:
        if SINGLE_FILE not in entries:
            found.append(f"{index_where}: missing (expected the index naming every weight shard, or a single "
                         f"{SINGLE_FILE}). {fix}")
            return []
        weight_map, index_where = None, name(shown_dir / SINGLE_FILE)
    else:
        weight_map = _index(root / INDEX, index_where, fix, found)
        if weight_map is None:
            return []
    shards = sorted(set(weight_map.values())) if weight_map is not None else [SINGLE_FILE]
    headers: dict[str, set[str]] = {}
    for shard in shards:
        where = name(shown_dir / shard)
        if shard not in entries:
            held = sorted(tensor for tensor, file in weight_map.items() if file == shard)
            found.append(f"{where}: missing, but {INDEX} names it for {len(held)} tensors (e.g. {held[0]!r}). {fix}")
            continue
        if shard in unreadable:
            continue  # refused by its shape
        tensors = _header(root / shard, where, fix, found, report)
        if tensors is not None:
            headers[shard] = tensors
    report.shards = len(shards)
    if weight_map is None:
        weight_map = {tensor: SINGLE_FILE for tensor in headers.get(SINGLE_FILE, ())}
    report.tensors = len(weight_map)
    unheld = sorted((tensor, file) for tensor, file in weight_map.items()
                    if file in headers and tensor not in headers[file])
    found += [f"{index_where}: weight_map puts {tensor!r} in {file}, whose safetensors header has no such tensor "
              f"(the index and its shards are not one checkpoint). {fix}" for tensor, file in unheld[:MAX_LISTED]]
    if len(unheld) > MAX_LISTED:
        found.append(f"{index_where}: {len(unheld) - MAX_LISTED} more tensors weight_map puts in a shard that does "
                     f"not hold them (expected none). {fix}")
    if shape is not None:
        report.layers, report.experts = shape.layers, shape.experts
        report.nextn_layer = nextn_layer_id(shape.layers) if shape.nextn else None
        missing = [(tensor, what, detail) for tensor, what, detail in _required(shape) if tensor not in weight_map]
        found += [f"{index_where}: weight_map has no {tensor!r} ({what}{detail}). {fix}"
                  for tensor, what, detail in missing[:MAX_LISTED]]
        if len(missing) > MAX_LISTED:
            found.append(f"{index_where}: {len(missing) - MAX_LISTED} more tensors SGLang loads are missing from "
                         f"weight_map (expected every one, for the counts config.json states). {fix}")
    return shards


def _index(path: Path, where: str, fix: str, found: list[str]) -> dict[str, str] | None:
    index, problems_ = _read_json(path, MAX_INDEX_BYTES, where, fix, "a safetensors index")
    found += problems_
    if problems_:
        return None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        found.append(f"{where}: weight_map {shown(weight_map)}, expected an object naming each tensor's shard. {fix}")
        return None
    if len(weight_map) > MAX_INDEX_ENTRIES:
        found.append(f"{where}: weight_map names {len(weight_map)} tensors, more than {MAX_INDEX_ENTRIES} "
                     f"(expected a model's tensors). {fix}")
        return None
    bad_name = next((t for t in weight_map if not (len(t) <= MAX_TENSOR_NAME and t.isprintable())), None)
    if bad_name is not None:
        found.append(f"{where}: weight_map tensor name {shown(bad_name)} is not a plain name (expected printable, "
                     f"at most {MAX_TENSOR_NAME} characters). {fix}")
        return None
    plain: dict[object, bool] = {}
    for tensor, shard in weight_map.items():
        ok = plain.get(shard) if isinstance(shard, str) else False
        if ok is None:
            ok = plain[shard] = SHARD_NAME.fullmatch(shard) is not None
        if not ok:
            found.append(f"{where}: weight_map puts {tensor!r} in {shown(shard)}, expected a *.safetensors file "
                         "directly in the checkpoint directory (SGLang loads no other). " + fix)
            return None
    return weight_map


def _header(path: Path, where: str, fix: str, found: list[str], report: Report) -> set[str] | None:
    """The tensor names a shard's safetensors header declares, or None after a finding. Reads the 8-byte
    length and the header only; checks the layout safetensors itself requires and the file's exact size."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            report.shard_bytes += size
            if size < 8:
                found.append(f"{where}: {size} bytes, too short for a safetensors header (truncated). {fix}")
                return None
            length = int.from_bytes(handle.read(8), "little")
            if length > MAX_HEADER_BYTES:
                found.append(f"{where}: safetensors header length {length} bytes, above safetensors' own limit of "
                             f"{MAX_HEADER_BYTES} (not a safetensors file, or a corrupt one). {fix}")
                return None
            if 8 + length > size:
                found.append(f"{where}: safetensors header length {length} bytes runs past the file's {size} bytes "
                             f"(truncated, or not a safetensors file). {fix}")
                return None
            raw = handle.read(length)
    except OSError as exc:
        found.append(f"{where}: unreadable ({shown(exc.strerror or str(exc))}). {fix}")
        return None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        found.append(f"{where}: safetensors header is not JSON ({type(exc).__name__}: {shown(str(exc))}). {fix}")
        return None
    if not isinstance(header, dict):
        found.append(f"{where}: safetensors header is a JSON {type(header).__name__}, expected an object. {fix}")
        return None
    spans = []
    bits_of, rank = DTYPE_BITS.get, MAX_TENSOR_RANK
    for tensor, info in header.items():
        # The common case inline (a shard holds thousands of entries); anything off it gets the detailed reason.
        if type(info) is dict:
            dims, offsets = info.get("shape"), info.get("data_offsets")
            dtype = info.get("dtype")
            bits = bits_of(dtype) if type(dtype) is str else None
            if (bits is not None and type(dims) is list and len(dims) <= rank and type(offsets) is list
                    and len(offsets) == 2):
                begin, stop = offsets
                if type(begin) is int and type(stop) is int and 0 <= begin <= stop:  # `type is int`: no bools
                    count = 1
                    for dim in dims:
                        if type(dim) is not int or dim < 0:
                            break
                        count *= dim
                    else:
                        if count * bits == (stop - begin) * 8:
                            spans.append((begin, stop, tensor))
                            continue
        if tensor == "__metadata__":
            continue
        found.append(f"{where}: safetensors header entry {shown(tensor)} {_tensor_reason(info)}. {fix}")
        return None
    end = 0
    for begin, stop, tensor in sorted(spans):
        if begin != end:
            found.append(f"{where}: safetensors header puts {tensor!r} at byte {begin} of the data, expected {end} "
                         f"(tensors overlap or leave a gap). {fix}")
            return None
        end = stop
    expected = 8 + length + end
    if size < expected:
        found.append(f"{where}: {size} bytes, but its safetensors header ends its data at byte {expected} "
                     f"(8 + header {length} + data {end}): truncated, a partial copy or download. {fix}")
        return None
    if size > expected:
        found.append(f"{where}: {size} bytes, {size - expected} more than its safetensors header accounts for "
                     f"(8 + header {length} + data {end} = {expected}): not the file the download wrote. {fix}")
        return None
    return {tensor for tensor in header if tensor != "__metadata__"}


def _tensor_reason(info: object) -> str | None:
    if not isinstance(info, dict):
        return f"is a JSON {type(info).__name__}, expected an object with dtype, shape and data_offsets"
    dtype, dims, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        return f"has dtype {shown(dtype)}, expected one of safetensors' ({', '.join(DTYPE_BITS)})"
    if not (isinstance(dims, list) and len(dims) <= MAX_TENSOR_RANK
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims)):
        return f"has shape {shown(dims)}, expected at most {MAX_TENSOR_RANK} non-negative integers"
    if not (isinstance(offsets, list) and len(offsets) == 2
            and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets) and 0 <= offsets[0] <= offsets[1]):
        return f"has data_offsets {shown(offsets)}, expected [begin, end] with 0 <= begin <= end"
    bits = math.prod(dims) * DTYPE_BITS[dtype]
    if bits != (offsets[1] - offsets[0]) * 8:
        return (f"spans {offsets[1] - offsets[0]} bytes, but {dtype} {dims} needs {bits / 8:g} "
                "(shape, dtype and offsets disagree)")
    return "is not a tensor entry safetensors loads"


def _required(shape: _Shape):
    """(tensor, what, detail) for every tensor SGLang's Bailing V3 loader (and with MTP its NextN loader) needs;
    the reason a missing one is needed is `what` + `detail` (formatted only for what is missing)."""
    yield "model.word_embeddings.weight", "the embedding", ""
    yield "model.norm.weight", "the final norm", ""
    if not shape.tied:
        yield "lm_head.weight", "the LM head; tie_word_embeddings is false", ""
    for layer in range(shape.layers):
        yield from _layer(layer, shape, f"layer {layer} of num_hidden_layers {shape.layers}",
                          moe=layer >= shape.first_dense)
    if shape.nextn:
        nextn = nextn_layer_id(shape.layers)
        for part in NEXTN_BRIDGE:
            yield (f"model.layers.{nextn}.{part}.weight",
                   f"the NEXTN bridge tensor {part} of layer {nextn} = num_hidden_layers + 0, which MTP drafts with", "")
        yield from _layer(nextn, shape, f"the NEXTN layer {nextn}", moe=True)


def _layer(layer: int, shape: _Shape, what: str, moe: bool):
    prefix = f"model.layers.{layer}"
    for norm in ("input_layernorm", "post_attention_layernorm"):
        yield f"{prefix}.{norm}.weight", what, f": its {norm}"
    if moe:
        of = f" of num_experts {shape.experts}"
        for expert in range(shape.experts):
            for projection in EXPERT_PROJECTIONS:
                yield f"{prefix}.mlp.experts.{expert}.{projection}.weight", what, f": expert {expert}{of}"
