"""CPU stand-in for `sgl_kernel` (SGLang 0.5.10 imports it at module level; the real one needs CUDA).

Installed by patches/compat_matrix.py only while 0.5.10 is the release under test, as a
`.pth`-loaded module: a meta-path finder appended *last* to sys.meta_path, so a real sgl_kernel
always wins. Every `sgl_kernel` / `sgl_kernel.<sub>` module it makes hands out placeholders for any
attribute; calling one raises NotImplementedError naming the kernel (nothing runs silently).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

_ROOT = "sgl_kernel"


class _Placeholder:
    def __init__(self, name: str):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"{self._name}: CPU stand-in for sgl_kernel (tests/cpu_shims/sgl_kernel_stub.py)")

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self._name}.{attr}")

    def __repr__(self):
        return f"<sgl_kernel stand-in {self._name}>"


class _StubModule(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self.__name__}.{attr}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == _ROOT or fullname.startswith(_ROOT + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        m.__sge3_stub__ = True
        return m

    def exec_module(self, module):
        pass


if not any(
    isinstance(f, _Finder) or type(f).__name__ == "_Finder" and getattr(f, "__module__", "") == __name__
    for f in sys.meta_path
):
    sys.meta_path.append(_Finder())
