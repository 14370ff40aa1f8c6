"""DoubleML's partially linear panel regression (DoubleMLPLPR) on a fanfit stack.

DoubleML 0.11.4's ``DoubleMLPLPR`` (``doubleml/plm/plpr.py``; Clarke and Polselli 2025, "Double
machine learning for static panel models with fixed effects", Econometrics Journal) transforms
the panel itself at construction (``data_transform``, ``transform_cols``): correlated random
effects (``'cre_general'``, ``'cre_normal'``: the unit means of the covariates added as
covariates), first differences (``'fd_exact'``: outcome and treatment differenced, the lagged
covariates added) or within-group demeaning (``'wg_approx'``). It then runs a partially linear
regression on the transformed data, clustered by unit (``DoubleMLPanelData`` with
``static_panel=True`` makes ``id_col`` the cluster column, so its sample splitting puts every
row of a unit into one fold).

:class:`DoubleMLPLPR` sends exactly that transformed data, with DoubleML's cluster folds
(``smpls``), to a ``plr`` job clustered by ``id_col``; the job's out-of-fold predictions go back
to DoubleML's own ``fit(external_predictions=...)``, so summary, confint and bootstrap are
DoubleML's (DoubleML 0.11.4's bootstrap raises ``NotImplementedError`` on clustered data, and
so does this class's). Re-exported by :mod:`fanfit.client.doubleml` and :mod:`fanfit`
(``fanfit.DoubleMLPLPR``).

``approach='cre_normal'``: DoubleML fits ``ml_m`` on the covariates *and the unit mean of the
treatment* (``np.column_stack((x, d_mean))``), and ``ml_l`` (and ``ml_g``) on the covariates
alone; the job gets the unit means as columns (``d_mean_cols``: the registry's PLR ``ml_m``
then has ``Nuisance.features='xm'``).

``approach='cre_general'``: DoubleML fits ``ml_m`` on the covariates and their unit means
(the transformed data) and adjusts its predictions by unit,
:math:`\\hat m^*_{it} = \\hat m_{it} + \\bar D_i - \\overline{\\hat m}_i` (``_nuisance_est`` of
``plpr.py``), before the IV-type score's preliminary estimate and the score. The job does the
same (``d_mean_cols`` with ``approach='cre_general'``: :func:`fanfit.dml.scores.plm_irm.
cre_general_adjustment` in the registry's PLR score), so its second stage fits ``ml_g`` on
DoubleML's target and its coef and se are DoubleML's; it returns ``ml_m``'s predictions as
fitted, and the client adjusts them before handing them to DoubleML, which skips the adjustment
for external predictions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from fanfit import errors
from fanfit.client.doubleml.base import (
    _check_arguments,
    _estimator,
    _learner_spec,
    _OnStack,
    _placeholder,
    _unsupported,
)
from fanfit.client.doubleml.plm import DoubleMLPLR
from fanfit.dml.interop import import_doubleml
from fanfit.dml.scores.plm_irm import cre_general_adjustment
from fanfit.dml.spec import CRE_APPROACHES

import_doubleml()  # without DoubleML: MissingDependencyError, with the pip command
import doubleml as _doubleml  # noqa: E402 - after the check that names the extra

__all__ = ["DoubleMLPLPR"]

#: The approaches a ``plr`` job carries (DoubleML's ``valid_approach``).
APPROACHES = ("cre_general", "cre_normal", "fd_exact", "wg_approx")


def _plpr_data(obj_dml_data: Any) -> Any:
    """``obj_dml_data`` checked to be a DoubleMLPanelData with ``static_panel=True``.

    Raises
    ------
    fanfit.errors.InvalidDataError
        Anything else, or a panel without ``static_panel=True``.
    """
    if not isinstance(obj_dml_data, _doubleml.data.DoubleMLPanelData):
        raise errors.InvalidDataError(
            "DoubleMLPLPR needs obj_dml_data as a doubleml.data.DoubleMLPanelData (long format "
            f"with y_col, d_cols, t_col, id_col and static_panel=True), got "
            f"{type(obj_dml_data).__name__}"
        )
    if not obj_dml_data.static_panel:
        raise errors.InvalidDataError(
            "DoubleMLPLPR needs a DoubleMLPanelData built with static_panel=True (it clusters "
            "by id_col)"
        )
    return obj_dml_data


class _CREAdjusted:
    """Between fanfit's ``fit`` and DoubleML's: the ``'cre_general'`` adjustment of ``ml_m``."""

    _approach: str
    _d_mean: Any
    _dml_data: Any

    def fit(self, *args: Any, external_predictions: Any = None, **kwargs: Any) -> Any:
        if self._approach == "cre_general" and external_predictions is not None:
            ids = np.asarray(self._dml_data.id_var)
            adjusted = {}
            for j, (d_col, preds) in enumerate(external_predictions.items()):
                m_hat = np.asarray(preds["ml_m"], dtype=float)
                m_star = np.column_stack(
                    [cre_general_adjustment(m_hat[:, r], self._d_mean[:, j], ids)
                     for r in range(m_hat.shape[1])]
                )  # fmt: skip
                adjusted[d_col] = {**preds, "ml_m": m_star}
            external_predictions = adjusted
        return super().fit(*args, external_predictions=external_predictions, **kwargs)  # type: ignore[misc]


class DoubleMLPLPR(_OnStack, _CREAdjusted, _doubleml.DoubleMLPLPR):  # type: ignore[misc]
    """DoubleML's partially linear panel regression, fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLPLPR`` (0.11.4): ``obj_dml_data, ml_l, ml_m, ml_g=None,
    n_folds=5, n_rep=1, score='partialling out', approach='fd_exact',
    draw_sample_splitting=True``; ``obj_dml_data`` a ``doubleml.data.DoubleMLPanelData`` with
    ``static_panel=True``. DoubleML transforms the data at construction (``data_transform``) and
    draws its folds by unit (``smpls``, ``smpls_cluster``); :meth:`fit` sends the transformed
    data and those folds to one ``plr`` job clustered by ``id_col`` (module docstring).

    Raises
    ------
    fanfit.errors.InvalidDataError
        ``obj_dml_data`` is not a DoubleMLPanelData with ``static_panel=True``.
    fanfit.errors.UnsupportedArgumentError
        A callable score.
    fanfit.errors.InvalidLearnerError
        A learner outside the allow-list.
    ValueError, TypeError
        DoubleML's own checks (an unknown approach or score).
    """

    _fanfit_model = "plr"

    def __init__(
        self, obj_dml_data: Any, ml_l: Any, ml_m: Any, ml_g: Any = None, n_folds: int = 5,
        n_rep: int = 1, score: Any = "partialling out", approach: Any = "fd_exact",
        draw_sample_splitting: bool = True,
    ) -> None:  # fmt: skip
        data = _plpr_data(obj_dml_data)
        _check_arguments(data, score)
        for name, learner in (("ml_l", ml_l), ("ml_m", ml_m), ("ml_g", ml_g)):
            if learner is not None and not _placeholder(learner):
                _learner_spec(name, learner)
        super().__init__(
            data, _estimator("ml_l", ml_l), _estimator("ml_m", ml_m), _estimator("ml_g", ml_g),
            n_folds, n_rep, score, approach, draw_sample_splitting,
        )  # fmt: skip
        self._fanfit_check_learners()

    def _fanfit_frame(self) -> pd.DataFrame:
        """DoubleML's transformed data; with ``'cre_normal'`` and ``'cre_general'`` also each
        treatment's unit mean (DoubleML's ``d_mean``), the columns of :meth:`_fanfit_d_mean_cols`."""
        frame = self._dml_data.data
        if self.approach not in CRE_APPROACHES:
            return frame  # type: ignore[no-any-return]
        means = pd.DataFrame(self._d_mean, columns=self._fanfit_d_mean_cols(), index=frame.index)
        return pd.concat([frame, means], axis=1)

    def _fanfit_d_mean_cols(self) -> list[str]:
        return [f"__fanfit_{d}_mean" for d in self._dml_data.d_cols]

    def _fanfit_model_options(self) -> dict[str, Any]:
        if self.approach not in CRE_APPROACHES:
            return {}
        return {"d_mean_cols": self._fanfit_d_mean_cols(), "approach": self.approach}

    def _fanfit_targets(self, y, d, z, preds):  # type: ignore[no-untyped-def]
        return DoubleMLPLR._fanfit_targets(self, y, d, z, preds)  # type: ignore[arg-type]

    def _fanfit_check_external(self) -> None:
        super()._fanfit_check_external()
        if self.approach == "cre_general":
            raise _unsupported(
                "external_predictions with approach='cre_general'",
                "DoubleML leaves given ml_m predictions unadjusted for the units' treatment "
                "means, while fanfit adjusts every ml_m it hands over; give them with "
                "approach='fd_exact' or 'wg_approx'",
            )
