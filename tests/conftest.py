"""Shared test configuration: where the out-of-repo reference data lives.

The spec, recordings and goldens are not part of this repository (they must
never be copied into it). They are looked up in exactly one place, here:
`$BBRIDGE_SHARED` when set, else `<repo>/../shared`. Tests that need them call
`shared_path(...)` (usable at collection time, e.g. for parametrization) or
use the `shared` fixture, and skip with a clear reason when the data is absent,
so a fresh clone without ../shared still passes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Property tests run Hypothesis's default 100 examples each; `make soak` loads this profile
# (--hypothesis-profile=soak, applied by Hypothesis's plugin before the test modules are imported): 10^5 each.
settings.register_profile(
    "soak", max_examples=100_000, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
# The soak at 2,000 examples each, to measure its per-example costs in minutes: `pytest -p no:xdist --durations=0
# --hypothesis-profile=soak-sample --hypothesis-show-statistics tests/test_properties*.py` (durations / 2,000).
settings.register_profile("soak-sample", settings.get_profile("soak"), max_examples=2_000)

REPO = Path(__file__).resolve().parent.parent
SHARED_ENV = "BBRIDGE_SHARED"


def shared_root() -> Path:
    """The shared-data root (it may not exist)."""
    env = os.environ.get(SHARED_ENV)
    return Path(env).resolve() if env else (REPO.parent / "shared").resolve()


def shared_path(*parts: str) -> Path | None:
    """`<shared>/<parts...>` when it exists, else None."""
    path = shared_root().joinpath(*parts)
    return path if path.exists() else None


def missing_reason(*parts: str) -> str:
    where = shared_root().joinpath(*parts)
    return f"shared reference data not found: {where} (set ${SHARED_ENV} or place it at <repo>/../shared)"


def require_shared(*parts: str) -> Path:
    """`<shared>/<parts...>`, or skip the calling test when it is absent."""
    path = shared_path(*parts)
    if path is None:
        pytest.skip(missing_reason(*parts))
    return path


@pytest.fixture(scope="session")
def shared() -> Path:
    """The shared-data root; skips the test when it is absent."""
    return require_shared()


@pytest.fixture(scope="session")
def spec_path() -> Path:
    return require_shared("spec", "assembler.md")


@pytest.fixture(scope="session")
def recordings_root() -> Path:
    return require_shared("recordings")


@pytest.fixture(scope="session")
def golden_root() -> Path:
    return require_shared("golden")


@pytest.fixture(scope="session")
def cases_path() -> Path:
    return require_shared("golden", "synthetic", "cases.ndjson")


@pytest.fixture
def recording(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Record mode on for this process's provider lanes (the kit's recorder), into `tmp_path`."""
    from bbridge import kit

    monkeypatch.setenv("BB_PROVIDER_BRIDGE_RECORD_DIR", f"  {tmp_path}  ")
    kit.process_recorder.cache_clear()
    yield tmp_path
    recorder = kit.process_recorder()
    if recorder is not None:
        recorder.close()
    kit.process_recorder.cache_clear()
