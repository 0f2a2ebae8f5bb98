"""The strategies' registry: ``STRATEGIES[name]``, one ``strategy.Strategy`` per strategy module, in the order of
``strategy.STRATEGY_NAMES`` (the ladder, the default, first). Every list of strategies (``--strategy``'s choices,
a request's check) is read from it."""

from __future__ import annotations

from . import fixed_base, ladder, single
from .strategy import STRATEGY_NAMES

_BY_NAME = {s.name: s for s in (fixed_base.STRATEGY, ladder.STRATEGY, single.STRATEGY)}
STRATEGIES = {name: _BY_NAME[name] for name in STRATEGY_NAMES}  # a name without its module fails here
