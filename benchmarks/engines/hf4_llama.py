"""The llama target in transformers 4.x: the remote-code families' picos converted with the defaults and run by
transformers 4.57's own Llama, against independent readings of their published code.

    python -m benchmarks.engines.hf4_llama --python ENV/bin/python [--write]

ENV is a virtual environment outside the repository with transformers 4.x (``python3 -m venv ENV &&
ENV/bin/pip install torch==2.13.0 transformers==4.57.6 safetensors``, the ``transformers-4`` environment of
``envs.py``; about 2 minutes). For Baichuan-13B, Baichuan2-13B and Refact picos (``tests/pico.build_remote``) in
float32 (the exact single pair) and bfloat16 (the ladder): ``ropebridge convert`` to the ``llama`` target,
``worker_hf4.py`` (run by ENV's Python) runs the checkpoint as transformers 4.x loads it on 512 tokens and
continues 4 prompts greedily by 16 tokens. Its logits are compared with the family's float64 reading
(``tests/remote_models.py``) and with transformers 5.x's run of the same checkpoint in the same dtype, its
greedy tokens with 5.x's. Twice: with the ``config.json`` as written, and with its ``rope_scaling`` key
removed, which shows what the key is for (transformers 4.x reads no ``rope_parameters``). A case passes when
its error from the reading is within the plan's tolerance (float32) or within 3x the plan's prediction
(bfloat16, ``verdict.LOGIT_FACTOR``), and in float32 when its greedy tokens are also 5.x's. In bfloat16 the
two versions round differently (0.4 logits apart on these picos, each as far from the reading), so their
greedy tokens part at near-ties: reported, not judged.

The table goes to stdout; ``--write`` stores ``benchmarks/results/hf4_llama.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from benchmarks._common import payload  # (the results' one schema)
from benchmarks.engines.workers import FOLDER as WORKERS

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "hf4_llama.json"
CASES = [(family, dtype) for family in ("baichuan", "baichuan2", "refact") for dtype in ("float32", "bfloat16")]
TOKENS, PROMPTS, GREEDY = 512, 4, 16


@torch.no_grad()
def _transformers5(directory: Path, dtype: str, ids: torch.Tensor, prompts: list[torch.Tensor]):
    """transformers 5.x's logits ``(s, V)`` float32 and greedy tokens, as ``worker_hf4.py`` computes them."""
    import transformers as T

    model = T.AutoModelForCausalLM.from_pretrained(directory, dtype=getattr(torch, dtype)).eval()
    logits = model(ids).logits[0].float().numpy()
    greedy = [model.generate(p, attention_mask=torch.ones_like(p), max_new_tokens=GREEDY, min_new_tokens=GREEDY,
                             do_sample=False, eos_token_id=None, pad_token_id=0)[0, p.shape[1]:].tolist()
              for p in prompts]
    return logits, greedy


def case(python: str, family: str, dtype: str, work: Path) -> list[dict]:
    from tests.pico import build_remote

    from ropebridge.convert import convert
    from ropebridge.verify.verdict import LOGIT_FACTOR
    from ropebridge.emulation import PlanRequest

    src = build_remote(work / family, family)
    res = convert(src, work / "llama", PlanRequest(window=TOKENS, dtype=dtype), force=True)
    from tests.remote_models import READINGS

    plan, oracle = res.plan, READINGS[family]
    vocab = json.loads((src / "config.json").read_text())["vocab_size"]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, min(vocab, 320), (1, TOKENS), generator=g)
    np.save(work / "ref.npy", oracle(src, ids)[0].numpy())
    prompts = [ids[:, 8 * p: 8 * p + 8] for p in range(PROMPTS)]
    t5_logits, expected = _transformers5(res.destination, dtype, ids, prompts)
    np.save(work / "t5.npy", t5_logits)
    del t5_logits
    limit = plan.tolerance if dtype == "float32" else LOGIT_FACTOR * plan.worst_head.predicted_error
    rows = []
    for config_as in ("as written", "without rope_scaling"):
        if config_as != "as written":
            config = json.loads((res.destination / "config.json").read_text())
            del config["rope_scaling"]
            (res.destination / "config.json").write_text(json.dumps(config, indent=1))
        job = {"model": str(res.destination), "sequence": ids[0].tolist(),
               "references": {"oracle": str(work / "ref.npy"), "t5": str(work / "t5.npy")},
               "prompts": [p[0].tolist() for p in prompts], "greedy_tokens": GREEDY, "settings": {"threads": 2},
               "out": str(work / "out.json")}
        (work / "job.json").write_text(json.dumps(job))
        subprocess.run([python, str(WORKERS / "worker_hf4.py"), "run", str(work / "job.json")],
                       check=True, cwd=Path(__file__).parent, capture_output=True)
        got = json.loads((work / "out.json").read_text())
        err = max(got["oracle"]["max_abs_by_position"])
        rows.append({"family": family, "dtype": dtype, "strategy": plan.strategy, "config": config_as,
                     "transformers": got["transformers_version"], "max_abs_vs_oracle": err,
                     "max_abs_vs_transformers5": max(got["t5"]["max_abs_by_position"]),
                     "predicted": plan.worst_head.predicted_error, "limit": limit,
                     "greedy_identical": got["greedy"] == expected,
                     "passes": bool(err <= limit) and (dtype != "float32" or got["greedy"] == expected)})
    return rows


def table(content: dict) -> str:
    """The stored rows (``content["rows"]``) as markdown."""
    rows = content["rows"]
    out = ["| source | dtype | strategy | config.json | transformers | max \\|Δlogit\\| vs its code | limit | "
           "vs transformers 5.x | greedy vs 5.x | passes |", "|---" * 10 + "|"]
    for r in rows:
        out.append(f"| {r['family']} | {r['dtype']} | {r['strategy']} | {r['config']} | {r['transformers']} | "
                   f"{r['max_abs_vs_oracle']:.3g} | {r['limit']:.3g} | {r['max_abs_vs_transformers5']:.3g} | "
                   f"{'identical' if r['greedy_identical'] else 'differs'} | {'yes' if r['passes'] else 'no'} |")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the Python of an environment with transformers 4.x")
    parser.add_argument("--write", action="store_true", help=f"store the results in {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args()
    rows = []
    for family, dtype in CASES:
        with tempfile.TemporaryDirectory() as work:
            rows += case(args.python, family, dtype, Path(work))
        print(f"{family} {dtype}: done", file=sys.stderr)
    print(table({"rows": rows}))
    if args.write:
        RESULTS.write_text(json.dumps(payload(rows), indent=1) + "\n")
    return 0 if all(r["passes"] for r in rows if r["config"] == "as written") else 1


if __name__ == "__main__":
    sys.exit(main())
