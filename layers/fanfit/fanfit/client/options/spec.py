"""An estimate job's spec from user options (:func:`build_spec`, with the nuisance parameters
:func:`read_learner_params` reads), and the options of model ``apos``, which is not one job
(:func:`parse_treatment_levels`, :func:`check_apos_options`)."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping, Sequence
from typing import Any

from fanfit import dml
from fanfit.client.values import (
    check_columns,
    check_int,
    check_learners,
    check_number,
    check_str,
    shown_value,
)
from fanfit.dml.fold_procedures import one_quantile, parse_quantiles
from fanfit.dml.spec import parse_subgroups
from fanfit.errors import InvalidJobError

__all__ = [
    "build_spec",
    "check_apos_options",
    "parse_treatment_levels",
    "read_learner_params",
    "read_mapping_option",
]


# ---------------------------------------------------------------- apos (fanfit.client.apos)
def parse_treatment_levels(value: Any, name: str = "treatment_levels") -> tuple[float, ...]:
    """DoubleMLAPOS's ``treatment_levels`` from ``"0,1,2"`` or a sequence of numbers.

    Parameters
    ----------
    value : str or sequence of numbers
        Comma-separated levels (the command line's and job files' form), or a list or tuple.
    name : str
        The option's name in the messages.

    Returns
    -------
    tuple of float
        The levels, in the given order.

    Raises
    ------
    InvalidJobError
        Naming ``name``: nothing given, a level that is not a finite number, or a level given
        twice (DoubleML's ``treatment_levels`` must be unique).
    """
    if isinstance(value, str):
        items: list[Any] = [v.strip() for v in value.split(",")]
    elif isinstance(value, Sequence) or hasattr(value, "tolist"):
        items = list(value.tolist() if hasattr(value, "tolist") else value)
    else:
        items = [value]
    if not items or items == [""]:
        raise InvalidJobError(f"{name} must name at least one treatment level, e.g. 0,1,2")
    levels: list[float] = []
    for item in items:
        if isinstance(item, str):
            try:
                level = float(item)
            except ValueError:
                level = math.nan
        elif isinstance(item, numbers.Real) and not isinstance(item, bool):
            level = float(item)
        else:
            level = math.nan
        if not math.isfinite(level):
            raise InvalidJobError(
                f"{name} must be numbers separated by commas, e.g. 0,1,2; {shown_value(item)} is not "
                "a finite number"
            )
        if level in levels:
            raise InvalidJobError(f"{name} names level {level:g} twice; give each level once")
        levels.append(level)
    return tuple(levels)


def check_apos_options(model: Any, treatment_levels: Any) -> None:
    """``treatment_levels`` belongs to model ``apos``, which is not one job.

    Raises
    ------
    InvalidJobError
        ``treatment_levels`` given with another model, or ``model='apos'`` or ``'qte'`` given to
        a single job's spec (:func:`fanfit.client.apos.submit_apos` runs apos, one ``apo`` job
        per level; :func:`fanfit.client.qte.submit_qte` runs qte).
    """
    if model == "qte":
        raise InvalidJobError(
            "model 'qte' runs one 'pq', 'cvar' or 'lpq' job per quantile and treatment level: "
            "submit it with fanfit.client.qte.submit_qte (fanfit estimate --model qte), or use "
            "fanfit.DoubleMLQTE"
        )
    if model == "apos":
        raise InvalidJobError(
            "model 'apos' runs one 'apo' job per treatment level: submit it with "
            "fanfit.client.apos.submit_apos (fanfit estimate --model apos), or use "
            "fanfit.DoubleMLAPOS"
        )
    if treatment_levels is not None:
        raise InvalidJobError(
            "treatment_levels is an option of model 'apos' only (model 'apo' takes one "
            "treatment_level)"
        )


def _as_list(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [c.strip() for c in value.split(",") if c.strip()]
    return [str(c) for c in value]


def build_spec(
    *,
    y: str,
    d: str | Sequence[str],
    x: Sequence[str] | str | None,
    z: str | Sequence[str] | None,
    model: str,
    score: str | None,
    learners: Mapping[str, Any],
    n_folds: int,
    n_rep: int,
    seed: int,
    trimming_threshold: float = 0.01,
    boot_method: str | None = None,
    n_rep_boot: int = 500,
    cluster_cols: str | Sequence[str] | None = None,
    normalize_ipw: bool = False,
    subgroups: str | Mapping[str, Any] | None = None,
    treatment_level: float | None = None,
    t: str | None = None,
    in_sample_normalization: bool | None = None,
    s_col: str | None = None,
    weights_col: str | None = None,
    weights_bar_cols: str | Sequence[str] | None = None,
    treatment: int | None = None,
    quantiles: str | float | Sequence[float] | None = None,
    n_folds_inner: int | None = None,
    n_iterations: int | None = None,
    inner_folds_cols: str | Sequence[str] | None = None,
    learner_params: Mapping[str, Any] | None = None,
    external_predictions_cols: Mapping[str, Any] | None = None,
    d_mean_cols: str | Sequence[str] | None = None,
    approach: str | None = None,
    store_models: bool = False,
) -> tuple[dml.DMLSpec, list[str]]:
    """Build and validate a :class:`fanfit.dml.DMLSpec` from user options.

    ``subgroups`` may be a dict (DoubleML's, both keys) or the command line's string
    (:func:`parse_subgroups`).

    Returns
    -------
    (spec, columns) : DMLSpec, list of str
        The spec and the data columns it uses (y, d, x, z, then the cluster columns).

    Raises
    ------
    fanfit.errors.InvalidJobError, InvalidLearnerError
        Also for an option of the wrong type (``learners=0``, ``d=0``), naming it.
    """
    check_str("y", y)
    check_columns("d", d)
    if x is None:
        raise InvalidJobError(
            "x is not given: name the covariate columns, or let the data's other columns be used "
            "(EstimateOptions.with_data_columns, which check_estimate applies)"
        )
    check_columns("x", x)
    check_columns("z", z, optional=True)
    check_str("model", model)
    check_str("score", score, optional=True)
    check_str("boot_method", boot_method, optional=True)
    parsed = check_learners(learners)
    for name, value in (("n_folds", n_folds), ("n_rep", n_rep), ("seed", seed),
                        ("n_rep_boot", n_rep_boot)):  # fmt: skip
        check_int(name, value)
    check_int("n_folds_inner", n_folds_inner, optional=True)
    check_int("n_iterations", n_iterations, optional=True)
    check_columns("inner_folds_cols", inner_folds_cols, optional=True)
    check_columns("d_mean_cols", d_mean_cols, optional=True)
    check_str("approach", approach, optional=True)
    if not isinstance(store_models, bool):
        raise InvalidJobError(
            f"store_models must be True or False, got {shown_value(store_models)}"
        )
    check_number("trimming_threshold", trimming_threshold)
    if treatment_level is not None:
        check_number("treatment_level", treatment_level)
    check_columns("cluster_cols", cluster_cols, optional=True)
    check_str("s", s_col, optional=True)
    if not isinstance(normalize_ipw, bool):
        raise InvalidJobError(
            f"normalize_ipw must be True or False, got {shown_value(normalize_ipw)}"
        )
    check_str("t", t, optional=True)
    check_str("weights_col", weights_col, optional=True)
    check_columns("weights_bar_cols", weights_bar_cols, optional=True)
    if in_sample_normalization is not None and not isinstance(in_sample_normalization, bool):
        raise InvalidJobError(
            f"in_sample_normalization must be True or False, got {shown_value(in_sample_normalization)}"
        )
    model = str(model).lower()
    quantile = one_quantile(model, parse_quantiles(quantiles))
    spec = dml.DMLSpec(
        model=model,
        score=score or dml.DEFAULT_SCORE.get(model, ""),
        y_col=y,
        d_cols=tuple(_as_list(d)),
        x_cols=tuple(_as_list(x)),
        z_cols=tuple(_as_list(z)),
        n_folds=int(n_folds),
        n_rep=int(n_rep),
        seed=int(seed),
        learners=parsed,
        trimming_threshold=float(trimming_threshold),
        n_rep_boot=int(n_rep_boot),
        boot_method=boot_method,
        cluster_cols=tuple(_as_list(cluster_cols)),
        normalize_ipw=normalize_ipw,
        subgroups=parse_subgroups(subgroups),
        treatment_level=None if treatment_level is None else float(treatment_level),
        t_col=t,
        in_sample_normalization=in_sample_normalization,
        s_col=s_col,
        weights_col=weights_col,
        weights_bar_cols=None if weights_bar_cols is None else tuple(_as_list(weights_bar_cols)),
        treatment=treatment,  # the spec names a value that is not 0 or 1
        quantile=quantile,
        n_folds_inner=None if n_folds_inner is None else int(n_folds_inner),
        n_iterations=None if n_iterations is None else int(n_iterations),
        inner_folds_cols=None if inner_folds_cols is None else tuple(_as_list(inner_folds_cols)),
        d_mean_cols=None if d_mean_cols is None else tuple(_as_list(d_mean_cols)),
        approach=approach,
        store_models=store_models,
        learner_params=None if learner_params is None else dict(learner_params),
        external_predictions_cols=(
            None if external_predictions_cols is None else dict(external_predictions_cols)
        ),
    )
    spec.validate()
    columns = list(spec.used_cols)
    return spec, columns


def read_learner_params(value: Any) -> dict[str, Any] | None:
    """The ``learner_params`` option as :attr:`fanfit.dml.DMLSpec.learner_params` takes it
    (:func:`read_mapping_option`): ``{nuisance: {treatment column: params}}``, DoubleML's names
    (``set_ml_nuisance_params``)."""
    return read_mapping_option("learner_params", value)


def read_mapping_option(name: str, value: Any) -> dict[str, Any] | None:
    """An option whose value is an object: given as one (Python), or as a JSON or YAML file of one
    (the command line, job files).

    Parameters
    ----------
    name : str
        The option, for messages (``learner_params``, ``external_predictions_cols``).
    value : mapping, str, os.PathLike or None

    Returns
    -------
    dict or None
        The object (checked against the model by :meth:`fanfit.dml.DMLSpec.validate`).

    Raises
    ------
    fanfit.errors.InvalidJobError
        A file that cannot be read or parsed, or one whose top level is not an object, naming it.
    """
    if value is None or isinstance(value, Mapping):
        return None if value is None else dict(value)
    if not isinstance(value, str | os.PathLike):
        raise InvalidJobError(
            f"{name} must be an object or a JSON or YAML file of one, got {shown_value(value)}"
        )
    import yaml  # a JSON document is YAML too

    try:
        with open(value, encoding="utf-8") as fh:
            loaded = yaml.safe_load(fh)
    except OSError as exc:
        raise InvalidJobError(f"{name}: cannot read {value}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise InvalidJobError(f"{name}: {value} is not JSON or YAML: {exc}") from exc
    if not isinstance(loaded, Mapping):
        raise InvalidJobError(f"{name}: {value} must hold an object, got {type(loaded).__name__}")
    return dict(loaded)
