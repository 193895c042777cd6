"""A bounded fuzz run over every reader, the judge, the launcher/pre-flight, the configs, template values
and redaction (the long campaign is bench/fuzz_campaign.py). Inputs are arbitrary bytes and mutations of
a valid seed; the targets (tests/fuzz_targets.py) fail on anything but the documented error."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_targets import ALL_SEEDS, TARGETS, mutate

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
SLOW = {"full_check": 8, "mlflow_sqlite": 15, "judge": 15, "textlog": 20, "run_config": 20}


def _inputs(name: str) -> st.SearchStrategy[bytes]:
    seed = ALL_SEEDS[name]()
    mutated = st.integers(0, 2**32).map(lambda n: mutate(random.Random(n), seed))
    return st.one_of(mutated, st.binary(max_size=3000), st.just(seed))


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_no_input_escapes(name: str) -> None:
    target = TARGETS[name]

    @settings(max_examples=min(EXAMPLES, SLOW.get(name, EXAMPLES)), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=_inputs(name))
    def run(data: bytes) -> None:
        with tempfile.TemporaryDirectory() as folder:
            target(data, Path(folder))  # raises fuzz_targets.Escape on anything undocumented

    run()
