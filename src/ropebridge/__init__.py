"""ropebridge: positional encodings of transformer language models.

Shape legend used in every docstring: ``b`` batch, ``s`` query positions, ``t`` key positions,
``h`` heads, ``d`` head dim, ``r`` rotary dim (``r/2`` pairs), ``D`` hidden size, ``V`` vocabulary.
"""

__version__ = "0.2.0"  # nothing is imported here: the command handles signals before any import (``_log``)
