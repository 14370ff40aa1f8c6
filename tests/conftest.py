"""Suite-wide test setup: the integration modules run on two pytest-xdist workers, a local stack each.

``make test`` runs ``pytest -n 3 --dist loadgroup``. The integration tests (marked ``integration``)
are split by module into two xdist groups; each group runs on one worker, whose session fixtures
(tests/integration/conftest.py) start one local stack and deploy the project once for every module
of the group. The unit tests go to the third worker from the start, and to the other two as they
finish their groups. Why two stacks: the integration modules spend much of their time waiting on the
stack (process starts, polling, one shard at a time), so one worker's stack left a core idle for
most of the run; a second stack costs one more start and deploy (about a minute) and lets both cores
work. Why a third worker: the unit tests (CPU-bound, about four minutes of it) then fill the time the
two stacks wait instead of running after both groups. The groups are balanced by the modules'
measured durations (``--durations`` in every run); a module not listed goes to the first group.
Without xdist (``pytest tests/integration``) every module shares one stack, as before.
"""

from __future__ import annotations

import pytest

#: Integration modules of the second group (the first takes the others): the slow modules that
#: start LocalStacks of their own (faults, restart), the GPU worker's, and the train jobs'.
#: (test_sharing_on_stack.py, moved here to balance the groups on 2026-11-28, failed in one of two
#: runs beside them: a listing of its jobs' partitions summed over the capacity; it stays first.)
SECOND_STACK_MODULES = frozenset(
    {
        "test_faults.py",
        "test_restart_on_stack.py",
        "test_train_mlp_on_stack.py",
        "test_batch_pipeline.py",
        "test_train_resume_on_stack.py",
        "test_local_stack.py",
    }
)


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the mark into the node id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("integration"):
            second = item.path.name in SECOND_STACK_MODULES
            item.add_marker(pytest.mark.xdist_group("local-stack-2" if second else "local-stack-1"))
