"""Allow-listed nuisance learner specs: :class:`LearnerSpec` and :func:`as_learner_spec`.

A job names its nuisance learners as text (``"NAME"``, ``"NAME:{json}"`` or a JSON object), as a
dict (``{"name": NAME, "params": {...}}``) or, from Python, as a scikit-learn estimator object
(converted from its class and ``get_params(deep=False)`` by
:func:`fanfit.learners.allowlist.estimator_to_dict`, never pickled). Only the classes of
:mod:`fanfit.learners.allowlist` can be named, and only with JSON scalar parameters (or flat lists
of them) that the estimator's ``get_params()`` knows. Nothing from a user string is ever imported,
evaluated or unpickled: the name is a key into an explicit dict of classes, the parameters are
passed as keyword arguments.

Composites nest specs in their ``params``:

``Pipeline``
    ``{"name": "Pipeline", "params": {"steps": [STEP, ...]}}`` (``"verbose"`` optional). A step is
    a spec (``"StandardScaler"``, ``{"name": "Lasso", "params": {"alpha": 0.1}}``) named as
    ``make_pipeline`` names it (the lower-cased class name, ``-1``, ``-2`` for repeats), or a pair
    ``["scale", SPEC]`` naming it, as in ``Pipeline(steps=[("scale", ...), ...])``. Every step but
    the last is one of :data:`ALLOWED_TRANSFORMERS`; the last is one of :data:`ALLOWED_LEARNERS`.
``GridSearchCV`` / ``RandomizedSearchCV``
    ``{"name": "GridSearchCV", "params": {"estimator": SPEC, "param_grid": {"alpha": [0.1, 1.0]},
    "cv": 3, "scoring": "neg_mean_squared_error"}}``; ``RandomizedSearchCV`` takes
    ``param_distributions`` (lists only, no scipy distributions), ``n_iter`` and ``random_state``.
    ``SPEC`` is an allowed learner or a ``Pipeline``; the grid's keys are its parameters (a
    pipeline's as ``step__param``), its values non-empty lists of JSON values (a list of such
    dicts is a list of grids). ``cv`` is an integer (or null: 5 folds), ``scoring`` a scikit-learn
    scorer name (or null), ``refit`` stays ``true``: the refitted best estimator predicts.

A composite is a classifier or a regressor as its final estimator is (scikit-learn's
``is_classifier`` of the built object). :meth:`LearnerSpec.build` seeds every estimator inside it
that has a ``random_state`` and was given none (and a ``RandomizedSearchCV`` itself).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fanfit.errors import InvalidLearnerError
from fanfit.learners.allowlist import (
    ALLOWED_LEARNERS,
    ALLOWED_TRANSFORMERS,
    COMPOSITE_LEARNERS,
    EXTRA_PARAMS,
    GPU_ONLY_LEARNERS,
    SEARCH_PARAMS,
    allowed_names,
    check_json_value,
    estimator_to_dict,
    json_value,
)

#: The allowed learners that are classifiers (``predict_proba``): the ``...Classifier`` classes and
#: logistic regression; every other one in :data:`ALLOWED_LEARNERS` is a regressor. Known by name,
#: so that checking a job's learners on the client needs no import of scikit-learn
#: (tests/unit/test_learners.py checks it against scikit-learn's ``is_classifier``).
CLASSIFIER_LEARNERS = frozenset(
    name
    for name in ALLOWED_LEARNERS
    if name.endswith("Classifier") or name.startswith("LogisticRegression")
)

if (
    TYPE_CHECKING
):  # scikit-learn is imported when a learner is built (see fanfit.learners.allowlist)
    from sklearn.base import BaseEstimator

__all__ = [
    "ALLOWED_LEARNERS",
    "ALLOWED_TRANSFORMERS",
    "COMPOSITE_LEARNERS",
    "GPU_ONLY_LEARNERS",
    "LearnerSpec",
    "as_learner_spec",
]

_SCALAR_TYPES = (str, int, float, bool, type(None))
_SEARCHES = ("GridSearchCV", "RandomizedSearchCV")


@dataclass(frozen=True)
class LearnerSpec:
    """An allow-listed scikit-learn estimator (or composite) and its JSON parameters.

    Constructing a spec validates it: the name must be a key of :data:`ALLOWED_LEARNERS` or
    :data:`COMPOSITE_LEARNERS`, every parameter a key of the class's ``get_params()`` with a JSON
    value, and the estimator must accept the values (scikit-learn's own parameter constraints are
    checked). A composite's nested specs are validated the same way and stored in a canonical form
    (see the module docstring), so equal learners give equal specs.

    Parameters
    ----------
    name : str
        Class name, a key of :data:`ALLOWED_LEARNERS` (e.g. ``"RandomForestRegressor"``) or of
        :data:`COMPOSITE_LEARNERS` (``"Pipeline"``, ``"GridSearchCV"``, ``"RandomizedSearchCV"``).
    params : dict
        Constructor keyword arguments; values are ``str``, ``int``, ``float``, ``bool``, ``None``
        or flat lists of those; a composite's ``steps``/``estimator``/grid hold nested specs.

    Raises
    ------
    InvalidLearnerError
        Unknown name (the message lists the allowed names), unknown parameter (the message lists the
        class's parameters), a non-JSON value, or a value the estimator rejects; for a composite,
        naming the step or the search parameter.

    Examples
    --------
    >>> spec = LearnerSpec.parse('RandomForestRegressor:{"n_estimators": 50, "random_state": 42}')
    >>> str(spec)
    'RandomForestRegressor:{"n_estimators":50,"random_state":42}'
    """

    name: str
    params: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or (
            self.name not in ALLOWED_LEARNERS and self.name not in COMPOSITE_LEARNERS
        ):
            raise InvalidLearnerError(
                f"Unknown learner {_shown(self.name)}. Allowed learners: {allowed_names()}."
            )
        if not isinstance(self.params, dict):
            raise InvalidLearnerError(
                f"Learner {self.name}: params must be a JSON object (dict), got "
                f"{type(self.params).__name__}."
            )
        if self.name == "Pipeline":
            params = _pipeline_params(self.params)
        elif self.name in _SEARCHES:
            params = _search_params(self.name, self.params)
        elif not self.params:  # a class's defaults are valid: scikit-learn is not imported
            params = {}
        else:
            params = _check_params(self.name, ALLOWED_LEARNERS[self.name], self.params)
        # keep a private copy so that later changes to the caller's dict do not leak in
        object.__setattr__(self, "params", params)
        if self.name in COMPOSITE_LEARNERS:
            _validate_estimator(self.name, _build(self.name, self.params, None))

    # ------------------------------------------------------------------ constructors
    @classmethod
    def parse(cls, text: str) -> LearnerSpec:
        """Parse ``"NAME"``, ``"NAME:{json}"`` or a JSON object ``{"name": ..., "params": ...}``.

        Parameters
        ----------
        text : str
            E.g. ``"LassoCV"``, ``'LassoCV:{"cv": 5}'`` or
            ``'{"name": "Pipeline", "params": {"steps": ["StandardScaler", "Lasso"]}}'``.

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
        if text.strip().startswith("{"):
            return cls.from_dict(_loads("learner", text))
        name, sep, rest = text.strip().partition(":")
        name = name.strip()
        params: Any = {}
        if sep:
            params = _loads(name, rest)
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

    @classmethod
    def from_estimator(cls, est: Any, role: str = "learner") -> LearnerSpec:
        """The spec of a scikit-learn estimator object (its class and ``get_params(deep=False)``).

        Parameters
        ----------
        est : estimator
            An object of an allowed class, a ``Pipeline`` or a search (see the module docstring).
            Only parameters that differ from the class's defaults are kept, so an unset
            ``random_state`` stays unset (and :meth:`build` seeds it).
        role : str
            How errors name the learner (``'ml_l'``).

        Raises
        ------
        InvalidLearnerError
            See :func:`fanfit.learners.allowlist.estimator_to_dict`, and any reason listed on the class.
        """
        return cls.from_dict(estimator_to_dict(est, role))

    def to_dict(self) -> dict:
        """``{"name": NAME, "params": {...}}`` (JSON-safe, a copy)."""
        return {
            "name": self.name,
            "params": copy.deepcopy({k: self.params[k] for k in sorted(self.params)}),
        }

    def __str__(self) -> str:
        """Canonical text ``NAME:{json}`` with sorted keys and compact separators."""
        return f"{self.name}:{json.dumps(self.params, sort_keys=True, separators=(',', ':'))}"

    # ------------------------------------------------------------------ properties
    @property
    def estimator_class(self) -> type:
        """The scikit-learn class (``Pipeline``, ``GridSearchCV``, ... for a composite)."""
        return ALLOWED_LEARNERS.get(self.name) or COMPOSITE_LEARNERS[self.name]

    @property
    def is_classifier(self) -> bool:
        """Whether the estimator (a composite's final one) is a classifier (DoubleML then uses
        ``predict_proba[:, 1]``). A plain allowed learner is known by name
        (:data:`CLASSIFIER_LEARNERS`); a composite is built."""
        if self.name in ALLOWED_LEARNERS:
            return self.name in CLASSIFIER_LEARNERS
        from sklearn.base import is_classifier

        return bool(is_classifier(self.build()))

    @property
    def is_regressor(self) -> bool:
        """Whether the estimator (a composite's final one) is a regressor (DoubleML then uses
        ``predict``). A plain allowed learner is known by name (:data:`CLASSIFIER_LEARNERS`);
        a composite is built."""
        if self.name in ALLOWED_LEARNERS:
            return self.name not in CLASSIFIER_LEARNERS
        from sklearn.base import is_regressor

        return bool(is_regressor(self.build()))

    @property
    def requires_gpu(self) -> bool:
        """Whether the learner must run on a Batch worker (it, or a step or estimator inside it,
        is in :data:`GPU_ONLY_LEARNERS`)."""
        return bool(_names(self.name, self.params) & GPU_ONLY_LEARNERS)

    def with_params(self, params: dict) -> LearnerSpec:
        """This spec with ``params`` set, as scikit-learn's ``clone(est).set_params(**params)``.

        DoubleML fits a nuisance learner with the parameters of ``set_ml_nuisance_params`` (and
        of ``tune``) this way (``doubleml.utils._estimation._dml_cv_predict``); a spec built from
        the result equals that estimator. A plain learner's keys are its parameters; a
        ``Pipeline``'s are ``STEP__PARAM`` (``"lasso__alpha"``); a search's are its own
        parameters or ``estimator__PARAM``. Values are JSON values (numpy scalars and tuples are
        converted, :func:`fanfit.learners.allowlist.json_value`).

        Parameters
        ----------
        params : dict of str to JSON value
            Empty: this spec itself.

        Returns
        -------
        LearnerSpec
            A new, validated spec.

        Raises
        ------
        InvalidLearnerError
            Not a dict, a key the learner has no parameter for (a pipeline's ``steps`` or a
            step itself included: only JSON values can be set), a non-JSON value, or a value
            the estimator rejects; the message names the learner and the parameter.
        """
        if not isinstance(params, dict):
            raise InvalidLearnerError(
                f"Learner {self.name}: parameters to set must be a dict, got {_shown(params)}."
            )
        if not params:
            return self
        plain = {k: json_value(self.name, str(k), v) for k, v in params.items()}
        out = copy.deepcopy(self.params)
        if self.name == "Pipeline":
            steps = _steps(out)
            found = {n: i for i, (n, _) in enumerate(steps)}
            for key, value in plain.items():
                step, sep, leaf = key.partition("__")
                if not sep or step not in found:
                    raise InvalidLearnerError(
                        f"Learner Pipeline has no parameter {key!r} that can be set; name a "
                        f"step's parameter as STEP__PARAM with STEP one of {', '.join(found)}."
                    )
                d = steps[found[step]][1]
                d["params"] = LearnerSpec._step_with(d, {leaf: value})
            return LearnerSpec("Pipeline", out)
        if self.name in _SEARCHES:
            inner = {
                k[len("estimator__") :]: v for k, v in plain.items() if k.startswith("estimator__")
            }
            own = {k: v for k, v in plain.items() if not k.startswith("estimator__")}
            if "estimator" in own:
                raise InvalidLearnerError(
                    f"Learner {self.name}: its estimator cannot be replaced by set_params; set its "
                    "parameters as estimator__PARAM."
                )
            if inner:
                out["estimator"] = (
                    LearnerSpec.from_dict(out["estimator"]).with_params(inner).to_dict()
                )
            return LearnerSpec(self.name, {**out, **own})
        return LearnerSpec(self.name, {**out, **plain})

    @staticmethod
    def _step_with(step: dict, params: dict) -> dict:
        """A pipeline step's params with ``params`` set (checked as the step's class checks them)."""
        name = step["name"]
        if name in ALLOWED_LEARNERS:
            return LearnerSpec(name, step["params"]).with_params(params).params
        return _check_params(name, ALLOWED_TRANSFORMERS[name], {**step["params"], **params})

    # ------------------------------------------------------------------ build
    def build(self, random_state: int | None = None) -> BaseEstimator:
        """A new unfitted estimator.

        Parameters
        ----------
        random_state : int or None
            Set as the ``random_state`` of the estimator, and of every step and inner estimator of
            a composite, that has that parameter **and** was not given one in its ``params``: a
            user-given ``random_state`` is kept verbatim.

        Returns
        -------
        sklearn.base.BaseEstimator
        """
        return _build(self.name, self.params, random_state)


def as_learner_spec(value: Any, role: str | None = None) -> LearnerSpec:
    """Any form of a nuisance learner as a validated :class:`LearnerSpec`.

    Parameters
    ----------
    value : LearnerSpec, str, dict or estimator
        A spec; ``"NAME"``, ``"NAME:{json}"`` or a JSON object (:meth:`LearnerSpec.parse`);
        ``{"name": ..., "params": {...}}`` (:meth:`LearnerSpec.from_dict`); or a scikit-learn
        estimator object of an allowed class, pipeline or search (:meth:`LearnerSpec.from_estimator`).
    role : str, optional
        The learner's name in the job (``'ml_l'``), put in front of error messages.

    Returns
    -------
    LearnerSpec

    Raises
    ------
    InvalidLearnerError
        Anything else (a callable, an array, a class, an unknown estimator, a non-JSON parameter),
        naming ``role``, the step and the parameter, and saying what is allowed.
    """
    try:
        if isinstance(value, LearnerSpec):
            return value
        if isinstance(value, str):
            return LearnerSpec.parse(value)
        if isinstance(value, dict):
            return LearnerSpec.from_dict(value)
        return LearnerSpec.from_estimator(value, role or "learner")
    except InvalidLearnerError as exc:
        if role is None or str(exc).startswith(f"{role}"):
            raise
        raise InvalidLearnerError(f"{role}: {exc}") from exc


# ---------------------------------------------------------------------- validation helpers
def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _loads(name: str, text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise InvalidLearnerError(
            f"Learner {name}: the parameters after ':' are not valid JSON ({exc}); "
            'write them as a JSON object, e.g. RandomForestRegressor:{"n_estimators": 100}.'
        ) from exc


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not allowed")


def _valid_params(name: str, cls: type) -> list[str]:
    return sorted(set(cls().get_params(deep=False)) | EXTRA_PARAMS.get(name, frozenset()))


def _check_params(name: str, cls: type, params: dict) -> dict:
    """A copy of ``params`` after checking keys, JSON values and scikit-learn's constraints."""
    valid = _valid_params(name, cls)
    for key, value in params.items():
        if not isinstance(key, str) or key not in valid:
            raise InvalidLearnerError(
                f"Learner {name} has no parameter {key!r}. Its parameters are: {', '.join(valid)}."
            )
        check_json_value(name, key, value)
    out = {k: (list(v) if isinstance(v, list) else v) for k, v in params.items()}
    try:
        _validate_estimator(name, cls(**out))
    except TypeError as exc:
        raise InvalidLearnerError(f"Learner {name}: invalid parameters: {exc}") from exc
    return out


def _validate_estimator(name: str, estimator: Any) -> None:
    validate = getattr(estimator, "_validate_params", None)
    if validate is None or not hasattr(estimator, "_parameter_constraints"):
        return  # LightGBM checks its parameters when it fits
    try:
        validate()
    except (TypeError, ValueError) as exc:
        raise InvalidLearnerError(f"Learner {name}: invalid parameters: {exc}") from exc


def _default_step_names(names: list[str]) -> list[str]:
    """The step names ``make_pipeline`` gives classes ``names`` (sklearn's ``_name_estimators``)."""
    lower = [n.lower() for n in names]
    counts = {n: lower.count(n) for n in lower if lower.count(n) > 1}
    out = list(lower)
    for i in reversed(range(len(out))):
        if out[i] in counts:
            out[i] = f"{lower[i]}-{counts[lower[i]]}"
            counts[lower[i]] -= 1
    return out


def _step_dict(step: Any, where: str) -> dict:
    if isinstance(step, str):
        step = step.strip()
        if step.startswith("{"):
            step = _loads(where, step)
        else:
            name, sep, rest = step.partition(":")
            params = _loads(name.strip(), rest) if sep else {}
            step = {"name": name.strip(), "params": params}
    if not isinstance(step, dict) or "name" not in step or set(step) - {"name", "params"}:
        raise InvalidLearnerError(
            f"Pipeline {where}: a step is 'NAME', 'NAME:{{json}}', {{\"name\": ..., \"params\": ...}} "
            f'or a pair ["step_name", STEP], got {_shown(step)}.'
        )
    params = step.get("params")
    params = {} if params is None else params
    if not isinstance(params, dict):
        raise InvalidLearnerError(
            f"Pipeline {where}: params must be a JSON object, got {_shown(params)}."
        )
    return {"name": step["name"], "params": params}


def _pipeline_params(params: dict) -> dict:
    """Canonical ``Pipeline`` params: checked steps, named as ``make_pipeline`` would or by pairs."""
    extra = sorted(set(params) - {"steps", "verbose"})
    if extra:
        raise InvalidLearnerError(
            f"Learner Pipeline has no parameter(s) {extra}; its parameters are: steps, verbose."
        )
    steps = params.get("steps")
    if not isinstance(steps, list) or not steps:
        raise InvalidLearnerError(
            "Learner Pipeline: steps must be a non-empty list of steps ending with a learner, "
            f"got {_shown(steps)}."
        )
    entries: list[tuple[str | None, dict]] = []
    for i, raw in enumerate(steps):
        step_name = None
        if isinstance(raw, list | tuple) and len(raw) == 2 and isinstance(raw[0], str):
            step_name, raw = raw
        where = f"step {i}" + (f" {step_name!r}" if step_name else "")
        d = _step_dict(raw, where)
        if i == len(steps) - 1:
            if d["name"] not in ALLOWED_LEARNERS:
                raise InvalidLearnerError(
                    f"Pipeline {where}: the last step must be a learner, got {_shown(d['name'])}. "
                    f"Allowed learners: {', '.join(sorted(ALLOWED_LEARNERS))}."
                )
            try:
                d = LearnerSpec(d["name"], d["params"]).to_dict()
            except InvalidLearnerError as exc:
                raise InvalidLearnerError(f"Pipeline {where}: {exc}") from exc
        else:
            if d["name"] not in ALLOWED_TRANSFORMERS:
                raise InvalidLearnerError(
                    f"Pipeline {where}: {_shown(d['name'])} is not an allowed step before the "
                    f"last. Allowed steps: {', '.join(sorted(ALLOWED_TRANSFORMERS))}."
                )
            try:
                checked = _check_params(d["name"], ALLOWED_TRANSFORMERS[d["name"]], d["params"])
            except InvalidLearnerError as exc:
                raise InvalidLearnerError(f"Pipeline {where}: {exc}") from exc
            d = {"name": d["name"], "params": {k: checked[k] for k in sorted(checked)}}
        entries.append((step_name, d))
    defaults = _default_step_names([d["name"] for _, d in entries])
    names = [n if n is not None else defaults[i] for i, (n, _) in enumerate(entries)]
    for n in names:
        if not n or "__" in n or names.count(n) > 1:
            raise InvalidLearnerError(
                f"Learner Pipeline: step name {n!r} must be non-empty, unique and without '__'; "
                f"names are {names}."
            )
    out: dict[str, Any] = {}
    if names == defaults:
        out["steps"] = [d for _, d in entries]
    else:
        out["steps"] = [[n, d] for n, (_, d) in zip(names, entries, strict=True)]
    if "verbose" in params:
        check_json_value("Pipeline", "verbose", params["verbose"])
        out["verbose"] = params["verbose"]
    return out


def _steps(params: dict) -> list[tuple[str, dict]]:
    """A canonical ``Pipeline``'s steps as ``(step_name, {"name", "params"})``."""
    steps = params["steps"]
    if steps and isinstance(steps[0], list):
        return [(n, d) for n, d in steps]
    names = _default_step_names([d["name"] for d in steps])
    return list(zip(names, steps, strict=True))


def _search_params(name: str, params: dict) -> dict:
    """Canonical params of a ``GridSearchCV``/``RandomizedSearchCV``."""
    grid_key = "param_grid" if name == "GridSearchCV" else "param_distributions"
    allowed = sorted({"estimator", grid_key, *SEARCH_PARAMS[name]})
    extra = sorted(set(params) - set(allowed))
    if extra:
        raise InvalidLearnerError(
            f"Learner {name} has no parameter(s) {extra} that a job may set; its parameters are: "
            f"{', '.join(allowed)}."
        )
    for key in ("estimator", grid_key):
        if key not in params:
            raise InvalidLearnerError(f"Learner {name}: {key!r} is required.")
    raw = params["estimator"]
    try:
        inner = raw if isinstance(raw, LearnerSpec) else LearnerSpec.from_dict(raw)
    except InvalidLearnerError as exc:
        raise InvalidLearnerError(f"{name} estimator: {exc}") from exc
    if inner.name in _SEARCHES:
        raise InvalidLearnerError(
            f"{name} estimator: a search cannot wrap another search ({inner.name}); give an "
            "allowed learner or a Pipeline."
        )
    out: dict[str, Any] = {
        "estimator": inner.to_dict(),
        grid_key: _grid(name, grid_key, inner, params[grid_key]),
    }
    for key in sorted(set(params) - {"estimator", grid_key}):
        value = params[key]
        check_json_value(name, key, value)
        if key == "refit" and value is not True:
            raise InvalidLearnerError(
                f"Learner {name}: refit must stay true (the refitted best estimator predicts the "
                f"held-out fold), got {value!r}."
            )
        if key == "cv" and not (value is None or (type(value) is int and value >= 2)):
            raise InvalidLearnerError(
                f"Learner {name}: cv must be an integer of at least 2 (or null for 5), got {value!r}."
            )
        if key == "scoring" and value is not None and value not in _scorer_names():
            raise InvalidLearnerError(
                f"Learner {name}: scoring must be a scikit-learn scorer name (or null), got "
                f"{value!r}; e.g. neg_mean_squared_error, neg_log_loss, r2, roc_auc."
            )
        out[key] = list(value) if isinstance(value, list) else value
    return out


def _grid(name: str, grid_key: str, inner: LearnerSpec, grid: Any) -> Any:
    """A checked grid: every key a parameter of ``inner``, every value a list the leaf accepts."""
    grids = grid if isinstance(grid, list) else [grid]
    if not grids or not all(isinstance(g, dict) and g for g in grids):
        raise InvalidLearnerError(
            f"Learner {name}: {grid_key} must be a non-empty object of parameter names to lists "
            f"of JSON values (or a list of such objects), got {_shown(grid)}."
        )
    out = []
    for one in grids:
        entry = {}
        for key in sorted(one):
            values = one[key]
            where = f"{name} {grid_key}[{key!r}]"
            if not isinstance(values, list) or not values:
                raise InvalidLearnerError(
                    f"Learner {where}: must be a non-empty list of JSON values, got {_shown(values)}."
                )
            for value in values:
                _check_grid_value(where, inner, key, value)
            entry[key] = list(values)
        out.append(entry)
    return out if isinstance(grid, list) else out[0]


def _check_grid_value(where: str, inner: LearnerSpec, key: str, value: Any) -> None:
    """Raise unless ``inner`` with ``key`` (``param`` or ``step__param``) set to ``value`` is valid."""
    check_json_value(where, key, value)
    if inner.name == "Pipeline":
        step, sep, leaf = key.partition("__")
        found = dict(_steps(inner.params))
        if not sep or step not in found or "__" in leaf:
            raise InvalidLearnerError(
                f"Learner {where}: {key!r} is not a parameter of the pipeline; name a step's "
                f"parameter as STEP__PARAM with STEP one of {', '.join(found)}."
            )
        target = found[step]
    elif "__" in key:
        raise InvalidLearnerError(f"Learner {where}: {inner.name} has no parameter {key!r}.")
    else:
        target, leaf = inner.to_dict(), key
    name = target["name"]
    cls = ALLOWED_LEARNERS.get(name) or ALLOWED_TRANSFORMERS[name]
    try:
        _check_params(name, cls, {**target["params"], leaf: value})
    except InvalidLearnerError as exc:
        raise InvalidLearnerError(f"Learner {where}: {exc}") from exc


def _scorer_names() -> set[str]:
    from sklearn.metrics import get_scorer_names

    return set(get_scorer_names())


def _names(name: str, params: dict) -> set[str]:
    """Every class name in a canonical spec (the composite's own and those nested in it)."""
    if name == "Pipeline":
        return {name} | {d["name"] for _, d in _steps(params)}
    if name in _SEARCHES:
        inner = params["estimator"]
        return {name} | _names(inner["name"], inner["params"])
    return {name}


def _build(name: str, params: dict, random_state: int | None) -> Any:
    """A new estimator from a canonical spec, seeding every ``random_state`` the user left unset."""
    kwargs = copy.deepcopy(params)
    if name == "Pipeline":
        kwargs["steps"] = [
            (n, _build(d["name"], d["params"], random_state)) for n, d in _steps(params)
        ]
        estimator = COMPOSITE_LEARNERS[name](**kwargs)
    elif name in _SEARCHES:
        inner = params["estimator"]
        kwargs["estimator"] = _build(inner["name"], inner["params"], random_state)
        estimator = COMPOSITE_LEARNERS[name](**kwargs)
    else:
        estimator = (ALLOWED_LEARNERS.get(name) or ALLOWED_TRANSFORMERS[name])(**kwargs)
    if (
        random_state is not None
        and "random_state" not in params
        and "random_state" in estimator.get_params(deep=False)
    ):
        estimator.set_params(random_state=int(random_state))
    return estimator
