"""An engine image's SGLang facts (conformance fixture, flag manifest, env manifest), what an installed SGLang
really has, and the difference between the two, with the checks and rules each difference affects.

- `pinned(image)`: the facts images.lock.yaml names for an engine image (files in sparkgate/sglang/data/).
- `observe(site_packages)`: the same facts read from an installed SGLang, in a child Python whose sys.path starts
  at that directory (so a copy of SGLang is proven, not whichever one this process would import).
- `diff(pinned, observed)`: flags added/removed/changed, the changed defaults of the flags sparkgate reads or the
  profiles pass, env added/removed, fixture entries found/moved/missing, and for each the checks that read it (their
  declared READS, proven by tests/unit/test_declared_reads.py), the profile rules (RULE_READS), the probe
  (HOOK_READS) and the simulator modules that write it.

`python -m sparkgate.sglang.facts observe [--fork]` is the child's entry point (JSON on stdout).
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sparkgate.sglang import proof

_CONFORMANCE_NAMES = {"C", "conformance"}
OBSERVE_TIMEOUT_S = 600
# The child prints its JSON on one line after this marker: whatever SGLang prints on import cannot corrupt it.
RESULT_MARKER = "SPARKGATE-SGLANG-FACTS "
# An image reference as docker reads it, never an option: no leading '-', no spaces.
IMAGE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$")


@dataclass(frozen=True)
class Facts:
    """One SGLang's facts: what the gate's checks read (fixture), its parser's table (flags) and Envs (env)."""

    fixture: dict[str, Any]
    flags: dict[str, Any]  # option string -> manifest entry
    env: dict[str, str]  # declared name -> EnvField kind
    findings: tuple[proof.Finding, ...] = ()
    sglang_version: str = ""
    origin: str = ""


def _data(name: str) -> dict[str, Any]:
    return json.loads(resources.files("sparkgate.sglang.data").joinpath(name).read_text(encoding="utf-8"))


@lru_cache(maxsize=8)
def pinned(image: str) -> Facts:
    """The facts images.lock.yaml records for engine image `image`."""
    from sparkgate.images import load_lock

    engine = load_lock().engine_images[image]
    files = engine.sglang_facts
    env = {name: entry["kind"] for name, entry in _data(files.env)["declared"].items()}
    # What the image declares beyond the manifest (the fork's SGLANG_ENABLE_FP8_LM_HEAD), as rules.py reads it.
    env.update({name: "EnvBool" for name in engine.capabilities.declared_env if name not in env})
    return Facts(
        fixture=_data(files.fixture),
        flags=_data(files.flags)["options"],
        env=env,
        sglang_version=_data(files.flags)["sglang_version"],
        origin=f"images.lock.yaml engine_images.{image}.sglang_facts",
    )


def image_needs_fork(image: str) -> bool:
    from sparkgate.images import load_lock

    capabilities = load_lock().engine_images[image].capabilities
    return bool(capabilities.declared_env) or capabilities.nextn_lm_head_module_sharing


# --- observing an installed SGLang ------------------------------------------------------------------


class ObserveError(RuntimeError):
    pass


def observe(site_packages: Path | None, *, fork: bool, fixture: dict[str, Any], python: str = sys.executable,
            timeout: float = OBSERVE_TIMEOUT_S) -> Facts:
    """Read the facts of the SGLang under `site_packages` (None: the one this interpreter imports, read in this
    process: the build guard inside the image)."""
    if site_packages is None:
        return _facts(fixture, _observe_here(None, fork, fixture))
    env = dict(os.environ)
    argv = [python, "-m", "sparkgate.sglang.facts", "observe"]
    if fork:
        argv.append("--fork")
    site_packages = Path(site_packages).resolve()
    proof.SourceTree(site_packages)  # fails early, naming the directory, when it holds no sglang
    argv += ["--site-packages", str(site_packages)]
    return _facts(fixture, _result(_child(argv, fixture, timeout, env=env), str(site_packages)))


def _child(argv: list[str], fixture: dict[str, Any], timeout: float, where: str = "", env=None) -> str:
    """The observing child's stdout. The fixture travels with the request: the child proves exactly what the
    caller pins."""
    try:
        done = subprocess.run(argv, input=json.dumps(fixture), capture_output=True, text=True, timeout=timeout,
                              env=env, check=False)
    except FileNotFoundError:
        raise ObserveError(f"{argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise ObserveError(f"reading SGLang's facts{where} took over {timeout:.0f} s") from None
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise ObserveError(f"reading SGLang's facts{where} failed (exit {done.returncode}): {tail}")
    return done.stdout


def _result(stdout: str, where: str) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.startswith(RESULT_MARKER)]
    if not lines:
        raise ObserveError(f"reading SGLang's facts in {where} printed no result")
    try:
        data = json.loads(lines[-1][len(RESULT_MARKER):])
    except json.JSONDecodeError as exc:
        raise ObserveError(f"reading SGLang's facts in {where} printed an unreadable result ({exc})") from None
    if not isinstance(data, dict) or not {"flags", "env", "findings", "sglang_version", "origin"} <= set(data):
        raise ObserveError(f"reading SGLang's facts in {where} printed a result without flags/env/findings")
    return data


def _facts(fixture: dict[str, Any], data: dict[str, Any], origin_prefix: str = "") -> Facts:
    try:
        findings = tuple(proof.Finding.model_validate(f) for f in data["findings"])
    except (ValidationError, TypeError) as exc:
        first = str(exc).splitlines()[:2]
        raise ObserveError(f"SGLang facts from {origin_prefix}{data['origin']}: invalid finding ({' '.join(first)})") \
            from None
    return Facts(fixture=fixture, flags=data["flags"], env=data["env"], findings=findings,
                 sglang_version=str(data["sglang_version"]), origin=origin_prefix + str(data["origin"]))


def observe_in_image(tag: str, *, fork: bool, fixture: dict[str, Any], timeout: float = OBSERVE_TIMEOUT_S) -> Facts:
    """The same facts read inside engine image `tag` (sparkgate is installed there), with no network."""
    if not IMAGE_REF.match(tag):
        raise ObserveError(f"--image {tag!r} is not an image reference (name[:tag][@digest], no leading '-')")
    # --pull never: the image on this host is what gets read, and no registry is asked.
    argv = ["docker", "run", "--rm", "-i", "--pull", "never", "--network", "none", "--entrypoint", "python", tag,
            "-m", "sparkgate.sglang.facts", "observe", *(["--fork"] if fork else [])]
    return _facts(fixture, _result(_child(argv, fixture, timeout, f" in {tag}"), tag), origin_prefix=f"{tag}:")


def profile_flags() -> frozenset[str]:
    """Every option the rendered argv of the shipped profiles passes (whichever image they target: a flag an
    upgrade removes breaks the profile that passes it)."""
    from sparkgate.bundle import render
    from sparkgate.profile import loading as profiles
    used = set()
    for name in profiles.available_profiles():
        loaded = profiles.load(name)
        argv = json.loads(render.render_files(loaded, render.RenderOptions(target="spark"))["argv.json"])
        used.update(token.partition("=")[0] for token in argv if token.startswith("--"))
    return frozenset(used)


def _observe_here(site_packages: str | None, fork: bool, fixture: dict[str, Any]) -> dict[str, Any]:
    """Runs in the child: import the SGLang under `site_packages` and read its facts."""
    import importlib.util
    import pkgutil

    if site_packages:
        sys.path.insert(0, site_packages)
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise ObserveError("no sglang package importable")
    root = Path(next(iter(spec.submodule_search_locations))).parent
    if site_packages and root.resolve() != Path(site_packages).resolve():
        raise ObserveError(f"sglang imports from {root}, not from {site_packages}")
    import sglang

    from sparkgate.sglang import env as sglang_env
    from sparkgate.sglang import parser as sglang_parser

    cli = sglang_parser.generate_manifest()["options"]
    env_manifest = sglang_env.generate_manifest()
    dests = {entry["dest"] for entry in cli.values()}
    hook_errors = {}
    for item in fixture.get("hook_targets", {}).values():
        try:
            pkgutil.resolve_name(item["text"])
        except Exception as exc:  # any failure means SGLang could not attach the hook either
            hook_errors[item["text"]] = f"{type(exc).__name__}: {exc}"
    findings = proof.prove_fixture(proof.SourceTree(root), fixture, fork=fork, server_arg_fields=dests,
                                   hook_target_errors=hook_errors)
    return {
        "sglang_version": getattr(sglang, "__version__", "unknown"),
        "origin": str(root),
        "flags": cli,
        "env": {name: entry["kind"] for name, entry in env_manifest["declared"].items()},
        "findings": [f.as_dict() for f in findings],
    }


# --- who reads what ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Readers:
    """Who reads one fact: the checks whose evidence it is (their READS, evidence/catalog.py), the modules whose
    profile rules read it (their RULE_READS), every sparkgate module that names it, the simulator's, and the probe's
    (its HOOK_READS)."""

    checks: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    simulator: tuple[str, ...] = ()
    probe: tuple[str, ...] = ()  # the probe modules that read it off SGLang

    def __bool__(self) -> bool:
        # Sparkgate reads it; the simulator alone writing it makes it no check's evidence.
        return bool(self.checks or self.rules or self.modules)

    def affects(self) -> str:
        parts = []
        if self.checks:
            parts.append(", ".join(self.checks))
        if self.rules:
            parts.append("profile rules in " + ", ".join(self.rules))
        if not parts:
            parts.append("read by no sparkgate check or rule" + (f" (named in {', '.join(self.modules)})"
                                                                  if self.modules else ""))
        if self.probe:
            parts.append("the probe reads it (" + ", ".join(self.probe) + ")")
        if self.simulator:
            parts.append("the simulator writes it (" + ", ".join(self.simulator) + ")")
        return "; ".join(parts)


def _product_root() -> Path:
    return Path(__file__).resolve().parents[1]


# conformance accessor -> the fixture section its first argument names a key of.
ACCESSORS = {
    "log_format": "log_formats", "log_line": "log_formats", "log_pattern": "log_formats", "log_fields": "log_formats",
    "string_": "strings", "metric": "metrics", "class_name": "classes", "dtype": "dtypes", "env": "env",
    "server_arg": "server_args", "hook_target": "hook_targets", "fork_only": "fork_only",
}
PROBE_HOOKS = "probe/src/sparkgate_probe/hooks.py"


def _constants(module_path: Path) -> dict[str, str]:
    """NAME -> string value of a module's top-level string constants (sparkgate/sglang/flags.py)."""
    tree = ast.parse(module_path.read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


@lru_cache(maxsize=1)
def module_readers() -> dict[tuple[str, str], tuple[str, ...]]:
    """(kind, name) -> the modules that name it. kind: a fixture section (name: its key), 'flag' (an option string)
    or 'env' (a variable name); flags and env names are found through sparkgate/sglang/flags.py's constants
    (F.NAME) and as literals. Which *checks* read it is their READS, not a module's."""
    root = _product_root()
    flag_constants = _constants(root / "sglang" / "flags.py")
    table: dict[tuple[str, str], set[str]] = {}
    # The simulator writes what the gate reads; in a checkout its readings are affected too.
    simulator = root.parent / "simulator" / "src" / "sparkgate_sim"
    trees = [(root, "sparkgate")] + ([(simulator, "simulator/src/sparkgate_sim")] if simulator.is_dir() else [])
    # fork.py re-exports fork-only fixture entries as constants (fork.FP8_LM_HEAD_LOG ...): follow them.
    fork_constants = _fixture_constants(root / "sglang" / "fork.py")
    skipped = {"flags.py", "facts.py"}
    for base, label in trees:
        for path in sorted(base.rglob("*.py")):
            if "__pycache__" in path.parts or path.parent == root / "sglang" and path.name in skipped:
                continue
            relative = f"{label}/{path.relative_to(base)}"
            for kind, name in _reads(path, flag_constants, fork_constants):
                table.setdefault((kind, name), set()).add(relative)
    return {key: tuple(sorted(mods)) for key, mods in table.items()}


def _key_of(node: ast.expr) -> str | None:
    """A literal key, or an f-string key as a pattern (`f"speculative_{name}"` -> `speculative_*`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "*" for v in node.values)
    return None


def _fixture_constants(module_path: Path) -> dict[str, set[tuple[str, str]]]:
    """NAME -> the fixture entries a module-level constant is computed from (`X = conformance.fork_only("k")`)."""
    tree = ast.parse(module_path.read_text(encoding="utf-8"))
    found: dict[str, set[tuple[str, str]]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            reads = _reads_in(node.value, {}, {})
            for target in node.targets:
                if isinstance(target, ast.Name) and reads:
                    found[target.id] = reads
    return found


def _reads(path: Path, flag_constants: dict[str, str],
           fork_constants: dict[str, set[tuple[str, str]]]) -> set[tuple[str, str]]:
    return _reads_in(ast.parse(path.read_text(encoding="utf-8")), flag_constants, fork_constants)


def _reads_in(tree: ast.AST, flag_constants: dict[str, str],
              fork_constants: dict[str, set[tuple[str, str]]]) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "fork" \
                and node.attr in fork_constants:
            found |= fork_constants[node.attr]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in _CONFORMANCE_NAMES:
            args = [key for key in map(_key_of, node.args) if key is not None]
            attr = node.func.attr
            if attr in ACCESSORS and args:
                found.add((ACCESSORS[attr], args[0]))
            elif attr in ("text", "entry") and len(args) >= 2:
                found.add((args[0], args[1]))
            elif attr == "fork_only_of_kind" and args:
                found.add(("fork_only_kind", args[0]))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "F" \
                and node.attr in flag_constants:
            value = flag_constants[node.attr]
            found.add(("flag" if value.startswith("--") else "env", value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("--"):
            found.add(("flag", node.value))
    return found


def _modules_of(keys: set[tuple[str, str]], fixture: dict[str, Any] | None) -> set[str]:
    table = module_readers()
    found = {m for (k, pattern), mods in table.items() for kind, name in keys
             if k == kind and fnmatch.fnmatchcase(name, pattern) for m in mods}
    for kind, name in keys:  # a fork-only entry is also read as a whole kind (fork_only_of_kind)
        entry = (fixture or {}).get("fork_only", {}).get(name) if kind == "fork_only" else None
        if entry:
            found |= set(table.get(("fork_only_kind", entry["kind"]), ()))
    return found


@lru_cache(maxsize=1)
def _rule_reads() -> dict[str, tuple[str, ...]]:
    """Rule module (its path) -> the facts its rules declare they read (RULE_READS)."""
    from sparkgate.optimizations import REGISTRY
    from sparkgate.profile import rules

    return {module.__name__.replace(".", "/") + ".py": tuple(module.RULE_READS)
            for module in (rules, *REGISTRY.values())}


def _rules_of(names: set[str]) -> tuple[str, ...]:
    """The rule modules that read any of `names` (fixture entries, options, variables; a read may be a glob)."""
    return tuple(sorted(module for module, reads in _rule_reads().items()
                        if any(fnmatch.fnmatchcase(name, read) for read in reads for name in names)))


# Launch settings (passed for every profile by sglang/flags.py, or SGLang's default left in place: the decode log
# interval, 40) without which whole families of reads see nothing:
# a renamed one breaks every check reading a fact that starts with one of its prefixes, although none of those
# checks reads the setting back (so no replay can prove it: a replay launches nothing).
LAUNCH_PREREQUISITES = {
    "server_args.enable_metrics": ("metrics.",),
    "server_args.decode_log_interval": ("log_formats.decode_",),
    "env.expose_own_env_vars": ("env.", "fork_only.fp8_lm_head_env"),
}


def _checks_of(names: set[str]) -> tuple[str, ...]:
    from sparkgate.evidence import catalog

    table = catalog.readers()
    names = names | {fact for name in names for fact in table
                     if fact.startswith(LAUNCH_PREREQUISITES.get(name, ()))}
    return tuple(sorted({check for name in names for check in table.get(name, ())}))


def _probe_fields(section: str, entry: dict[str, Any]) -> set[str]:
    """The report fields the probe fills from a fixture entry (its HOOK_READS: a dotted name, or an attribute's)."""
    try:
        from sparkgate_probe.hooks import HOOK_READS
    except ImportError:  # never "no probe reads": the report would under-name what an SGLang change affects
        raise ObserveError("the probe package (sparkgate_probe) is not installed, so which checks read what the probe "
                           "reports is unknown: run `bash scripts/bootstrap` (it installs ./probe)") from None
    text = str(entry.get("text", ""))
    dotted = str(entry.get("source", "")).removesuffix(".py").replace("/", ".") + "." + text
    found: set[str] = set()
    for name, fields in HOOK_READS.items():
        if section == "hook_targets" and name == text \
                or section == "classes" and (name == dotted or name.startswith(dotted + ".")) \
                or section in ("attributes", "fork_only") and name == text \
                and entry.get("kind", "attribute") in ("attribute", "method"):
            found |= set(fields)
    return found


def _readers(checks: set[str], rules: set[str], keys: set[tuple[str, str]], fixture: dict[str, Any] | None,
             probe_fields: set[str] = frozenset()) -> Readers:
    modules = _modules_of(keys, fixture)
    return Readers(checks=_checks_of(checks | {f"probe.{f}" for f in probe_fields}), rules=_rules_of(rules),
                   modules=tuple(sorted(m for m in modules if m.startswith("sparkgate/"))),
                   simulator=tuple(sorted(m for m in modules if not m.startswith("sparkgate/"))),
                   probe=(PROBE_HOOKS,) if probe_fields else ())


def _options_setting(dest: str, flags: dict[str, Any]) -> set[str]:
    """Every option string that sets ServerArgs field `dest`."""
    return {spelling for option, entry in flags.items() if entry.get("dest") == dest
            for spelling in (option, *entry.get("option_strings", ()))}


def readers_of_entry(section: str, key: str, fixture: dict[str, Any], flags: dict[str, Any] | None = None) -> Readers:
    """Who reads fixture entry `section.key` (`flags`, the parser table, links a ServerArgs field to its options)."""
    entry = fixture.get(section, {}).get(key, {})
    name = f"{section}.{key}"
    rules = {name}
    if section == "server_args":
        rules |= _options_setting(str(entry.get("text", "")), flags or {})
    if section == "env" or section == "fork_only" and entry.get("kind") == "env":
        rules.add(str(entry.get("text", "")))
    return _readers({name}, rules, {(section, key)}, fixture, _probe_fields(section, entry))


def readers_of_flag(option: str, flags: dict[str, Any], fixture: dict[str, Any]) -> Readers:
    """Who reads an option: through any of its spellings, and through the ServerArgs field it sets."""
    entry = flags.get(option) or {}
    spellings = {option, *entry.get("option_strings", ())}
    fields = {f"server_args.{k}" for k, arg in fixture.get("server_args", {}).items()
              if arg.get("text") == entry.get("dest")}
    keys = {("flag", spelling) for spelling in spellings} | {tuple(f.split(".", 1)) for f in fields}
    return _readers(fields, spellings | fields, keys, fixture)


def readers_of_env(name: str, fixture: dict[str, Any]) -> Readers:
    """Who reads a variable: by name, and through the fixture entries that name it."""
    entries = {f"env.{k}" for k, e in fixture.get("env", {}).items() if e.get("text") == name}
    entries |= {f"fork_only.{k}" for k, e in fixture.get("fork_only", {}).items()
                if e.get("kind") == "env" and e.get("text") == name}
    keys = {("env", name)} | {tuple(f.split(".", 1)) for f in entries}
    return _readers(entries, {name} | entries, keys, fixture)


# --- the difference ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    kind: str  # flag | default (a flag's default) | env | fixture (name: section.key)
    name: str
    change: str  # added | removed | changed | moved | missing | found | ...
    detail: str
    readers: Readers = Readers()
    loses_evidence: bool = False

    def affects(self) -> str:
        return self.readers.affects()


@dataclass(frozen=True)
class Diff:
    pinned: Facts
    observed: Facts
    items: tuple[Item, ...] = field(default_factory=tuple)

    @property
    def losses(self) -> list[Item]:
        return [i for i in self.items if i.loses_evidence]

    def of(self, kind: str) -> list[Item]:
        return [i for i in self.items if i.kind == kind]


def _without_default(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "default"}


def diff(pinned_facts: Facts, observed: Facts, *, used_flags: frozenset[str] = frozenset()) -> Diff:
    """Compare; `used_flags` are the options the profiles' argv pass (a removed or changed one loses evidence).
    A flag's default is compared only where sparkgate reads the flag or a profile passes it, and a changed default
    is reported, not a loss: the checks that read the setting still see what the engine runs with."""
    items: list[Item] = []
    fixture = pinned_facts.fixture
    flags = {**observed.flags, **pinned_facts.flags}
    defaults_unread = []
    for option in sorted(set(pinned_facts.flags) | set(observed.flags)):
        before, after = pinned_facts.flags.get(option), observed.flags.get(option)
        readers_ = readers_of_flag(option, flags, fixture)
        used = option in used_flags or bool(readers_)
        if before is not None and after is not None and (used or option in used_flags) and "default" in before:
            if "default" not in after:
                defaults_unread.append(option)
            elif before["default"] != after["default"]:
                items.append(Item("default", option, "changed", f"{before['default']!r} -> {after['default']!r}",
                                  readers_))
        if before is not None and after is not None and _without_default(before) == _without_default(after):
            continue
        if before is None:
            items.append(Item("flag", option, "added", f"{after['kind']}, dest {after['dest']}", readers_))
        elif after is None:
            items.append(Item("flag", option, "removed", f"was {before['kind']}, dest {before['dest']}", readers_,
                              loses_evidence=used))
        else:
            changed = {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
                       if k != "default" and before.get(k) != after.get(k)}
            detail = ", ".join(f"{k}: {b!r} -> {a!r}" for k, (b, a) in sorted(changed.items()))
            items.append(Item("flag", option, "changed", detail, readers_, loses_evidence=used))
    if defaults_unread:
        items.append(Item("default", f"{len(defaults_unread)} flag(s)", "unproven",
                          "the reader reported no defaults (an older sparkgate in the image?): "
                          + ", ".join(defaults_unread[:6]) + (", ..." if len(defaults_unread) > 6 else "")))
    for name in sorted(set(pinned_facts.env) | set(observed.env)):
        before, after = pinned_facts.env.get(name), observed.env.get(name)
        if before == after:
            continue
        readers_ = readers_of_env(name, fixture)
        if before is None:
            items.append(Item("env", name, "added", f"declared as {after}", readers_))
        elif after is None:
            items.append(Item("env", name, "removed", f"was {before}; SGLang would ignore it silently", readers_,
                              loses_evidence=bool(readers_)))
        else:
            items.append(Item("env", name, "changed", f"{before} -> {after}", readers_, loses_evidence=bool(readers_)))
    proven = {(f.section, f.key) for f in observed.findings}
    for section, entries in sorted(fixture.items()):
        if not isinstance(entries, dict) or section in ("about",):
            continue
        for key in sorted(set(entries) - {k for s_, k in proven if s_ == section}):
            items.append(Item("fixture", f"{section}.{key}", "unproven",
                              f"unproven {section}.{key}: the reader returned no proof for it (an older sparkgate in the "
                              "image?)", readers_of_entry(section, key, fixture, flags), loses_evidence=True))
    for finding in observed.findings:
        change = {"fork_only_present": "found", "stock_absent": "found", "runtime_only": "runtime"}.get(
            finding.status, finding.status)
        items.append(Item("fixture", f"{finding.section}.{finding.key}", change, finding.line(),
                          readers_of_entry(finding.section, finding.key, observed.fixture, flags),
                          loses_evidence=finding.loses_evidence))
    return Diff(pinned_facts, observed, tuple(items))


def render(result: Diff) -> str:
    """The report `invoke sglang.diff` prints: one line per difference, then the line naming what it affects."""
    lines = [f"pinned:   SGLang {result.pinned.sglang_version} ({result.pinned.origin})",
             f"observed: SGLang {result.observed.sglang_version} ({result.observed.origin})", ""]
    for title, kind in (("flags", "flag"), ("defaults of the flags sparkgate reads or the profiles pass", "default"),
                        ("environment variables", "env")):
        rows = result.of(kind)
        lines.append(f"{title}: {len(rows)} difference(s)")
        for item in rows:
            mark = "LOSS " if item.loses_evidence else "     "
            lines.append(f"  {mark}{item.change:8} {item.name}: {item.detail}")
            lines.append(f"           affects {item.affects()}")
        lines.append("")
    fixture_rows = result.of("fixture")
    counts: dict[str, int] = {}
    for item in fixture_rows:
        counts[item.change] = counts.get(item.change, 0) + 1
    lines.append("evidence fixture: " + ", ".join(f"{n} {c}" for c, n in sorted(counts.items())))
    for item in fixture_rows:
        if item.change == "found":
            continue
        mark = "LOSS " if item.loses_evidence else "     "
        lines.append(f"  {mark}{item.detail}")
        lines.append(f"           affects {item.affects()}")
    lines.append("")
    losses = result.losses
    if losses:
        lines.append(f"{len(losses)} item(s) would leave checks without their evidence (marked LOSS): update the "
                     "fixture/manifests for this image and the checks that read them (docs/upgrade.md)")
    else:
        lines.append("no check loses its evidence")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkgate.sglang.facts")
    sub = parser.add_subparsers(dest="command", required=True)
    obs = sub.add_parser("observe", help="print the installed SGLang's facts as JSON (the fixture on stdin)")
    obs.add_argument("--site-packages", default=None)
    obs.add_argument("--fork", action="store_true")
    args = parser.parse_args(argv)
    fixture = json.loads(sys.stdin.read())
    result = _observe_here(args.site_packages, args.fork, fixture)
    sys.stdout.write("\n" + RESULT_MARKER + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
