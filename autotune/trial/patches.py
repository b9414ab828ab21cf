"""Undoing what a trial's kernel library patched in its process, for the next trial there.

liger-kernel (the Liger knob) patches more than the trial's model: applied to an instance, it
also replaces names in the model type's modeling module (``modeling_llama.LlamaRMSNorm``,
``LlamaMLP``, ``apply_rotary_pos_emb``) and may replace methods of its classes and
``torch.nn.functional.cross_entropy``. A later trial in the same process (``--isolation none``,
`autotune.tune` in process, the tests' in-process searches) then builds a model with Liger's
modules although it did not ask for them, and its throughput is measured under the wrong name
(seen on an H200: the plain trial after a Liger one printed ``LigerRMSNorm`` and
``LigerSwiGLUMLP``). A worker process trains one trial and ends, so there is nothing to undo.

Only values that come from a patching library are put back: anything else a trial changed in
these modules is left as it is.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any

PATCHING_PACKAGES = ("liger_kernel",)

_MISSING = object()


def _from_patcher(value: Any) -> bool:
    module = getattr(value, "__module__", None)
    if not isinstance(module, str):
        module = getattr(getattr(value, "__func__", None), "__module__", None) or ""
    return module.split(".")[0] in PATCHING_PACKAGES


def _modeling_modules(extra: Iterable[str]) -> list[ModuleType]:
    names = {n for n in list(sys.modules) if n.startswith("transformers.models.") and ".modeling_" in n}
    names.update(n for n in extra if n in sys.modules)
    return [sys.modules[n] for n in sorted(names)]


def _namespaces(modules: Iterable[ModuleType]) -> list[Any]:
    """The modules and the classes defined in each (whose methods a patch may replace)."""
    out: list[Any] = []
    for module in modules:
        out.append(module)
        out.extend(
            value
            for value in list(vars(module).values())
            if isinstance(value, type) and value.__module__ == module.__name__
        )
    return out


@contextlib.contextmanager
def undone_kernel_patches(model_modules: Iterable[str] = ()) -> Iterator[None]:
    """Put back, on exit, every name of the loaded modeling modules (and `model_modules`, the
    trial's model's own), of their classes and of ``torch.nn.functional`` that a patching library
    replaced or added inside the block."""
    import torch.nn.functional

    namespaces = [*_namespaces(_modeling_modules(model_modules)), torch.nn.functional]
    before = [(space, dict(vars(space))) for space in namespaces]
    try:
        yield
    finally:
        for space, saved in before:
            for name, value in list(vars(space).items()):
                if saved.get(name, _MISSING) is value or not _from_patcher(value):
                    continue
                original = saved.get(name, _MISSING)
                if original is _MISSING:
                    delattr(space, name)
                else:
                    setattr(space, name, original)
