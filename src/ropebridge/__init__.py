"""ropebridge: positional encodings of transformer language models.

Shape legend used in every docstring: ``b`` batch, ``s`` query positions, ``t`` key positions,
``h`` heads, ``d`` head dim, ``r`` rotary dim (``r/2`` pairs), ``D`` hidden size, ``V`` vocabulary.
"""

import logging

__version__ = "0.2.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
