from __future__ import annotations

import os

import pytest
from hypothesis import settings

from kaas.testing import BrokerProcess

settings.register_profile("ci", max_examples=60, deadline=None)
settings.register_profile("deep", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("KAAS_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def broker(tmp_path):
    """A fresh single broker on a free port and a temporary data directory."""
    with BrokerProcess(tmp_path / "data").running() as b:
        yield b


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker shared by the tests of a module (they use distinct topic names)."""
    with BrokerProcess(tmp_path_factory.mktemp("shared") / "data", extra=["--num-partitions", "1"]).running() as b:
        yield b
