"""Allow-listed nuisance learner specs.

A job names its nuisance learners as text (``"NAME"`` or ``"NAME:{json}"``) or as a dict
(``{"name": NAME, "params": {...}}``). Only the scikit-learn estimators in :data:`ALLOWED_LEARNERS`
can be named, and only with JSON scalar parameters (or flat lists of them) that the estimator's
``get_params()`` knows. Nothing from a user string is ever imported, evaluated or unpickled: the name is
a key into an explicit dict of classes, the parameters are passed as keyword arguments.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from sklearn.base import BaseEstimator, is_classifier, is_regressor
from sklearn.dummy import DummyClassifier, DummyRegressor
from sklearn.ensemble import (
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.linear_model import (
    BayesianRidge,
    ElasticNet,
    ElasticNetCV,
    HuberRegressor,
    Lasso,
    LassoCV,
    LinearRegression,
    LogisticRegression,
    LogisticRegressionCV,
    Ridge,
    RidgeCV,
)
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from fanfit.errors import InvalidLearnerError
from fanfit.learners.torch_mlp import TorchMLPClassifier, TorchMLPRegressor

__all__ = ["ALLOWED_LEARNERS", "GPU_ONLY_LEARNERS", "LearnerSpec"]

#: Every estimator a job may name: an explicit map from the class name to the class. Every regressor
#: here has ``predict``; every classifier has ``predict_proba`` (DoubleML needs it for propensities).
ALLOWED_LEARNERS: dict[str, type] = {
    # linear models
    "LinearRegression": LinearRegression,
    "Lasso": Lasso,
    "LassoCV": LassoCV,
    "Ridge": Ridge,
    "RidgeCV": RidgeCV,
    "ElasticNet": ElasticNet,
    "ElasticNetCV": ElasticNetCV,
    "BayesianRidge": BayesianRidge,
    "HuberRegressor": HuberRegressor,
    "LogisticRegression": LogisticRegression,
    "LogisticRegressionCV": LogisticRegressionCV,
    # trees and ensembles
    "DecisionTreeRegressor": DecisionTreeRegressor,
    "DecisionTreeClassifier": DecisionTreeClassifier,
    "RandomForestRegressor": RandomForestRegressor,
    "RandomForestClassifier": RandomForestClassifier,
    "ExtraTreesRegressor": ExtraTreesRegressor,
    "ExtraTreesClassifier": ExtraTreesClassifier,
    "GradientBoostingRegressor": GradientBoostingRegressor,
    "GradientBoostingClassifier": GradientBoostingClassifier,
    "HistGradientBoostingRegressor": HistGradientBoostingRegressor,
    "HistGradientBoostingClassifier": HistGradientBoostingClassifier,
    # neighbours, neural networks, baselines
    "KNeighborsRegressor": KNeighborsRegressor,
    "KNeighborsClassifier": KNeighborsClassifier,
    "MLPRegressor": MLPRegressor,
    "MLPClassifier": MLPClassifier,
    "DummyRegressor": DummyRegressor,
    "DummyClassifier": DummyClassifier,
    # PyTorch networks (torch is imported when they fit; see GPU_ONLY_LEARNERS)
    "TorchMLPRegressor": TorchMLPRegressor,
    "TorchMLPClassifier": TorchMLPClassifier,
}

#: Learners too heavy for Lambda (PyTorch does not fit the 250 MB unzipped code limit): a stage that
#: uses one runs on a Batch (GPU) worker. See :attr:`LearnerSpec.requires_gpu`.
GPU_ONLY_LEARNERS: frozenset[str] = frozenset({"TorchMLPRegressor", "TorchMLPClassifier"})

_SCALAR_TYPES = (str, int, float, bool, type(None))


def _allowed_names() -> str:
    return ", ".join(sorted(ALLOWED_LEARNERS))


def _check_json_value(name: str, key: str, value: Any) -> None:
    """Raise unless ``value`` is a JSON scalar (finite number) or a flat list of them."""
    values = value if isinstance(value, list) else [value]
    for item in values:
        ok = isinstance(item, _SCALAR_TYPES) and type(item) in _SCALAR_TYPES
        if ok and isinstance(item, float) and not math.isfinite(item):
            ok = False
        if not ok:
            raise InvalidLearnerError(
                f"Learner {name}: parameter {key!r} has value {item!r} of type "
                f"{type(item).__name__}; only JSON values are allowed: str, int, finite float, bool, "
                "null, or a flat list of those."
            )


@dataclass(frozen=True)
class LearnerSpec:
    """An allow-listed scikit-learn estimator and its JSON parameters.

    Constructing a spec validates it: the name must be a key of :data:`ALLOWED_LEARNERS`, every
    parameter a key of the class's ``get_params()`` with a JSON value, and the estimator must accept
    the values (scikit-learn's own parameter constraints are checked).

    Parameters
    ----------
    name : str
        Class name, a key of :data:`ALLOWED_LEARNERS` (e.g. ``"RandomForestRegressor"``).
    params : dict
        Constructor keyword arguments; values are ``str``, ``int``, ``float``, ``bool``, ``None``
        or flat lists of those.

    Raises
    ------
    InvalidLearnerError
        Unknown name (the message lists the allowed names), unknown parameter (the message lists the
        class's parameters), a non-JSON value, or a value the estimator rejects.

    Examples
    --------
    >>> spec = LearnerSpec.parse('RandomForestRegressor:{"n_estimators": 50, "random_state": 42}')
    >>> str(spec)
    'RandomForestRegressor:{"n_estimators":50,"random_state":42}'
    """

    name: str
    params: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or self.name not in ALLOWED_LEARNERS:
            raise InvalidLearnerError(
                f"Unknown learner {self.name!r}. Allowed learners: {_allowed_names()}."
            )
        if not isinstance(self.params, dict):
            raise InvalidLearnerError(
                f"Learner {self.name}: params must be a JSON object (dict), got "
                f"{type(self.params).__name__}."
            )
        cls = ALLOWED_LEARNERS[self.name]
        valid = sorted(cls().get_params(deep=False))
        for key, value in self.params.items():
            if not isinstance(key, str) or key not in valid:
                raise InvalidLearnerError(
                    f"Learner {self.name} has no parameter {key!r}. "
                    f"Its parameters are: {', '.join(valid)}."
                )
            _check_json_value(self.name, key, value)
        # keep a private copy so that later changes to the caller's dict do not leak in
        object.__setattr__(
            self,
            "params",
            {k: (list(v) if isinstance(v, list) else v) for k, v in self.params.items()},
        )
        try:
            estimator = cls(**self.params)
            validate = getattr(estimator, "_validate_params", None)
            if validate is not None:
                validate()
        except (TypeError, ValueError) as exc:
            raise InvalidLearnerError(f"Learner {self.name}: invalid parameters: {exc}") from exc

    # ------------------------------------------------------------------ constructors
    @classmethod
    def parse(cls, text: str) -> LearnerSpec:
        """Parse ``"NAME"`` or ``"NAME:{json}"``.

        Parameters
        ----------
        text : str
            E.g. ``"LassoCV"`` or ``'LassoCV:{"cv": 5}'``.

        Returns
        -------
        LearnerSpec

        Raises
        ------
        InvalidLearnerError
            Not a string, JSON that does not parse to an object, or any reason listed on the class.
        """
        if not isinstance(text, str):
            raise InvalidLearnerError(
                f"A learner spec must be a string like 'NAME' or 'NAME:{{json}}', got {text!r}."
            )
        name, sep, rest = text.strip().partition(":")
        name = name.strip()
        params: Any = {}
        if sep:
            try:
                params = json.loads(rest, parse_constant=_reject_constant)
            except ValueError as exc:
                raise InvalidLearnerError(
                    f"Learner {name}: the parameters after ':' are not valid JSON ({exc}); "
                    'write them as a JSON object, e.g. RandomForestRegressor:{"n_estimators": 100}.'
                ) from exc
            if not isinstance(params, dict):
                raise InvalidLearnerError(
                    f"Learner {name}: the parameters after ':' must be a JSON object, got {rest.strip()!r}."
                )
        return cls(name, params)

    @classmethod
    def from_dict(cls, d: Any) -> LearnerSpec:
        """Build from ``{"name": NAME, "params": {...}}`` (``params`` optional), validated as :meth:`parse`.

        A plain string is accepted too and handed to :meth:`parse`.
        """
        if isinstance(d, str):
            return cls.parse(d)
        if not isinstance(d, dict):
            raise InvalidLearnerError(
                f'A learner must be a string or an object {{"name": ..., "params": {{...}}}}, got {d!r}.'
            )
        extra = sorted(set(d) - {"name", "params"})
        if extra:
            raise InvalidLearnerError(
                f"Learner object has unknown keys {extra}; allowed keys are 'name' and 'params'."
            )
        if "name" not in d:
            raise InvalidLearnerError(f"Learner object {d!r} has no 'name'.")
        params = d.get("params")
        return cls(d["name"], {} if params is None else params)

    def to_dict(self) -> dict:
        """``{"name": NAME, "params": {...}}`` (JSON-safe)."""
        return {"name": self.name, "params": {k: self.params[k] for k in sorted(self.params)}}

    def __str__(self) -> str:
        """Canonical text ``NAME:{json}`` with sorted keys and compact separators."""
        return f"{self.name}:{json.dumps(self.params, sort_keys=True, separators=(',', ':'))}"

    # ------------------------------------------------------------------ properties
    @property
    def estimator_class(self) -> type:
        """The scikit-learn class."""
        return ALLOWED_LEARNERS[self.name]

    @property
    def is_classifier(self) -> bool:
        """Whether the estimator is a classifier (DoubleML then uses ``predict_proba[:, 1]``)."""
        return bool(is_classifier(self.estimator_class()))

    @property
    def is_regressor(self) -> bool:
        """Whether the estimator is a regressor (DoubleML then uses ``predict``)."""
        return bool(is_regressor(self.estimator_class()))

    @property
    def requires_gpu(self) -> bool:
        """Whether the learner must run on a Batch worker (its name is in :data:`GPU_ONLY_LEARNERS`)."""
        return self.name in GPU_ONLY_LEARNERS

    # ------------------------------------------------------------------ build
    def build(self, random_state: int | None = None) -> BaseEstimator:
        """A new unfitted estimator.

        Parameters
        ----------
        random_state : int or None
            Set as the estimator's ``random_state`` only if the class has that parameter **and** the
            user did not give one in ``params``: a user-given ``random_state`` is kept verbatim.

        Returns
        -------
        sklearn.base.BaseEstimator
        """
        estimator = self.estimator_class(**self.params)
        if (
            random_state is not None
            and "random_state" not in self.params
            and "random_state" in estimator.get_params(deep=False)
        ):
            estimator.set_params(random_state=int(random_state))
        return estimator


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not allowed")
