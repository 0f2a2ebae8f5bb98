"""The ``ropebridge`` command's entry point, outside the package so that its first instruction runs before any of
ropebridge's imports (importing ``ropebridge.cli`` runs ``ropebridge/__init__.py`` first).

It imports only what the interpreter has already loaded (``os``, ``_signal``) and handles SIGINT, SIGTERM and SIGHUP
as it is imported: a signal during ropebridge's own imports ends the process with 128 + the signal and one line, as every
later one does; nothing has been written yet. ``ropebridge.cli.console_main`` then installs the full handlers
(``ropebridge.cli.signals``) before anything heavy is imported. The interpreter's own start (``site``) and the
console script's ``import re`` come before this and are not ropebridge's.
"""

import os
import _signal

_WORDS = {_signal.SIGINT: "interrupted", _signal.SIGTERM: "stopped by SIGTERM", _signal.SIGHUP: "stopped by SIGHUP"}


def _early(signum, frame):
    os.write(2, f"ropebridge: {_WORDS.get(signum, 'stopped')}; nothing written\n".encode())
    os._exit(128 + signum)


for _signum in _WORDS:  # on import: the command imports this module and nothing before it
    _signal.signal(_signum, _early)


def main():
    from ropebridge.cli import console_main

    return console_main()
