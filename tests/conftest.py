import logging

import pytest
import torch

torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _quiet_transformers():
    logging.getLogger("transformers").setLevel(logging.ERROR)
    yield
