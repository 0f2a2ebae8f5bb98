"""Conversion of ALiBi checkpoints into stock RoPE checkpoints: ``convert`` (``pipeline``), the conversion record
(``record``, with ``older`` reading what earlier releases wrote) and the model card (``card``). Verifying a
conversion is the ``verify`` package's."""

from .pipeline import ConversionResult, convert

__all__ = ["ConversionResult", "convert"]
