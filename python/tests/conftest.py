"""Shared fixtures: the bundled trace and the C++ results on it (tests/golden.cpp)."""

import json
import os
import pathlib
import subprocess

import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("MOEPOLICY_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BUNDLED = SOURCE_DIR / "examples" / "traces" / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace"


@pytest.fixture(scope="session")
def trace_path():
    return BUNDLED


@pytest.fixture(scope="session")
def trace():
    import moepolicy

    return moepolicy.read_trace(BUNDLED)


@pytest.fixture(scope="session")
def golden():
    """What the C++ library computes on the bundled trace (python_golden, built beside the module)."""
    exe = os.environ.get("MOEPOLICY_GOLDEN")
    if not exe or not os.path.exists(exe):
        pytest.skip("python_golden not found: run through ctest (MOEPOLICY_GOLDEN names the program)")
    out = subprocess.run([exe, str(BUNDLED)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)
