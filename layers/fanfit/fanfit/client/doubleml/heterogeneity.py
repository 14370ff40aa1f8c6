"""Heterogeneous treatment effects of a finished estimate: ``cate``, ``gate`` and ``policy_tree``.

>>> blp = dml_irm.cate(basis)              # doctest: +SKIP
>>> blp.summary, blp.confint(basis, joint=True, n_rep_boot=500)
>>> dml_irm.gate(groups).confint()
>>> dml_irm.policy_tree(features, depth=2).plot_tree()

Everything runs on the client, from the out-of-fold predictions the estimate stored: no learner
is fitted again and nothing runs on the pipeline. The orthogonal signal comes from
:mod:`fanfit.dml.heterogeneity` (DoubleML 0.11.4's formulas, in numpy); the regressions are
DoubleML's own classes: :class:`doubleml.DoubleMLBLP` (the best linear predictor of the CATE,
Semenova and Chernozhukov 2021, The Econometrics Journal 24(2), with pointwise and joint,
Gaussian-multiplier-bootstrap confidence bands) and :class:`doubleml.DoubleMLPolicyTree` (a
depth-limited tree that classifies the signal's sign weighted by its size: policy learning,
Athey and Wager 2021, Econometrica 89(1)); see DoubleML's user guide, "Heterogeneous treatment
effects". So ``summary``, ``confint``, ``plot_tree`` and ``predict`` of the results are
DoubleML's, and equal DoubleML's ``cate``/``gate``/``policy_tree`` on the same predictions.

What the functions take as ``source``:

- a fitted :class:`fanfit.DoubleMLPLR` or :class:`fanfit.DoubleMLIRM` (whose methods ``cate``,
  ``gate``, ``policy_tree`` call these functions), or DoubleML's own fitted classes;
- an :class:`fanfit.client.EstimateJob` of a PLR or IRM job (or its ``EstimateResult``): its data,
  predictions and estimate are read from the stack;
- :class:`HeterogeneityInputs`, e.g. :meth:`HeterogeneityInputs.from_result` of an in-process
  :func:`fanfit.dml.estimate_in_process`.

Needs DoubleML on the client (``pip install 'fanfit[doubleml]'``).
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fanfit import errors
from fanfit.dml.heterogeneity import irm_orthogonal_signal, plr_partialled_out
from fanfit.dml.interop import import_doubleml

#: DoubleML (without it: MissingDependencyError, with the pip command); its models' base class.
_doubleml = import_doubleml()
_DoubleMLBase = _doubleml.double_ml.DoubleML

__all__ = [
    "HeterogeneityInputs",
    "HeterogeneityMethods",
    "PolicyTreeMethod",
    "cate",
    "gate",
    "policy_tree",
]

#: The models and scores each method takes (DoubleML 0.11.4's).
CATE_SCORES = {"plr": ("partialling out", "IV-type"), "irm": ("ATE",)}


@dataclass(frozen=True)
class HeterogeneityInputs:
    """What heterogeneity needs of a finished estimate of one treatment.

    Attributes
    ----------
    model : str
        ``'plr'`` or ``'irm'``.
    score : str
    y, d : numpy.ndarray, shape (n_obs,)
        Outcome and treatment.
    predictions : dict of str to numpy.ndarray of shape (n_obs, n_rep)
        The out-of-fold predictions (``ml_l``, ``ml_m``, ``ml_g`` or ``ml_g0``, ``ml_g1``, ``ml_m``).
    theta : numpy.ndarray, shape (n_rep,)
        The estimate per repetition (``all_coef[0]``).
    trimming_threshold : float
        IRM: the propensities' clipping threshold.
    normalize_ipw : bool
        IRM: normalized inverse probability weights.
    n_treat : int
        Treatments of the estimate (heterogeneity takes one).
    """

    model: str
    score: str
    y: np.ndarray
    d: np.ndarray
    predictions: Mapping[str, np.ndarray]
    theta: np.ndarray
    trimming_threshold: float = 1e-2
    normalize_ipw: bool = False
    n_treat: int = 1

    @property
    def n_obs(self) -> int:
        """Number of observations."""
        return int(self.y.shape[0])

    @property
    def n_rep(self) -> int:
        """Number of repetitions of the cross-fitting."""
        return int(np.shape(self.theta)[0])

    @classmethod
    def from_result(cls, result: Any, data: Any, spec: Any) -> HeterogeneityInputs:
        """From an in-process result: :func:`fanfit.dml.estimate_in_process` or :func:`fanfit.dml.aggregate`.

        Parameters
        ----------
        result : fanfit.dml.DMLResult
            With ``predictions`` (of shape ``(n_obs, n_rep, n_treat)``).
        data : fanfit.dml.DMLData
        spec : fanfit.dml.DMLSpec

        Raises
        ------
        fanfit.errors.InvalidJobError
            The result has no predictions (it was read from JSON).
        """
        if result.predictions is None:
            raise errors.InvalidJobError(
                "this result has no out-of-fold predictions (it was read from JSON); use the "
                "result of fanfit.dml.aggregate or estimate_in_process, or the job"
            )
        preds = {k: np.asarray(v)[:, :, 0] for k, v in result.predictions.items()}
        return cls._of_spec(spec, data, preds, result.all_coef)

    @classmethod
    def _of_spec(
        cls, spec: Any, data: Any, preds: Mapping[str, np.ndarray], all_coef: Any
    ) -> HeterogeneityInputs:
        """From fanfit's spec and data, the first treatment's predictions and ``all_coef``."""
        return cls(
            model=spec.model, score=spec.score, y=np.asarray(data.y), d=np.asarray(data.d)[:, 0],
            predictions=preds, theta=np.asarray(all_coef)[0],
            trimming_threshold=float(spec.trimming_threshold),
            normalize_ipw=bool(spec.normalize_ipw), n_treat=len(spec.d_cols),
        )  # fmt: skip

    @classmethod
    def from_doubleml(cls, obj: Any) -> HeterogeneityInputs:
        """From a fitted DoubleML (or fanfit) ``DoubleMLPLR`` or ``DoubleMLIRM``.

        Raises
        ------
        fanfit.errors.UnsupportedArgumentError
            Another model class.
        fanfit.errors.InvalidJobError
            Not fitted, or fitted with ``store_predictions=False``.
        """
        if isinstance(obj, _doubleml.DoubleMLIRM):
            model = "irm"
        elif isinstance(obj, _doubleml.DoubleMLPLR):
            model = "plr"
        else:
            raise errors.UnsupportedArgumentError(
                f"heterogeneous effects of a {type(obj).__name__} are not supported; "
                "they are DoubleMLPLR's and DoubleMLIRM's (as in DoubleML 0.11)"
            )
        if obj.predictions is None or obj.all_coef is None:
            raise errors.InvalidJobError(
                f"{type(obj).__name__} has no out-of-fold predictions: call fit() first, with "
                "store_predictions=True"
            )
        data = obj._dml_data
        options: dict[str, Any] = {}
        if model == "irm":
            options = {
                "trimming_threshold": float(obj.ps_processor_config.clipping_threshold),
                "normalize_ipw": bool(obj.normalize_ipw),
            }
        d = np.asarray(data.d, dtype=np.float64)
        return cls(
            model=model, score=obj.score, y=np.asarray(data.y, dtype=np.float64),
            d=d if d.ndim == 1 else d[:, 0],
            predictions={k: np.asarray(v)[:, :, 0] for k, v in obj.predictions.items()},
            theta=np.asarray(obj.all_coef)[0], n_treat=int(data.n_treat), **options,
        )  # fmt: skip

    @classmethod
    def from_job(cls, job: Any) -> HeterogeneityInputs:
        """From a finished estimate job on a stack (its data, predictions and ``all_coef``).

        Parameters
        ----------
        job : fanfit.client.EstimateJob

        Raises
        ------
        fanfit.errors.InvalidJobError
            The job did not succeed or has no stored predictions.
        """
        from fanfit import dml

        result = job.result()
        plan = job._plan()
        spec = plan.dml
        names, values = job.client.store.get_data(plan.data_key)
        data = dml.validate_data(spec, names, values)
        return cls._of_spec(spec, data, job.predictions()[spec.d_cols[0]], result.all_coef)


def _inputs(source: Any) -> HeterogeneityInputs:
    """``source`` as :class:`HeterogeneityInputs` (see the module's docstring for what it may be)."""
    if isinstance(source, HeterogeneityInputs):
        return source
    if isinstance(source, _doubleml.DoubleMLPLR | _doubleml.DoubleMLIRM):
        return HeterogeneityInputs.from_doubleml(source)
    from fanfit.client.estimate import EstimateJob, EstimateResult

    if isinstance(source, EstimateResult):
        if source.job is None:
            raise errors.InvalidJobError(
                "this result has no job handle; pass client.job(JOB_ID) instead"
            )
        source = source.job
    if isinstance(source, EstimateJob):
        return HeterogeneityInputs.from_job(source)
    if isinstance(source, _DoubleMLBase):
        return HeterogeneityInputs.from_doubleml(source)  # raises, naming the class
    raise errors.InvalidJobError(
        "heterogeneous effects need a fitted DoubleMLPLR/DoubleMLIRM, an EstimateJob or "
        f"HeterogeneityInputs; got {type(source).__name__}"
    )


def _check_model(inputs: HeterogeneityInputs, method: str, models: tuple[str, ...]) -> None:
    if inputs.model not in models:
        raise errors.UnsupportedArgumentError(
            f"{method} of a {inputs.model.upper()} model is not supported; it is "
            f"{' and '.join(m.upper() for m in models)}'s (as in DoubleML 0.11)"
        )
    if inputs.score not in CATE_SCORES[inputs.model]:
        raise errors.UnsupportedArgumentError(
            f"{method} of a {inputs.model.upper()} model with score {inputs.score!r} is not "
            f"supported; valid score: {' or '.join(repr(s) for s in CATE_SCORES[inputs.model])}"
        )
    if inputs.n_treat != 1:
        raise errors.UnsupportedArgumentError(
            f"{method} needs a single treatment; this estimate has {inputs.n_treat}"
        )


def _check_shape(frame: Any, name: str, n_obs: int) -> None:
    """Raise :class:`fanfit.errors.InvalidDataError` unless ``frame`` is an ``(n_obs, k >= 1)`` DataFrame."""
    if not isinstance(frame, pd.DataFrame):
        raise errors.InvalidDataError(
            f"{name} must be a pandas DataFrame of shape (n_obs, k), got {type(frame).__name__}"
        )
    if frame.shape[0] != n_obs:
        raise errors.InvalidDataError(
            f"{name} has {frame.shape[0]} rows; it needs one per observation of the estimate "
            f"({n_obs}), in the data's order"
        )
    if frame.shape[1] == 0:
        raise errors.InvalidDataError(f"{name} has no columns")


def _check_frame(frame: Any, name: str, n_obs: int) -> pd.DataFrame:
    """``frame`` as the numeric, finite ``(n_obs, k)`` DataFrame that ``name`` must be.

    Raises
    ------
    fanfit.errors.InvalidDataError
        Not a DataFrame, a row count other than ``n_obs``, no columns, duplicate column names,
        or a non-numeric, missing or infinite value (the message names ``name`` and the column).
    """
    _check_shape(frame, name, n_obs)
    if not frame.columns.is_unique:
        dupes = sorted({str(c) for c in frame.columns[frame.columns.duplicated()]})
        raise errors.InvalidDataError(f"{name} has duplicate column names: {', '.join(dupes)}")
    for col in frame.columns:
        values = frame[col]
        if not (pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values)):
            raise errors.InvalidDataError(
                f"column {col!r} of {name} is not numeric ({values.dtype})"
            )
        if not np.all(np.isfinite(values.to_numpy(dtype=np.float64))):
            raise errors.InvalidDataError(
                f"column {col!r} of {name} has missing or infinite values"
            )
    return frame


def _blp(inputs: HeterogeneityInputs, basis: pd.DataFrame, is_gate: bool, **kwargs: Any) -> Any:
    """DoubleML's BLP of ``inputs``' signal on ``basis`` (``DoubleMLPLR.cate``/``DoubleMLIRM.cate``)."""
    if inputs.model == "irm":
        signal = irm_orthogonal_signal(
            inputs.y, inputs.d, inputs.predictions, inputs.trimming_threshold, inputs.normalize_ipw
        )
        model = _doubleml.DoubleMLBLP(signal, basis=basis, is_gate=is_gate)
    else:
        y_tilde, d_tilde = plr_partialled_out(
            inputs.y, inputs.d, inputs.predictions, inputs.score, inputs.theta
        )
        basis_per_rep = [basis.multiply(d_tilde[:, i], axis=0) for i in range(inputs.n_rep)]
        model = _doubleml.DoubleMLBLP(y_tilde, basis=basis_per_rep, is_gate=is_gate)
    return model.fit(**kwargs)


def cate(source: Any, basis: Any, is_gate: bool = False, **kwargs: Any) -> Any:
    r"""The best linear predictor (BLP) of the CATE on ``basis``, as DoubleML's ``cate``.

    IRM (score ``'ATE'``): OLS of the doubly robust signal :math:`\tilde Y`
    (:func:`fanfit.dml.heterogeneity.irm_orthogonal_signal`) on :math:`b(X)`; PLR: OLS of
    :math:`\tilde Y` on :math:`b(X)\,\tilde D` (:func:`fanfit.dml.heterogeneity.plr_partialled_out`);
    one regression per repetition, coefficients and standard errors aggregated over repetitions
    as the estimate's (median). The CATE at :math:`x` is :math:`b(x)^\top\hat\beta`; its pointwise
    and joint (uniform, Gaussian multiplier bootstrap over the rows of a basis) confidence bands
    are ``confint(basis, joint=..., level=..., n_rep_boot=...)`` of the returned object (Semenova
    and Chernozhukov 2021, Theorem 3.1 and Section 3.2; DoubleML user guide, "Heterogeneous
    treatment effects", CATEs). Joint bands draw from NumPy's global random state, as DoubleML's:
    seed it with ``np.random.seed`` for reproducible bands.

    Parameters
    ----------
    source : fitted fanfit/DoubleML DoubleMLPLR or DoubleMLIRM, EstimateJob, or HeterogeneityInputs
    basis : pandas.DataFrame, shape (n_obs, k)
        The basis :math:`b(X)`, one row per observation in the data's order, numeric and finite
        (e.g. a spline basis of a covariate, ``patsy.dmatrix("bs(x, df=5, degree=2)", ...)``).
    is_gate : bool
        The basis is group dummies (:func:`gate`).
    **kwargs
        Passed to ``DoubleMLBLP.fit`` (statsmodels' OLS ``fit``), e.g. ``cov_type`` (default ``'HC0'``).

    Returns
    -------
    doubleml.DoubleMLBLP
        Fitted: ``coef``, ``se``, ``all_coef`` and ``all_se`` of shape ``(k,)``/``(k, n_rep)``,
        ``blp_omega`` (the covariance, shape ``(k, k, n_rep)``), ``summary``, ``confint``.

    Raises
    ------
    fanfit.errors.InvalidDataError
        ``basis`` is not a DataFrame, has another row count than the estimate, duplicate column
        names, or non-numeric or non-finite values.
    fanfit.errors.UnsupportedArgumentError
        A model other than PLR and IRM, IRM with a score other than ``'ATE'``, or several treatments.
    fanfit.errors.InvalidJobError
        ``source`` has no out-of-fold predictions (not fitted, or ``store_predictions=False``).
    """
    inputs = _inputs(source)
    _check_model(inputs, "cate", ("plr", "irm"))
    if not isinstance(is_gate, bool):
        raise errors.InvalidJobError(f"is_gate must be True or False, got {is_gate!r}")
    basis = _check_frame(basis, "basis", inputs.n_obs)
    return _blp(inputs, basis, is_gate, **kwargs)


def _dummies(groups: Any, n_obs: int) -> pd.DataFrame:
    """``groups`` as DoubleML's ``gate`` takes them: dummy columns, or one column of labels.

    Raises
    ------
    fanfit.errors.InvalidDataError
    """
    _check_shape(groups, "groups", n_obs)
    # DoubleML's test: every column bool, or every column the platform's int (int64)
    if not (all(groups.dtypes == np.dtype(bool)) or all(groups.dtypes == np.dtype(int))):
        if groups.shape[1] != 1:
            raise errors.InvalidDataError(
                "groups must be dummy coded (all columns bool, or all int with values 0 and 1), "
                f"or one column of group labels; got {groups.shape[1]} columns of dtypes "
                f"{', '.join(sorted({str(t) for t in groups.dtypes}))}"
            )
        if groups.iloc[:, 0].isna().any():
            raise errors.InvalidDataError(
                f"the group column {groups.columns[0]!r} has missing labels"
            )
        return pd.get_dummies(groups, prefix="Group", prefix_sep="_")
    if not np.isin(groups.to_numpy(), (0, 1)).all():
        bad = [str(c) for c in groups.columns if not groups[c].isin((0, 1)).all()]
        raise errors.InvalidDataError(
            f"groups must be dummies (0 or 1); column(s) {', '.join(bad)} hold other values "
            "(give labels as one column instead)"
        )
    return groups


def gate(source: Any, groups: Any, **kwargs: Any) -> Any:
    r"""Group average treatment effects (GATE): the BLP on group dummies, as DoubleML's ``gate``.

    With :math:`b(X)` the dummies of groups :math:`G_1, \dots, G_k`, the BLP's coefficients are
    :math:`\theta_{G_j} = E[\theta(X) \mid G_j]` (Semenova and Chernozhukov 2021, Section 3;
    DoubleML user guide, "Heterogeneous treatment effects", GATEs); ``confint()`` of the result
    gives each group's effect with pointwise, or with ``joint=True`` joint, confidence intervals.
    Groups with 5 observations or fewer are warned about (a ``UserWarning``, as DoubleML).

    Parameters
    ----------
    source
        As :func:`cate`.
    groups : pandas.DataFrame, shape (n_obs, k) or (n_obs, 1)
        Mutually exclusive group dummies (bool columns, or int columns of 0 and 1), or one column
        of group labels (strings or a categorical), turned into dummies named ``Group_<label>``.
    **kwargs
        As :func:`cate`.

    Returns
    -------
    doubleml.DoubleMLBLP
        Fitted, with ``is_gate``: ``confint()`` is indexed by the group names.

    Raises
    ------
    fanfit.errors.InvalidDataError
        ``groups`` not a DataFrame, of another row count, several columns that are not dummies,
        int dummies other than 0 and 1, or missing labels.
    fanfit.errors.UnsupportedArgumentError, fanfit.errors.InvalidJobError
        As :func:`cate`.
    """
    inputs = _inputs(source)
    _check_model(inputs, "gate", ("plr", "irm"))
    dummies = _dummies(groups, inputs.n_obs)
    if any(dummies.sum(axis=0) <= 5):
        warnings.warn(
            "At least one group effect is estimated with less than 6 observations.", stacklevel=2
        )
    return cate(inputs, dummies, is_gate=True, **kwargs)


def policy_tree(source: Any, features: Any, depth: int = 2, **tree_params: Any) -> Any:
    r"""A policy tree: who should be treated, as DoubleML's ``DoubleMLIRM.policy_tree``.

    A :class:`sklearn.tree.DecisionTreeClassifier` of depth ``depth`` on ``features`` with label
    :math:`\mathbb 1\{\tilde Y_i > 0\}` and sample weight :math:`|\tilde Y_i|`, :math:`\tilde Y` the
    doubly robust signal (:func:`fanfit.dml.heterogeneity.irm_orthogonal_signal`): the tree
    maximizes the estimated gain of its policy over the class of depth-``depth`` trees (policy
    learning with doubly robust scores, Athey and Wager 2021, Econometrica 89(1), eq. (8);
    DoubleML user guide, "Heterogeneous treatment effects", policy learning with trees).

    Parameters
    ----------
    source
        As :func:`cate`; an IRM with score ``'ATE'``, binary treatment and one repetition.
    features : pandas.DataFrame, shape (n_obs, k)
        The covariates the policy may depend on, numeric and finite.
    depth : int
        Depth of the tree, at least 1.
    **tree_params
        Passed to ``DecisionTreeClassifier``; DoubleML's defaults ``ccp_alpha=0.01``,
        ``min_samples_leaf=8``.

    Returns
    -------
    doubleml.DoubleMLPolicyTree
        Fitted: ``policy_tree`` (the sklearn tree), ``plot_tree()``, ``predict(features)``.

    Raises
    ------
    fanfit.errors.InvalidDataError
        ``features`` invalid (as ``basis`` in :func:`cate`), or a treatment that is not binary.
    fanfit.errors.InvalidJobError
        ``depth`` not an integer of at least 1, or no out-of-fold predictions.
    fanfit.errors.UnsupportedArgumentError
        A model other than IRM, a score other than ``'ATE'``, or more than one repetition.
    """
    inputs = _inputs(source)
    _check_model(inputs, "policy_tree", ("irm",))
    if isinstance(depth, bool) or not isinstance(depth, numbers.Integral) or depth < 1:
        raise errors.InvalidJobError(f"depth must be an integer of at least 1, got {depth!r}")
    if inputs.n_rep != 1:
        raise errors.UnsupportedArgumentError(
            f"policy_tree needs one repetition (n_rep=1), as DoubleML's; this estimate has "
            f"{inputs.n_rep}"
        )
    if not np.isin(inputs.d, (0.0, 1.0)).all():
        raise errors.InvalidDataError(
            "policy_tree needs a binary treatment (0 or 1); the treatment has other values"
        )
    features = _check_frame(features, "features", inputs.n_obs)
    signal = irm_orthogonal_signal(
        inputs.y, inputs.d, inputs.predictions, inputs.trimming_threshold, inputs.normalize_ipw
    )
    return _doubleml.DoubleMLPolicyTree(
        signal.reshape(-1), depth=int(depth), features=features, **tree_params
    ).fit()


class HeterogeneityMethods:
    """``cate`` and ``gate`` on fanfit's :class:`~fanfit.DoubleMLPLR` and :class:`~fanfit.DoubleMLIRM`."""

    def cate(self, basis: Any, is_gate: bool = False, **kwargs: Any) -> Any:
        """The BLP of the CATE on ``basis``, from this fit's predictions: :func:`cate`."""
        return cate(self, basis, is_gate, **kwargs)

    def gate(self, groups: Any, **kwargs: Any) -> Any:
        """Group average treatment effects, from this fit's predictions: :func:`gate`."""
        return gate(self, groups, **kwargs)


class PolicyTreeMethod:
    """``policy_tree`` on fanfit's :class:`~fanfit.DoubleMLIRM`."""

    def policy_tree(self, features: Any, depth: int = 2, **tree_params: Any) -> Any:
        """A policy tree on ``features``, from this fit's predictions: :func:`policy_tree`."""
        return policy_tree(self, features, depth, **tree_params)
