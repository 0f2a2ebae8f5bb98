"""The repository's maintenance scripts; the ones that import the benchmarks or the tests' models run from the
repository's root as modules (``python -m scripts.checkpoint_digests``)."""
