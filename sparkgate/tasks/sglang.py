"""SGLang knowledge tasks (`invoke sglang.diff`): what an installed SGLang has against the facts an engine image
pins. The logic is sparkgate.sglang.facts."""

from __future__ import annotations

from pathlib import Path

from invoke import Collection

from sparkgate.errors import Refusal
from sparkgate.tasks.common import sparkgate_task


class FactsLost(Refusal):
    exit_code = 1


@sparkgate_task("sglang.diff", help={
    "site_packages": "a directory holding an installed `sglang` package (e.g. a venv's site-packages)",
    "image": "an engine image tag: read its SGLang inside it (docker run --network none)",
    "facts": "the engine image key of images.lock.yaml whose pinned facts to compare with (default: the image whose "
             "tag is --image, else sglang-stock)",
})
def diff(c, site_packages="", image="", facts=""):
    """Compare an installed SGLang with pinned facts: flags added/removed/changed, changed defaults of the flags
    sparkgate reads or the profiles pass, env added/removed, evidence fixture entries found/moved/missing, and for
    each the checks that read it (derived from the code) and the rules. Exit 1 when any check would lose its
    evidence."""
    from sparkgate.images import load_lock
    from sparkgate.sglang import facts as F

    if bool(site_packages) == bool(image):
        raise Refusal("give exactly one of --site-packages PATH or --image TAG")
    lock = load_lock()
    key = facts or next((k for k, v in lock.engine_images.items() if image and v.tag == image), "sglang-stock")
    if key not in lock.engine_images:
        raise Refusal(f"--facts {key!r} is not in images.lock.yaml engine_images ({', '.join(sorted(lock.engine_images))})")
    try:
        pinned = F.pinned(key)
    except (OSError, ValueError, KeyError) as exc:
        raise Refusal(f"cannot read the facts images.lock.yaml pins for {key} ({type(exc).__name__}: {exc})") from None
    fork = F.image_needs_fork(key)
    print(f"sglang.diff: reading {'the SGLang in ' + image if image else site_packages} "
          f"({'fork' if fork else 'stock'} facts of {key}); this imports SGLang and takes about half a minute",
          flush=True)
    try:
        if image:
            observed = F.observe_in_image(image, fork=fork, fixture=pinned.fixture)
        else:
            observed = F.observe(Path(site_packages), fork=fork, fixture=pinned.fixture)
    except (F.ObserveError, FileNotFoundError) as exc:
        raise Refusal(str(exc)) from None
    result = F.diff(pinned, observed, used_flags=F.profile_flags())
    print(F.render(result), flush=True)
    if result.losses:
        raise FactsLost(f"{len(result.losses)} difference(s) would leave checks without their evidence "
                        "(marked LOSS above); see docs/upgrade.md")


ns = Collection("sglang", diff)
