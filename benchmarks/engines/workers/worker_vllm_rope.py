"""Runs inside a vLLM environment (never ropebridge's): a converted checkpoint's rope as vLLM builds it from the
config as its ``llama.py``, ``nemotron.py`` and ``stablelm.py`` do (``get_rope`` of the head size, hidden / heads
where the config states none, and ``rope_parameters``, which carries ``partial_rotary_factor``; the PyTorch-native path
``forward_native``, on the CPU), applied to the checkpoint's own q and k emulation constants (``_rope_job``).

    python worker_vllm_rope.py run JOB.json
"""

import sys

import _rope_job
import vllm
from vllm.config import CompilationConfig, DeviceConfig, VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.rotary_embedding import get_rope


def run(job_path: str) -> int:
    job = _rope_job.load(job_path)
    config = job["config"]
    current = VllmConfig(compilation_config=CompilationConfig(custom_ops=["none"]),
                         device_config=DeviceConfig(device="cpu"))
    with set_current_vllm_config(current):
        # llama.py, nemotron.py and stablelm.py: get_rope(head size, max position, rope_parameters)
        rope = get_rope(_rope_job.head_dim(config), int(job["positions"].max()) + 1, is_neox_style=True,
                        rope_parameters=config.get("rope_parameters"), dtype=job["dtype"])
        q_rot, k_rot = rope.forward_native(job["positions"], job["q"], job["k"])
    _rope_job.save(job, rope, q_rot, k_rot, rope._compute_inv_freq(rope.base), vllm.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[2]))
