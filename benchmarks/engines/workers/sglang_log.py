"""What SGLang's info log says of a run (standard library only): read by ``worker_sglang.py`` in SGLang's
environment and by ``sglang_run.py`` in ropebridge's, from the log the package's runner returns."""

import re


def facts(log: str) -> dict:
    """The class SGLang loaded and its KV cache's dtype, from its info log."""
    arch = re.search(r"Load weight end\..*?type=(\w+)", log)
    dtype = re.search(r"KV Cache is allocated\. dtype: torch\.(\w+)", log)
    return {"architecture": arch.group(1) if arch else None, "dtype": dtype.group(1) if dtype else None}
