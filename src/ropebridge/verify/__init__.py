"""Verification of a converted checkpoint against its ALiBi source (``run.verify``): the pair, the bytes
(``byte_check``), the function (``measure`` through the typed ``stages``, each model's weights read as they are used
by ``read_on_use``, the source as its family defines it by ``deviations``), the verdict (``verdict``) and what is kept
(``report``)."""

from .run import VerifyRequest, verify
from .verdict import VerifyReport

__all__ = ["VerifyReport", "VerifyRequest", "verify"]
