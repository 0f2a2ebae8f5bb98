"""Runs inside an SGLang environment (never ropebridge's): a converted checkpoint's rope as SGLang 0.5.23's
``llama.py`` builds it from the config (``rope_parameters``, when present, gives ``rope_theta`` and stands for
``rope_scaling``; ``get_rope(head_dim, rotary_dim = partial_rotary_factor * head_dim, max_position_embeddings,
rope_theta, rope_scaling)``), or its ``persimmon.py`` from the transformers config object (``get_rope(head_dim,
rotary_dim=head_dim, max_position_embeddings, rope_parameters["rope_theta"],
partial_rotary_factor=config.partial_rotary_factor)``, head dim hidden / heads: with transformers 5.19, as SGLang
0.5.23 pins it, on ``PYTHONPATH`` too), or its ``stablelm.py`` likewise (``get_rope(head_dim, rotary_dim=int(head_dim *
rope_pct))``, ``rope_pct`` read before ``partial_rotary_factor``), rotated by its PyTorch-native path ``forward_native``
on the CPU, applied to the checkpoint's own q and k emulation constants (``_rope_job``).

    PYTHONPATH=SGLANG_WHEEL_DIR[:TRANSFORMERS_5_19_DIR] python worker_sglang_rope.py run JOB.json
"""

import sys
from importlib.metadata import version

import _rope_job
from sglang.srt.layers.rotary_embedding import get_rope


def run(job_path: str) -> int:
    job = _rope_job.load(job_path)
    config = job["config"]
    if config["model_type"] == "persimmon":
        rope = persimmon_rope(job)
    elif config["model_type"] == "stablelm":
        rope = stablelm_rope(job)
    else:
        rope = llama_rope(job)
    q_rot, k_rot = rope.forward_native(job["positions"], job["q"], job["k"])
    try:
        engine_version = version("sglang")
    except Exception:  # the wheel unpacked on PYTHONPATH: its dist-info names it
        import sglang

        engine_version = getattr(sglang, "__version__", "unknown")
    _rope_job.save(job, rope, q_rot, k_rot, rope._compute_inv_freq(rope.base), engine_version)
    return 0


def persimmon_rope(job: dict):
    """``PersimmonAttention``'s rope, from the config object as SGLang's model receives it."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(job["model"])
    head_dim = config.hidden_size // config.num_attention_heads
    return get_rope(head_dim, rotary_dim=head_dim, max_position=config.max_position_embeddings,
                    base=config.rope_parameters["rope_theta"], partial_rotary_factor=config.partial_rotary_factor,
                    dtype=job["dtype"])


def stablelm_rope(job: dict):
    """``StablelmAttention``'s rope, from the config object as SGLang's model receives it: rotary dims
    ``int(head_dim * rope_pct)``, ``rope_pct`` falling back to ``partial_rotary_factor`` and then 1."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(job["model"])
    head_dim = config.hidden_size // config.num_attention_heads
    rope_pct = getattr(config, "rope_pct", getattr(config, "partial_rotary_factor", 1))
    return get_rope(head_dim, rotary_dim=int(head_dim * rope_pct), max_position=config.max_position_embeddings,
                    base=config.rope_parameters["rope_theta"], dtype=job["dtype"])


def llama_rope(job: dict):
    """``LlamaAttention``'s rope, from config.json's keys."""
    config = job["config"]
    parameters = config.get("rope_parameters")
    rope_theta = parameters.get("rope_theta", 10000) if parameters is not None else config.get("rope_theta", 10000)
    rope_scaling = dict(parameters) if parameters is not None else config.get("rope_scaling")
    head_dim = config["head_dim"]
    return get_rope(head_dim, rotary_dim=int(config.get("partial_rotary_factor", 1.0) * head_dim),
                    max_position=config.get("max_position_embeddings", 8192), base=rope_theta,
                    rope_scaling=rope_scaling, is_neox_style=config.get("rope_is_neox_style", True),
                    dtype=job["dtype"])


if __name__ == "__main__":
    sys.exit(run(sys.argv[2]))
