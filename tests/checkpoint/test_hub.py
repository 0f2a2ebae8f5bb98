"""checkpoint.hub: a source by directory or hub id; a download that fails says what happened and what to do in
one line, never the hub library's exception chain."""

import json
import os
import subprocess
import sys

import pytest
from huggingface_hub import errors

from ropebridge.checkpoint import hub


def http(cls, message: str):
    """A hub HTTP error as the library raises it (it wants the response it failed on: a stand-in)."""
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    return exc


@pytest.mark.parametrize("exc, words", [
    (errors.LocalEntryNotFoundError("Got: ConnectError: [Errno -2] Name or service not known"),
     "cannot reach the Hugging Face hub to download owner/model, and it is not in the local cache"),
    (http(errors.RepositoryNotFoundError, "404 Client Error. Repository Not Found for url"),
     "no repository owner/model"),
    (http(errors.GatedRepoError, "401 Client Error. Cannot access gated repo"), "owner/model is a gated repository"),
    (errors.HFValidationError("Repo id must use alphanumeric chars or '-', '_', '.'"), "owner/model is not a hub id"),
    (RuntimeError("disk quota exceeded\nmore"), "cannot download owner/model from the hub: disk quota exceeded"),
])
def test_a_failed_download_is_one_sentence_of_what_to_do(monkeypatch, exc, words):
    import huggingface_hub

    def fail(*args, **kwargs):
        raise exc

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    with pytest.raises(FileNotFoundError) as caught:
        hub.resolve_source("owner/model")
    message = str(caught.value)
    assert message.startswith(words) and "\n" not in message, message
    assert type(exc).__name__ not in message and "Got:" not in message and "Errno" not in message


def test_what_names_nothing_is_refused_before_any_download(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a directory nor a hub id"):
        hub.resolve_source(tmp_path / "absent")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is not a directory"):
        hub.resolve_source(tmp_path / "file")
    assert hub.resolve_source(tmp_path) == tmp_path


@pytest.mark.parametrize("argv",
                         [["convert", "bigscience/bloom-560m", "DST"], ["plan", "--model", "bigscience/bloom-560m"],
                                  ["convert", "a b/c!d", "DST"]])
def test_the_command_says_it_offline_in_one_line(tmp_path, argv):
    # the hub unreachable (offline, as here): convert and plan take hub ids and say what to do, exit 2
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    argv = [str(tmp_path / "dst") if a == "DST" else a for a in argv]
    proc = subprocess.run([sys.executable, "-m", "ropebridge", *argv], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert ("cannot reach the Hugging Face hub" in proc.stderr or "is not a hub id" in proc.stderr), proc.stderr
    assert "Error" not in proc.stderr and not (tmp_path / "dst").exists()


def test_plan_takes_a_hub_id_as_convert_does(tmp_path, monkeypatch, capsys):
    # a hub id in the local cache (the hub unreachable here): plan --model reads it where it said "no config.json"
    import huggingface_hub.constants as constants
    from pico import build

    from ropebridge.cli import main

    cache = tmp_path / "hub"
    entry = cache / "models--owner--bloom"
    build(entry / "snapshots" / ("0" * 40), "bloom-4heads")
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    assert main(["plan", "--model", "owner/bloom", "--window", "256", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["source"] == "owner/bloom" and planned["heads"]
