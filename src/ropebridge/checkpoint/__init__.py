"""Checkpoints of ALiBi sources: configs parsed once per family from one table (``config``), tensors read by byte
range with their shapes checked first (``tensor_io``), and the canonical view of a source model (``model``)."""

from .config import FAMILIES, AlibiSource, SourceInfo, family_slopes, from_config, from_heads, load_config

__all__ = ["FAMILIES", "AlibiSource", "SourceInfo", "family_slopes", "from_config", "from_heads", "load_config"]
