"""Conversion of ALiBi checkpoints into stock RoPE checkpoints, and its verification."""

from .pipeline import ConversionResult, convert, conversion_plan

__all__ = ["ConversionResult", "convert", "conversion_plan"]

from .verify import VerifyReport, verify  # noqa: E402

__all__ += ["VerifyReport", "verify"]
