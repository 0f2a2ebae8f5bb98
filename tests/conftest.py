import logging
import os

import pytest
import torch

torch.manual_seed(0)
if os.environ.get("PYTEST_XDIST_WORKER"):  # one torch thread per test worker: the workers share the cores
    torch.set_num_threads(1)

DEMO_FIXTURES = {"demo_run", "demo_report_lines"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups from the marks
def pytest_collection_modifyitems(config, items):
    """The tests that read the session's demo run form one group (``pytest -n``'s ``--dist loadgroup`` runs them
    on one worker, so the demo runs once) and come first, so the longest unit starts first."""
    demo = [item for item in items if DEMO_FIXTURES & set(getattr(item, "fixturenames", ()))]
    for item in demo:
        item.add_marker(pytest.mark.xdist_group("demo"))
    grouped = set(demo)
    items[:] = demo + [item for item in items if item not in grouped]


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
