"""The package's loggers: ``logger(__name__)`` gives a module its logger; the package's is quiet unless the
application configures logging (a ``NullHandler`` on ``ropebridge``, as libraries do). Kept out of
``ropebridge/__init__.py``, which imports nothing: the ``ropebridge`` command handles signals from its first
instruction, and ``python -m ropebridge`` from ``__main__``'s, before any of the package's imports."""

import logging

logging.getLogger("ropebridge").addHandler(logging.NullHandler())


def logger(name: str) -> logging.Logger:
    return logging.getLogger(name)
