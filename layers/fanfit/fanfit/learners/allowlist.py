"""The allow-lists of nuisance learners, pipeline steps and composites, and estimator objects as JSON.

Three explicit maps from a class name to the class, and nothing else, decide what a job may name:

- :data:`ALLOWED_LEARNERS`: the estimators a nuisance learner (or a pipeline's last step, or a
  search's estimator) may be;
- :data:`ALLOWED_TRANSFORMERS`: the preprocessing steps a pipeline may have before its estimator;
- :data:`COMPOSITE_LEARNERS`: ``Pipeline``, ``GridSearchCV`` and ``RandomizedSearchCV`` around them.

:func:`estimator_to_dict` turns a scikit-learn estimator object into the JSON form that
:class:`fanfit.learners.LearnerSpec` reads, from its class (looked up by identity, never imported by
name) and ``get_params(deep=False)`` (only the parameters that differ from the class's defaults).
Objects are never pickled: what does not fit the JSON form (a callable, an array, a CV splitter, a
class outside the lists) is refused with :class:`fanfit.errors.InvalidLearnerError`.
"""

from __future__ import annotations

import importlib
import math
import numbers
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from fanfit.errors import InvalidLearnerError

__all__ = [
    "ALLOWED_LEARNERS",
    "ALLOWED_TRANSFORMERS",
    "BATCHED_LEARNERS",
    "COMPOSITE_LEARNERS",
    "ClassMap",
    "EXTRA_PARAMS",
    "GPU_ONLY_LEARNERS",
    "SEARCH_PARAMS",
    "allowed_names",
    "check_json_value",
    "estimator_to_dict",
    "json_value",
]


# The modules the classes live in, each imported when a class of it is first looked up: a cold
# Lambda that never builds a learner (Release, the train steps) then never imports scikit-learn or
# LightGBM, which take most of a handler's start-up. The module paths are this module's constants
# (LightGBM pinned to 4.7.0 by the scientific layer and pyproject); a name from a job only ever
# selects one of them.
_DUMMY = "sklearn.dummy"
_ENSEMBLE = "sklearn.ensemble"
_LINEAR = "sklearn.linear_model"
_MODEL_SELECTION = "sklearn.model_selection"
_NEIGHBORS = "sklearn.neighbors"
_NEURAL = "sklearn.neural_network"
_PIPELINE = "sklearn.pipeline"
_PREPROCESSING = "sklearn.preprocessing"
_TREE = "sklearn.tree"
_LIGHTGBM = "lightgbm"
_TORCH_MLP = "fanfit.learners.torch_mlp"


class ClassMap(Mapping[str, type]):
    """A fixed map from class names to classes, each class imported on its first lookup.

    Iterating, ``len`` and ``in`` need no import (the names are fixed here); ``table[name]`` and
    ``table.get(name)`` import the class's module once. A name that is not a key raises
    ``KeyError`` (``get`` returns the default), as a ``dict`` does.
    """

    def __init__(self, modules: dict[str, str]) -> None:
        self._modules = dict(modules)
        self._classes: dict[str, type] = {}

    def __getitem__(self, name: str) -> type:
        cls = self._classes.get(name)
        if cls is None:
            cls = getattr(importlib.import_module(self._modules[name]), name)
            self._classes[name] = cls
        return cls

    def __contains__(self, name: object) -> bool:
        return name in self._modules

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)


#: Every estimator a job may name: an explicit map from the class name to the module that holds it
#: (imported on first lookup, :class:`ClassMap`). Every regressor here has ``predict``; every
#: classifier has ``predict_proba`` (DoubleML needs it for propensities).
ALLOWED_LEARNERS: ClassMap = ClassMap(
    {
        # linear models
        "LinearRegression": _LINEAR,
        "Lasso": _LINEAR,
        "LassoCV": _LINEAR,
        "Ridge": _LINEAR,
        "RidgeCV": _LINEAR,
        "ElasticNet": _LINEAR,
        "ElasticNetCV": _LINEAR,
        "BayesianRidge": _LINEAR,
        "HuberRegressor": _LINEAR,
        "LogisticRegression": _LINEAR,
        "LogisticRegressionCV": _LINEAR,
        # trees and ensembles
        "DecisionTreeRegressor": _TREE,
        "DecisionTreeClassifier": _TREE,
        "RandomForestRegressor": _ENSEMBLE,
        "RandomForestClassifier": _ENSEMBLE,
        "ExtraTreesRegressor": _ENSEMBLE,
        "ExtraTreesClassifier": _ENSEMBLE,
        "GradientBoostingRegressor": _ENSEMBLE,
        "GradientBoostingClassifier": _ENSEMBLE,
        "HistGradientBoostingRegressor": _ENSEMBLE,
        "HistGradientBoostingClassifier": _ENSEMBLE,
        # neighbours, neural networks, baselines
        "KNeighborsRegressor": _NEIGHBORS,
        "KNeighborsClassifier": _NEIGHBORS,
        "MLPRegressor": _NEURAL,
        "MLPClassifier": _NEURAL,
        "DummyRegressor": _DUMMY,
        "DummyClassifier": _DUMMY,
        # PyTorch networks (torch is imported when they fit; see GPU_ONLY_LEARNERS)
        "TorchMLPRegressor": _TORCH_MLP,
        "TorchMLPClassifier": _TORCH_MLP,
        # gradient boosting by LightGBM (deterministic settings: docs/estimate.md, "LightGBM")
        "LGBMRegressor": _LIGHTGBM,
        "LGBMClassifier": _LIGHTGBM,
    }
)

#: Preprocessing steps a ``Pipeline`` may have before its last step (an allowed learner).
ALLOWED_TRANSFORMERS: ClassMap = ClassMap(
    {
        "StandardScaler": _PREPROCESSING,
        "MinMaxScaler": _PREPROCESSING,
        "RobustScaler": _PREPROCESSING,
        "MaxAbsScaler": _PREPROCESSING,
        "PolynomialFeatures": _PREPROCESSING,
        "SplineTransformer": _PREPROCESSING,
        "OneHotEncoder": _PREPROCESSING,
    }
)

#: Learners built around other learners; their JSON form is in :mod:`fanfit.learners.specs`.
COMPOSITE_LEARNERS: ClassMap = ClassMap(
    {
        "Pipeline": _PIPELINE,
        "GridSearchCV": _MODEL_SELECTION,
        "RandomizedSearchCV": _MODEL_SELECTION,
    }
)

#: Learners too heavy for Lambda (PyTorch does not fit the 250 MB unzipped code limit): a stage that
#: uses one runs on a Batch (GPU) worker. See :attr:`LearnerSpec.requires_gpu`.
GPU_ONLY_LEARNERS: frozenset[str] = frozenset({"TorchMLPRegressor", "TorchMLPClassifier"})
#: Learners whose fits of one shard train together as one batched model
#: (:mod:`fanfit.learners.torch_batched`, :func:`fanfit.dml.fit_predict_units`).
BATCHED_LEARNERS: frozenset[str] = frozenset({"TorchMLPRegressor", "TorchMLPClassifier"})

#: LightGBM parameters passed through the scikit-learn wrapper's ``**kwargs`` that a spec may set
#: besides the constructor's named ones (the deterministic settings among them).
_LGBM_EXTRA = frozenset(
    {
        "verbose", "verbosity", "deterministic", "force_row_wise", "force_col_wise",
        "num_threads", "seed", "bagging_seed", "feature_fraction_seed", "data_random_seed",
        "max_bin", "min_data_in_bin", "extra_trees", "path_smooth", "linear_tree",
        "max_cat_to_onehot", "cat_smooth", "cat_l2", "min_sum_hessian_in_leaf",
    }
)  # fmt: skip

#: Parameters a class takes beyond its ``get_params()`` defaults (LightGBM's ``**kwargs``).
EXTRA_PARAMS: dict[str, frozenset[str]] = {
    "LGBMRegressor": _LGBM_EXTRA,
    "LGBMClassifier": _LGBM_EXTRA,
}

#: The parameters of each search class a spec may set, besides ``estimator`` and the grid.
SEARCH_PARAMS: dict[str, tuple[str, ...]] = {
    "GridSearchCV": ("cv", "error_score", "n_jobs", "pre_dispatch", "refit",
                     "return_train_score", "scoring", "verbose"),
    "RandomizedSearchCV": ("cv", "error_score", "n_iter", "n_jobs", "pre_dispatch",
                           "random_state", "refit", "return_train_score", "scoring", "verbose"),
}  # fmt: skip

_SCALAR_TYPES = (str, int, float, bool, type(None))


def allowed_names(kind: str = "learner") -> str:
    """The allowed class names of ``kind`` (``'learner'``, ``'step'`` or ``'any'``), comma-separated."""
    names = set(ALLOWED_LEARNERS)
    if kind == "step":
        names |= set(ALLOWED_TRANSFORMERS)
    elif kind == "any":
        names |= set(ALLOWED_TRANSFORMERS) | set(COMPOSITE_LEARNERS)
    else:
        names |= set(COMPOSITE_LEARNERS)
    return ", ".join(sorted(names))


def check_json_value(where: str, key: str, value: Any) -> None:
    """Raise unless ``value`` is a JSON scalar (finite number) or a flat list of them.

    Raises
    ------
    InvalidLearnerError
        Naming ``where`` (the learner or step) and the parameter ``key``.
    """
    values = value if isinstance(value, list) else [value]
    for item in values:
        ok = isinstance(item, _SCALAR_TYPES) and type(item) in _SCALAR_TYPES
        if ok and isinstance(item, float) and not math.isfinite(item):
            ok = False
        if not ok:
            raise InvalidLearnerError(
                f"Learner {where}: parameter {key!r} has value {_short(item)} of type "
                f"{type(item).__name__}; only JSON values are allowed: str, int, finite float, bool, "
                "null, or a flat list of those."
            )


def json_value(where: str, key: str, value: Any) -> Any:
    """``value`` as a JSON value: numpy scalars as Python's, tuples as lists; else refused.

    Raises
    ------
    InvalidLearnerError
        A callable, an array, an estimator or any other object, naming ``where`` and ``key``.
    """
    if isinstance(value, tuple | list):
        out: Any = [json_value(where, key, v) for v in value]
    elif isinstance(value, np.bool_):
        out = bool(value)
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        out = int(value)
    elif isinstance(value, np.floating):
        out = float(value)
    else:
        out = value
    check_json_value(where, key, out)
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _same(a: Any, b: Any) -> bool:
    """Whether a parameter value equals the class default (arrays and objects never do)."""
    if a is b:
        return True
    try:
        return type(a) is type(b) and bool(a == b)
    except (TypeError, ValueError):
        return False


def _lookup(est: Any, where: str, table: ClassMap) -> str:
    cls = type(est)
    name = cls.__name__
    if table.get(name) is not cls:
        what = "a step" if table is ALLOWED_TRANSFORMERS else "a learner"
        raise InvalidLearnerError(
            f"{where}: {cls.__module__}.{name} is not allowed as {what}. "
            f"Allowed: {', '.join(sorted(table))}."
        )
    return name


def _params_to_dict(est: Any, name: str, where: str, skip: tuple[str, ...] = ()) -> dict:
    """The parameters of ``est`` that differ from its class's defaults, as JSON values."""
    if name == "Pipeline":
        defaults = COMPOSITE_LEARNERS["Pipeline"]([("step", None)]).get_params(deep=False)
    else:
        defaults = type(est)().get_params(deep=False)
    params = {}
    for key, value in est.get_params(deep=False).items():
        if key in skip or (key in defaults and _same(value, defaults[key])):
            continue
        params[key] = json_value(where, key, value)
    return params


def _grid_to_json(where: str, key: str, grid: Any) -> Any:
    """A search's ``param_grid``/``param_distributions``: dicts of lists of JSON values."""
    grids = grid if isinstance(grid, list | tuple) else [grid]
    out = []
    for one in grids:
        if not isinstance(one, dict):
            raise InvalidLearnerError(
                f"Learner {where}: {key} must be a dict (or a list of dicts) of parameter names to "
                f"lists of JSON values, got {_short(one)}."
            )
        entry = {}
        for name, values in one.items():
            if not isinstance(values, list | tuple | np.ndarray):
                raise InvalidLearnerError(
                    f"Learner {where}: {key}[{name!r}] is {_short(values)}; only lists of JSON "
                    "values are allowed (no scipy.stats distributions or other objects)."
                )
            entry[str(name)] = json_value(where, f"{key}[{name!r}]", list(values))
        out.append(entry)
    return out if isinstance(grid, list | tuple) else out[0]


def estimator_to_dict(est: Any, where: str = "learner") -> dict:
    """A scikit-learn estimator object as the JSON form ``{"name": ..., "params": {...}}``.

    The class is matched by identity against :data:`ALLOWED_LEARNERS` and
    :data:`COMPOSITE_LEARNERS`; ``params`` holds what ``get_params(deep=False)`` gives that differs
    from the class's defaults (so a ``random_state`` the user did not set stays unset, and fanfit
    seeds it). A ``Pipeline``'s steps and a search's estimator are converted the same way, steps
    as ``[step_name, {...}]`` pairs. A fitted estimator is converted from its parameters only.

    Parameters
    ----------
    est : estimator
        E.g. ``RandomForestRegressor(n_estimators=500)`` or ``make_pipeline(StandardScaler(), Lasso())``.
    where : str
        How errors name the learner (e.g. ``'ml_l'``).

    Returns
    -------
    dict
        JSON-safe; read by :meth:`fanfit.learners.LearnerSpec.from_dict`, which validates it.

    Raises
    ------
    InvalidLearnerError
        An object without ``get_params``, a class outside the allow-lists, or a parameter value
        that is not JSON (a callable, an array, a CV splitter, ...), naming the learner, step and
        parameter.
    """
    if isinstance(est, type) or not callable(getattr(est, "get_params", None)):
        raise InvalidLearnerError(
            f"{where}: {_short(est)} ({type(est).__name__}) is not a scikit-learn estimator object "
            "(no get_params). Give an unfitted estimator of an allowed class, 'NAME' or "
            f"'NAME:{{json}}'. Allowed learners: {allowed_names()}."
        )
    name = type(est).__name__
    if COMPOSITE_LEARNERS.get(name) is type(est):
        return _composite_to_dict(est, name, where)
    _lookup(est, where, ALLOWED_LEARNERS)
    return {"name": name, "params": _params_to_dict(est, name, f"{where} ({name})")}


def _composite_to_dict(est: Any, name: str, where: str) -> dict:
    label = f"{where} ({name})"
    if name == "Pipeline":
        steps = []
        for i, (step_name, step) in enumerate(est.steps):
            at = f"{where} step {i} {step_name!r}"
            if i < len(est.steps) - 1:
                if step is None or isinstance(step, str):
                    raise InvalidLearnerError(
                        f"{at}: {step!r} steps are not allowed; give a transformer of: "
                        f"{', '.join(sorted(ALLOWED_TRANSFORMERS))}."
                    )
                step_cls = _lookup(step, at, ALLOWED_TRANSFORMERS)
                d = {"name": step_cls, "params": _params_to_dict(step, step_cls, at)}
            else:
                if ALLOWED_TRANSFORMERS.get(type(step).__name__) is type(step):
                    raise InvalidLearnerError(
                        f"{at}: the last step must be a learner, got {type(step).__name__}. "
                        f"Allowed learners: {', '.join(sorted(ALLOWED_LEARNERS))}."
                    )
                d = estimator_to_dict(step, at)
            steps.append([step_name, d])
        params = _params_to_dict(est, name, label, skip=("steps",))
        return {"name": name, "params": {"steps": steps, **params}}
    grid_key = "param_grid" if name == "GridSearchCV" else "param_distributions"
    inner = estimator_to_dict(est.estimator, f"{where} estimator")
    defaults = type(est)(estimator=None, **{grid_key: {}}).get_params(deep=False)
    out: dict[str, Any] = {
        "estimator": inner,
        grid_key: _grid_to_json(label, grid_key, getattr(est, grid_key)),
    }
    for key, value in est.get_params(deep=False).items():
        if key in ("estimator", grid_key) or _same(value, defaults.get(key)):
            continue
        out[key] = json_value(label, key, value)
    return {"name": name, "params": out}
