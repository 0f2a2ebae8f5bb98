import logging

import pytest
import torch

torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _quiet_transformers():
    logging.getLogger("transformers").setLevel(logging.ERROR)
    yield


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """``ropebridge demo --out demo-out`` as the README runs it (default context), in a temporary directory:
    (report, the output directory)."""
    import os

    from ropebridge.demo import run_demo

    work = tmp_path_factory.mktemp("demo")
    here = os.getcwd()
    os.chdir(work)
    try:
        report = run_demo("demo-out")
    finally:
        os.chdir(here)
    return report, work / "demo-out"


@pytest.fixture(scope="session")
def demo_report_lines(demo_run):
    from ropebridge.cli.demo_cmd import format_report

    return format_report(demo_run[0])


@pytest.fixture(scope="session")
def bloom(tmp_path_factory):
    """A pico BLOOM of 4 heads (``pico.build``), shared by the tests that only read it."""
    from pico import build

    return build(tmp_path_factory.mktemp("bloom4") / "bloom", "bloom-4heads")
