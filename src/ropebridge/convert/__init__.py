"""Conversion of ALiBi checkpoints into stock RoPE checkpoints, and its verification."""

from ..planning import conversion_plan
from .pipeline import ConversionResult, convert

__all__ = ["ConversionResult", "convert", "conversion_plan"]

from .verify import VerifyReport, verify  # noqa: E402

__all__ += ["VerifyReport", "verify"]
