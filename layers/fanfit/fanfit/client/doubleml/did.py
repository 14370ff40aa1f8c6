"""DoubleML's difference-in-differences models on a fanfit stack: DoubleMLDID, DoubleMLDIDCS and
DoubleMLDIDMulti.

Panel data (:class:`DoubleMLDID`, model ``did`` of :mod:`fanfit.dml.models`) and repeated
cross-sections (:class:`DoubleMLDIDCS`, model ``didcs``), on a ``DoubleMLDIDData`` or a
DataFrame with its columns; staggered adoption (:class:`DoubleMLDIDMulti`, one job of one ``did``
part per group-time combination, each selecting its rows from one upload of the panel) on a
``DoubleMLPanelData``. All are re-exported by :mod:`fanfit.client.doubleml`, whose
docstring says how a fit works.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from fanfit import errors
from fanfit.client.doubleml.base import (
    _check,
    _check_arguments,
    _estimator,
    _learner_spec,
    _OnStack,
    _PropensityOptions,
    _unsupported,
    _where,
)
from fanfit.client.doubleml.parts import _SideBySide
from fanfit.dml.interop import import_doubleml
from fanfit.jobs.documents.estimate import PartSelect

import_doubleml()  # without DoubleML: MissingDependencyError, with the pip command
import doubleml as _doubleml  # noqa: E402 - after the check that names the extra

__all__ = ["DoubleMLDID", "DoubleMLDIDCS", "DoubleMLDIDMulti"]


def _did_data(obj_dml_data: Any, t_required: bool, **columns: Any) -> Any:
    """``obj_dml_data`` as a DoubleMLDIDData: one given, or built from a DataFrame and the columns
    (``y_col``, ``d_cols``, ``x_cols``, and ``t_col`` for repeated cross-sections).

    Raises
    ------
    fanfit.errors.InvalidDataError
        A DataFrame without ``y_col``, ``d_cols`` (or ``t_col`` where needed), columns given next
        to a DoubleMLDIDData, data without ``t_col`` where needed, or something else.
    """
    given = [k for k, v in columns.items() if v is not None]
    if isinstance(obj_dml_data, pd.DataFrame):
        needed = ("y_col", "d_cols", "t_col") if t_required else ("y_col", "d_cols")
        if any(columns.get(k) is None for k in needed):
            raise errors.InvalidDataError(
                f"obj_dml_data is a DataFrame: name its columns with {', '.join(needed)} (and "
                "x_cols), as DoubleMLDIDData takes them"
            )
        data = _doubleml.DoubleMLDIDData(obj_dml_data, **columns)
    elif isinstance(obj_dml_data, _doubleml.DoubleMLDIDData):
        if given:
            raise errors.InvalidDataError(
                f"{', '.join(given)} given with a DoubleMLDIDData, which names its columns "
                "itself; give them with a DataFrame only"
            )
        data = obj_dml_data
    else:
        raise errors.InvalidDataError(
            "obj_dml_data must be a doubleml.DoubleMLDIDData or a pandas DataFrame with y_col and "
            f"d_cols, got {type(obj_dml_data).__name__}"
        )
    if t_required and data.t_col is None:
        raise errors.InvalidDataError(
            "DoubleMLDIDCS needs the time column: a DoubleMLDIDData with t_col (repeated "
            "cross-sections)"
        )
    return data


class _DIDOptions:
    """DoubleMLDID's and DoubleMLDIDCS's construction and options on the stack: clipping and
    normalization."""

    _fanfit_external_targets = True  # DoubleML keeps an external prediction's targets

    def _fanfit_build(self, data: Any, ml_g: Any, ml_m: Any, *args: Any) -> None:
        """DoubleML's constructor on checked data and learners; ``args`` from ``n_folds`` on."""
        _check_arguments(data, args[2])
        super().__init__(data, _estimator("ml_g", ml_g), _estimator("ml_m", ml_m), *args)  # type: ignore[call-arg]
        self._fanfit_check_learners()  # type: ignore[attr-defined]

    def _fanfit_model_options(self) -> dict[str, Any]:
        return {
            "trimming_threshold": float(self.clipping_threshold),  # type: ignore[attr-defined]
            "in_sample_normalization": bool(self.in_sample_normalization),  # type: ignore[attr-defined]
        }


class DoubleMLDID(_DIDOptions, _OnStack, _doubleml.DoubleMLDID):  # type: ignore[misc]
    """DoubleML's difference-in-differences model for panel data, fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLDID`` (0.11): ``obj_dml_data, ml_g, ml_m=None, n_folds=5,
    n_rep=1, score='observational', in_sample_normalization=True, clipping_threshold=1e-2,
    draw_sample_splitting=True``; ``obj_dml_data`` a ``DoubleMLDIDData`` whose outcome is the
    difference :math:`Y_1 - Y_0` (as ``make_did_SZ2020`` returns it), or a DataFrame with
    ``y_col``, ``d_cols`` and ``x_cols`` by keyword. The job fits ``ml_g`` on the untreated and the
    treated rows (``ml_g0``, ``ml_g1``) and, for the observational score, ``ml_m`` (model ``did`` of
    :mod:`fanfit.dml.models`).

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        A callable score.
    fanfit.errors.InvalidDataError
        ``obj_dml_data`` is neither a DoubleMLDIDData nor a DataFrame with its columns.
    """

    _fanfit_model = "did"

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any = None, n_folds: int = 5, n_rep: int = 1,
        score: Any = "observational", in_sample_normalization: bool = True,
        clipping_threshold: float = 1e-2, draw_sample_splitting: bool = True, *,
        y_col: Any = None, d_cols: Any = None, x_cols: Any = None,
    ) -> None:  # fmt: skip
        data = _did_data(obj_dml_data, False, y_col=y_col, d_cols=d_cols, x_cols=x_cols)
        self._fanfit_build(data, ml_g, ml_m, n_folds, n_rep, score, in_sample_normalization,
                           clipping_threshold, draw_sample_splitting)  # fmt: skip

    def _fanfit_targets(self, y, d, z, preds):  # type: ignore[no-untyped-def]
        out = {"ml_g0": _where(y, d == 0), "ml_g1": _where(y, d == 1)}
        return out | ({"ml_m": d} if "ml_m" in preds else {})


class DoubleMLDIDCS(_DIDOptions, _OnStack, _doubleml.DoubleMLDIDCS):  # type: ignore[misc]
    """DoubleML's difference-in-differences model for repeated cross-sections, on a fanfit stack.

    Parameters as ``doubleml.DoubleMLDIDCS`` (0.11): ``obj_dml_data, ml_g, ml_m=None, n_folds=5,
    n_rep=1, score='observational', in_sample_normalization=True, clipping_threshold=1e-2,
    draw_sample_splitting=True``; ``obj_dml_data`` a ``DoubleMLDIDData`` with ``t_col`` (the
    binary period), or a DataFrame with ``y_col``, ``d_cols``, ``x_cols`` and ``t_col`` by
    keyword. The job fits ``ml_g`` on each group and period (``ml_g_d0_t0`` ... ``ml_g_d1_t1``)
    and, for the observational score, ``ml_m`` (model ``didcs`` of :mod:`fanfit.dml.models`).

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        A callable score.
    fanfit.errors.InvalidDataError
        ``obj_dml_data`` is neither a DoubleMLDIDData with ``t_col`` nor a DataFrame with its
        columns.
    """

    _fanfit_model = "didcs"

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any = None, n_folds: int = 5, n_rep: int = 1,
        score: Any = "observational", in_sample_normalization: bool = True,
        clipping_threshold: float = 1e-2, draw_sample_splitting: bool = True, *,
        y_col: Any = None, d_cols: Any = None, x_cols: Any = None, t_col: Any = None,
    ) -> None:  # fmt: skip
        columns = {"y_col": y_col, "d_cols": d_cols, "x_cols": x_cols, "t_col": t_col}
        data = _did_data(obj_dml_data, True, **columns)
        self._fanfit_build(data, ml_g, ml_m, n_folds, n_rep, score, in_sample_normalization,
                           clipping_threshold, draw_sample_splitting)  # fmt: skip

    def _fanfit_model_options(self) -> dict[str, Any]:
        return super()._fanfit_model_options() | {"t": self._dml_data.t_col}

    def _fanfit_targets(self, y, d, z, preds):  # type: ignore[no-untyped-def]
        t = self._dml_data.data[self._dml_data.t_col].to_numpy(dtype=float)
        out = {f"ml_g_d{a}_t{b}": _where(y, (d == a) & (t == b)) for a in (0, 1) for b in (0, 1)}
        return out | ({"ml_m": d} if "ml_m" in preds else {})


def _did_multi_data(obj_dml_data: Any) -> Any:
    """``obj_dml_data`` checked to be a DoubleMLPanelData.

    Raises
    ------
    fanfit.errors.InvalidDataError
        Anything else (a DataFrame, a DoubleMLData, a DoubleMLDIDData).
    """
    if not isinstance(obj_dml_data, _doubleml.data.DoubleMLPanelData):
        raise errors.InvalidDataError(
            "DoubleMLDIDMulti needs obj_dml_data as a doubleml.data.DoubleMLPanelData (panel data "
            f"in long format with y_col, d_cols, t_col, id_col), got {type(obj_dml_data).__name__}"
        )
    return obj_dml_data


def cs_subset(binary: Any, x_cols: list[str], y_col: str) -> pd.DataFrame:
    """The data of one group-time combination's ``didcs`` job, from DoubleML's
    ``DoubleMLDIDCSBinary``: its ``data_subset`` rows in their order (the two periods' rows of
    the units in the group or the control group), columns ``x_cols``, ``y_col``,
    ``G_indicator`` and ``t_indicator`` (1 in the evaluation period, as 0/1 integers), index
    reset (DoubleML 0.11.4 ``did/did_cs_binary.py`` ``_preprocess_data``).

    Raises
    ------
    fanfit.errors.InvalidDataError
        A covariate or the outcome is named ``G_indicator`` or ``t_indicator``.
    """
    clash = sorted({*x_cols, y_col} & {"G_indicator", "t_indicator"})
    if clash:
        raise errors.InvalidDataError(
            f"column {clash[0]!r} has the name of DoubleML's own subset column; rename it"
        )
    frame = binary.data_subset[[*x_cols, y_col, "G_indicator", "t_indicator"]]
    frame = frame.reset_index(drop=True)
    return frame.assign(t_indicator=frame["t_indicator"].astype(int))


class DoubleMLDIDMulti(_SideBySide, _doubleml.did.DoubleMLDIDMulti):  # type: ignore[misc]
    """DoubleML's staggered-adoption DID (group-time ATTs and their aggregations), on a fanfit stack.

    Parameters as ``doubleml.did.DoubleMLDIDMulti`` (0.11): ``obj_dml_data, ml_g, ml_m=None,
    gt_combinations='standard', control_group='never_treated', anticipation_periods=0,
    n_folds=5, n_rep=1, score='observational', panel=True, in_sample_normalization=True,
    trimming_rule='truncate', trimming_threshold=1e-2, ps_processor_config=None,
    draw_sample_splitting=True, print_periods=False``; ``obj_dml_data`` a
    ``doubleml.data.DoubleMLPanelData``. DoubleML builds one ``DoubleMLDIDBinary`` per
    group-time combination :math:`(g, t_{pre}, t_{eval})` at construction: the units observed in
    both periods that are in group :math:`g` or in the control group, in wide format, with the
    outcome difference :math:`Y_{t_{eval}} - Y_{t_{pre}}` (``y_diff``), the group indicator
    (``G_indicator``) and its own sample splitting (``smpls``, stratified by the indicator).

    With ``panel=False`` (repeated cross-sections) DoubleML builds a ``DoubleMLDIDCSBinary``
    per combination instead: the rows of the two periods whose unit is in group :math:`g` or in
    the control group, in DoubleML's order, with the outcome, ``G_indicator``, ``t_indicator``
    (1 in :math:`t_{eval}`) and its own ``smpls`` (stratified by both).

    :meth:`fit` submits ONE job (model ``did_multi``): one upload of the panel in long format
    (:meth:`fanfit_panel`) and one ``did`` part (``didcs`` with ``panel=False``, time column
    ``t_indicator``) per combination that selects exactly that subset from it in the pipeline
    (:meth:`fanfit_selects`, :class:`fanfit.jobs.documents.estimate.PartSelect`), with that
    combination's folds; every combination's units fan out together. The parts' predictions,
    placed at the units' (or rows') positions (DoubleML's ``id_positions``),
    then go to DoubleML's own ``fit(external_predictions=...)``, so coef, se,
    summary, confint, bootstrap, ``aggregate('eventstudy'|'group'|'time')`` and the plots are
    DoubleML's (Callaway and Sant'Anna 2021, J. Econometrics 225; DoubleML user guide, "Panel
    data with multiple periods").

    Raises
    ------
    fanfit.errors.InvalidDataError
        ``obj_dml_data`` is not a DoubleMLPanelData.
    fanfit.errors.UnsupportedArgumentError
        A propensity calibration, or a callable score.
    fanfit.errors.InvalidLearnerError
        A learner outside the allow-list.
    """

    _fanfit_parts_model = "did_multi"  # one job of several parts, selecting their rows

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any = None, gt_combinations: Any = "standard",
        control_group: str = "never_treated", anticipation_periods: int = 0, n_folds: int = 5,
        n_rep: int = 1, score: Any = "observational", panel: bool = True,
        in_sample_normalization: bool = True, trimming_rule: str = "truncate",
        trimming_threshold: float = 1e-2, ps_processor_config: Any = None,
        draw_sample_splitting: bool = True, print_periods: bool = False,
    ) -> None:  # fmt: skip
        data = _did_multi_data(obj_dml_data)
        if callable(score):
            raise _unsupported("a callable score", "give 'observational' or 'experimental'")
        _PropensityOptions._fanfit_check_ps(self, None, False, ps_processor_config)  # type: ignore[arg-type]
        for name, learner in (("ml_g", ml_g), ("ml_m", ml_m)):
            if learner is not None:
                _learner_spec(name, learner)
        ml_g, ml_m = _estimator("ml_g", ml_g), _estimator("ml_m", ml_m)
        super().__init__(
            data, ml_g, ml_m, gt_combinations, control_group, anticipation_periods, n_folds,
            n_rep, score, panel, in_sample_normalization, trimming_rule, trimming_threshold,
            ps_processor_config, draw_sample_splitting, print_periods,
        )  # fmt: skip
        self.fanfit_jobs: list[Any] = []
        self.fanfit_results: list[Any] = []

    def _fanfit_did(self, binary: Any) -> DoubleMLDID | DoubleMLDIDCS:
        """Fanfit's DoubleMLDID on one combination's subset (one row per unit: the covariates,
        ``G_indicator``, ``y_diff``), with its folds and options; without ``panel`` fanfit's
        DoubleMLDIDCS on :func:`cs_subset` (time column ``t_indicator``)."""
        x_cols = list(self._dml_data.x_cols)
        if self.panel:
            frame = binary.data_subset[[*x_cols, "G_indicator", "y_diff"]].reset_index(drop=True)
            cls: type[DoubleMLDID] | type[DoubleMLDIDCS] = DoubleMLDID
            y_col, t_col = "y_diff", {}
        else:
            y_col = self._dml_data.y_col
            frame, cls, t_col = (
                cs_subset(binary, x_cols, y_col),
                DoubleMLDIDCS,
                {"t_col": "t_indicator"},
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=DeprecationWarning)
            warnings.simplefilter("ignore", category=FutureWarning)
            data = _doubleml.DoubleMLDIDData(frame, y_col, "G_indicator", x_cols=x_cols, **t_col)
            one = cls(
                data, self._learner["ml_g"], self._learner["ml_m"], self.n_folds, self.n_rep,
                self.score, self.in_sample_normalization, self.trimming_threshold,
                draw_sample_splitting=False,
            )  # fmt: skip
        one.set_sample_splitting(binary.smpls)
        # the combination's nuisance parameters (set on the modellist model or by
        # tune_ml_models), for its one treatment, under the subset's treatment column
        d_col = one._dml_data.d_cols[0]
        one._params = {
            key: {d_col: copy.deepcopy(next(iter(by_treat.values())))}
            for key, by_treat in binary._params.items()
        }
        return one

    def fanfit_options(self, seed: int = 0) -> list[tuple[pd.DataFrame, dict[str, Any]]]:
        """The data and options of the ``did`` part of each group-time combination (its data as
        DoubleML built it, which the client checks the part on; the job's parts select it from
        the one upload, :meth:`fanfit_panel`).

        Parameters
        ----------
        seed : int
            The jobs' seed (learners without a ``random_state``).

        Returns
        -------
        list of (DataFrame, dict)
            Per combination, in ``gt_labels`` order: the subset (``x_cols``, ``G_indicator``,
            ``y_diff``; one row per unit in DoubleML's ``data_subset`` order; with
            ``panel=False`` :func:`cs_subset`) and the options of
            :meth:`DoubleMLDID.fanfit_options` (:meth:`DoubleMLDIDCS.fanfit_options`); its folds
            are the combination's ``smpls``.

        Raises
        ------
        fanfit.errors.InvalidFoldsError, InvalidLearnerError
            As :meth:`DoubleMLDID.fanfit_options`.
        """
        out = []
        for binary in self.modellist:
            one = self._fanfit_did(binary)
            out.append((one._dml_data.data, one.fanfit_options(seed)))
        return out

    def _fanfit_parts(self, seed: int) -> list[tuple[str, pd.DataFrame, dict[str, Any]]]:
        return [(label, *part) for label, part in zip(self.gt_labels, self.fanfit_options(seed))]

    def _fanfit_period_codes(self) -> pd.Index | None:
        """The periods as numbers where DoubleMLPanelData holds them otherwise (datetime ``t``
        and ``g``): every period of ``t`` and ``g`` in increasing order, coded by its position
        (order and equality are all a combination's selection compares); None for numeric
        periods, which travel as they are."""
        frame, data = self._dml_data.data, self._dml_data
        if all(pd.api.types.is_numeric_dtype(frame[c]) for c in (data.t_col, data.g_col)):
            return None
        periods = pd.concat([frame[data.t_col], frame[data.g_col]]).dropna().unique()
        return pd.Index(np.sort(periods))

    def _fanfit_period(self, value: Any, codes: pd.Index | None) -> float:
        """A period (``g_value``, ``t_value_pre``, ``t_value_eval``) as it travels."""
        return float(value) if codes is None else float(codes.get_loc(value))

    def fanfit_panel(self) -> tuple[list[str], np.ndarray]:
        """The panel the one job uploads: DoubleMLPanelData's ``data`` in long format, columns
        ``id_col``, ``t_col``, ``g_col``, ``y_col`` and ``x_cols`` as float64; the unit ids by
        their rank (any type DoubleML takes; the selection only groups and orders them), datetime
        periods by their rank among all periods, never-treated (NaT) as ``inf``."""
        data = self._dml_data
        columns = [data.id_col, data.t_col, data.g_col, data.y_col, *data.x_cols]
        frame = data.data
        ids = pd.factorize(frame[data.id_col], sort=True)[0].astype(np.float64)
        codes = self._fanfit_period_codes()
        if codes is None:
            periods = frame[[data.t_col, data.g_col]].to_numpy(dtype=np.float64)
        else:
            t = codes.get_indexer(frame[data.t_col]).astype(np.float64)
            g = codes.get_indexer(frame[data.g_col]).astype(np.float64)
            g[frame[data.g_col].isna().to_numpy()] = np.inf  # never treated (NaT)
            periods = np.column_stack([t, g])
        rest = frame[[data.y_col, *data.x_cols]].to_numpy(dtype=np.float64)
        return columns, np.column_stack([ids, periods, rest])

    def fanfit_selects(self) -> list[PartSelect]:
        """Each combination's selection from :meth:`fanfit_panel`, in ``gt_labels`` order: its
        :math:`(g, t_{pre}, t_{eval})`, control group, anticipation and never-treated coding,
        which the pipeline turns into DoubleMLDIDBinary's (DoubleMLDIDCSBinary's)
        ``data_subset`` (:func:`fanfit.dml.gt_subsets.gt_subset`)."""
        data, codes = self._dml_data, self._fanfit_period_codes()
        out = []
        for binary in self.modellist:
            never = binary.never_treated_value
            inf = codes is not None or np.isinf(never)
            out.append(PartSelect(
                id_col=data.id_col, t_col=data.t_col, g_col=data.g_col, y_col=data.y_col,
                g_value=self._fanfit_period(binary.g_value, codes),
                t_value_pre=self._fanfit_period(binary.t_value_pre, codes),
                t_value_eval=self._fanfit_period(binary.t_value_eval, codes),
                control_group=self.control_group,
                anticipation_periods=int(self.anticipation_periods),
                never_treated="inf" if inf else "zero", panel=bool(self.panel),
            ))  # fmt: skip
        return out

    def _fanfit_submit(
        self,
        client: Any,
        parts: list[tuple[str, pd.DataFrame, dict[str, Any]]],
        job_options: Mapping[str, Any],
    ) -> list[Any]:
        """One job of one ``did`` part (``didcs`` with ``panel=False``) per combination on one
        upload of the panel (:meth:`fanfit_panel`), each part selecting its rows in the
        pipeline (:meth:`fanfit_selects`) with its own folds (its ``smpls``), all checked
        (on DoubleML's subset) before anything is uploaded."""
        pairs = [_check(frame, {**o, **job_options}) for _, frame, o in parts]
        labels = [label for label, _, _ in parts]
        job = client.submit_parts_job(
            self._fanfit_parts_model, labels, [c for _, c in pairs], [g for g, _ in pairs],
            selects=self.fanfit_selects(), data=self.fanfit_panel(),
        )  # fmt: skip
        return [job.part(k, label) for k, label in enumerate(labels)]

    def _fanfit_external(self, jobs: list[Any]) -> dict[Any, Any]:
        """Each job's predictions at its units' positions (DoubleML's ``id_positions``) among
        all ``n_ids`` units (with ``panel=False``: its rows among all ``n_obs`` rows), NaN
        elsewhere: arrays of shape (n_ids or n_obs, n_rep) per learner."""
        n_ids = self._dml_data.n_ids if self.panel else self._dml_data.n_obs
        external: dict[str, dict[str, np.ndarray]] = {}
        for label, binary, job in zip(self.gt_labels, self.modellist, jobs):
            external[label] = {}
            for name, values in job.predictions()["G_indicator"].items():
                full = np.full((n_ids, self.n_rep), np.nan)
                full[binary.id_positions] = np.asarray(values).reshape(-1, self.n_rep)
                external[label][name] = full
        return external
