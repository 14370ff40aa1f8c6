"""DoubleML interop: fanfit's out-of-fold predictions as DoubleML's ``external_predictions``.

A fanfit estimate is fully determined by the data, the folds and the out-of-fold predictions of the
nuisance learners. :func:`to_doubleml` hands exactly these to DoubleML 0.11: a ``DoubleMLPLR``,
``DoubleMLIRM``, ``DoubleMLPLIV`` or ``DoubleMLIIVM`` built with ``draw_sample_splitting=False``,
``set_sample_splitting(folds_to_smpls(folds))`` and ``fit(external_predictions=...)``, so that no
learner is fitted again and DoubleML's own ``summary``, ``sensitivity_analysis()``,
``sensitivity_plot()``, ``confint()`` and ``bootstrap()`` work on fanfit's results, with
``coef`` and ``se`` equal to fanfit's (DoubleML user guide, "External predictions";
Bach et al. 2022, JMLR 23).

The array helpers (:func:`external_predictions`, :func:`predictions_to_arrays`,
:func:`predictions_from_arrays`) are pure numpy and run in Lambda (the Aggregate step writes the
predictions with them). DoubleML and pandas are client-side dependencies, imported only inside
:func:`to_doubleml`; without DoubleML it raises :class:`MissingDependencyError` with the pip command.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from fanfit.dml.data import DMLData
from fanfit.dml.folds import cluster_folds_to_smpls, folds_to_smpls
from fanfit.dml.models import REGISTRY, model_def
from fanfit.dml.spec import DMLSpec
from fanfit.dml.units import check_preds, prediction_keys, validate_spec_folds
from fanfit.errors import FanfitError, InvalidJobError

__all__ = [
    "DOUBLEML_CLASSES",
    "doubleml_model",
    "PIP_DOUBLEML",
    "MissingDependencyError",
    "external_predictions",
    "import_doubleml",
    "predictions_from_arrays",
    "predictions_to_arrays",
    "to_doubleml",
]

#: The DoubleML class of each fanfit model.
DOUBLEML_CLASSES = {name: m.doubleml_class for name, m in REGISTRY.items()}

#: What a user runs to get DoubleML next to fanfit (the ``doubleml`` extra pins DoubleML 0.11.4).
PIP_DOUBLEML = "pip install 'fanfit[doubleml]'  (or: pip install doubleml==0.11.4)"

#: The fold scalars of the registry's fold procedures (PQ's ``theta_ipw``), stored with the
#: predictions (:func:`fanfit.dml.units.fold_scalar_keys`).
_FOLD_SCALARS = sorted(
    {n for m in REGISTRY.values() if m.fold_procedure for n in m.fold_procedure.scalars}
)
_ARRAY_RE = re.compile(r"^t(\d+)_(ml_\w+|" + "|".join(map(re.escape, _FOLD_SCALARS)) + r")$")
_D_COLS = "d_cols"


class MissingDependencyError(FanfitError, ImportError):
    """A client-side extra (DoubleML) is not installed; the message gives the pip command."""


def import_doubleml() -> Any:
    """Import DoubleML, which fanfit needs on the client side only (never in the Lambda layer).

    Returns
    -------
    module
        The ``doubleml`` package.

    Raises
    ------
    MissingDependencyError
        DoubleML is not installed; the message gives the pip command (:data:`PIP_DOUBLEML`).
    """
    try:
        import doubleml
    except ImportError as exc:
        raise MissingDependencyError(
            f"DoubleML interop needs the DoubleML package, which is not installed: {PIP_DOUBLEML}"
        ) from exc
    return doubleml


def external_predictions(
    spec: DMLSpec, preds: Mapping[str, np.ndarray]
) -> dict[str, dict[str, np.ndarray]]:
    """fanfit's prediction layout to DoubleML's ``external_predictions`` layout.

    Parameters
    ----------
    spec : DMLSpec
    preds : mapping of str to numpy.ndarray of shape (n_obs, n_rep, n_treat)
        Every prediction key of the spec (:func:`~fanfit.dml.units.prediction_keys`), as
        :func:`fanfit.dml.aggregate` takes them (IRM/IIVM ``ml_m`` before clipping).

    Returns
    -------
    dict of str to dict of str to numpy.ndarray of shape (n_obs, n_rep)
        ``{treatment: {prediction key: array}}``, treatments in the order of ``spec.d_cols``.

    Raises
    ------
    InvalidJobError
        A key missing, a wrong shape, or non-finite values (:func:`~fanfit.dml.units.check_preds`).
    """
    first = next(iter(preds.values()), None)
    n_obs = int(np.shape(first)[0]) if first is not None else 0
    checked = check_preds(spec, n_obs, dict(preds))
    return {
        d: {k: np.ascontiguousarray(checked[k][:, :, j]) for k in prediction_keys(spec)}
        for j, d in enumerate(spec.d_cols)
    }


def predictions_to_arrays(
    d_cols: tuple[str, ...] | list[str], preds: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Named arrays of the out-of-fold predictions, for one ``.npz`` object.

    Parameters
    ----------
    d_cols : sequence of str, length n_treat
        Treatment names, in the order of the last axis of ``preds``.
    preds : mapping of str to numpy.ndarray of shape (n_obs, n_rep, n_treat)
        Prediction key -> predictions (DoubleML's ``predictions`` layout).

    Returns
    -------
    dict of str to numpy.ndarray
        ``d_cols`` (n_treat,) str, and one float64 array of shape (n_obs, n_rep) per treatment and
        key, named ``t<i_treat>_<key>`` (e.g. ``t0_ml_l``).

    Raises
    ------
    InvalidJobError
        An array is not of shape (n_obs, n_rep, n_treat).
    """
    names = [str(d) for d in d_cols]
    out: dict[str, np.ndarray] = {_D_COLS: np.array(names, dtype=str)}
    for key, arr in preds.items():
        arr = np.asarray(arr, dtype=np.float64)
        if arr.ndim != 3 or arr.shape[2] != len(names):
            raise InvalidJobError(
                f"Predictions for {key!r} have shape {arr.shape}; expected (n_obs, n_rep, {len(names)})."
            )
        for j in range(len(names)):
            out[f"t{j}_{key}"] = np.ascontiguousarray(arr[:, :, j])
    return out


def predictions_from_arrays(arrays: Mapping[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Inverse of :func:`predictions_to_arrays`, in DoubleML's ``external_predictions`` layout.

    Parameters
    ----------
    arrays : mapping of str to numpy.ndarray
        As read from the ``.npz`` object (:meth:`fanfit.storage.JobStore.get_arrays`).

    Returns
    -------
    dict of str to dict of str to numpy.ndarray of shape (n_obs, n_rep)
        ``{treatment: {prediction key: array}}``.

    Raises
    ------
    InvalidJobError
        No ``d_cols`` array, an array name that is not ``t<i>_<key>``, or a treatment index out of range.
    """
    if _D_COLS not in arrays:
        raise InvalidJobError(
            "The predictions object has no 'd_cols' array; it was not written by fanfit."
        )
    d_cols = [str(d) for d in np.asarray(arrays[_D_COLS]).reshape(-1)]
    out: dict[str, dict[str, np.ndarray]] = {d: {} for d in d_cols}
    for name, arr in arrays.items():
        if name == _D_COLS:
            continue
        match = _ARRAY_RE.match(name)
        if match is None or int(match.group(1)) >= len(d_cols):
            raise InvalidJobError(
                f"Unexpected array {name!r} in the predictions object (expected 't<i_treat>_ml_*' "
                f"or a fold scalar, {', '.join(_FOLD_SCALARS)}, "
                f"with i_treat < {len(d_cols)})."
            )
        out[d_cols[int(match.group(1))]][match.group(2)] = np.asarray(arr, dtype=np.float64)
    return out


def _data_frame(spec: DMLSpec, data: DMLData) -> Any:
    import pandas as pd

    cols: dict[str, np.ndarray] = {spec.y_col: data.y}
    cols.update({c: data.d[:, j] for j, c in enumerate(spec.d_cols)})
    cols.update({c: data.x[:, j] for j, c in enumerate(spec.x_cols)})
    if data.z is not None:
        cols.update({c: data.z[:, j] for j, c in enumerate(spec.z_cols)})
    if data.cluster_vars is not None:
        cols.update({c: data.cluster_vars[:, j] for j, c in enumerate(spec.cluster_cols)})
    if data.t is not None and spec.t_col is not None:
        cols[spec.t_col] = data.t
    return pd.DataFrame(cols)


def _check_external(
    spec: DMLSpec, n_obs: int, external: Mapping[str, Mapping[str, np.ndarray]]
) -> dict[str, dict[str, np.ndarray]]:
    keys = prediction_keys(spec)
    out: dict[str, dict[str, np.ndarray]] = {}
    for d in spec.d_cols:
        if d not in external:
            raise InvalidJobError(
                f"The predictions have no treatment {d!r}; they have: {', '.join(external) or 'none'}."
            )
        per_key = {}
        for key in keys:
            if key not in external[d]:
                raise InvalidJobError(
                    f"The predictions of treatment {d!r} lack {key!r}; model {spec.model!r} with "
                    f"score {spec.score!r} needs {', '.join(keys)}."
                )
            arr = np.asarray(external[d][key], dtype=np.float64)
            if arr.shape != (n_obs, spec.n_rep):
                raise InvalidJobError(
                    f"Predictions {key!r} of treatment {d!r} have shape {arr.shape}; expected "
                    f"(n_obs, n_rep) = ({n_obs}, {spec.n_rep})."
                )
            if not np.all(np.isfinite(arr)):
                raise InvalidJobError(f"Predictions {key!r} of treatment {d!r} are not all finite.")
            per_key[key] = arr
        out[d] = per_key
    return out


def _adjusted_external(
    spec: DMLSpec, data: DMLData, external: dict[str, dict[str, np.ndarray]], adjust: Any
) -> dict[str, dict[str, np.ndarray]]:
    """DoubleML's ``external_predictions`` passed through the model's
    :attr:`~fanfit.dml.models.ModelDef.adjusted_preds`, repetition by repetition."""
    out = {
        d: {k: np.array(v, dtype=float) for k, v in by_key.items()}
        for d, by_key in external.items()
    }
    for i_treat, d in enumerate(spec.d_cols):
        for i_rep in range(spec.n_rep):
            p = adjust(spec, data, {k: v[:, i_rep] for k, v in external[d].items()}, i_treat)
            for k, v in p.items():
                out[d][k][:, i_rep] = v
    return out


def to_doubleml(
    spec: DMLSpec,
    data: DMLData,
    folds: np.ndarray,
    predictions: Mapping[str, Any],
    *,
    bootstrap: bool = True,
) -> Any:
    """A fitted DoubleML object from fanfit's data, folds and out-of-fold predictions.

    Builds ``DoubleMLData`` from the spec's columns, the model's class (:data:`DOUBLEML_CLASSES`)
    with the spec's learners (unfitted; DoubleML checks their kind), ``n_folds``, ``n_rep``,
    ``score``, and for IRM/IIVM ``normalize_ipw`` and the clipping threshold (IIVM: ``subgroups``;
    with ``cluster_cols`` the data are clustered and the splits are
    :func:`~fanfit.dml.folds.cluster_folds_to_smpls`'s), with
    ``draw_sample_splitting=False``; then ``set_sample_splitting(folds_to_smpls(folds))`` and
    ``fit(external_predictions=...)``: no learner is fitted, and ``coef``/``se`` equal
    :func:`fanfit.dml.aggregate` on the same inputs. If ``spec.boot_method`` is set and
    ``bootstrap`` is true, DoubleML's ``bootstrap(method, n_rep_boot)`` runs after
    ``np.random.seed(spec.seed)`` (the global NumPy state is restored afterwards), which draws what
    fanfit drew, so ``confint(joint=True)`` equals fanfit's ``ci_joint_95``.

    Parameters
    ----------
    spec : DMLSpec
        The job's spec (validated here).
    data : DMLData
        The job's data (:func:`fanfit.dml.validate_data`), n_obs rows.
    folds : numpy.ndarray of int, shape (n_obs, n_rep)
        The job's folds: test-fold index per row and repetition.
    predictions : dict
        Either fanfit's layout ``{prediction key: array (n_obs, n_rep, n_treat)}`` or DoubleML's
        ``{treatment: {prediction key: array (n_obs, n_rep)}}`` (what
        :func:`predictions_from_arrays` returns).
    bootstrap : bool
        Run DoubleML's multiplier bootstrap when the spec has a ``boot_method``.

    Returns
    -------
    doubleml.DoubleMLPLR, DoubleMLIRM, DoubleMLPLIV or DoubleMLIIVM
        Fitted; ``summary``, ``sensitivity_analysis()`` and DoubleML's plots are available.

    Raises
    ------
    MissingDependencyError
        DoubleML is not installed (the message gives the pip command).
    InvalidJobError
        An invalid spec, or predictions with a missing key or treatment, a wrong shape, or
        non-finite values; a model whose DoubleML class takes no external predictions
        (:attr:`~fanfit.dml.models.ModelDef.doubleml_client_class`, SSM), naming the fanfit class
        to use instead.
    InvalidFoldsError
        Folds that do not fit the data or the spec.
    """
    import_doubleml()
    spec.validate()
    mdef = model_def(spec.model)
    if mdef.doubleml_client_class:
        raise InvalidJobError(
            f"DoubleML's {mdef.doubleml_class} takes no external predictions (or, LPLR, only with "
            f"every inner prediction), so a {spec.model!r} job cannot be handed to it; fit "
            f"fanfit.{mdef.doubleml_client_class} instead (a DoubleML object whose fit() runs on "
            "the stack)."
        )
    n_obs = data.n_obs
    folds = validate_spec_folds(spec, data, folds)
    if predictions and all(isinstance(v, Mapping) for v in predictions.values()):
        external = _check_external(spec, n_obs, predictions)
    else:
        external = external_predictions(spec, predictions)
    if mdef.adjusted_preds is not None:  # as DoubleML keeps them (PLPR's cre_general ml_m)
        external = _adjusted_external(spec, data, external, mdef.adjusted_preds)

    obj = doubleml_model(spec, data, folds)
    obj.fit(external_predictions=external)
    if bootstrap and spec.boot_method is not None:
        state = np.random.get_state()
        try:
            np.random.seed(spec.seed)
            obj.bootstrap(method=spec.boot_method, n_rep_boot=spec.n_rep_boot)
        finally:
            np.random.set_state(state)
    return obj


def doubleml_model(spec: DMLSpec, data: DMLData, folds: np.ndarray) -> Any:
    """DoubleML's unfitted model of a job: its class (:data:`DOUBLEML_CLASSES`) on the spec's
    columns, learners (unfitted), ``n_folds``, ``n_rep``, score and model options, with the
    job's folds as its sample splitting (what :func:`to_doubleml` fits with the predictions, and
    the command line's ``--param-grid`` tunes).

    Parameters
    ----------
    spec : DMLSpec
        Validated.
    data : DMLData
    folds : numpy.ndarray of int, shape (n_obs, n_rep)
        Validated (:func:`fanfit.dml.validate_spec_folds`).

    Returns
    -------
    A DoubleML model, ``draw_sample_splitting=False`` and ``set_sample_splitting`` done.

    Raises
    ------
    MissingDependencyError
        DoubleML is not installed.
    """
    dml_pkg = import_doubleml()
    mdef = model_def(spec.model)
    data_kwargs = {kw: getattr(spec, opt) for opt, kw in mdef.data_options.items()}
    if spec.cluster_cols:
        data_kwargs["cluster_cols"] = list(spec.cluster_cols)
    obj_data = getattr(dml_pkg, mdef.doubleml_data)(
        _data_frame(spec, data),
        spec.y_col,
        list(spec.d_cols),
        x_cols=list(spec.x_cols),
        z_cols=list(spec.z_cols) or None,
        **data_kwargs,
    )
    learners = {k: v.build() for k, v in spec.learners.items()}
    common: dict[str, Any] = {
        "n_folds": spec.n_folds,
        "n_rep": spec.n_rep,
        "score": spec.score,
        "draw_sample_splitting": False,
    }
    if mdef.clipping_keyword is not None:
        common[mdef.clipping_keyword] = spec.trimming_threshold
    if mdef.ipw_options:
        from doubleml.utils import PSProcessorConfig

        common["normalize_ipw"] = spec.normalize_ipw
        common["ps_processor_config"] = PSProcessorConfig(
            clipping_threshold=spec.trimming_threshold
        )
    for option in mdef.options:
        value = getattr(spec, option)
        if value is not None:
            common[option] = dict(value) if isinstance(value, Mapping) else value
    if mdef.weights and data.weights is not None:  # DoubleMLAPO's weights: array or dict
        bar = data.weights_bar
        common["weights"] = (
            data.weights if bar is None else {"weights": data.weights, "weights_bar": bar}
        )
    cls = getattr(dml_pkg, mdef.doubleml_class)
    positional = [learners[name] for name in mdef.doubleml_learners]
    optional = {name: learners.get(name) for name in mdef.doubleml_optional}
    obj = cls(obj_data, *positional, **optional, **common)
    if spec.cluster_cols:
        assert data.cluster_vars is not None
        obj.set_sample_splitting(*cluster_folds_to_smpls(folds, data.cluster_vars, spec.n_folds))
    else:
        obj.set_sample_splitting(folds_to_smpls(folds))
    return obj
