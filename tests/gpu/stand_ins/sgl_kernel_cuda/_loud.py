"""Every `sgl_kernel` name the stand-in does not implement imports, and raises when called.

SGLang 0.5.23 imports dozens of sgl-kernel names at module load on CUDA (most for paths a tiny bf16 model never
takes). Importing must work; calling one must fail loudly with its name, so a missing op is an error in the GPU
lane's log, never a silent wrong answer. Installed by the package's __init__ (import this module last).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

PACKAGE = "sgl_kernel"


class MissingOp:
    """A name the stand-in lacks: attribute access nests, a call raises NotImplementedError naming it."""

    def __init__(self, qualname: str) -> None:
        self._qualname = qualname

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return MissingOp(f"{self._qualname}.{name}")

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"sgl_kernel stand-in (tests/gpu): {self._qualname} is not implemented")

    def __repr__(self) -> str:
        return f"<missing sgl_kernel op {self._qualname}>"


class _LenientModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return MissingOp(f"{self.__name__}.{name}")


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`import sgl_kernel.<anything>`: the real file when the stand-in has one, else a lenient empty module."""

    def find_spec(self, fullname, path, target=None):
        if not fullname.startswith(PACKAGE + ".") or fullname in sys.modules:
            return None
        package = sys.modules.get(PACKAGE)
        search = list(getattr(package, "__path__", []))
        real = importlib.machinery.PathFinder.find_spec(fullname, search)
        if real is not None:
            return real
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _LenientModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        return None


def install(package_globals: dict) -> None:
    """Make the package itself lenient (module __getattr__) and its unknown submodules importable."""

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return MissingOp(f"{PACKAGE}.{name}")

    package_globals["__getattr__"] = __getattr__
    if not any(isinstance(finder, _SubmoduleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SubmoduleFinder())
