"""``fanfit estimate --param-grid`` (issue 37, item 4): DoubleML's tune() of a job's options.

GIVEN a CSV of a PLR and a grid per learner, WHEN :func:`tune_options` tunes the options on a
fake stack (each search one in-process job), THEN the ``learner_params`` it returns are what
DoubleML's own ``tune()`` of the job's model (its columns, learners and folds) sets after the
job's seed, grid and randomized, globally and fold by fold; bad grids and options are refused by
name before anything runs.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

dml = pytest.importorskip("doubleml")

from doubleml.plm.datasets import make_plr_CCDDHNR2018  # noqa: E402
from test_doubleml_classes import FakeClient  # noqa: E402

from fanfit import errors  # noqa: E402
from fanfit.client.check import check_estimate  # noqa: E402
from fanfit.client.doubleml.tune_options import read_param_grid, tune_options  # noqa: E402
from fanfit.client.options import EstimateOptions  # noqa: E402
from fanfit.dml import draw_spec_folds  # noqa: E402
from fanfit.dml.interop import doubleml_model  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


class WaitingClient(FakeClient):
    """The fake stack, its jobs awaited as :meth:`fanfit.client.jobs.JobHandle.wait` awaits:
    ``timeout`` must be seconds (a None timeout failed only on a real stack)."""

    def submit_estimate(self, data, options=None, **keywords):
        job = super().submit_estimate(data, options, **keywords)
        result = job.result

        def waited(timeout=3600.0, progress=False):
            assert isinstance(timeout, int | float) and timeout > 0, timeout
            return result(timeout, progress)

        job.result = waited
        return job


GRIDS = {"ml_l": {"alpha": [0.01, 0.1, 0.5]}, "ml_m": {"alpha": [0.02, 0.2]}}


@pytest.fixture
def options(tmp_path) -> EstimateOptions:
    np.random.seed(8)
    frame = make_plr_CCDDHNR2018(n_obs=150, dim_x=4, return_type="DataFrame")
    path = tmp_path / "plr.csv"
    frame.to_csv(path, index=False)
    lasso = "Lasso:" + json.dumps({"random_state": 0})
    return EstimateOptions(data=str(path), model="plr", y="y", d="d", x=[f"X{i}" for i in range(1, 5)],
                           ml_l=lasso, ml_m=lasso, n_folds=3, n_rep=2, seed=5)  # fmt: skip


def _doublemls(options: EstimateOptions, **tune) -> dict:
    checked = check_estimate(options=options)
    folds = draw_spec_folds(checked.spec, checked.data)
    model = doubleml_model(checked.spec, checked.data, folds)
    np.random.seed(checked.spec.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.tune(GRIDS, **tune)
    return {k: v for k, v in model.params.items()}


@pytest.mark.parametrize(
    "tune",
    [{}, {"tune_on_folds": True}, {"search": "randomized", "n_iter": 2}],
    ids=["grid", "on-folds", "randomized"],
)
def test_the_tuned_learner_params_are_doublemls(options, tune) -> None:
    if tune.get("tune_on_folds"):  # DoubleML 0.11.4's fold-wise tune needs n_rep <= n_treat
        options = options.replace(n_rep=1)
    client = WaitingClient()
    # WHEN the options are tuned on the fake stack
    tuned, chosen = tune_options(client, options, read_param_grid(GRIDS), n_folds_tune=3, **tune)
    # THEN the parameters are DoubleML's own tune() of the job's model after the job's seed
    want = _doublemls(options, n_folds_tune=3, tune_on_folds=tune.get("tune_on_folds", False),
                      search_mode={"randomized": "randomized_search"}.get(tune.get("search"), "grid_search"),
                      n_iter_randomized_search=tune.get("n_iter", 100))  # fmt: skip
    assert tuned.learner_params == want
    assert set(chosen) == {"ml_l", "ml_m"} and client.submitted  # each search ran as a job
    # AND the tuned options still check as an estimate (the parameters the learners take)
    assert check_estimate(options=tuned).spec.learner_params == want


def test_bad_grids_and_models_are_refused_before_any_job(options, tmp_path) -> None:
    with pytest.raises(errors.InvalidJobError, match="ml_l.*alpha.*list"):
        read_param_grid({"ml_l": {"alpha": 0.1}})
    with pytest.raises(errors.InvalidJobError, match="param_grid"):
        read_param_grid(str(tmp_path / "missing.yaml"))
    client = FakeClient()
    with pytest.raises(errors.InvalidJobError, match="search"):
        tune_options(client, options, GRIDS, search="bayes")
    # AND DoubleML's own check: every learner needs a grid
    with pytest.raises(ValueError, match="param_grids"):
        tune_options(client, options, {"ml_l": GRIDS["ml_l"]})
    # AND fold-wise tuning of more repetitions than treatments, which DoubleML 0.11.4 fails
    with pytest.raises(errors.UnsupportedArgumentError, match="tune_on_folds"):
        tune_options(client, options, GRIDS, tune_on_folds=True)
    assert client.submitted == []


def test_the_command_line_refuses_a_grid_it_cannot_run_before_any_stack(tmp_path, capsys) -> None:
    from fanfit.cli import main

    grid = tmp_path / "grid.yaml"
    grid.write_text("ml_l: {alpha: [0.1, 1.0]}\nml_m: {C: [0.1, 1.0]}\n", encoding="utf-8")
    plr = ["estimate", "--data", "examples/data/sipp1991.dta", "--model", "plr", "--y",
           "net_tfa", "--d", "e401", "--x", "age,inc", "--ml-l", "Lasso", "--ml-m",
           "LogisticRegression"]  # fmt: skip
    for extra, message in ((["--plan-only"], "--plan-only plans the estimate"),
                           (["--model", "qte", "--quantiles", "0.5"], "tuned in Python")):  # fmt: skip
        code = main([*plr, *extra, "--param-grid", str(grid)])
        err = capsys.readouterr().err
        assert code != 0 and message in err and "Traceback" not in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("ml_l: {alpha: 0.1}\n", encoding="utf-8")
    assert main([*plr, "--param-grid", str(bad)]) != 0
    assert "--param-grid['ml_l']['alpha'] must be" in capsys.readouterr().err
