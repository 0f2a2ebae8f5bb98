"""The llama target in llama.cpp: the remote-code families' picos converted with the defaults, then through
llama.cpp's own converter with its defaults, run by llama.cpp against independent readings of their code.

    python -m benchmarks.engines.llamacpp_llama [--env-dir DIR] [--write]

The llama.cpp environment of ``envs.py`` (llama-cpp-python 0.3.36 compiled from source, with the
``convert_hf_to_gguf.py`` of its llama.cpp; created on first use, about 8 minutes). For Baichuan-13B and Refact
picos (``tests/pico.build_remote``) with GPT-2's tokenizer and vocabulary (llama.cpp's converter refuses a
tokenizer it does not know: ``gpt2_vocab.py``) in float32, the exact single pair and the ladder (its pairs kept
at the engine's own frequencies): ``ropebridge convert`` to the ``llama`` target; ``convert_hf_to_gguf.py DST --outtype
f32``, nothing else (it reads the config's ``rope_parameters`` and writes the llama3 rope as the ``rope_freqs`` tensor,
the per-pair divisors); ``worker_llamacpp.py`` runs the GGUF on 512 tokens (``-fa off``, f32 K/V cache) and continues 4
prompts greedily by 16 tokens, against the family's float64 reading (``tests/remote_models.py``) and its own greedy
continuation. A case passes when its error is within the plan's float32 tolerance (the single pair) or 3x its
prediction (the ladder, ``verdict.LOGIT_FACTOR``) and its greedy tokens are the reading's. Beside them, the Refact
source itself through llama.cpp's own converter and its native Refact (``native``), judged by float32's
tolerance: the independent implementation the conversion is checked against. llama.cpp reads Refact's norms
as RMSNorms where its published code has LayerNorms without bias, so each Refact row is also compared with
that reading (``remote_models.refact_logits(norm="rmsnorm")``): the native row agrees with it, not with the
published code.

The table goes to stdout; ``--write`` stores ``benchmarks/results/llamacpp_llama.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from benchmarks._common import payload  # (the results' one schema)
from benchmarks.engines.workers import FOLDER as WORKERS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "llamacpp_llama.json"
CASES = (("baichuan", "single"), ("refact", "single"), ("baichuan", "ladder"), ("refact", "ladder"),
         ("refact", "native"))  # native: the source itself through llama.cpp's own Refact reading
TOKENS, PROMPTS, GREEDY = 512, 4, 16


def case(env, family: str, strategy: str, tokenizer: Path, work: Path) -> dict:
    from benchmarks.engines import envs
    from tests.pico import build_remote
    from tests.remote_models import READINGS, greedy_continuation, refact_logits

    from ropebridge.convert import convert
    from ropebridge.verify.verdict import LOGIT_FACTOR
    from ropebridge.emulation import PlanRequest

    vocab = json.loads((tokenizer / "tokenizer.json").read_text())["model"]["vocab"]
    size = max(vocab.values()) + 1
    src = build_remote(work / family, family, vocab_size=size)
    for f in tokenizer.iterdir():
        shutil.copy(f, src / f.name)
    request = PlanRequest(window=TOKENS, dtype="float32", strategy=None if strategy == "native" else strategy)
    res = convert(src, work / "llama", request, force=True)
    plan = res.plan
    limit = plan.tolerance if strategy != "ladder" else LOGIT_FACTOR * max(plan.worst_head.predicted_error,
                                                                           plan.tolerance)
    gguf = work / "llama.gguf"
    env.run([env.convert_hf_to_gguf, src if strategy == "native" else res.destination, "--outtype", "f32",
             "--outfile", gguf], gguf=True, log_file=work / "convert_hf_to_gguf.log")
    oracle = READINGS[family]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, size, (1, TOKENS), generator=g)
    np.save(work / "ref.npy", oracle(src, ids)[0].numpy())
    references = {"oracle": str(work / "ref.npy")}
    if family == "refact":  # llama.cpp's own reading of Refact: every norm an RMSNorm
        np.save(work / "rms.npy", refact_logits(src, ids, norm="rmsnorm")[0].numpy())
        references["rmsnorm"] = str(work / "rms.npy")
    prompts = [ids[:, 8 * p: 8 * p + 8] for p in range(PROMPTS)]
    expected = [greedy_continuation(oracle, src, p, GREEDY) for p in prompts]
    job = {"model": str(gguf), "n_ctx": TOKENS + GREEDY, "sequence": ids[0].tolist(),
           "references": references, "prompts": [p[0].tolist() for p in prompts],
           "greedy_tokens": GREEDY, "settings": {"flash_attn": False, "type_k": "f32", "type_v": "f32", "threads": 2},
           "out": str(work / "out.json")}
    (work / "job.json").write_text(json.dumps(job))
    env.run([WORKERS / "worker_llamacpp.py", "run", work / "job.json"], log_file=work / "run.log")
    got = json.loads((work / "out.json").read_text())
    err = max(got["oracle"]["max_abs_by_position"])
    config = json.loads((res.destination / "config.json").read_text())
    native = strategy == "native"
    return {"family": family, "dtype": "float32", "strategy": "native" if native else plan.strategy,
            "head_dim": plan.head_dim if native else config["head_dim"], "kv_heads": config["num_key_value_heads"],
            "llama_cpp_python": envs.LLAMA_CPP_PYTHON,
            "max_abs_vs_oracle": err, "predicted": plan.worst_head.predicted_error, "limit": limit,
            "max_abs_vs_rmsnorm_reading": max(got["rmsnorm"]["max_abs_by_position"]) if "rmsnorm" in got else None,
            "greedy_identical": got["greedy"] == expected, "passes": bool(err <= limit) and got["greedy"] == expected}


def table(content: dict) -> str:
    """The stored rows (``content["rows"]``) as markdown."""
    rows = content["rows"]
    out = ["| source | dtype | strategy | head dim (kv heads) | llama-cpp-python | max \\|Δlogit\\| vs its code | "
           "vs its code read with RMSNorms | limit | greedy | passes |", "|---" * 10 + "|"]
    for r in rows:
        rms = r.get("max_abs_vs_rmsnorm_reading")
        out.append(f"| {r['family']} | {r['dtype']} | {r['strategy']} | {r['head_dim']} ({r['kv_heads']}) | "
                   f"{r['llama_cpp_python']} | {r['max_abs_vs_oracle']:.3g} | {'—' if rms is None else f'{rms:.3g}'} | "
                   f"{r['limit']:.3g} | "
                   f"{'identical' if r['greedy_identical'] else 'differs'} | {'yes' if r['passes'] else 'no'} |")
    return "\n".join(out)


def main() -> int:
    from benchmarks.engines import envs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-dir", type=Path, default=envs.default_root())
    parser.add_argument("--write", action="store_true", help=f"store the results in {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args()
    env = envs.ensure("llama.cpp", args.env_dir)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        tokenizer = Path(work) / "gpt2-tokenizer"
        env.run([WORKERS / "worker_llamacpp.py", "tokenizer", env.llama_src, tokenizer], gguf=True)
        for family, strategy in CASES:
            (Path(work) / f"{family}-{strategy}").mkdir()
            rows.append(case(env, family, strategy, tokenizer, Path(work) / f"{family}-{strategy}"))
            print(f"{family} {strategy}: done", file=sys.stderr)
    print(table({"rows": rows}))
    if args.write:
        RESULTS.write_text(json.dumps(payload(rows), indent=1) + "\n")
    return 0 if all(r["passes"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
