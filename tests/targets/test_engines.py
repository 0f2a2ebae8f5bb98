"""The engines table: what each engine runs, the target --engine takes per family, and the refusals."""

import dataclasses
from types import SimpleNamespace

import pytest
from pico import build

from ropebridge.checkpoint.config import FAMILIES
from ropebridge.cli import main
from ropebridge.emulation import PlanRequest
from ropebridge.targets import TARGETS
from ropebridge.targets.engines import choose, describe, family_forms, per_family, support
from ropebridge.targets.support import COLUMNS, ENGINES, KINDS


def _form(family, block="layernorm", parallel=False):
    return SimpleNamespace(family=family, block=block, parallel=parallel)


def test_every_target_has_a_row_for_every_engine():
    for target in TARGETS.values():
        assert set(ENGINES) <= set(target.support) == set(COLUMNS), target.name
        assert all(s.kind in KINDS for s in target.support.values())


def test_a_target_row_without_every_engine_is_refused():
    import dataclasses

    row = TARGETS["gpt-neox"]
    with pytest.raises(ValueError, match="target gpt-neox: support must name every engine column"):
        dataclasses.replace(row, support={k: v for k, v in row.support.items() if k != "vllm"})


def test_where_a_target_runs_is_said_from_its_support():
    assert TARGETS["llama"].engines.startswith("transformers 5.x, transformers 4.57, vLLM 0.34.0, SGLang 0.5.23")
    assert TARGETS["gpt-neox"].engines.endswith("; through their Transformers backends: vLLM 0.34.0, SGLang 0.5.23")
    assert TARGETS["stablelm"].engines.endswith("; through its Transformers backend: vLLM 0.34.0")


@pytest.mark.parametrize("family, block, parallel, engine, target, kind", [
    ("bloom", "layernorm", False, "vllm", "nemotron", "native"),
    ("bloom", "layernorm", False, "sglang", "persimmon", "native"),
    ("bloom", "layernorm", False, "transformers", "gpt-neox", "native"),
    ("falcon", "layernorm", True, "vllm", "gpt-neox", "backend"),  # only gpt-neox carries a parallel residual
    ("baichuan", "rmsnorm-gated", False, "trtllm", "llama", "native"),
    ("jais", "layernorm-gated", False, "vllm", "stablelm", "backend"),  # vLLM 0.34: StableLM on the backend
    ("jais", "layernorm-gated", False, "sglang", "stablelm", "native"),
])
def test_the_engine_takes_the_target_it_runs_natively_else_its_backends(family, block, parallel, engine, target,
                                                                        kind):
    choice = choose(_form(family, block, parallel), engine)
    assert (choice.target, choice.kind) == (target, kind)
    assert TARGETS[choice.target].carries(_form(family, block, parallel))
    assert ("Transformers backend" in choice.sentence) == (kind == "backend")


@pytest.mark.parametrize("engine", list(ENGINES))
def test_for_every_family_form_the_engine_gets_a_native_target_wherever_one_carries_it(engine):
    from ropebridge.targets.engines import family_forms

    for label, form in family_forms():
        carriers = [t for t in TARGETS if TARGETS[t].carries(form)]
        kinds = {support(t, engine).kind for t in carriers}
        if kinds == {"none"}:
            with pytest.raises(ValueError, match=f"--engine {engine}: "):
                choose(form, engine)
            continue
        choice = choose(form, engine)
        assert choice.target in carriers, (label, engine)
        assert choice.kind == ("native" if "native" in kinds else "backend"), (label, engine)


def test_an_engine_that_runs_no_form_of_the_family_is_refused_naming_the_carriers():
    with pytest.raises(ValueError, match="--engine trtllm: .* runs no target that carries this bloom model "
                                         r"\(gpt-neox, starcoder2, nemotron, persimmon carry it"):
        choose(_form("bloom"), "trtllm")


def test_the_per_family_table_has_every_form_and_names_natives_first():
    rows = dict(per_family())
    assert len(rows) == len(family_forms())
    assert rows["Jais, BTLM (stablelm)"]["vllm"] == "none natively; backend: stablelm"
    assert rows["BLOOM, BLOOMZ, Poro (gpt-neox)"]["vllm"].startswith("nemotron; backend: gpt-neox")


def test_the_request_takes_the_engines_kernel_and_refuses_a_target_it_does_not_run():
    from ropebridge.checkpoint.config import from_heads
    from ropebridge.emulation import resolve

    kernel = lambda **kw: resolve(from_heads(4, 64), PlanRequest(dtype="bfloat16", **kw)).kernel  # noqa: E731
    assert kernel(engine="trtllm", target="llama") == "trtllm" and kernel(engine="vllm") == "vllm-cpu"
    assert kernel(engine="trtllm", kernel="fa3", target="llama") == "fa3" and kernel() == "any"
    assert PlanRequest(engine="vllm", target="gpt-neox").target == "gpt-neox"  # its backend runs it
    with pytest.raises(ValueError, match="--engine vllm: vLLM 0.34.0 does not run --target persimmon"):
        PlanRequest(engine="vllm", target="persimmon")
    with pytest.raises(ValueError, match="engine must be one of"):
        PlanRequest(engine="tgi")
    assert "engine" not in PlanRequest().to_dict() and PlanRequest(engine="vllm").to_dict()["engine"] == "vllm"


def test_convert_and_plan_with_engine_take_and_name_the_target(tmp_path, capsys):
    src = build(tmp_path / "src", "bloom-4heads")
    assert main(["plan", "--model", str(src), "--engine", "vllm", "--window", "256"]) == 0
    out = capsys.readouterr().out
    assert "target nemotron (NemotronForCausalLM)" in out and "--engine vllm: vLLM 0.34.0 runs nemotron natively" in out
    dst = tmp_path / "dst"
    assert main(["convert", str(src), str(dst), "--engine", "sglang", "--window", "256", "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert "--engine sglang: SGLang 0.5.23 runs persimmon natively" in out
    assert "SGLang 0.5.23 (measured with sglang 0.5.23): `--kv-cache-dtype` auto, bfloat16, bf16 hold; fp8_e4m3, " \
           "fp8_e5m2 break this plan" in out
    assert "SGLang: python -m sglang.launch_server" in out.strip().splitlines()[-1]
    assert main(["verify", str(src), str(dst), "--context", "64", "--greedy-tokens", "0"]) == 0  # re-derived alike
    capsys.readouterr()
    assert main(["convert", str(src), str(tmp_path / "t"), "--engine", "trtllm", "--window", "256"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runs no target that carries this bloom model" in err[0]
    assert not (tmp_path / "t").exists()
    assert describe("stablelm", "vllm") == "vLLM 0.34.0 runs stablelm through its Transformers backend"


def test_float32_on_a_kernel_that_does_not_run_the_single_pairs_head_takes_the_float32_ladder():
    # Baichuan-13B's 40 heads of 128 on llama: the opposed pairs give 132, which neither MMHA nor vLLM's CPU
    # attention runs; the ladder planned for float32 takes 160, which both run; the single pair asked for is refused
    from ropebridge.checkpoint.config import from_heads
    from ropebridge.emulation import plan

    source = from_heads(40, 128, "baichuan")
    for engine in ("trtllm", "vllm"):
        exact = plan(source, PlanRequest(engine=engine, target="llama", dtype="float32", window=4096))
        assert (exact.strategy, exact.dtype, exact.head_dim + exact.rotary_dim) == ("ladder", "float32", 160)
        assert exact.meets_tolerance and exact.tolerance == 1e-3
        with pytest.raises(ValueError, match="head dim 132, which --kernel .* does not run .*the single strategy "
                                             "fixes the head dim at 132; leave out --strategy"):
            plan(source, PlanRequest(engine=engine, target="llama", dtype="float32", window=4096, strategy="single"))
    assert plan(source, PlanRequest(target="llama", dtype="float32", window=4096)).strategy == "single"  # any kernel
    half = plan(source, PlanRequest(engine="trtllm", target="llama", dtype="bfloat16", window=4096))
    assert half.head_dim + half.rotary_dim == 160


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("family", tuple(FAMILIES))
def test_every_plan_for_vllm_serves_a_head_size_its_cpu_attention_runs(family, dtype):
    """Nothing ``--engine vllm`` writes fails to load in vLLM: at the families' real head dims (32 for the demos, 64,
    80, 128) the served head dim is one of vLLM's CPU attention sizes (which its GPU backends run too), in every
    dtype; float32 takes the ladder where the single pair's hd + 2 or hd + 4 is not one of them."""
    from ropebridge.checkpoint.config import from_heads
    from ropebridge.emulation import plan
    from ropebridge.targets.kernels import VLLM_CPU

    for heads, hd in ((6, 32), (16, 64), (32, 80), (40, 128)):
        source = from_heads(heads, hd, family)
        request = PlanRequest(engine="vllm", dtype=dtype, window=2048)
        target = TARGETS[choose(source, "vllm").target]
        p = plan(source, dataclasses.replace(request, target=target.name))
        served = target.served_head_dim(p.head_dim, p.rotary_dim, p.strategy)
        assert served in VLLM_CPU, (family, hd, dtype, p.strategy, served)
        assert p.meets_tolerance, (family, hd, dtype, p.worst_head.predicted_error)


@pytest.mark.parametrize("name", ["demo", "demo-mpt", "demo-falcon", "demo-baichuan", "demo-jais"])
def test_convert_for_vllm_writes_a_head_dim_vllm_runs_in_every_dtype(tmp_path, capsys, name):
    """The embedded models converted with ``--engine vllm``: the config's head dim (``head_dim``, or hidden / heads on
    the padded stream) is one vLLM's CPU attention runs; float32 says in one line why it takes the ladder."""
    import json

    from ropebridge.demo import data_dir
    from ropebridge.targets.kernels import VLLM_CPU

    for dtype in ("float32", "bfloat16", "float16"):
        dst = tmp_path / f"{name}-{dtype}"
        assert main(["convert", str(data_dir(name)), str(dst), "--engine", "vllm", "--dtype", dtype,
                     "--window", "2048"]) == 0
        out = capsys.readouterr().out
        config = json.loads((dst / "config.json").read_text())
        head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        assert head_dim in VLLM_CPU, (name, dtype, head_dim)
        assert ("float32 takes the ladder planned for float32: the single pair would serve head dim" in out) == (
            dtype == "float32"), out


def test_the_float32_ladder_on_vllm_takes_the_ladders_options_and_the_single_pair_refuses_them(capsys):
    """Where the source decides the float32 strategy (a kernel that may not run the single pair's head), the
    ladder's options are checked against the strategy resolved for it, not against the single pair's."""
    from ropebridge.demo import data_dir

    for flags in (["--rotary-dim", "32"], ["--floor", "60"]):
        assert main(["plan", "--model", str(data_dir()), "--engine", "vllm", "--dtype", "float32", "--window",
                     "2048", *flags]) == 0, flags
        assert "float32 takes the ladder planned for float32" in capsys.readouterr().out
    assert main(["plan", "--model", str(data_dir()), "--dtype", "float32", "--window", "2048", "--floor", "60"]) == 2
    assert "--floor and --calibration-text are for --strategy ladder" in capsys.readouterr().err  # any kernel: single
