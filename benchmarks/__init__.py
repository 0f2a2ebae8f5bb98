"""The studies: each module measures one claim and writes ``results/NAME.json`` (``studies.STUDIES`` lists them).
Run one from the repository's root as a module, ``python -m benchmarks.NAME``."""
