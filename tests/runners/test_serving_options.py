"""runners.serving_options: the engines' serving options as data."""

import pytest

from ropebridge.runners import RUNNERS
from ropebridge.runners.jobs import WORKERS
from ropebridge.runners.serving_options import Option, flags


def test_every_runner_names_a_worker_that_exists_and_a_flag_is_one_option():
    for runner in RUNNERS.values():
        assert (WORKERS / runner.worker).is_file(), runner.worker
        assert runner.loads in ("checkpoint", "gguf")
    table = flags()  # asserts that two runners share a flag only as one option
    assert sum(len(r.options) for r in RUNNERS.values()) == sum(len(runners) for _, runners in table.values())
    assert all(flag.startswith("--") and flag[2:].replace("-", "_") == o.key for flag, (o, _) in table.items())
    assert [r.name for r in table["--kv-cache-dtype"][1]] == ["transformers", "vllm"]


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
