"""DoubleML's nuisance parameters on the stack: what ``set_ml_nuisance_params`` (and ``tune``) set.

DoubleML 0.11.4 keeps, per nuisance (its ``params_names``: ``ml_l``, ``ml_g0``, ``ml_m_z``, ...) and
treatment column, either nothing or ``n_rep`` lists of ``n_folds`` dicts, and fits the learner of
fold ``i_fold`` of repetition ``i_rep`` as ``clone(learner).set_params(**params[i_rep][i_fold])``
(``DoubleML._get_params``, ``doubleml.utils._estimation._dml_cv_predict``; the fold procedures of
PQ, CVaR, LPQ and SSM build one model per outer fold the same way). A job carries them as
:attr:`fanfit.dml.DMLSpec.learner_params`::

    {"ml_l": {"d": {"alpha": 0.1}},                         # every repetition and fold
     "ml_m": {"d": [[{"alpha": 0.2}, ..., {"alpha": 0.3}],   # n_rep lists of n_folds dicts
                    ...]}}

and every fit unit builds its learner with the parameters of its (nuisance, treatment,
repetition, fold) (:func:`unit_learner`), so its predictions are the ones DoubleML's ``fit()``
computes after the same ``set_ml_nuisance_params`` calls. One exception follows DoubleML: the
inner fits of DoubleMLLPLR's ``ml_M`` and ``ml_a`` (``_double_dml_cv_predict``) use the
parameters of the outer fold whose index is the inner fold's (so per-fold parameters need ``n_folds_inner
== n_folds``; :func:`check_learner_params` says so; one dict serves any ``n_folds_inner``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fanfit.dml.folds import DEFAULT_N_FOLDS_INNER
from fanfit.dml.model_checks import DMLSpec
from fanfit.dml.models import model_def
from fanfit.errors import InvalidJobError, InvalidLearnerError
from fanfit.learners import LearnerSpec

__all__ = [
    "INNER_FOLD_PARAMS",
    "check_learner_params",
    "fold_params",
    "param_keys",
    "unit_learner",
]

#: The nuisances whose inner fits take the parameters of the outer fold of the inner fold's index
#: (DoubleMLLPLR's ``_double_dml_cv_predict`` of ``ml_M`` and ``ml_a``), by model.
INNER_FOLD_PARAMS = {"lplr": ("ml_M", "ml_a")}

#: Most distinct parameter dicts one job's ``learner_params`` may hold (each is validated by
#: building its learner's spec).
MAX_DISTINCT_PARAMS = 10_000


def param_keys(spec: DMLSpec) -> dict[str, str]:
    """The nuisances a spec fits, as DoubleML names them for ``set_ml_nuisance_params``, and the
    learner each fits: ``{params name: spec.learners name}`` (PLR ``{'ml_l': 'ml_l', 'ml_m':
    'ml_m'}``, IRM ``{'ml_g0': 'ml_g', 'ml_g1': 'ml_g', 'ml_m': 'ml_m'}``)."""
    return {n.key: n.learner for n in model_def(spec.model).nuisances(spec)}


def fold_params(spec: DMLSpec, key: str, i_treat: int, i_rep: int, i_fold: int) -> dict[str, Any]:
    """The parameters nuisance ``key`` is fitted with in fold ``i_fold`` of repetition ``i_rep``
    for treatment ``i_treat``: ``{}`` when none are set.

    Returns
    -------
    dict of str to JSON value
    """
    by_treat = (spec.learner_params or {}).get(key)
    if not by_treat:
        return {}
    value = by_treat.get(spec.d_cols[i_treat])
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    return dict(value[i_rep][i_fold])


def unit_learner(
    spec: DMLSpec, key: str, i_treat: int, i_rep: int, i_fold: int, learner: str | None = None
) -> LearnerSpec:
    """The learner spec nuisance ``key`` is fitted with in one fold: ``spec.learners[learner]``
    with :func:`fold_params` set (:meth:`fanfit.learners.LearnerSpec.with_params`).

    Parameters
    ----------
    spec : DMLSpec
    key : str
        The nuisance (a prediction key, DoubleML's params name).
    i_treat, i_rep, i_fold : int
    learner : str, optional
        The ``spec.learners`` name; default the one the model's nuisance ``key`` fits.

    Raises
    ------
    InvalidJobError
        A learner the spec does not define.
    """
    name = learner or param_keys(spec).get(key, key)
    if name not in spec.learners:
        raise InvalidJobError(
            f"Nuisance {key} needs learner {name!r}, which the spec does not define."
        )
    base = spec.learners[name]
    params = fold_params(spec, key, i_treat, i_rep, i_fold)
    return base.with_params(params) if params else base


def check_learner_params(spec: DMLSpec) -> None:
    """Check :attr:`~fanfit.dml.DMLSpec.learner_params` against the spec: every key a nuisance
    the model fits, every treatment one of ``d_cols``, every value a dict or ``n_rep`` lists of
    ``n_cross_folds`` dicts, and every distinct dict valid for its learner (built with
    :meth:`~fanfit.learners.LearnerSpec.with_params`).

    Raises
    ------
    InvalidJobError
        Naming the nuisance, the treatment and, for a list, the repetition and fold.
    InvalidLearnerError
        A parameter the learner does not have or a value it rejects, naming the nuisance.
    """
    given = spec.learner_params
    if given is None:
        return
    if not isinstance(given, Mapping):
        raise InvalidJobError(
            "learner_params must be an object {nuisance: {treatment column: params}}, got "
            f"{type(given).__name__}."
        )
    keys = param_keys(spec)
    seen: set[tuple[str, str]] = set()
    for key, by_treat in given.items():
        if key not in keys:
            raise InvalidJobError(
                f"learner_params names nuisance {key!r}; model {spec.model!r} with score "
                f"{spec.score!r} fits {', '.join(keys)}."
            )
        if not isinstance(by_treat, Mapping):
            raise InvalidJobError(
                f"learner_params[{key!r}] must be an object {{treatment column: params}}, got "
                f"{type(by_treat).__name__}."
            )
        for d_col, value in by_treat.items():
            if d_col not in spec.d_cols:
                raise InvalidJobError(
                    f"learner_params[{key!r}] names treatment {d_col!r}; the treatments are "
                    f"{', '.join(spec.d_cols)}."
                )
            for where, params in _entries(spec, key, d_col, value):
                if not isinstance(params, Mapping):
                    raise InvalidJobError(
                        f"learner_params[{key!r}][{d_col!r}]{where} must be an object of "
                        f"parameters, got {type(params).__name__}."
                    )
                text = json.dumps(params, sort_keys=True, default=str)
                if (key, text) in seen:
                    continue
                seen.add((key, text))
                if len(seen) > MAX_DISTINCT_PARAMS:
                    raise InvalidJobError(
                        f"learner_params holds more than {MAX_DISTINCT_PARAMS:,} distinct "
                        "parameter sets; give fewer."
                    )
                try:
                    spec.learners[keys[key]].with_params(dict(params))
                except InvalidLearnerError as exc:
                    raise InvalidLearnerError(
                        f"learner_params[{key!r}][{d_col!r}]{where}: {exc}"
                    ) from exc
    _check_inner_folds(spec, given)


def _entries(spec: DMLSpec, key: str, d_col: str, value: Any) -> list[tuple[str, Any]]:
    """``(where, params)`` of one (nuisance, treatment) entry: one dict, or n_rep x n_folds."""
    if isinstance(value, Mapping):
        return [("", value)]
    n_folds = spec.n_cross_folds
    if not isinstance(value, list | tuple) or len(value) != spec.n_rep:
        raise InvalidJobError(
            f"learner_params[{key!r}][{d_col!r}] must be an object of parameters (every "
            f"repetition and fold) or a list of n_rep={spec.n_rep} lists of n_folds={n_folds} "
            "objects, as DoubleML's set_ml_nuisance_params takes them."
        )
    out = []
    for i_rep, per_fold in enumerate(value):
        if not isinstance(per_fold, list | tuple) or len(per_fold) != n_folds:
            raise InvalidJobError(
                f"learner_params[{key!r}][{d_col!r}][{i_rep}] must be a list of "
                f"n_folds={n_folds} objects of parameters, one per fold."
            )
        out += [(f"[{i_rep}][{i_fold}]", p) for i_fold, p in enumerate(per_fold)]
    return out


def _check_inner_folds(spec: DMLSpec, given: Mapping[str, Any]) -> None:
    """DoubleMLLPLR's inner fit ``k`` takes outer fold ``k``'s parameters (module docstring), and
    DoubleML asserts one setting per inner fold (``_dml_cv_predict``), so per-fold parameters of
    ``ml_M`` or ``ml_a`` need ``n_folds_inner == n_folds``."""
    per_fold = sorted(
        k
        for k in INNER_FOLD_PARAMS.get(spec.model, ())
        if any(not isinstance(v, Mapping) for v in (given.get(k) or {}).values())
    )
    n_inner = spec.n_folds_inner or DEFAULT_N_FOLDS_INNER
    if per_fold and n_inner != spec.n_cross_folds:
        raise InvalidJobError(
            f"per-fold learner_params of {', '.join(per_fold)} with n_folds_inner={n_inner} and "
            f"n_folds={spec.n_cross_folds}: DoubleML fits inner fold k with the parameters of "
            "outer fold k and needs one per inner fold; give one dict of parameters for every "
            "fold, or n_folds_inner equal to n_folds."
        )
