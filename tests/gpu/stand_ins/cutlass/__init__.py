"""Import-only stand-in for nvidia-cutlass-dsl (`cutlass`), test-only (tests/gpu).

On CUDA, SGLang 0.5.23 imports CuTe DSL modules at load (sglang/srt/layers/dual_gemm.py and its kernels), whose
kernels need SM100; on SM90 they are never launched. Decorators return what they decorate, classes and types
resolve to placeholders, so the module bodies evaluate; anything actually run through a placeholder raises.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


class Placeholder:
    def __init__(self, qualname: str) -> None:
        self._qualname = qualname

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return Placeholder(f"{self._qualname}.{name}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], Placeholder):
            return args[0]  # a decorator (cute.jit, cute.kernel, dsl_user_op): leave the function as defined
        return Placeholder(f"{self._qualname}(...)")

    def __getitem__(self, item):
        return Placeholder(f"{self._qualname}[...]")

    def __mro_entries__(self, bases):
        return (object,)  # subclassing a cutlass type in a module body

    def __or__(self, other):
        return self  # `A | None` annotations evaluated at definition

    __ror__ = __or__

    def __repr__(self) -> str:
        return f"<cutlass stand-in {self._qualname}>"


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return Placeholder(f"cutlass.{name}")


class _Module(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return Placeholder(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith("cutlass.") and fullname not in sys.modules:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        return None


sys.meta_path.insert(0, _Finder())
