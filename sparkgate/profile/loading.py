"""Load a profile: read YAML, resolve `extends:` (ordered deep merge), validate into the model, then run
the launch rules. Every refusal names the file and field that caused it."""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sparkgate.bundle.launch import LaunchPlan, plan_launch
from sparkgate.frozen import ControlCharacters, control_characters
from sparkgate.images import load_lock
from sparkgate.paths import profiles_dir, repo_root
from sparkgate.profile.context import RuleContext
from sparkgate.profile.model import Profile
from sparkgate.profile.problems import Problem, ProfileError, single
from sparkgate.profile.rules import check

Path_ = tuple[str, ...]
MAX_PROFILE_BYTES = 64 * 1024  # the largest shipped profile is under 2 KiB


# libyaml where PyYAML has it (10x faster). Its composer recurses in C, so a deeply nested file would crash the
# process: _refuse_unsupported_yaml reads the parser's events (no recursion) and refuses such nesting first.
class _ProfileLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """PyYAML's safe loader, reading exponent numbers as YAML 1.2 does: PyYAML (YAML 1.1) reads `1e9` as the
    string "1e9", which the profile's numeric fields (strict: a number or nothing) would refuse as "not a number"."""


_ProfileLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def display(path: Path) -> str:
    """Repo-relative where possible: messages should read `profiles/all-three.yaml`."""
    try:
        return str(path.resolve().relative_to(repo_root().resolve()))
    except ValueError:
        return str(path)


def locate(reference: str, relative_to: Path | None = None) -> Path:
    """A bare name means profiles/<name>.yaml; anything with a slash or a .yaml suffix is a path."""
    if "/" in reference or reference.endswith((".yaml", ".yml")):
        path = Path(reference).expanduser()
        if not path.is_absolute() and relative_to is not None:
            path = relative_to / path
        return path
    return profiles_dir() / f"{reference}.yaml"


def available_profiles() -> list[str]:
    return sorted(p.stem for p in profiles_dir().glob("*.yaml"))


@dataclass
class _Merged:
    data: dict[str, Any] = field(default_factory=dict)
    origins: dict[Path_, str] = field(default_factory=dict)  # leaf path -> file that set it last


def _merge_into(target: dict, origins: dict, source: dict, origin: str, prefix: Path_ = ()) -> None:
    for key, value in source.items():
        path = prefix + (str(key),)
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge_into(target[key], origins, value, origin, path)
            continue
        if isinstance(value, dict):
            target[key] = {}
            _merge_into(target[key], origins, value, origin, path)
            if not value:
                origins[path] = origin
            continue
        # Scalars and lists replace whatever a parent set (lists are not concatenated).
        target[key] = value
        for stale in [p for p in origins if p[: len(path)] == path]:
            del origins[stale]
        origins[path] = origin


def _field_at(node: yaml.Node | None, index: int, path: str = "") -> str:
    """The dotted field whose key or value spans character `index` of the document (`path` so far)."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            name = f"{path}.{key.value}" if path else str(key.value)
            if key.start_mark.index <= index < key.end_mark.index:
                return name
            if value.start_mark.index <= index < max(value.end_mark.index, value.start_mark.index + 1):
                return _field_at(value, index, name)
    if isinstance(node, yaml.SequenceNode):
        for position, item in enumerate(node.value):
            if item.start_mark.index <= index < max(item.end_mark.index, item.start_mark.index + 1):
                return _field_at(item, index, f"{path}[{position}]")
    return path


def _refuse_raw_control_characters(shown: str, text: str) -> None:
    """Refuse control and invisible characters in the file itself, before YAML reads it: YAML folds a raw
    U+0085, U+2028 or U+2029 inside a quoted value into a space, so the value checked afterwards would no
    longer be the one written (tabs, newlines and CR line endings are YAML's own)."""
    at = next((i for i, ch in enumerate(text) if ch not in "\t\n\r" and control_characters(ch)), None)
    if at is None:
        return
    line = text.count("\n", 0, at) + 1
    try:
        field_name = _field_at(yaml.compose(text), at)
    except (yaml.YAMLError, RecursionError):
        field_name = ""
    found = ", ".join(dict.fromkeys(control_characters(text.replace("\t", "").replace("\n", "").replace("\r", ""))))
    raise single(shown, field_name or f"line {line}", (f"line {line} " if field_name else "") + "contains control or "
                 f"invisible formatting characters ({found}), which YAML may fold or hide",
                 "remove them; write the value with plain characters") from None


# Byte-order marks of encodings other than UTF-8: a file saved so is refused by name, not read as garbage.
_FOREIGN_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
                 (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


def _decode(shown: str, raw: bytes) -> str:
    """The file's text: UTF-8, with a leading UTF-8 byte-order mark (as some editors write) dropped."""
    for bom, encoding in _FOREIGN_BOMS:
        if raw.startswith(bom):
            raise single(shown, "(file)", f"is saved as {encoding} (byte-order mark {bom.hex(' ')})",
                         "save it as UTF-8") from None
    raw = raw.removeprefix(codecs.BOM_UTF8)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise single(shown, f"line {line}", f"is not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
                     "save the file as UTF-8") from None


MERGE_TAG = "tag:yaml.org,2002:merge"


def _refuse_duplicate_keys(shown: str, node: yaml.Node | None, path: str = "") -> None:
    """A key written twice in one mapping: YAML keeps the last silently, so a file could read as FP8-on and
    load as FP8-off. Refused with both lines."""
    if isinstance(node, yaml.MappingNode):
        first_line: dict[str, int] = {}
        for key, value in node.value:
            name = str(key.value)
            dotted = f"{path}.{name}" if path else name
            if key.tag == MERGE_TAG:  # `<<` would fold another mapping in, under the keys written beside it
                raise single(shown, dotted, f"line {key.start_mark.line + 1}: uses a YAML merge key (<<), which a "
                             "profile does not take", "write the keys out; to reuse a profile, name it in `extends:`")
            if name in first_line:
                raise single(shown, dotted, f"line {key.start_mark.line + 1}: key {name!r} is written twice (first at "
                             f"line {first_line[name]}); YAML would keep only the last", "keep one of them") from None
            first_line[name] = key.start_mark.line + 1
            _refuse_duplicate_keys(shown, value, dotted)
    elif isinstance(node, yaml.SequenceNode):
        for position, item in enumerate(node.value):
            _refuse_duplicate_keys(shown, item, f"{path}[{position}]")


def _read(path: Path) -> dict[str, Any]:
    shown = display(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise single(shown, "(file)", "no such profile file", "check the name; `invoke profiles` lists them") from None
    except OSError as exc:
        raise single(shown, "(file)", f"cannot be read ({exc.strerror or exc})", "check the path and its "
                     "permissions") from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise single(shown, "(file)", f"is {len(raw)} bytes, more than a profile needs ({MAX_PROFILE_BYTES})",
                     "point at the profile's YAML file") from None
    text = _decode(shown, raw)
    _refuse_unsupported_yaml(shown, text)
    _refuse_raw_control_characters(shown, text)
    loader = _ProfileLoader(text)
    try:  # composed once: the duplicate-key check reads the nodes the data is then built from
        node = loader.get_single_node()
        _refuse_duplicate_keys(shown, node)
        data = None if node is None else loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise _not_yaml(shown, exc) from None
    except (ValueError, KeyError, TypeError, OverflowError) as exc:  # a value YAML cannot build (2001-13-45, 5000 digits)
        told = " ".join(str(exc).split())[:120]
        raise single(shown, "(file)", f"holds a value YAML cannot read ({type(exc).__name__}: {told})",
                     "write the value plainly (quote a date-like or very long text)") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise single(shown, "(file)", "a profile must be a YAML mapping", "start with `name:` and `description:`")
    return data


MAX_NESTING = 16  # the deepest profile field is 4 levels down


def _refuse_unsupported_yaml(shown: str, text: str) -> None:
    """Before anything composes the document (recursively): refuse nesting no profile has, YAML anchors and aliases
    (a profile takes values written out; an alias can also expand exponentially or refer to itself), explicit tags,
    and a syntax error. Read from the parser's event stream, which does not recurse."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_ProfileLoader):
            line = f"line {event.start_mark.line + 1}"
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise single(shown, line, "uses a YAML anchor or alias (& or *), which a profile does not take",
                             "write the value out; to reuse a profile, name it in `extends:`")
            if getattr(event, "tag", None) is not None and not isinstance(event, yaml.DocumentStartEvent):
                raise single(shown, line, f"uses a YAML tag ({str(event.tag)[:40]}), which a profile does not take",
                             "write the plain value; the profile's schema gives each field its type")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_NESTING:
                    raise single(shown, line, f"nests deeper than {MAX_NESTING} levels, which no profile field does",
                                 "remove the extra nesting")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError as exc:  # refused here: the checks above never saw the rest of the file
        raise _not_yaml(shown, exc) from None


def _not_yaml(shown: str, exc: yaml.YAMLError) -> ProfileError:
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}" if mark else "(file)"
    return single(shown, where, f"not valid YAML ({getattr(exc, 'problem', exc)})", "fix the YAML syntax")


def _linearize(path: Path, chain: tuple[Path, ...], order: list[tuple[Path, dict]]) -> list[str]:
    """Depth-first, parents before children, each file once: a profile reached through two parents
    (baseline under both humming and mtp) is applied once, first, so it cannot undo a sibling's change."""
    shown = display(path)
    if path.resolve() in chain:
        cycle = " -> ".join(display(p) for p in (*chain, path.resolve()))
        raise single(shown, "extends", f"inheritance cycle: {cycle}", "remove one of the extends entries")
    data = _read(path)
    parents = data.get("extends", [])
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise single(shown, "extends", "must be a list of profile names or paths", "write e.g. `extends: [baseline]`")
    # An overlay may omit both: its name is its file's stem, its description says what it extends.
    data.setdefault("name", path.stem)
    if "description" not in data:
        data["description"] = f"{path.stem}: {', '.join(parents) or 'defaults'} with the changes in {path.name}"
    for parent in parents:
        parent_path = locate(parent, path.parent)
        if not parent_path.exists():
            raise single(
                shown,
                "extends",
                f"unknown parent profile {parent!r} (looked for {display(parent_path)})",
                f"use one of: {', '.join(available_profiles())}, or a path to a YAML file",
            )
        if any(seen.resolve() == parent_path.resolve() for seen, _ in order):
            continue
        _linearize(parent_path, (*chain, path.resolve()), order)
    order.append((path, data))
    return list(parents)


def _resolve(path: Path) -> _Merged:
    order: list[tuple[Path, dict]] = []
    parents = _linearize(path, (), order)
    merged = _Merged()
    for file_path, data in order:
        own = {k: v for k, v in data.items() if k != "extends"}
        _merge_into(merged.data, merged.origins, own, display(file_path))
    merged.data["extends"] = parents
    return merged


@dataclass(frozen=True)
class LoadedProfile:
    profile: Profile
    plan: LaunchPlan
    path: Path
    origins: dict[Path_, str]

    @property
    def source(self) -> str:
        return display(self.path)

    def file_of(self, dotted: str) -> str:
        return _file_of(self.origins, dotted, self.source)


def _split(dotted: str) -> Path_:
    return tuple(part for part in dotted.replace("]", "").replace("[", ".").split(".") if part)


def _file_of(origins: dict[Path_, str], dotted: str, default: str) -> str:
    path = _split(dotted)
    while path:
        if path in origins and origins[path]:
            return origins[path]
        below = [origins[p] for p in origins if p[: len(path)] == path and origins[p]]
        if below:
            return below[-1]
        path = path[:-1]
    return default


def _validation_problems(exc: ValidationError, origins: dict[Path_, str], default: str) -> list[Problem]:
    problems = []
    for error in exc.errors():
        dotted = ".".join(str(part) for part in error["loc"]) or "(profile)"
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, ControlCharacters):
            dotted += cause.where  # the env entry or list item, not just the whole field
        kind = error["type"]
        if kind == "extra_forbidden":
            fix = "remove it (unknown key; schema/profile.schema.json lists the allowed keys)"
        elif kind == "missing":
            fix = "add it"
        elif "control or invisible formatting characters" in error["msg"]:
            fix = "write plain single-line text (no newlines, tabs, escapes or invisible characters)"
        else:
            fix = "see schema/profile.schema.json for the allowed values"
        message = error["msg"]
        if "input" in error and kind != "missing" and not isinstance(error["input"], dict):
            message += f" (got {error['input']!r})"
        problems.append(Problem(_file_of(origins, dotted, default), (dotted,), message, fix))
    return problems


def load(reference: str) -> LoadedProfile:
    """Resolve, validate and plan a profile; raise ProfileError naming file and field on any fault."""
    path = locate(reference)
    merged = _resolve(path)
    shown = display(path)
    try:
        profile = Profile.model_validate(merged.data)
    except ValidationError as exc:
        raise ProfileError(_validation_problems(exc, merged.origins, shown)) from None
    if profile.name != path.stem:
        raise single(shown, "name", f"is {profile.name!r} but the file is {path.name}", f"set name: {path.stem}")
    lock = load_lock()
    if profile.image not in lock.engine_images:
        raise single(
            _file_of(merged.origins, "image", shown),
            "image",
            f"unknown engine image {profile.image!r}",
            f"use one of: {', '.join(sorted(lock.engine_images))} (images.lock.yaml)",
        )
    plan = plan_launch(profile)
    loaded = LoadedProfile(profile, plan, path, merged.origins)
    problems = check(RuleContext(profile, plan, lock.engine_images[profile.image], loaded.file_of, shown))
    if problems:
        raise ProfileError(problems)
    return loaded
