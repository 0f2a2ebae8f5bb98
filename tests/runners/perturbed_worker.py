"""A test engine: transformers through the job protocol (``run_transformers``), with every log p it answers moved
by ``options["shift"]`` at one scored position (``options["at"]``) and at the first greedy token: an engine whose
numbers are wrong, which ``verify --engine`` must fail; ``shift`` "refuse": an engine that will not run the model."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(sys.argv[0]).resolve().parents[2] / "src" / "ropebridge" / "runners" / "workers"))

import _job  # noqa: E402
import run_transformers  # noqa: E402


def run(job: dict) -> dict:
    options = dict(job["options"])
    if options["shift"] == "refuse":  # an engine that will not run the model
        return {"refused": "ValueError: this engine runs no NemotronForCausalLM"}
    shift, at = float(options.pop("shift")), int(options.pop("at", 0))
    result = run_transformers.run({**job, "options": options})
    if "logprobs" in result:
        result["logprobs"][0][at] += shift
        if result["greedy_logprobs"]:
            result["greedy_logprobs"][0][0] += shift
    return result


if __name__ == "__main__":
    _job.main(run)
