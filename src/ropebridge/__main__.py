"""``python -m ropebridge`` runs the CLI."""

from .cli import console_main

console_main()
