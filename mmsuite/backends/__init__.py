"""Backend registry: adapters are imported lazily so that listing never needs a GPU."""

from __future__ import annotations

import importlib
from functools import cache

from ..backend_table import BACKENDS
from .base import (
    Backend,
    KernelFailed,
    KernelSpec,
    KernelUnavailable,
    RunOptions,
    Session,
    is_kernel_failure,
)

__all__ = ["Backend", "KernelFailed", "KernelSpec", "KernelUnavailable", "RunOptions", "Session",
           "get_backend", "is_kernel_failure", "unavailable_reason"]

_ADAPTERS = {name: backend.adapter for name, backend in BACKENDS.items()}


DEFAULT_OPTIONS = RunOptions()


def get_backend(name: str, options: RunOptions | None = None) -> Backend:
    """The adapter for ``name`` configured with ``options`` (one instance per option set)."""
    return _adapter(name, options or DEFAULT_OPTIONS)


@cache
def _adapter(name: str, options: RunOptions) -> Backend:
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


def unavailable_reason(kernel: KernelSpec, options: RunOptions | None = None) -> str:
    """Why ``kernel`` cannot run with ``options``; empty when it can. Never raises."""
    options = options or DEFAULT_OPTIONS
    reason = _backend_reason(kernel.backend, options)
    if reason:
        return reason
    try:
        return get_backend(kernel.backend, options).kernel_reason(kernel)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
