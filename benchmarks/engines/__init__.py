"""The studies that run a checkpoint in a serving engine's own environment (``envs``), and their shared parts.
Run one from the repository's root, ``python -m benchmarks.engines.NAME``; its workers are in ``workers/``."""
