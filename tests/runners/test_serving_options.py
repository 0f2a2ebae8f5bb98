"""runners.serving_options: the engines' serving options as data."""

import pytest

from ropebridge.runners import RUNNERS
from ropebridge.runners.jobs import WORKERS
from ropebridge.runners.serving_options import Option, flags


def test_every_runner_names_a_worker_that_exists_and_a_flag_is_one_option():
    for runner in RUNNERS.values():
        assert (WORKERS / runner.worker).is_file(), runner.worker
        assert runner.loads in ("checkpoint", "gguf")
    table = flags()  # asserts that runners sharing a flag share its key and kind
    assert sum(len(r.options) for r in RUNNERS.values()) == sum(len(takers) for takers in table.values())
    assert all(flag.startswith("--") and flag[2:].replace("-", "_") == o.key
               for flag, takers in table.items() for _, o in takers)
    assert [r.name for r, _ in table["--kv-cache-dtype"]] == ["transformers", "vllm", "sglang"]


def test_each_engine_names_its_own_kv_caches():
    """vLLM's fp8 is e4m3 under its own name; SGLang names only fp8_e4m3 and its bf16 spelling."""
    caches = {r.name: o.choices for r, o in flags()["--kv-cache-dtype"]}
    assert "fp8" in caches["vllm"] and "fp8" not in caches["sglang"]
    assert {"bf16", "fp8_e4m3", "fp8_e5m2"} <= set(caches["sglang"]) and "bf16" not in caches["vllm"]


@pytest.mark.parametrize("option, value, message", [
    (Option("k", "--k", int, "", low=16), 8, "--k must be >= 16"),
    (Option("k", "--k", int, ""), 1.5, "--k must be an integer"),
    (Option("k", "--k", float, ""), float("inf"), "--k must be finite"),
    (Option("k", "--k", str, "", ("a", "b")), "c", "--k must be one of a, b"),
    (Option("k", "--k", str, ""), "", "--k must be a non-empty string"),
    (Option("k", "--k", bool, ""), 1, "--k is on or off"),
])
def test_an_option_refuses_a_value_naming_its_flag(option, value, message):
    with pytest.raises(ValueError, match=message):
        option.check(value)
    assert Option("k", "--k", int, "", low=16).check(16) == 16 and Option("k", "--k", bool, "").check(False) is False
