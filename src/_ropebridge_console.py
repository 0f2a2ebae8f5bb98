"""The ``ropebridge`` command's entry point, outside the package so that its first instruction runs before any of
ropebridge's imports (importing ``ropebridge.cli`` runs ``ropebridge/__init__.py`` first).

It imports only what the interpreter has already loaded (``os``, ``sys``, ``_signal``) and handles SIGINT, SIGTERM
and SIGHUP as it is imported (not in a process multiprocessing spawns, which imports it again): a signal during
ropebridge's own imports ends the process with 128 + the signal and one line, as every later one does; nothing has been
written yet. ``ropebridge.cli.console_main`` then installs the full handlers (``ropebridge.cli.signals``) before
anything heavy is imported. The interpreter's own start (``site``) and the console script's ``import re`` come before
this and are not ropebridge's.
"""

import os
import sys
import _signal

_WORDS = {_signal.SIGINT: "interrupted", _signal.SIGTERM: "stopped by SIGTERM", _signal.SIGHUP: "stopped by SIGHUP"}


def _early(signum, frame):
    os.write(2, f"ropebridge: {_WORDS.get(signum, 'stopped')}; nothing written\n".encode())
    os._exit(128 + signum)


# on import: the command imports this module and nothing before it. A process multiprocessing spawns (the ladder's
# pool) imports the command's main module again, and with it this one: it is not the command (the pool ends it with
# SIGTERM when its work is done), so it keeps the signals as multiprocessing set them.
if "--multiprocessing-fork" not in sys.orig_argv:  # (multiprocessing gives sys.argv the parent's)
    for _signum in _WORDS:
        _signal.signal(_signum, _early)


def main():
    from ropebridge.cli import console_main

    return console_main()
