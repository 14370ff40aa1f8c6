"""DoubleML's quantile models on a fanfit stack: DoubleMLPQ, DoubleMLCVAR, DoubleMLLPQ, DoubleMLQTE.

:class:`DoubleMLPQ`, :class:`DoubleMLCVAR` and :class:`DoubleMLLPQ` run one ``pq`` / ``cvar`` /
``lpq`` job (models of :mod:`fanfit.dml.models` with a fold procedure: one fit unit per outer
fold runs the fold's nested fits, :func:`fanfit.dml.scores.quantile.pq_fold`,
:func:`fanfit.dml.scores.lpq.lpq_fold`). The job returns the out-of-fold predictions and each
fold's preliminary IPW quantile (``theta_ipw``); DoubleML's own classes then compute the scores
and the estimate from them: PQ and LPQ through their ``external_predictions``, with the root
search started from the mean of the fold IPW quantiles as DoubleML's own fit does; CVaR (whose DoubleML class takes no external predictions) through
its ``_score_elements`` with that mean as the potential quantile. So coef, se, summary, confint
and bootstrap are DoubleML's numbers, checked against the job's.

The user's own ``fit(external_predictions=...)`` is taken as DoubleML 0.11.4 takes it
(:mod:`fanfit.dml.external`): :class:`DoubleMLPQ` any of ``ml_g``, ``ml_m`` (the job skips their
fits; with both given no job runs and DoubleML's own ``fit`` computes the estimate, its root
search from the first start value); :class:`DoubleMLLPQ` all five keys (no job runs) or, as
DoubleML, none: a subset is ignored with a warning and every nuisance is fitted;
:class:`DoubleMLCVAR` none (``NotImplementedError``, DoubleML's), :class:`DoubleMLQTE` none
(``UnsupportedArgumentError``; DoubleML's raises ``NotImplementedError``).

:class:`DoubleMLQTE` builds its per-quantile models as fanfit's :class:`DoubleMLPQ`,
:class:`DoubleMLCVAR` or :class:`DoubleMLLPQ` and submits ONE job whose parts are the (quantile,
treatment level) models, their units fanned out together; DoubleML's framework difference and
concatenation then give the effects. Re-exported by :mod:`fanfit.client.doubleml`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Set
from typing import Any

import numpy as np

from fanfit import errors
from fanfit.client.doubleml.base import (
    _check_arguments,
    _dml_data,
    _estimator,
    _learner_spec,
    _OnStack,
    _placeholder,
    _PropensityOptions,
    _unsupported,
)
from fanfit.client.doubleml.parts import _SideBySide
from fanfit.dml.interop import import_doubleml

import_doubleml()  # without DoubleML: MissingDependencyError, with the pip command
import doubleml as _doubleml  # noqa: E402 - after the check that names the extra
from doubleml.double_ml_framework import concat as _concat  # noqa: E402
from doubleml.utils._estimation import _default_kde  # noqa: E402

__all__ = ["DoubleMLCVAR", "DoubleMLLPQ", "DoubleMLPQ", "DoubleMLQTE"]

#: The fold scalar a ``pq``/``cvar`` job stores with its predictions (one value per fold, on the
#: fold's test rows): the fold's preliminary IPW quantile.
THETA_IPW = "theta_ipw"
_COLUMNS = ("y_col", "d_cols", "x_cols", "z_cols", "cluster_cols")


def _quantile_data(cls_name: str, obj_dml_data: Any, columns: dict[str, Any]) -> Any:
    unknown = sorted(set(columns) - set(_COLUMNS))
    if unknown:
        raise TypeError(f"{cls_name}() got unexpected keyword argument(s) {unknown}")
    data = _dml_data(obj_dml_data, *(columns.get(k) for k in _COLUMNS))
    if getattr(data, "is_cluster_data", False):
        raise _unsupported("clustered data", f"fanfit's {cls_name} runs on unclustered data")
    return data


def default_kde_at_zero(u: np.ndarray, weights: np.ndarray) -> Any:
    """DoubleML's default score derivative, ``doubleml.utils._estimation._default_kde``, without
    the grid it never reads.

    ``_default_kde`` fits statsmodels' ``KDEUnivariate(u).fit(kernel='gau', bw='silverman',
    weights=weights, fft=False)`` and returns ``evaluate(0)``; the fit also evaluates the density on
    an ``n_obs``-point grid (an ``n_obs x n_obs`` array: 4.4 s at 9,915 rows) that ``evaluate``
    does not use. This computes the same bandwidth (statsmodels' ``select_bandwidth`` on the finite
    values of ``u``, as ``kdensity`` clips them) and the same kernel object's ``density(u, 0)``,
    with the same operations, so its value is DoubleML's bit for bit (tests/unit/
    test_quantile_kde.py), in O(n_obs).

    Parameters
    ----------
    u : numpy.ndarray, shape (n_obs,)
        :math:`Y - \\hat\\theta`, as DoubleML's PQ and LPQ score derivatives pass it.
    weights : numpy.ndarray, shape (n_obs,)
        The score weights (LPQ's may be negative).

    Returns
    -------
    numpy.ndarray, shape (1,)
        The weighted density at 0, as ``evaluate(0)`` returns it.
    """
    from statsmodels.nonparametric import bandwidths
    from statsmodels.nonparametric.kde import KDEUnivariate, kernel_switch

    x = KDEUnivariate(u).endog
    bw = bandwidths.select_bandwidth(x[(x > -np.inf) & (x < np.inf)], "silverman",
                                     kernel_switch["gau"]())  # fmt: skip
    kernel = kernel_switch["gau"](h=bw)
    w = np.asarray(weights)
    kernel.weights = w / w.sum()
    return kernel.density(x, 0)


class _DefaultKDE:
    """Before DoubleML's PQ or LPQ: its ``kde`` with DoubleML's default replaced by
    :func:`default_kde_at_zero` (the same numbers, without the unused grid); a custom ``kde``
    is refused by the constructor."""

    @property
    def kde(self) -> Any:
        """DoubleML's score derivative callable, ``deriv = kde(u, weights)``."""
        kde = super().kde  # type: ignore[misc]
        return default_kde_at_zero if kde is _default_kde else kde


def _fold_means(theta: np.ndarray, smpls: Any) -> float:
    """The mean over folds of one repetition's fold IPW quantiles (each stored on its test rows)."""
    return float(np.mean([theta[test][0] for _, test in smpls]))


class _TakeTheta:
    """Between :class:`_OnStack` and DoubleML's class: takes the fold IPW quantiles out of the
    job's predictions (DoubleML would refuse an unknown key) and keeps them for ``_nuisance_est``;
    the user's own external predictions (no ``theta_ipw``: every key given, no job) pass as they
    are, ``_fanfit_theta`` None."""

    _fanfit_theta: np.ndarray | None = None

    def fit(self, *args: Any, **kwargs: Any) -> Any:
        external = kwargs.get("external_predictions")
        self._fanfit_theta = None
        if external:
            d_col = next(iter(external))
            preds = dict(external[d_col])
            theta = preds.pop(THETA_IPW, None)
            if theta is not None:
                self._fanfit_theta = np.asarray(theta, dtype=float)
                kwargs["external_predictions"] = {d_col: preds}
            elif not set(self.params_names) <= getattr(self, "_fanfit_given", frozenset()):  # type: ignore[attr-defined]
                raise errors.InvalidJobError(
                    f"The job's predictions hold no fold IPW quantiles ({THETA_IPW!r}); "
                    "a quantile model's job stores them with its predictions."
                )
        return super().fit(*args, **kwargs)  # type: ignore[misc]


class _QuantileOnStack(_PropensityOptions, _OnStack):
    """What PQ and CVaR share on a stack: their options, the ``kde`` check and the finish of a fit."""

    quantile: float
    treatment: int
    smpls: Any
    _i_rep: int
    _dml_data: Any
    _fanfit_theta: np.ndarray | None  # set by _TakeTheta
    _coef_start_val: float
    #: The prediction keys the user's ``fit(external_predictions=...)`` gave (and the model
    #: takes), whose targets DoubleML leaves empty; set by :meth:`fanfit_options`.
    _fanfit_given: frozenset[str] = frozenset()

    def fanfit_options(
        self,
        seed: int = 0,
        external: Set[tuple[str, str]] | Mapping[tuple[str, str], Any] = frozenset(),
    ) -> dict[str, Any]:
        """As :meth:`fanfit.client.doubleml.base._OnStack.fanfit_options`; keeps the keys of
        ``external`` (:attr:`_fanfit_given`)."""
        self._fanfit_given = frozenset(key for key, _ in external)
        return super().fanfit_options(seed, external)  # type: ignore[no-any-return]

    def _fanfit_check_kde(self, kde: Any) -> None:
        if kde is not None:
            raise _unsupported(
                "a custom kde",
                "fanfit's score derivative is DoubleML's default Gaussian kernel density "
                "(fanfit.dml.scores.quantile.kde_at_zero)",
            )

    def _fanfit_model_options(self) -> dict[str, Any]:
        options = super()._fanfit_model_options()
        options.update(treatment=int(self.treatment), quantiles=[float(self.quantile)])
        return options

    def _fanfit_nuisance_loss(self, given: Set[tuple[str, str]] = frozenset()) -> None:
        """Nothing to add: :meth:`_nuisance_est` returns DoubleML's targets with the predictions."""

    def _fanfit_theta_rep(self) -> np.ndarray:
        """This repetition's fold IPW quantiles, each on its fold's test rows, shape (n_obs,)."""
        assert self._fanfit_theta is not None
        return self._fanfit_theta[:, self._i_rep]

    def _fanfit_theta_mean(self) -> float:
        return _fold_means(self._fanfit_theta_rep(), self.smpls[self._i_rep])

    def _fanfit_g_target(self, y: np.ndarray, theta: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _fanfit_targets_of(self, y: np.ndarray, d: np.ndarray) -> dict[str, np.ndarray]:
        """DoubleML's targets: ml_g's of fold k from its IPW quantile, on the rows ``d == treatment``
        (NaN where the user gave ``ml_g``'s predictions: DoubleML 0.11.4 ``irm/pq.py``
        ``_nuisance_est`` records none then); ml_m's ``d`` (also when given, as DoubleML)."""
        theta = self._fanfit_theta_rep()
        g = self._fanfit_g_target(y, theta).astype(float)
        g[d != self.treatment] = np.nan
        if "ml_g" in self._fanfit_given:
            g[:] = np.nan
        return {"ml_g": g, "ml_m": d.astype(float)}

    def _fanfit_init(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any, columns: dict[str, Any], kde: Any,
        args: tuple[Any, ...],
    ) -> None:  # fmt: skip
        """The constructors' shared body: the data (:func:`_quantile_data`), the checks of what a
        stack cannot honour, then DoubleML's constructor with the learners as DoubleML takes them
        and ``args``, its further positional arguments (``treatment, quantile, n_folds, n_rep,
        score, normalize_ipw, [kde,] trimming_rule, trimming_threshold, ps_processor_config,
        draw_sample_splitting``)."""
        score, normalize_ipw, ps_processor_config = args[4], args[5], args[-2]
        data = _quantile_data(type(self).__name__, obj_dml_data, columns)
        _check_arguments(data, score)
        self._fanfit_check_kde(kde)
        self._fanfit_check_ps(None, normalize_ipw, ps_processor_config)
        learners = (_estimator("ml_g", ml_g), _estimator("ml_m", ml_m))
        super().__init__(data, *learners, *args)  # type: ignore[call-arg]  # DoubleML's
        self._fanfit_check_learners()

    def _nuisance_est(
        self, smpls: Any, n_jobs_cv: Any, external_predictions: Any, return_models: bool = False
    ) -> Any:
        """PQ's and LPQ's: DoubleML's own ``_nuisance_est`` on the job's predictions, its start
        value the mean of the fold IPW quantiles (what DoubleML's fit sets before its root search),
        its targets the ones DoubleML records (:meth:`_fanfit_targets_of`). Without external
        predictions (in-process) DoubleML's runs."""
        given = external_predictions or {}
        if self._fanfit_theta is None or not given or any(v is None for v in given.values()):
            return super()._nuisance_est(smpls, n_jobs_cv, external_predictions, return_models)  # type: ignore[misc]
        self._coef_start_val = self._fanfit_theta_mean()
        psi_elements, preds = super()._nuisance_est(  # type: ignore[misc]
            smpls, n_jobs_cv, external_predictions, return_models
        )
        y, d = (np.asarray(v, dtype=float) for v in (self._dml_data.y, self._dml_data.d))
        preds["targets"] = self._fanfit_targets_of(y, d)
        return psi_elements, preds

    def _fanfit_finish(self, job: Any, store_predictions: bool) -> None:
        """What :meth:`_OnStack.fit` does once its job is done, but the parity check (for
        :class:`DoubleMLQTE`, whose :class:`_SideBySide` fit checks every part)."""
        super(_OnStack, self).fit(  # type: ignore[misc]
            store_predictions=True, external_predictions=job.predictions()
        )
        if not store_predictions:
            self._predictions = None
            self._nuisance_targets = None
        self.fanfit_job = job


class DoubleMLPQ(_QuantileOnStack, _TakeTheta, _DefaultKDE, _doubleml.DoubleMLPQ):  # type: ignore[misc]
    """DoubleML's potential quantile, fitted on a fanfit stack (one ``pq`` job).

    Parameters as ``doubleml.DoubleMLPQ`` (0.11): ``obj_dml_data, ml_g, ml_m, treatment=1,
    quantile=0.5, n_folds=5, n_rep=1, score='PQ', normalize_ipw=True, kde=None,
    trimming_rule='truncate', trimming_threshold=1e-2, ps_processor_config=None,
    draw_sample_splitting=True``; the data a DoubleMLData or a DataFrame with ``y_col``,
    ``d_cols``, ``x_cols`` by keyword. ``ml_g`` a classifier (of :math:`1\\{Y \\le q\\}`),
    ``ml_m`` a classifier of the binary treatment.

    Each outer fold's nested fits run in one fit unit; repetition ``r`` is stage ``r`` of the job
    (its IPW searches start from repetition ``r - 1``'s mean, as DoubleML's). DoubleML's own
    ``fit(external_predictions=...)`` then solves the score from the job's predictions, its root
    search started from the mean of the fold IPW quantiles, as DoubleML's fit does.

    ``fit(external_predictions={d_col: {"ml_g" and/or "ml_m": array (n_obs, n_rep)}})`` is
    DoubleML 0.11.4's (``irm/pq.py`` ``_nuisance_est``): the job skips the given key's fits (with
    ``ml_m`` given the folds' preliminary propensities are the given ones as DoubleML indexes
    them, :func:`fanfit.dml.scores.quantile.pq_fold_prelim`); with both given no job runs and
    DoubleML's own ``fit`` solves the score from its first start value. A learner whose
    predictions are all given may be DoubleML's ``DMLDummyClassifier``.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        A custom ``kde``, a propensity calibration, clustered data or a callable score.
    """

    _fanfit_model = "pq"

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any, treatment: int = 1, quantile: float = 0.5,
        n_folds: int = 5, n_rep: int = 1, score: Any = "PQ", normalize_ipw: bool = True,
        kde: Any = None, trimming_rule: str = "truncate", trimming_threshold: float = 1e-2,
        ps_processor_config: Any = None, draw_sample_splitting: bool = True, **columns: Any,
    ) -> None:  # fmt: skip
        self._fanfit_init(
            obj_dml_data, ml_g, ml_m, columns, kde,
            (treatment, quantile, n_folds, n_rep, score, normalize_ipw, kde, trimming_rule,
             trimming_threshold, ps_processor_config, draw_sample_splitting),
        )  # fmt: skip

    def _fanfit_g_target(self, y: np.ndarray, theta: np.ndarray) -> np.ndarray:
        return (y <= theta).astype(float)


class DoubleMLCVAR(_QuantileOnStack, _TakeTheta, _doubleml.DoubleMLCVAR):  # type: ignore[misc]
    """DoubleML's conditional value at risk, fitted on a fanfit stack (one ``cvar`` job).

    Parameters as ``doubleml.DoubleMLCVAR`` (0.11): ``obj_dml_data, ml_g, ml_m, treatment=1,
    quantile=0.5, n_folds=5, n_rep=1, score='CVaR', normalize_ipw=True,
    trimming_rule='truncate', trimming_threshold=1e-2, ps_processor_config=None,
    draw_sample_splitting=True``. ``ml_g`` a regressor, ``ml_m`` a classifier.

    DoubleML 0.11.4's DoubleMLCVAR takes no external predictions; this class lets it take the
    job's: ``_nuisance_est`` hands them to DoubleML's propensity processing and
    ``_score_elements`` with the mean of the fold IPW quantiles as the potential quantile, as
    DoubleML's own ``_nuisance_est`` does.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        A propensity calibration, clustered data or a callable score.
    """

    _fanfit_model = "cvar"

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any, treatment: int = 1, quantile: float = 0.5,
        n_folds: int = 5, n_rep: int = 1, score: Any = "CVaR", normalize_ipw: bool = True,
        trimming_rule: str = "truncate", trimming_threshold: float = 1e-2,
        ps_processor_config: Any = None, draw_sample_splitting: bool = True, **columns: Any,
    ) -> None:  # fmt: skip
        self._fanfit_init(
            obj_dml_data, ml_g, ml_m, columns, None,
            (treatment, quantile, n_folds, n_rep, score, normalize_ipw, trimming_rule,
             trimming_threshold, ps_processor_config, draw_sample_splitting),
        )  # fmt: skip
        self._external_predictions_implemented = True  # the job's, through _nuisance_est

    _fanfit_doubleml_external = False  # DoubleML's DoubleMLCVAR takes no external predictions

    def _fanfit_g_target(self, y: np.ndarray, theta: np.ndarray) -> np.ndarray:
        q = float(self.quantile)
        return np.maximum(theta, (y - q * theta) / (1 - q))

    def _nuisance_est(
        self, smpls: Any, n_jobs_cv: Any, external_predictions: Any, return_models: bool = False
    ) -> Any:
        """The tail of DoubleML 0.11.4's ``DoubleMLCVAR._nuisance_est`` on the job's predictions:
        ``ml_m`` through ``ps_processor.adjust_ps`` (and ``_normalize_ipw``), the treatment level's
        propensity, then ``_score_elements`` with the mean of the fold IPW quantiles."""
        given = external_predictions or {}
        if self._fanfit_theta is None or given.get("ml_g") is None or given.get("ml_m") is None:
            return super()._nuisance_est(smpls, n_jobs_cv, external_predictions, return_models)
        from doubleml.utils._propensity_score import _normalize_ipw

        y, d = (np.asarray(v, dtype=float) for v in (self._dml_data.y, self._dml_data.d))
        g_hat = np.asarray(given["ml_g"], dtype=float)
        m_hat = self._ps_processor.adjust_ps(np.asarray(given["ml_m"], dtype=float), d, cv=smpls)
        m_adj = _normalize_ipw(m_hat, d) if self._normalize_ipw else m_hat
        if self.treatment == 0:
            m_adj = 1 - m_adj
        psi_a, psi_b = self._score_elements(y, d, g_hat, m_adj, self._fanfit_theta_mean())
        return {"psi_a": psi_a, "psi_b": psi_b}, {
            "predictions": {"ml_g": g_hat, "ml_m": m_hat},
            "targets": self._fanfit_targets_of(y, d),
            "models": {"ml_g": None, "ml_m": None},
        }


class DoubleMLLPQ(_QuantileOnStack, _TakeTheta, _DefaultKDE, _doubleml.DoubleMLLPQ):  # type: ignore[misc]
    """DoubleML's local (compliers') potential quantile, fitted on a fanfit stack (one ``lpq`` job).

    Parameters as ``doubleml.DoubleMLLPQ`` (0.11): ``obj_dml_data, ml_g, ml_m, treatment=1,
    quantile=0.5, n_folds=5, n_rep=1, score='LPQ', normalize_ipw=True, kde=None,
    trimming_rule='truncate', trimming_threshold=1e-2, ps_processor_config=None,
    draw_sample_splitting=True``; the data with one binary instrument (``z_cols``). ``ml_g`` and
    ``ml_m`` classifiers.

    As :class:`DoubleMLPQ`: each outer fold's nested fits run in one fit unit (ml_m_z cross-fitted
    and ml_m_d_z0/z1 on half the fold, the fold's IPW local quantile, ml_g_du_z0/z1 on the other
    half, then ml_m_z, ml_m_d_z0, ml_m_d_z1 on the fold; :func:`fanfit.dml.scores.lpq.lpq_fold`),
    repetition ``r`` as stage ``r``; DoubleML's ``fit(external_predictions=...)`` solves the score,
    its root search started from the mean of the fold IPW quantiles.

    ``fit(external_predictions=...)`` is DoubleML 0.11.4's (``irm/lpq.py`` ``_nuisance_est``):
    with all five keys (``ml_m_z``, ``ml_m_d_z0``, ``ml_m_d_z1``, ``ml_g_du_z0``, ``ml_g_du_z1``)
    given no job runs and DoubleML's own ``fit`` solves the score from its first start value
    (``ml_g``/``ml_m`` may then be ``DMLDummyClassifier``); a subset is ignored, as DoubleML
    ignores it (it fits every nuisance: its "all or none" check can never fire), with a
    ``UserWarning``.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        A custom ``kde``, a propensity calibration, clustered data or a callable score.
    fanfit.errors.InvalidLearnerError
        From ``fit``: a ``DMLDummyClassifier`` learner when not all five keys are given
        (DoubleML would fit it and fail).
    """

    _fanfit_model = "lpq"

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any, treatment: int = 1, quantile: float = 0.5,
        n_folds: int = 5, n_rep: int = 1, score: Any = "LPQ", normalize_ipw: bool = True,
        kde: Any = None, trimming_rule: str = "truncate", trimming_threshold: float = 1e-2,
        ps_processor_config: Any = None, draw_sample_splitting: bool = True, **columns: Any,
    ) -> None:  # fmt: skip
        self._fanfit_init(
            obj_dml_data, ml_g, ml_m, columns, kde,
            (treatment, quantile, n_folds, n_rep, score, normalize_ipw, kde, trimming_rule,
             trimming_threshold, ps_processor_config, draw_sample_splitting),
        )  # fmt: skip

    def fanfit_options(
        self,
        seed: int = 0,
        external: Set[tuple[str, str]] | Mapping[tuple[str, str], Any] = frozenset(),
    ) -> dict[str, Any]:
        """As :meth:`fanfit.client.doubleml.base._OnStack.fanfit_options`, with the learners as
        ``ml_g`` and ``ml_m`` (DoubleML's LPQ keeps one clone per nuisance, ``ml_m_z`` ...).

        ``external`` of some keys only is ignored, as DoubleML 0.11.4 ignores it (a
        ``UserWarning`` says so); with every key given a ``DMLDummyClassifier`` learner is sent
        as scikit-learn's ``DummyClassifier`` (no unit fits it).

        Raises
        ------
        fanfit.errors.InvalidLearnerError
            A ``DMLDummyClassifier`` learner without every key given.
        """
        given = {key for key, _ in external}
        complete = set(self.params_names) <= given
        if given and not complete:
            warnings.warn(
                f"DoubleMLLPQ takes external predictions of all of {', '.join(self.params_names)} "
                f"or of none; given {', '.join(sorted(given))} only, they are ignored and every "
                "nuisance is fitted, as DoubleML 0.11.4's DoubleMLLPQ does",
                UserWarning,
                stacklevel=3,
            )
            placeholders = [k for k, v in self._learner.items() if _placeholder(v)]
            if placeholders:
                raise errors.InvalidLearnerError(
                    f"DoubleMLLPQ fits every nuisance unless the external predictions of all of "
                    f"{', '.join(self.params_names)} are given, but the learners of "
                    f"{', '.join(placeholders)} are DoubleML's placeholders (DMLDummyClassifier); "
                    "give every key's predictions, or learners"
                )
            external = frozenset()
        options = super().fanfit_options(seed, external)
        for key in self._learner:
            options.pop(key, None)
        for role, key in (("ml_g", "ml_g_du_z0"), ("ml_m", "ml_m_z")):
            learner = self._learner[key]
            options[role] = (
                self._fanfit_placeholder(role, learner, set(external))
                if _placeholder(learner)
                else _learner_spec(role, learner)
            )
        return options

    def _fanfit_targets_of(self, y: np.ndarray, d: np.ndarray) -> dict[str, np.ndarray]:
        """DoubleML's targets: ``z``; ``d`` and fold k's :math:`1\\{D = d\\}1\\{Y \\le q_k\\}` on the
        rows ``z == 0`` / ``z == 1``."""
        z = np.ravel(np.asarray(self._dml_data.z, dtype=float))
        theta = self._fanfit_theta_rep()
        du = ((d == self.treatment) * (y <= theta)).astype(float)
        out: dict[str, np.ndarray] = {"ml_m_z": z}
        for v in (0, 1):
            out[f"ml_m_d_z{v}"] = np.where(z == v, d, np.nan)
            out[f"ml_g_du_z{v}"] = np.where(z == v, du, np.nan)
        return out


class _QTEFromJobs:
    """Between :class:`_SideBySide` and DoubleML's QTE: its ``fit`` takes the parts' jobs (as
    ``external_predictions={"jobs": [...]}``, ``modellist`` order), finishes every model from its
    job and builds DoubleML's framework (``modellist_1[i].framework - modellist_0[i].framework``,
    concatenated over quantiles, as ``DoubleMLQTE.fit``)."""

    modellist: list[Any]
    modellist_0: list[Any]
    modellist_1: list[Any]
    _framework: Any

    def fit(self, *, store_predictions: bool = True, external_predictions: Any = None) -> Any:
        for model, job in zip(self.modellist, external_predictions["jobs"]):
            model._fanfit_finish(job, store_predictions)
        self._framework = _concat(
            [m1.framework - m0.framework for m0, m1 in zip(self.modellist_0, self.modellist_1)]
        )
        return self


class DoubleMLQTE(_SideBySide, _QTEFromJobs, _doubleml.DoubleMLQTE):  # type: ignore[misc]
    """DoubleML's quantile treatment effects, fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLQTE`` (0.11): ``obj_dml_data, ml_g, ml_m=None,
    quantiles=0.5, n_folds=5, n_rep=1, score='PQ', normalize_ipw=True, kde=None,
    trimming_rule='truncate', trimming_threshold=1e-2, ps_processor_config=None,
    draw_sample_splitting=True``; score ``'PQ'``, ``'CVaR'`` or ``'LPQ'`` (with one binary
    instrument).

    Its models (``modellist_0``, ``modellist_1``: treatment 0 and 1 of every quantile) are
    fanfit's :class:`DoubleMLPQ`, :class:`DoubleMLCVAR` or :class:`DoubleMLLPQ` on DoubleML's one
    sample splitting;
    ``fit`` (:class:`_SideBySide`'s) submits their ``2 * n_quantiles`` jobs, all before waiting
    for any, so that every (quantile, treatment level) runs side by side on the stack, then
    DoubleML's framework difference and concatenation give coef, se, confint and bootstrap.

    Attributes
    ----------
    modellist : list
        ``modellist_0`` then ``modellist_1``: the parts, one job each.
    fanfit_jobs, fanfit_results : list
        The jobs of the last fit and their results, in ``modellist`` order.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        A custom ``kde``, a propensity calibration, clustered data.
    """

    _fanfit_parts_model = "qte"  # one job of several parts

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any = None, quantiles: Any = 0.5,
        n_folds: int = 5, n_rep: int = 1, score: Any = "PQ", normalize_ipw: bool = True,
        kde: Any = None, trimming_rule: str = "truncate", trimming_threshold: float = 1e-2,
        ps_processor_config: Any = None, draw_sample_splitting: bool = True, **columns: Any,
    ) -> None:  # fmt: skip
        data = _quantile_data("DoubleMLQTE", obj_dml_data, columns)
        _check_arguments(data, score)
        if kde is not None:
            raise _unsupported("a custom kde", "fanfit uses DoubleML's default kernel density")
        learners = (_estimator("ml_g", ml_g), _estimator("ml_m", ml_m))
        super().__init__(
            data, *learners, quantiles, n_folds, n_rep, score, normalize_ipw, kde, trimming_rule,
            trimming_threshold, ps_processor_config, draw_sample_splitting,
        )  # fmt: skip
        self.fanfit_jobs, self.fanfit_results = [], []

    @property
    def modellist(self) -> list[Any]:  # type: ignore[override]
        """``modellist_0`` then ``modellist_1``."""
        return [*self.modellist_0, *self.modellist_1]

    def _initialize_models(self) -> Any:
        """DoubleML's per-quantile models, as fanfit's classes (same arguments and splitting)."""
        cls = {"PQ": DoubleMLPQ, "CVaR": DoubleMLCVAR, "LPQ": DoubleMLLPQ}[self.score]
        out: tuple[list[Any], list[Any]] = ([], [])
        for q in self._quantiles:
            for treatment, models in ((0, out[0]), (1, out[1])):
                model = cls(
                    self._dml_data, self._learner["ml_g"], self._learner["ml_m"],
                    treatment=treatment, quantile=float(q), n_folds=self.n_folds,
                    n_rep=self.n_rep, normalize_ipw=self.normalize_ipw,
                    ps_processor_config=self.ps_processor_config, draw_sample_splitting=False,
                )  # fmt: skip
                model.set_sample_splitting(all_smpls=self.smpls)
                models.append(model)
        return out

    def _fanfit_parts(self, seed: int) -> list[tuple[str, Any, dict[str, Any]]]:
        frame = self._dml_data.data
        return [
            (f"quantile {m.quantile} of treatment {m.treatment}", frame, m.fanfit_options(seed))
            for m in self.modellist
        ]

    def _fanfit_external(self, jobs: list[Any]) -> dict[str, Any]:
        return {"jobs": jobs}
