"""DoubleML's RDFlex (regression discontinuity with flexible covariate adjustment) on a fanfit stack.

:class:`RDFlex` is a subclass of ``doubleml.rdd.RDFlex`` (DoubleML 0.11.4) with its constructor;
only :meth:`RDFlex.fit` differs. DoubleML's fit loops over the repetitions and, in each, over the
iterations of its bandwidth fitting: cross-fit ``ml_g`` (fuzzy: and ``ml_m``) with kernel
weights, then ``rdrobust`` on the residuals for a new bandwidth (the last iteration: for the
estimate). fanfit runs ONE job (model ``rdflex`` of :mod:`fanfit.dml.models`) whose stages are
the iterations, each stage's (repetition, fold, learner) fits side by side on the stack; its
execution waits for this client before each stage (the stage's kernel weights) and before
Aggregate (the estimate): the client runs ``rdrobust`` in between (GPL-3.0, with pandas, plotnine
and matplotlib it cannot go into the Lambda layers; DoubleML's RDFlex needs it here too), with
DoubleML's own methods (``_update_weights``, ``_fit_rdd``, ``_set_coefs``,
``aggregate_over_splits``) on the job's predictions, so that every number, the printout and
``confint()`` are DoubleML's (the fits' math: :mod:`fanfit.dml.scores.rdd`).

The job's inputs: DoubleML's outcome, treatment and covariates, the first stage's design
:math:`Z` (:func:`fanfit.dml.scores.rdd.rd_design` of the centred score, as ``z_cols``),
DoubleML's folds (``_smpls``, drawn at construction stratified by the treatment), the learners
as allow-listed specs (never pickles), ``n_iterations``. Each stage's inputs are the
repetitions' kernel weights (``StageInputs.sample_weights``; stage 0: DoubleML's ``w``, from
``h_fs`` and ``fs_kernel``, a custom kernel callable included, which runs here only).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd

from fanfit import errors, storage
from fanfit.client.doubleml.base import _check, _estimator, _learner_spec, default_client
from fanfit.dml.folds import smpls_to_folds
from fanfit.dml.interop import import_doubleml
from fanfit.dml.scores.rdd import iteration_keys, rd_design

import_doubleml()  # without DoubleML: MissingDependencyError, with the pip command
from doubleml import rdd as _doubleml_rdd  # noqa: E402 - after the check that names the extra

__all__ = ["ESTIMATE_STEP", "RDD_COEF_NAMES", "RDFlex"]

#: rdrobust's three rows, DoubleML's ``confint()`` index: the names of the job's coefficients.
RDD_COEF_NAMES = ("Conventional", "Bias-Corrected", "Robust")

#: The step of the client's estimate (after the last stage), as the job's handle names it.
ESTIMATE_STEP = storage.CLIENT_ESTIMATE_STEP

#: The data columns of the first stage's design sent as the job's z_cols.
_DESIGN_PREFIX = "__fanfit_rd_z"


class RDFlex(_doubleml_rdd.RDFlex):  # type: ignore[misc]
    """DoubleML's RDFlex, fitted on a fanfit stack (module docstring).

    Parameters as ``doubleml.rdd.RDFlex`` (0.11.4): ``obj_dml_data`` (a ``DoubleMLRDDData``),
    ``ml_g``, ``ml_m=None``, ``fuzzy=False``, ``cutoff=0``, ``n_folds=5``, ``n_rep=1``,
    ``h_fs=None``, ``fs_specification='cutoff'``, ``fs_kernel='triangular'`` and rdrobust's
    keyword arguments (``**kwargs``, handed to rdrobust here). Learners may also be fanfit's
    spec strings (``'RandomForestRegressor:{"n_estimators": 200}'``).

    Raises
    ------
    fanfit.errors.InvalidLearnerError
        A learner outside the allow-list.
    ImportError, TypeError, ValueError
        DoubleML's own checks (rdrobust missing, the data, the cutoff, the learners).
    """

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any = None, fuzzy: bool = False,
        cutoff: float = 0, n_folds: int = 5, n_rep: int = 1, h_fs: float | None = None,
        fs_specification: str = "cutoff", fs_kernel: Any = "triangular", **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(
            obj_dml_data, _estimator("ml_g", ml_g), _estimator("ml_m", ml_m), fuzzy, cutoff,
            n_folds, n_rep, h_fs, fs_specification, fs_kernel, **kwargs,
        )  # fmt: skip
        self._fanfit_specs = {name: _learner_spec(name, est) for name, est in self._learner.items()}
        self.fanfit_job: Any = None
        self.fanfit_result: Any = None

    @classmethod
    def of(cls, model: Any) -> RDFlex:
        """fanfit's unfitted RDFlex of an unfitted ``doubleml.rdd.RDFlex``
        (:func:`fanfit.from_doubleml`): its whole state, so its folds, first bandwidth and
        weights (drawn and computed at its construction) are kept.

        Raises
        ------
        fanfit.errors.UnsupportedArgumentError
            Not a ``doubleml.rdd.RDFlex``, or fitted already.
        fanfit.errors.InvalidLearnerError
            A learner outside the allow-list.
        """
        if type(model) is not _doubleml_rdd.RDFlex or model.coef is not None:
            raise errors.UnsupportedArgumentError(
                f"fanfit's RDFlex takes an unfitted doubleml.rdd.RDFlex, got a "
                f"{'fitted ' if getattr(model, 'coef', None) is not None else ''}"
                f"{type(model).__name__}"
            )
        ours: RDFlex = cls.__new__(cls)
        ours.__dict__.update(model.__dict__)
        ours._fanfit_specs = {n: _learner_spec(n, est) for n, est in ours._learner.items()}
        ours.fanfit_job = ours.fanfit_result = None
        return ours

    # ------------------------------------------------------------------ the job
    def _fanfit_frame(self) -> pd.DataFrame:
        """DoubleML's data with the first stage's design :math:`Z` as columns."""
        data: Any = self._dml_data
        design = rd_design(self._score, self._fs_specification)
        columns = {f"{_DESIGN_PREFIX}{j}": design[:, j] for j in range(design.shape[1])}
        return pd.concat([data.data, pd.DataFrame(columns, index=data.data.index)], axis=1)

    def fanfit_options(self, n_iterations: int = 2, seed: int = 0) -> dict[str, Any]:
        """The estimate job's options (:class:`fanfit.client.EstimateOptions`) of this model:
        model ``rdflex``, score ``'fuzzy'`` or ``'sharp'``, y, d, x, the design as z (columns
        ``__fanfit_rd_z<j>``), the learners as specs, n_folds, n_rep, seed, DoubleML's folds
        and ``n_iterations``."""
        data: Any = self._dml_data
        n_design = rd_design(self._score[:1], self._fs_specification).shape[1]
        options: dict[str, Any] = {
            "model": "rdflex",
            "score": "fuzzy" if self.fuzzy else "sharp",
            "y": data.y_col,
            "d": list(data.d_cols),
            "x": list(data.x_cols),
            "z": [f"{_DESIGN_PREFIX}{j}" for j in range(n_design)],
            "n_folds": self.n_folds,
            "n_rep": self.n_rep,
            "seed": seed,
            "folds": smpls_to_folds(self._smpls, data.n_obs),
            "n_iterations": n_iterations,
        }
        options.update(self._fanfit_specs)
        return options

    def fit(
        self,
        n_iterations: int = 2,
        *,
        client: Any = None,
        timeout: float = 3600.0,
        progress: bool | str | Any = False,
        seed: int = 0,
        **job_options: Any,
    ) -> RDFlex:
        """Estimate the model on the stack: one job, its stages DoubleML's iterations.

        Parameters
        ----------
        n_iterations : int
            DoubleML's: the iterations of the bandwidth fitting (default 2), one stage each.
        client : fanfit.client.Client, optional
            The stack; default :func:`fanfit.client.doubleml.base.default_client`.
        timeout : float
            Seconds to wait for each stage and for the result.
        progress : bool or str
            As :meth:`fanfit.client.JobHandle.wait`.
        seed : int
            The job's seed (learners without a ``random_state``).
        **job_options
            Further :class:`fanfit.client.EstimateOptions` (``max_concurrency``, ...).

        Returns
        -------
        self

        Raises
        ------
        TypeError, ValueError
            DoubleML's checks of ``n_iterations``.
        fanfit.errors.InvalidJobError (or a subclass)
            An option, column or learner is wrong (before any upload), or the job was rejected.
        fanfit.errors.JobFailedError
            The job failed or a stage did not end within ``timeout``.
        """
        self._check_iterations(n_iterations)
        given, checked = _check(self._fanfit_frame(), {**self.fanfit_options(n_iterations, seed),
                                                        **job_options})  # fmt: skip
        if client is None:
            client = default_client()
        job = client.submit_estimate(checked, options=given)
        self._fanfit_step: int | str = 0  # the step the execution waits for
        try:
            estimate = self._fanfit_drive(job, n_iterations, timeout)
        except errors.JobFailedError:
            raise
        except BaseException as exc:  # rdrobust failed here, or Ctrl-C: fail the job, by name
            job.send_client_failure(self._fanfit_step, type(exc).__name__, str(exc) or "stopped")
            raise
        job.send_estimate(estimate, timeout)
        self.fanfit_result = job.result(timeout=timeout, progress=progress)
        self.fanfit_job = job
        return self

    def _fanfit_drive(self, job: Any, n_iterations: int, timeout: float) -> dict[str, Any]:
        """DoubleML 0.11.4's ``RDFlex.fit`` with each iteration's cross-fitting the job's stage:
        send the stage's weights, wait for its predictions, then per repetition the residuals
        and rdrobust (``_update_weights``; after the last stage ``_fit_rdd`` and
        ``_set_coefs``), and ``aggregate_over_splits``. Returns the estimate for Aggregate
        (:class:`~fanfit.jobs.documents.estimate.ClientEstimate`)."""
        data: Any = self._dml_data
        y, d = data.y, data.d
        weights = [self.w] * self.n_rep
        h: list[Any] = [None] * self.n_rep
        b: list[Any] = [None] * self.n_rep
        spec: Any = None
        for iteration in range(n_iterations):
            job.send_stage_inputs(iteration, {"sample_weights": [[
                np.asarray(w, dtype=np.float64).tolist() for w in weights
            ]]}, timeout)  # fmt: skip
            last = iteration == n_iterations - 1
            self._fanfit_step = ESTIMATE_STEP if last else iteration + 1
            job.client_request(self._fanfit_step, timeout)
            preds = job.stage_predictions(iteration)
            spec = spec or job.spec()
            keys = iteration_keys(spec, iteration)
            for i_rep in range(self.n_rep):
                self._i_rep = i_rep
                self._M_Y[:, i_rep] = y - preds[keys[0]][:, i_rep, 0]
                if self.fuzzy:
                    self._M_D[:, i_rep] = d - preds[keys[1]][:, i_rep, 0]
                if not last:
                    h[i_rep], b[i_rep], weights[i_rep] = self._update_weights()
                else:
                    h_rep, b_rep = (None, None) if n_iterations == 1 else (h[i_rep], b[i_rep])
                    self._set_coefs(self._fit_rdd(h=h_rep, b=b_rep), h_rep)
        self.aggregate_over_splits()
        return self._fanfit_estimate()

    def _fanfit_estimate(self) -> dict[str, Any]:
        """The fitted estimate as :class:`~fanfit.jobs.documents.estimate.ClientEstimate`'s JSON:
        rdrobust's three rows (:data:`RDD_COEF_NAMES`), DoubleML's ``coef``, ``se``, ``t_stat``,
        ``pval``, ``ci``, ``all_coef``, ``all_se``; ``rdd``: the final bandwidths ``h`` per
        repetition, ``N_h``, ``final_h``, ``cutoff``, ``fuzzy``, ``fs_kernel``."""
        names = list(RDD_COEF_NAMES)

        def per(values: Any) -> dict[str, float]:
            return {n: float(v) for n, v in zip(names, np.asarray(values), strict=True)}

        ci = np.asarray(self.ci)
        return {
            "d_cols": names,
            "coef": per(self.coef),
            "se": per(self.se),
            "t_stat": per(self.t_stat),
            "pval": per(self.pval),
            "ci_95": {n: [float(ci[j, 0]), float(ci[j, 1])] for j, n in enumerate(names)},
            "all_coef": {n: [float(v) for v in self.all_coef[j]] for j, n in enumerate(names)},
            "all_se": {n: [float(v) for v in self.all_se[j]] for j, n in enumerate(names)},
            "rdd": {
                "h": [None if np.isnan(v) else float(v) for v in np.asarray(self.h, dtype=float)],
                "N_h": [float(v) for v in np.asarray(self._N_h).ravel()],
                "final_h": float(self._final_h),
                "cutoff": float(self.cutoff),
                "fuzzy": bool(self.fuzzy),
                "fs_kernel": str(self.fs_kernel),
            },
        }


def rdflex_from_options(
    options: Any,
    *,
    score_col: str | None,
    cutoff: float = 0.0,
    fuzzy: bool = False,
    fs_specification: str = "cutoff",
    fs_kernel: str = "triangular",
    h_fs: float | None = None,
) -> RDFlex:
    """The :class:`RDFlex` of the command line's options (``fanfit estimate --model rdflex``):
    DoubleML's ``DoubleMLRDDData`` of the table (``options.data``; ``x`` default every column
    but y, d and the score), the learners ``ml_g`` and (fuzzy) ``ml_m``, ``n_folds``, ``n_rep``;
    folds drawn after ``np.random.seed(options.seed)``, as a script seeds DoubleML, or the given
    ones (``options.folds``: a CSV of fold ids, :func:`fanfit.dml.read_folds_csv`).

    Parameters
    ----------
    options : fanfit.client.EstimateOptions
    score_col : str
        The running variable (DoubleMLRDDData's ``score_col``).
    cutoff, fuzzy, fs_specification, fs_kernel, h_fs
        DoubleML's RDFlex arguments.

    Raises
    ------
    fanfit.errors.InvalidJobError
        No ``score_col``, instruments given, a score that is not ``sharp`` or ``fuzzy`` (or
        contradicts ``fuzzy``), a fuzzy design without ``ml_m``.
    fanfit.errors.InvalidDataError
        A column that is not in the table.
    """
    from doubleml import DoubleMLRDDData

    from fanfit.client.data import read_table
    from fanfit.dml.folds import folds_to_smpls, read_folds_csv, validate_folds

    if not score_col:
        raise errors.InvalidJobError(
            "--model rdflex needs --score-col, the running variable (DoubleMLRDDData's score_col)"
        )
    if options.z:
        raise errors.InvalidJobError(
            "--model rdflex takes no --z: its first stage's design comes from --score-col and "
            "--fs-specification (DoubleML's RDD data has no instruments)"
        )
    if options.score not in (None, "sharp", "fuzzy") or (options.score == "sharp" and fuzzy):
        raise errors.InvalidJobError(
            f"--model rdflex's --score is 'sharp' or 'fuzzy' (or --fuzzy), got {options.score!r}"
            + (" with --fuzzy" if fuzzy else "")
        )
    fuzzy = fuzzy or options.score == "fuzzy"
    learners = {k: v for k, v in options.learners.items() if v is not None}
    if "ml_g" not in learners or (fuzzy and "ml_m" not in learners):
        raise errors.InvalidJobError(
            "--model rdflex needs --ml-g" + (" and, fuzzy, --ml-m (a classifier)" if fuzzy else "")
        )
    frame = read_table(options.data)
    d_cols = [options.d] if isinstance(options.d, str) else list(options.d)
    missing = [c for c in (options.y, *d_cols, score_col) if c not in frame.columns]
    if missing:
        raise errors.InvalidDataError(f"column(s) {', '.join(missing)} not in the data")
    x = options.x
    x_cols = [x] if isinstance(x, str) else list(x) if x is not None else None
    if x_cols is None:
        x_cols = [c for c in frame.columns if c not in (options.y, *d_cols, score_col)]
    try:
        frame = frame.astype({c: "float64" for c in (options.y, *d_cols, score_col, *x_cols)})
    except (TypeError, ValueError) as exc:
        raise errors.InvalidDataError(f"--model rdflex needs numeric columns: {exc}") from exc
    data = DoubleMLRDDData(
        frame, y_col=options.y, d_cols=d_cols, x_cols=x_cols, score_col=score_col
    )
    np.random.seed(options.seed)
    try:
        model = RDFlex(
            data, learners["ml_g"], learners.get("ml_m") if fuzzy else None, fuzzy=fuzzy,
            cutoff=cutoff, n_folds=options.n_folds, n_rep=options.n_rep, h_fs=h_fs,
            fs_specification=fs_specification, fs_kernel=fs_kernel,
        )  # fmt: skip
    except (TypeError, ValueError) as exc:  # DoubleML's checks of the data and the options
        raise errors.InvalidJobError(f"RDFlex: {exc}") from exc
    if options.folds is not None:  # given folds replace the drawn ones (DoubleML's _smpls)
        given = options.folds
        raw = read_folds_csv(given) if isinstance(given, str | os.PathLike) else given
        folds = validate_folds(raw, data.n_obs, options.n_folds, options.n_rep)
        model._smpls = folds_to_smpls(folds)
    return model
