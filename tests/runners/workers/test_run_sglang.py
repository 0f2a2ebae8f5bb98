"""runners/workers/run_sglang: what can be checked without SGLang (the suite runs without it; the engine benchmarks
run SGLang itself in its own environment): the worker, run against a stand-in ``sglang`` module that records what it
is given, builds the engine as ``--device cpu`` does without a GPU, makes room for a job longer than the model's
window, and takes the log-probabilities by position."""

import json
import sys
from pathlib import Path

from ropebridge.runners import Job, launch

FAKE = '''
import json, os
__version__ = "0.5.23"

class Engine:
    def __init__(self, **kwargs):
        kwargs["env"] = os.environ.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN")
        kwargs["binds"] = os.environ.get("SGLANG_CPU_OMP_THREADS_BIND")
        open(os.environ["FAKE_SGLANG_RECORD"], "w").write(json.dumps(kwargs))

    def generate(self, input_ids, return_logprob, logprob_start_len, sampling_params):
        if isinstance(input_ids[0], list):  # a batch: one output each
            return [self.generate(s, return_logprob, logprob_start_len, sampling_params) for s in input_ids]
        n = sampling_params["max_new_tokens"]
        # as SGLang 0.5.23 does for the vocabulary's last id, it names token 0 beside the log p of token 4
        given = [[None, input_ids[0], None]] + [[-t / 10, 0 if t == 4 else t, None] for t in input_ids[1:]]
        return {"output_ids": [5] * n, "meta_info": {"input_token_logprobs": given + [[-9.0, 0, None]],
                                                       "output_token_logprobs": [[-0.25, 5, None]] * n}}

    def get_server_info(self):
        return {"kv_cache_dtype": "auto", "attention_backend": "torch_native", "device": "cpu",
                "max_total_num_tokens": 32768, "tp_size": 1}

    def shutdown(self):
        pass
'''


def test_the_worker_builds_sglang_as_a_cpu_server_does_and_reads_log_probabilities_by_position(tmp_path):
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text(FAKE)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 16}))
    record = tmp_path / "record.json"
    job = Job(model=str(model), dtype="bfloat16", max_model_len=12, sequences=[[1, 2, 3, 4], [7, 8]], prompts=[[1, 2]],
              greedy_tokens=3, options={"attention_backend": "torch_native"})
    result = launch(sys.executable, "run_sglang.py", job,
                    env={"PYTHONPATH": str(tmp_path), "FAKE_SGLANG_RECORD": str(record)})
    built = json.loads(record.read_text())
    assert built["model_path"] == str(model) and built["dtype"] == "bfloat16"
    assert built["device"] == "cpu" and built["max_total_tokens"] == 32768  # no GPU here: SGLang's CPU path
    assert built["context_length"] == 18 and built["env"] == "1"  # 12 tokens need a window of 12 + 6
    assert built["attention_backend"] == "torch_native"
    assert [list(x) for x in result.logprobs] == [[-0.2, -0.3, -0.4], [-0.8]]  # log p of ids[1:], not of what follows
    assert built["binds"] is None  # one rank: SGLang's own binding
    assert result.facts["reported_ids"] == [[[3, 4, 0]], []]  # position 3's id 4, reported as 0
    assert [list(x) for x in result.greedy] == [[5, 5, 5]]
    assert [list(x) for x in result.greedy_logprobs] == [[-0.25, -0.25, -0.25]]
    assert result.facts["engine"] == "sglang 0.5.23" and result.facts["device"] == "cpu"

    # two ranks on a CPU: the cores split between them, as SGLang asks where a machine has one NUMA node
    job = Job(model=str(model), dtype="bfloat16", max_model_len=12, sequences=[[1, 2, 3, 4]], prompts=[],
              greedy_tokens=0, options={"tp_size": 2})
    launch(sys.executable, "run_sglang.py", job, env={"PYTHONPATH": str(tmp_path), "FAKE_SGLANG_RECORD": str(record)})
    built = json.loads(record.read_text())
    assert built["tp_size"] == 2 and built["binds"] and built["binds"].count("|") == 1


def test_the_worker_is_in_the_runners_table():
    from ropebridge.runners import RUNNERS

    assert RUNNERS["sglang"].worker == "run_sglang.py" and Path(RUNNERS["sglang"].worker).suffix == ".py"
