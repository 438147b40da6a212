"""Build-time guard for the Spark engine image: fail the `docker build` unless the installed SGLang is the
fork the profiles need, proven on the installed code itself.

The checks, one `GuardResult` each: docs/images.md, "Building the Spark engine image", item "`sparkgate
build-guard` fails". Beyond that table: every env var the image's capabilities declare is checked, not only the
FP8 head's, and a profile on the image that runs DSpark needs its drafter class in `sglang.srt.models.dspark`'s
`EntryClass`, read from source (importing model modules at build time may need a GPU). Runs without a GPU; CI runs
it against stock sglang==0.5.23, which it must refuse.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.metadata
import importlib.util
import io
import json
import pkgutil
from dataclasses import dataclass
from pathlib import Path

from sparkgate.sglang import conformance, fork, proof
from sparkgate.sglang import flags as F

DEFAULT_IMAGE = "spark-fork"
def _module_of(source: str) -> str:
    return source.removesuffix(".py").replace("/", ".")


# The fork's patch in the Ling-3 model file logs this once the LM head is quantized; the
# fp8_lm_head.log_signature check waits for it, so an image whose source cannot print it can never pass.
FP8_LM_HEAD_MODEL_MODULE = _module_of(conformance.entry("classes", "target_model")["source"])
FP8_LM_HEAD_LOG_LINE = fork.FP8_LM_HEAD_LOG
NEXTN_MODULE = _module_of(conformance.entry("classes", "nextn_draft")["source"])
NEXTN_DRAFT_CLASS = conformance.class_name("nextn_draft")
NEXTN_SHARE_METHOD = fork.DRAFT_LM_HEAD_SHARE
HUMMING_DISTRIBUTION = "humming-kernels"
DSPARK_MODEL_MODULE = "sglang.srt.models.dspark"


# One line per manifest: named in the refusal only when nothing more specific failed.
SUMMARIES = ("evidence fixture", "flag manifest", "env manifest")


@dataclass(frozen=True)
class GuardResult:
    name: str
    ok: bool
    detail: str


def check_env_declared(env_name: str = F.FP8_LM_HEAD_ENV) -> GuardResult:
    name = f"declares {env_name}"
    try:
        environ = importlib.import_module("sglang.srt.environ")
    except Exception as exc:  # any import failure: this SGLang cannot run
        return GuardResult(name, False, f"cannot import sglang.srt.environ ({type(exc).__name__}: {exc})")
    envs = getattr(environ, "Envs", None)
    if envs is None:
        return GuardResult(name, False, f"{environ.__file__}: no class Envs")
    if env_name in vars(envs):
        return GuardResult(name, True, f"{environ.__file__}: Envs.{env_name}")
    return GuardResult(name, False, f"{environ.__file__}: Envs has no {env_name}; SGLang would ignore it silently "
                       "(stock build?)")


def check_fp8_log_line() -> GuardResult:
    name = "FP8 LM-head log line"
    spec = importlib.util.find_spec(FP8_LM_HEAD_MODEL_MODULE)
    if spec is None or spec.origin is None:
        return GuardResult(name, False, f"{FP8_LM_HEAD_MODEL_MODULE} not found")
    # Parsed, not grepped: a comment or docstring quoting the line is not code that prints it.
    if proof.starts_a_string_in(FP8_LM_HEAD_LOG_LINE, Path(spec.origin)):
        return GuardResult(name, True, f"{spec.origin}: logs {FP8_LM_HEAD_LOG_LINE!r}")
    return GuardResult(name, False, f"{spec.origin}: never logs {FP8_LM_HEAD_LOG_LINE!r}; the FP8 LM-head patch is "
                       "missing (stock build?)")


def check_draft_module_sharing(draft_class: str = NEXTN_DRAFT_CLASS) -> GuardResult:
    target = f"{NEXTN_MODULE}.{draft_class}.{NEXTN_SHARE_METHOD}"
    name = f"{draft_class}.{NEXTN_SHARE_METHOD}"
    try:
        pkgutil.resolve_name(target)
    except AttributeError:
        return GuardResult(name, False, f"{target} missing; the NEXTN draft would share only the LM-head tensor "
                           "(accept length 1.00 with an FP8 head)")
    except Exception as exc:
        return GuardResult(name, False, f"cannot resolve {target} ({type(exc).__name__}: {exc})")
    return GuardResult(name, True, f"{target} resolves")


def check_dspark_drafter_class(class_name: str, source: Path | None = None) -> GuardResult:
    """The drafter class is defined and registered (listed in EntryClass) in SGLang's DSpark model module."""
    name = f"DSpark drafter class {class_name}"
    if source is None:
        spec = importlib.util.find_spec(DSPARK_MODEL_MODULE)
        if spec is None or spec.origin is None:
            return GuardResult(name, False, f"{DSPARK_MODEL_MODULE} not found: this SGLang has no DSpark")
        source = Path(spec.origin)
    tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    defined = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    registered = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
            registered |= {elt.id for elt in getattr(node.value, "elts", []) if isinstance(elt, ast.Name)}
    if class_name in defined and class_name in registered:
        return GuardResult(name, True, f"{source}: {class_name} defined and in EntryClass")
    return GuardResult(name, False, f"{source}: {class_name} {'not in EntryClass' if class_name in defined else 'not defined'}"
                       "; SGLang could not load the drafter the dspark profile pins")


def dspark_drafter_classes(image: str) -> set[str]:
    """Drafter classes of the profiles that run DSpark on this image."""
    from sparkgate.profile import loading as profiles
    classes = set()
    for name in profiles.available_profiles():
        profile = profiles.load(name).profile
        if profile.image == image and profile.optimizations.dspark.enabled:
            classes.add(profile.optimizations.dspark.drafter_architecture)
    return classes


def check_probe_hook_targets() -> GuardResult:
    name = "probe hook targets"
    try:
        from sparkgate_probe.plugin import HOOK_TARGETS
    except ImportError as exc:
        return GuardResult(name, False, f"the probe plugin is not installed ({exc}); pip install ./probe")
    unresolved = []
    for target in sorted(HOOK_TARGETS):
        try:
            pkgutil.resolve_name(target)
        except Exception as exc:
            unresolved.append(f"{target} ({type(exc).__name__}: {exc})")
    if unresolved:
        return GuardResult(name, False, "SGLang could not attach the probe to " + "; ".join(unresolved))
    return GuardResult(name, True, f"{len(HOOK_TARGETS)} targets resolve")


def check_humming_installed(pinned: str | None) -> GuardResult:
    name = f"{HUMMING_DISTRIBUTION} installed"
    try:
        version = importlib.metadata.version(HUMMING_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return GuardResult(name, False, f"no {HUMMING_DISTRIBUTION} distribution; install "
                           f"{HUMMING_DISTRIBUTION}[cu13]=={pinned}")
    if pinned is not None and version != pinned:
        return GuardResult(name, False, f"{HUMMING_DISTRIBUTION} {version} installed, images.lock.yaml pins {pinned}")
    # find_spec on a top-level package locates it without running it.
    if importlib.util.find_spec("humming") is None:
        return GuardResult(name, False, f"{HUMMING_DISTRIBUTION} {version} installed but provides no `humming` module")
    return GuardResult(name, True, f"{HUMMING_DISTRIBUTION} {version}, module humming found (not imported: no GPU "
                       "at build time)")


def check_profiles_parse(image: str) -> list[GuardResult]:
    """SGLang's real parser on each profile's rendered argv.json (the argv the container runs)."""
    try:
        from sparkgate.bundle import render
        from sparkgate.profile import loading as profiles
        from sparkgate.sglang.parser import build_sglang_parser

        # The installed SGLang's own flags: in the image that is the fork, fork-only flags included.
        parser = build_sglang_parser(with_fork_options=False)
        bundles = {}
        for name in profiles.available_profiles():
            loaded = profiles.load(name)
            if loaded.profile.image == image:
                bundles[name] = render.render_files(loaded, render.RenderOptions(target="spark"))
    except Exception as exc:  # a broken install or profile: nothing proven, and the build must say why
        return [GuardResult("SGLang parser", False, f"cannot render the profiles' argv or build ServerArgs' parser "
                            f"({type(exc).__name__}: {exc})")]
    results = []
    for name, files in bundles.items():
        argv = json.loads(files["argv.json"])
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                parser.parse_args(argv)
        except SystemExit:  # argparse reports and exits 2
            message = (errors.getvalue().strip().splitlines() or ["rejected"])[-1]
            results.append(GuardResult(f"argv of {name}", False, f"SGLang's parser rejects argv.json: {message}"))
            continue
        results.append(GuardResult(f"argv of {name}", True, f"{len(argv)} tokens parse"))
    if not results:
        results.append(GuardResult("SGLang parser", False, f"no profile runs on image {image!r}: nothing was proven"))
    return results


def check_facts(image: str) -> list[GuardResult]:
    """The image's pinned SGLang facts against the installed SGLang: one result per difference, plus one per
    manifest saying what was proven."""
    from sparkgate.images import load_lock
    from sparkgate.sglang import facts

    files = load_lock().engine_images[image].sglang_facts
    pinned = facts.pinned(image)
    try:
        observed = facts.observe(None, fork=facts.image_needs_fork(image), fixture=pinned.fixture)
    except Exception as exc:  # a broken or unexpected SGLang: nothing proven, and the build must say why
        return [GuardResult("SGLang facts", False, f"cannot read the installed SGLang's facts "
                            f"({type(exc).__name__}: {exc})")]
    result = facts.diff(pinned, observed)
    results = []
    fixture_rows = result.of("fixture")
    bad = [i for i in fixture_rows if i.loses_evidence]
    # Shown one by one: every entry that is not plainly found (runtime-only ones pass, and say which check proves them).
    results += [GuardResult(f"fixture {i.name}", not i.loses_evidence, f"{i.detail} ({files.fixture})")
                for i in fixture_rows if i.change != "found"]
    results.append(GuardResult("evidence fixture", not bad, f"{len(fixture_rows) - len(bad)} of {len(fixture_rows)} "
                               f"entries of {files.fixture} proven in {observed.origin}"))
    for kind, manifest, title in (("flag", files.flags, "flag manifest"), ("env", files.env, "env manifest")):
        rows = result.of(kind)
        results += [GuardResult(f"{kind} {i.name}", False, f"{i.change} ({i.detail}) vs {manifest}") for i in rows]
        count = len(observed.flags if kind == "flag" else observed.env)
        results.append(GuardResult(title, not rows, f"{count} entries of the installed SGLang "
                                   + ("equal " if not rows else f"differ in {len(rows)} from ") + manifest))
    return results


def run_all(image: str = DEFAULT_IMAGE, *, facts: bool = True) -> list[GuardResult]:
    """Every guard check for `image`; `facts=False` leaves out check_facts (a test that patches SGLang in-process
    cannot have its patches seen by the source proof)."""
    from sparkgate.images import load_lock

    lock = load_lock()
    if image not in lock.engine_images:
        return [GuardResult("engine image", False, f"{image!r} is not in images.lock.yaml engine_images "
                            f"({', '.join(sorted(lock.engine_images))})")]
    capabilities = lock.engine_images[image].capabilities
    results = [check_env_declared(env) for env in capabilities.declared_env]
    if F.FP8_LM_HEAD_ENV in capabilities.declared_env:
        results.append(check_fp8_log_line())
    if capabilities.nextn_lm_head_module_sharing:
        results.append(check_draft_module_sharing())
    results += [check_dspark_drafter_class(cls) for cls in sorted(dspark_drafter_classes(image))]
    results.append(check_probe_hook_targets())
    results += check_profiles_parse(image)
    if capabilities.humming_kernels:
        results.append(check_humming_installed(lock.python_packages.get(HUMMING_DISTRIBUTION)))
    if facts:
        results += check_facts(image)
    return results


def refusal(results: list[GuardResult]) -> str | None:
    """One line naming everything missing, or None when the image may be built."""
    missing = [r.name for r in results if not r.ok and r.name not in SUMMARIES]
    missing += [r.name for r in results if not r.ok and r.name in SUMMARIES and not missing]
    if not missing:
        return None
    return (f"sparkgate build guard: refusing the image: missing {', '.join(missing)} (details above). Likely cause: "
            "the installed SGLang is not the pinned fork, or an install step failed. Fix: check SGLANG_REPO/"
            "SGLANG_BRANCH/SGLANG_COMMIT and the install logs; never bypass the guard")
