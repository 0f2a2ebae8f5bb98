"""benchmarks/engines' SGLang harness, without SGLang: the server command it runs, the Baichuan-13B source as its hub
repository has it, the table it writes, and what the stored run says: every family's ``--engine sglang`` conversion
served by SGLang in every dtype through both APIs, the sources as SGLang took them, and ``--engine sglang`` never
choosing a target seen run wrong."""

import json
from pathlib import Path

from benchmarks import known
from benchmarks.engines import envs, scoring, sglang_run
from ropebridge.checkpoint.config import from_config
from ropebridge.demo import data_dir
from ropebridge.targets.engines import choose

ROOT = Path(__file__).resolve().parents[2]


PAYLOAD = json.loads(sglang_run.OUT.read_text())


def test_the_server_is_started_as_a_user_types_it():
    env = envs.Env("sglang", Path("/x/bin/python"), None)
    cmd = sglang_run.serve_command(env, Path("/m/demo-sglang-bfloat16"), "bfloat16")
    assert cmd[:5] == ["/x/bin/python", "-m", "sglang.launch_server", "--model-path", "/m/demo-sglang-bfloat16"]
    assert cmd[cmd.index("--dtype") + 1] == "bfloat16" and cmd[cmd.index("--device") + 1] == "cpu"
    assert "--disable-radix-cache" in cmd and "--trust-remote-code" not in cmd
    assert "--trust-remote-code" in sglang_run.serve_command(env, Path("/m/b"), "float16", remote_code=True)


def test_the_offline_api_is_the_package_runner_verify_runs(monkeypatch, tmp_path):
    seen = {}

    def fake(python, worker, job, work, label):
        seen.update(python=python, worker=worker, job=job, label=label)
        log = "Load weight end. elapsed=1 s, type=PersimmonForCausalLM, avail mem=9 GB\n" \
              "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 32768\n"
        return {"logprobs": [-1.0], "greedy": [[5]], "reported_ids": [[[1, 4095, 0]]], "seconds": 3.0, "log": log}

    monkeypatch.setattr(sglang_run, "run_engine", fake)
    env = envs.Env("sglang", Path("/x/bin/python"), None)
    ref = {"ids": [1, 2, 3], "prompts": [[4, 5]]}
    out = sglang_run.worker(env, "offline", Path("/m/demo-sglang"), "bfloat16", ref, tmp_path, remote_code=True)
    assert seen["worker"] == "run_sglang.py" and seen["python"] == Path("/x/bin/python")
    options = seen["job"].options
    assert options["disable_radix_cache"] is True and options["trust_remote_code"] is True
    assert options["max_total_tokens"] == sglang_run.MAX_TOTAL_TOKENS and seen["job"].sequences == ((1, 2, 3),)
    assert out["architecture"] == "PersimmonForCausalLM" and out["dtype"] == "bfloat16"
    assert out["reported_ids"] == [[1, 4095, 0]] and "log" not in out


def test_the_baichuan_source_carries_the_configuration_code_its_hub_repository_has(tmp_path):
    hub = sglang_run.hub_baichuan(data_dir("demo-baichuan"), tmp_path)
    config = json.loads((hub / "config.json").read_text())
    assert config["auto_map"] == {"AutoConfig": "configuration_baichuan.BaichuanConfig"}
    assert "class BaichuanConfig(PretrainedConfig)" in (hub / "configuration_baichuan.py").read_text()
    source = json.loads((data_dir("demo-baichuan") / "config.json").read_text())
    assert {k: v for k, v in config.items() if k != "auto_map"} == source  # the weights and keys unchanged


def _row(**over):
    row = {"model": "demo", "kind": "converted", "dtype": "bfloat16", "api": "serve",
           "architecture": "PersimmonForCausalLM", "served_head_dim": 64, "target": "persimmon", "strategy": "ladder",
           "rotary_dim": 32, "ppl_exact": 19.0, "ppl": 19.5, "ppl_rel": 0.026, "max_abs_dlogp": 1.5,
           "greedy": "identical", "passes": False}
    return {**row, **over}


def test_the_table_lists_a_refusal_once_with_the_runs_it_ended():
    refused = {"model": "demo", "kind": "native", "refused": "ValueError: no BLOOM"}
    text = sglang_run.table({"rows": [{**refused, "dtype": "bfloat16", "api": "offline"},
                                      {**refused, "dtype": "float16", "api": "serve"}, _row()]})
    assert "| BLOOM | the source | bfloat16 offline, float16 serve | | | refused: ValueError: no BLOOM |" in text
    assert text.count("no BLOOM") == 1
    assert ("| BLOOM | persimmon, ladder R = 32 (`PersimmonForCausalLM`) | bfloat16 | serve | 64 | 19.000 → 19.500 "
            "(+2.60%) | 1.5 | identical | no |") in text


def test_every_family_was_served_by_sglang_in_every_dtype_through_both_apis():
    converted = {(r["model"], r["dtype"], r["api"]) for r in PAYLOAD["rows"] if r["kind"] == "converted"}
    assert converted == {(m, d, a) for m in sglang_run.MODELS for d in scoring.DTYPES for a in sglang_run.APIS}
    classes = {"persimmon": "PersimmonForCausalLM", "llama": "LlamaForCausalLM", "stablelm": "StableLmForCausalLM"}
    for r in PAYLOAD["rows"]:
        if r["kind"] == "converted":
            assert not r.get("refused") and r["architecture"] == classes[r["target"]], r
    assert PAYLOAD["sglang"] == "sglang 0.5.23" and PAYLOAD["max_total_tokens"] == sglang_run.MAX_TOTAL_TOKENS


def test_sglang_refused_every_source_here_and_said_why():
    said = {(r["model"], r["api"]): r["refused"] for r in PAYLOAD["rows"] if r["kind"] == "native"}
    assert {m for m, _ in said} == set(sglang_run.MODELS)
    for api in sglang_run.APIS:  # its Baichuan-13B creates its ALiBi slopes on "cuda" while it is built
        assert "NVIDIA driver" in said[("demo-baichuan", api)]


def test_sglang_is_never_chosen_onto_a_target_it_was_seen_to_run_wrong():
    for r in PAYLOAD["rows"]:
        if r["kind"] != "converted":
            continue
        info = from_config(data_dir(r["model"]))
        if not r["passes"]:
            assert choose(info, "sglang").target != r["target"], r
        elif r["dtype"] != "float32":
            assert known.mark(info.family, False, r["target"], "sglang").startswith("run: ≤ ")
