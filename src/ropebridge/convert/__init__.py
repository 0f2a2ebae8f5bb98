"""Conversion of ALiBi checkpoints into stock RoPE checkpoints, and its verification."""

from .pipeline import ConversionResult, convert
from .verify import VerifyReport, verify

__all__ = ["ConversionResult", "convert", "VerifyReport", "verify"]
