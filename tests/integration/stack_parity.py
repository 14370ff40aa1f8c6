"""What the integration tests of fanfit's DoubleML classes share: the check that a class fitted on
the stack equals DoubleML's in-process fit (test_apo_on_stack.py, test_ssm_on_stack.py).

Imported by name (``from stack_parity import ...``): pytest puts tests/integration on ``sys.path``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Relative tolerance of the stack's numbers against DoubleML's (issue 16: parity at 1e-9).
RTOL = 1e-9


def assert_stack_fit_is_doublemls(ours: Any, theirs: Any, model: str, seed: int = 31) -> None:
    """Assert that ``ours`` (fitted on the stack) ran ``model`` and equals ``theirs`` (DoubleML's,
    fitted in-process): coef, se, confint, the normal bootstrap's joint intervals from the same
    global ``seed`` and every nuisance loss, each to :data:`RTOL`."""
    assert ours.fanfit_result.model == model
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.confint(), theirs.confint(), rtol=RTOL)
    np.random.seed(seed)
    ours.bootstrap(method="normal", n_rep_boot=200)
    np.random.seed(seed)
    theirs.bootstrap(method="normal", n_rep_boot=200)
    np.testing.assert_allclose(ours.confint(joint=True), theirs.confint(joint=True), rtol=RTOL)
    for key, loss in theirs.nuisance_loss.items():
        np.testing.assert_allclose(ours.nuisance_loss[key], loss, rtol=RTOL, err_msg=key)
