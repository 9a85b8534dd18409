"""pytest options for checking your own kernels (``mmsuite.testing``): ``--mmsuite-plugin
PATH`` loads a plugin file before the tests are collected, ``--mmsuite-kernel GLOB`` picks
the kernels the suite checks (default: every plugin kernel)."""

from __future__ import annotations

import pytest

from .. import plugins


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mmsuite", "mmsuite: your own kernels")
    group.addoption("--mmsuite-plugin", action="append", default=[], metavar="PATH",
                    help="a Python file of kernels (mmsuite.register) to check; repeatable")
    group.addoption("--mmsuite-kernel", action="append", default=[], metavar="GLOB",
                    help="check kernels whose id matches GLOB (default: every plugin "
                    "kernel); repeatable")


def pytest_configure(config: pytest.Config) -> None:
    try:
        plugins.use(config.getoption("mmsuite_plugin"))
        if config.getoption("mmsuite_plugin"):
            plugins.load_configured()
    except plugins.PluginError as exc:
        raise pytest.UsageError(str(exc)) from None
