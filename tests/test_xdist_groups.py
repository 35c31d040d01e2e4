"""The xdist groups of tests/conftest.py: under ``make test`` (two xdist workers) the tests that
share an expensive fixture stay on one worker. Checked over every test of this session (the
whole suite under ``make test``), with this module's own module-scoped fixture so that the
check never runs on nothing."""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.conftest import shares_a_module_fixture


@pytest.fixture(scope="module")
def module_resource() -> object:
    """A module-scoped fixture: the tests using it must share one xdist worker."""
    return object()


def test_a_module_fixture_user(module_resource: object) -> None:
    assert module_resource is not None


def group_of(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    return None if marker is None else marker.args[0]


def test_tests_sharing_an_expensive_fixture_share_an_xdist_group(
    request: pytest.FixtureRequest,
) -> None:
    items = request.session.items
    by_module: dict[str, set[str | None]] = defaultdict(set)
    for item in items:
        by_module[item.module.__name__].add(group_of(item))
    assert by_module[__name__] == {__name__}
    for item in items:
        group = group_of(item)
        if "spark" in item.fixturenames:
            assert group == "spark", item.nodeid
        elif shares_a_module_fixture(item):
            assert group is not None, item.nodeid
        # a module's tests are grouped all alike: none, or all in one group
        assert by_module[item.module.__name__] == {group}, item.nodeid
