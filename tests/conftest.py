"""Suite-wide test setup: the integration modules share one worker under pytest-xdist.

``make test`` runs ``pytest -n 2 --dist loadgroup``: the unit tests spread over both workers while
every integration test (marked ``integration``) goes to one worker, in one group, so the session's
local stack is started and the project deployed once, as in a run without xdist.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.xdist_group("local-stack"))
