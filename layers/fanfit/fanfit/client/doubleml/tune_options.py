"""The command line's tuning: DoubleML's ``tune()`` of an estimate's options, on the stack.

``fanfit estimate ... --param-grid FILE`` (:func:`read_param_grid`) runs :func:`tune_options`
before the estimate: the job's own DoubleML model (:func:`fanfit.dml.interop.doubleml_model`:
the options' columns, learners, folds and nuisance parameters), as fanfit's class
(:func:`fanfit.client.doubleml.counterpart`), runs :meth:`tune` after ``np.random.seed(seed)``
(the job's seed: its searches and randomized candidates are drawn as DoubleML draws them, each
search one job on the stack), and the parameters it chose become the estimate's
``learner_params``. The estimate then runs as any job, with DoubleML's numbers for the tuned
learners.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fanfit import errors
from fanfit.client.options import EstimateOptions, read_mapping_option

__all__ = ["SEARCHES", "read_param_grid", "tune_options"]

#: ``--search``: DoubleML's ``search_mode`` of each.
SEARCHES = {"grid": "grid_search", "randomized": "randomized_search"}


def read_param_grid(value: Any) -> dict[str, Any]:
    """``--param-grid``: DoubleML's ``param_grids``, ``{learner: {parameter: [values]}}`` (or a
    list of such grids per learner), as a mapping or a JSON or YAML file of one.

    Raises
    ------
    fanfit.errors.InvalidJobError
        A file that cannot be read or parsed, a learner whose grid is not an object (or a list of
        objects) of lists of plain values, naming the learner and parameter.
    """
    grids = read_mapping_option("param_grid", value)
    if not grids:
        raise errors.InvalidJobError(
            "param_grid: give each learner's grid, e.g. {ml_l: {alpha: [0.1, 1]}}"
        )
    for learner, grid in grids.items():
        for one in grid if isinstance(grid, list) else [grid]:
            if not isinstance(one, Mapping) or not one:
                raise errors.InvalidJobError(
                    f"param_grid[{learner!r}] must map parameters to lists of values, got "
                    f"{type(one).__name__}"
                )
            for name, values in one.items():
                if not isinstance(values, list) or not values:
                    raise errors.InvalidJobError(
                        f"param_grid[{learner!r}][{name!r}] must be a non-empty list of values"
                    )
    return grids


def tune_options(
    client: Any,
    options: EstimateOptions,
    param_grids: Mapping[str, Any],
    *,
    n_folds_tune: int = 5,
    search: str = "grid",
    n_iter: int = 100,
    tune_on_folds: bool = False,
    timeout: float = 3600.0,
    progress: bool = False,
) -> tuple[EstimateOptions, dict[str, Any]]:
    """Tune the learners of an estimate's options on the stack (module docstring).

    Parameters
    ----------
    client : fanfit.client.Client
    options : EstimateOptions
        The estimate's (its data read here, locally).
    param_grids : mapping
        :func:`read_param_grid`'s.
    n_folds_tune, tune_on_folds : int, bool
        As DoubleML's ``tune``.
    search : {'grid', 'randomized'}
        DoubleML's ``search_mode`` (:data:`SEARCHES`), ``n_iter`` candidates when randomized.
    timeout, progress
        Per search job, as :meth:`fanfit.client.EstimateJob.result`.

    Returns
    -------
    (EstimateOptions, dict)
        The options with the chosen ``learner_params`` (those given for learners not tuned
        kept), and per learner its chosen parameters (one dict when every fold chose the same,
        else DoubleML's per-repetition, per-fold lists).

    Raises
    ------
    fanfit.errors.InvalidJobError (or a subclass)
        A model whose DoubleML class cannot be tuned here, ``tune_on_folds`` with more
        repetitions than treatments (DoubleML 0.11.4 fails on it), an unknown ``search``, a candidate a
        learner refuses; DoubleML's own checks as ValueError or TypeError (a learner without a
        grid, a parameter the learner does not have).
    fanfit.errors.JobFailedError
        A search's job failed.
    """
    from fanfit import dml
    from fanfit.client.check import check_estimate
    from fanfit.client.doubleml import counterpart
    from fanfit.dml.interop import doubleml_model
    from fanfit.dml.models import model_def

    if search not in SEARCHES:
        raise errors.InvalidJobError(f"search must be one of {', '.join(SEARCHES)}, got {search!r}")
    checked = check_estimate(options=options, s3=getattr(client, "s3", None))
    spec, data = checked.spec, checked.data
    if model_def(spec.model).doubleml_client_class or spec.model in ("qte", "apos"):
        raise errors.UnsupportedArgumentError(
            f"param_grid: a {spec.model!r} job is tuned through fanfit's DoubleML class; use "
            f"fanfit.DoubleML{spec.model.upper()}.tune(...) then fit() in Python"
        )
    if tune_on_folds and spec.n_rep > spec.n_treat:
        raise errors.UnsupportedArgumentError(
            f"tune_on_folds with n_rep {spec.n_rep} > {spec.n_treat} treatment(s): DoubleML "
            "0.11.4's tune() indexes its fold-wise results by treatment, not repetition, and "
            "fails; tune with n_rep 1 (then estimate with more) or on the whole sample"
        )
    folds = checked.folds if checked.folds is not None else dml.draw_spec_folds(spec, data)
    model = counterpart(doubleml_model(spec, data, folds))
    for learner, by_treatment in (spec.learner_params or {}).items():
        for d_col, params in by_treatment.items():
            model.set_ml_nuisance_params(learner, d_col, params)
    state = np.random.get_state()
    np.random.seed(spec.seed)
    try:
        model.tune(dict(param_grids), tune_on_folds=tune_on_folds, n_folds_tune=n_folds_tune,
                   search_mode=SEARCHES[search], n_iter_randomized_search=n_iter,
                   client=client, seed=spec.seed, timeout=timeout, progress=progress)  # fmt: skip
    finally:
        np.random.set_state(state)
    tuned = {
        learner: {d: params for d, params in by_d.items() if params is not None and any(params)}
        for learner, by_d in model.params.items()
    }
    learner_params = {**(spec.learner_params or {}), **{k: v for k, v in tuned.items() if v}}
    chosen = {
        learner: {d: _collapsed(p) for d, p in by_d.items()} for learner, by_d in tuned.items()
    }
    return options.replace(learner_params=learner_params), chosen


def _collapsed(params: Any) -> Any:
    """One dict when every repetition's every fold holds the same, else the lists as they are."""
    flat = [p for rep in params for p in rep]
    return flat[0] if flat and all(p == flat[0] for p in flat) else params
