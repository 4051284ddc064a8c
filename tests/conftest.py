from __future__ import annotations

import os

from hypothesis import settings

from tests.fixtures import broker_fixture

settings.register_profile("ci", max_examples=60, deadline=None)
settings.register_profile("deep", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("KAAS_HYPOTHESIS_PROFILE", "ci"))

broker = broker_fixture(doc="A fresh single broker on a free port and a temporary data directory.")
shared_broker = broker_fixture(scope="module", name="shared", extra=["--num-partitions", "1"],
                               doc="One broker shared by the tests of a module (they use distinct topic names).")
