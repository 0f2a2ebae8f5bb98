"""ALiBi emulated with RoPE: plan types, the error model, and one module per strategy behind one registry.

``STRATEGIES[name]`` is a ``strategy.Strategy`` (``strategies``): ``.plan(source, request) -> EmulationPlan``,
``source`` anything with ``slopes`` ``(h,)``, ``head_dim`` and ``family`` (``checkpoint.AlibiSource``), ``request``
a ``resolved.Resolved`` (a ``PlanRequest`` is resolved first, ``resolved.resolve``):

- ``single``: one slow pair per head at one theta (``single``);
- ``fixed-base``: each head on its best consecutive pairs of a fixed ``base^(-2r/R)`` (``fixed_base``);
- ``ladder``: every pair of a rotary block with fitted amplitudes (``ladder``, ``ladder_fit``).
"""

from __future__ import annotations

from .plan import EmulationPlan, HeadPlan, LadderHead, PairTerm
from .request import PlanRequest
from .resolved import Resolved, resolve
from .strategies import STRATEGIES


def plan(source, request: PlanRequest | Resolved) -> EmulationPlan:
    """The plan of ``source`` for ``request`` (a ``PlanRequest`` is completed for ``source`` first by
    ``resolved.resolve``, where every choice is made), by its strategy. A plan whose served head dim the
    request's kernel does not run is refused (``targets.kernels``)."""
    from ..targets.kernels import check_head_dim

    if isinstance(request, PlanRequest):
        request = resolve(source, request)
    result = STRATEGIES[request.strategy].plan(source, request)
    forced = "" if request.rotary_dim is None else f" with --rotary-dim {request.rotary_dim}"
    served = request.target_row.served_head_dim(result.head_dim, result.rotary_dim, result.strategy)
    try:
        check_head_dim(request.kernel, served, f"the {result.strategy} plan on --target {request.target}{forced}")
    except ValueError as exc:
        if request.dtype != "float32" or result.strategy == "ladder":
            raise
        if "ladder" in request.target_row.strategies:
            raise ValueError(f"{exc}: the {result.strategy} strategy fixes the head dim at {served}; leave out "
                             "--strategy and the single pair's flags to take the ladder planned for float32, on a "
                             "size it runs") from None
        raise ValueError(f"{exc}: float32 serving of this model on it is not possible (the exact strategy fixes "
                         f"the head dim at {served}); convert with --dtype bfloat16 or float16 on a target that "
                         "carries the ladder") from None
    return result


__all__ = ["STRATEGIES", "EmulationPlan", "HeadPlan", "LadderHead", "PairTerm", "PlanRequest", "Resolved", "plan",
           "resolve"]
