"""Backend registry: adapters are imported lazily so that listing never needs a GPU."""

from __future__ import annotations

import importlib
from functools import cache

from ..catalogue import Kernel
from .base import Backend, Execution, KernelUnavailable, RunOptions

__all__ = ["Backend", "Execution", "KernelUnavailable", "RunOptions", "get_backend",
           "unavailable_reason"]

_ADAPTERS = {
    "cpu": "mmsuite.backends.cpu:CpuBackend",
    "opencl": "mmsuite.backends.opencl:OpenCLBackend",
    "cuda": "mmsuite.backends.cuda:CudaBackend",
}


@cache
def get_backend(name: str, options: RunOptions = RunOptions()) -> Backend:
    """The adapter for ``name`` configured with ``options`` (one instance per option set)."""
    try:
        module_name, class_name = _ADAPTERS[name].split(":")
    except KeyError:
        raise KeyError(f"unknown backend {name!r}; choose from {', '.join(_ADAPTERS)}") from None
    module = importlib.import_module(module_name)
    return getattr(module, class_name)(options)


@cache
def _backend_reason(name: str, options: RunOptions) -> str:
    try:
        return get_backend(name, options).probe()
    except Exception as exc:  # listing must never raise
        return f"{name} backend failed to load: {type(exc).__name__}: {exc}"


def unavailable_reason(kernel: Kernel, options: RunOptions = RunOptions()) -> str:
    """Why ``kernel`` cannot run with ``options``; empty when it can. Never raises."""
    reason = _backend_reason(kernel.backend, options)
    if reason:
        return reason
    try:
        return get_backend(kernel.backend, options).kernel_reason(kernel)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
