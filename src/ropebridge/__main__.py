"""``python -m ropebridge`` runs the CLI through the command's entry point (``_ropebridge_console``), whose first
instruction handles signals before the CLI's imports; ``ropebridge/__init__.py``, which runs first, imports
nothing."""

import _ropebridge_console

_ropebridge_console.main()
