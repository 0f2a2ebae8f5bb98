"""The package's loggers are quiet unless the application configures logging, and importing the package imports
nothing (the command handles signals before any of ropebridge's imports)."""

import logging
import subprocess
import sys


def test_the_package_logger_has_a_null_handler_and_module_loggers_propagate_to_it():
    from ropebridge import _log

    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("ropebridge").handlers)
    assert _log.logger("ropebridge.planning") is logging.getLogger("ropebridge.planning")


def test_importing_the_package_imports_nothing_else():
    code = "import sys; before = set(sys.modules); import ropebridge; print(sorted(set(sys.modules) - before))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['ropebridge']", out
