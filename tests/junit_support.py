"""Jenkins' JUnit XML schema (junit-10.xsd, MIT), the one CI systems read: `make junit-schema` takes it from pytest's
source distribution on PyPI (pinned) into `.cache/junit`; the tests that validate `--junit` reports skip without it."""

from __future__ import annotations

import functools

import pytest
from lxml import etree

from tests.conftest import REPO

JUNIT_XSD = REPO / ".cache" / "junit" / "junit-10.xsd"


@functools.cache
def _schema() -> etree.XMLSchema:
    return etree.XMLSchema(etree.parse(str(JUNIT_XSD)))


def assert_valid(root: etree._Element) -> None:
    """The report's root is what the JUnit schema allows."""
    if not JUNIT_XSD.exists():
        pytest.skip(f"the JUnit XML schema is not installed ({JUNIT_XSD}): make junit-schema fetches it from PyPI")
    schema = _schema()
    assert schema.validate(root), schema.error_log
