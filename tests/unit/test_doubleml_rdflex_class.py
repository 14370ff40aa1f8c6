"""fanfit's RDFlex (fanfit.client.doubleml.rdd) without a stack: DoubleML's numbers, stage by stage.

GIVEN DoubleML's RDD generator and a fake client whose job runs each stage's units in-process
when the class sends the stage's kernel weights (what the stack computes between its waits for
the client: ``fanfit.dml.fit_stage``), WHEN fanfit's class and DoubleML's are built after the
same NumPy seed and fitted, THEN coef, se, ci, every repetition's coef and se, the bandwidths
and the printout are DoubleML's, sharp and fuzzy, for every ``fs_specification``, kernel and
number of iterations; the job ran one stage per iteration and got the estimate last.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

dml = pytest.importorskip("doubleml")
pytest.importorskip("rdrobust")

from doubleml.rdd.datasets import make_simple_rdd_data  # noqa: E402
from doubleml_helpers import submitted  # noqa: E402
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402

import fanfit  # noqa: E402
from fanfit import dml as fdml  # noqa: E402
from fanfit import errors  # noqa: E402
from fanfit.client.doubleml.rdd import ESTIMATE_STEP, RDFlex  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


class FakeJob:
    """A job run here: each stage's units fitted when the class sends the stage's inputs."""

    job_id = "est-20260101-000000-00000000"

    def __init__(self, checked) -> None:
        self.checked = checked
        self.preds = fdml.init_preds(checked.spec, checked.data.n_obs)
        self.folds = fdml.validate_spec_folds(checked.spec, checked.data, checked.folds)
        self.log: list[tuple] = []
        self.estimate = None

    def spec(self):
        return self.checked.spec

    def send_stage_inputs(self, stage, inputs, timeout=None):
        self.log.append(("inputs", stage))
        fdml.fit_stage(self.checked.spec, self.checked.data, self.folds, stage, inputs, self.preds)

    def client_request(self, step, timeout):
        self.log.append(("request", step))

    def stage_predictions(self, stage):
        return self.preds

    def send_estimate(self, estimate, timeout=None):
        self.log.append(("estimate",))
        self.estimate = estimate

    def send_client_failure(self, step, error, cause):
        self.log.append(("failure", step, error))

    def result(self, timeout=None, progress=False):
        return SimpleNamespace(raw=self.estimate)


class FakeClient:
    def __init__(self) -> None:
        self.jobs: list[FakeJob] = []

    def submit_estimate(self, data, options=None, **keywords):
        checked, _ = submitted(data, options, **keywords)
        self.jobs.append(FakeJob(checked))
        return self.jobs[-1]


def _data(fuzzy: bool, n_obs: int = 500):
    np.random.seed(3)
    d = make_simple_rdd_data(n_obs=n_obs, fuzzy=fuzzy)
    return dml.DoubleMLRDDData.from_arrays(x=d["X"], y=d["Y"], d=d["D"], score=d["score"])


def _pair(data, *learners, n_iterations: int = 2, **kwargs):
    """DoubleML's and fanfit's RDFlex built after the same seed, both fitted."""
    np.random.seed(8)
    theirs = dml.rdd.RDFlex(data, *learners, **kwargs)
    theirs.fit(n_iterations=n_iterations)
    np.random.seed(8)
    ours = RDFlex(data, *learners, **kwargs)
    client = FakeClient()
    ours.fit(n_iterations, client=client)
    return theirs, ours, client.jobs[0]


def _same(theirs, ours) -> None:
    for name in ("coef", "se", "ci", "all_coef", "all_se", "h"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(theirs, name), err_msg=name)
    np.testing.assert_array_equal(ours.confint(level=0.9), theirs.confint(level=0.9))
    assert str(ours) == str(theirs)


@pytest.mark.parametrize("fuzzy", [False, True], ids=["sharp", "fuzzy"])
@pytest.mark.parametrize("fs", ["cutoff", "cutoff and score", "interacted cutoff and score"])
def test_every_number_is_doublemls(fuzzy: bool, fs: str) -> None:
    # GIVEN both classes on the same data and learners, n_rep 2
    learners = (LinearRegression(), LogisticRegression() if fuzzy else None)
    theirs, ours, job = _pair(
        _data(fuzzy), *learners, fuzzy=fuzzy, n_folds=3, n_rep=2, fs_specification=fs
    )
    # THEN the numbers are DoubleML's bit for bit, and the job ran a stage per iteration, the
    # estimate after the last
    _same(theirs, ours)
    assert job.log == [("inputs", 0), ("request", 1), ("inputs", 1), ("request", ESTIMATE_STEP),
                       ("estimate",)]  # fmt: skip
    spec = job.checked.spec
    assert spec.model == "rdflex" and spec.score == ("fuzzy" if fuzzy else "sharp")
    assert fdml.n_stages(spec) == 2 and len(spec.z_cols) == {"cutoff": 1}.get(
        fs, 2 + (fs[0] == "i")
    )
    assert job.estimate["d_cols"] == ["Conventional", "Bias-Corrected", "Robust"]
    np.testing.assert_array_equal(list(job.estimate["coef"].values()), theirs.coef)


@pytest.mark.parametrize("n_iterations", [1, 3])
def test_one_and_three_iterations_with_forests(n_iterations: int) -> None:
    # GIVEN random forests with their own random_state, fuzzy, one or three iterations
    learners = (RandomForestRegressor(n_estimators=20, max_depth=4, random_state=1),
                RandomForestClassifier(n_estimators=20, max_depth=4, random_state=2))  # fmt: skip
    theirs, ours, job = _pair(
        _data(True, 400), *learners, n_iterations=n_iterations, fuzzy=True, n_folds=3
    )
    # THEN DoubleML's numbers; one iteration leaves the final bandwidth to rdrobust (h NaN)
    _same(theirs, ours)
    assert [e for e in job.log if e[0] == "inputs"] == [("inputs", s) for s in range(n_iterations)]


def test_kernels_a_given_first_bandwidth_and_rdrobust_options() -> None:
    # GIVEN the uniform kernel, a custom one (a callable: it runs on the client only), a given
    # h_fs and an rdrobust keyword
    data = _data(False)

    def custom(x, h):
        return np.maximum(0.0, 1 - (np.abs(x) / h) ** 2)

    for kwargs in ({"fs_kernel": "uniform", "h_fs": 0.5}, {"fs_kernel": custom},
                   {"fs_kernel": "epanechnikov", "p": 2}):  # fmt: skip
        theirs, ours, _ = _pair(data, LinearRegression(), n_folds=4, **kwargs)
        _same(theirs, ours)


def test_what_the_stack_cannot_honour_is_refused_by_name() -> None:
    # GIVEN sharp data WHEN a learner takes no sample_weight THEN DoubleML's own ValueError
    from sklearn.neighbors import KNeighborsRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    data = _data(False)
    with pytest.raises(ValueError, match="does not support sample weights"):
        RDFlex(data, KNeighborsRegressor())
    # ... a Pipeline (its fit takes **params, but refuses sample_weight): fanfit's, by name
    model = RDFlex(data, make_pipeline(StandardScaler(), LinearRegression()))
    with pytest.raises(errors.InvalidJobError, match="does not support sample weights"):
        model.fit(client=FakeClient())
    # ... a bad number of iterations: DoubleML's checks
    model = RDFlex(data, LinearRegression())
    with pytest.raises(ValueError, match="has to be positive"):
        model.fit(0, client=FakeClient())
    with pytest.raises(TypeError, match="must be of int type"):
        model.fit(1.5, client=FakeClient())


def test_a_failure_on_the_client_fails_the_job_by_name(monkeypatch) -> None:
    # GIVEN rdrobust failing on the client between two stages
    model = RDFlex(_data(False), LinearRegression(), n_folds=3)

    def broken(self):
        raise ZeroDivisionError("rdrobust failed")

    monkeypatch.setattr(RDFlex, "_update_weights", broken)
    client = FakeClient()
    # WHEN the model is fitted THEN the error reaches the caller and the job is told why
    with pytest.raises(ZeroDivisionError):
        model.fit(client=client)
    assert client.jobs[0].log[-1] == ("failure", 1, "ZeroDivisionError")


def test_fanfit_rdd_is_doublemls_module_name() -> None:
    import fanfit.rdd

    assert fanfit.RDFlex is fanfit.rdd.RDFlex is RDFlex
    assert issubclass(RDFlex, dml.rdd.RDFlex)


def test_the_command_line_runs_doublemls_rdflex(tmp_path, monkeypatch, capsys) -> None:
    # GIVEN a CSV of a fuzzy design and the command line against the fake client
    import contextlib

    import pandas as pd

    from fanfit.cli import common, main

    data = _data(True, 400)
    frame = pd.DataFrame(data.data)
    path = tmp_path / "rdd.csv"
    frame.to_csv(path, index=False)
    client = FakeClient()
    monkeypatch.setattr(common, "stack_client", lambda args: contextlib.nullcontext(client))
    argv = ["estimate", "--data", str(path), "--model", "rdflex", "--y", data.y_col, "--d",
            data.d_cols[0], "--score-col", data.score_col, "--fuzzy", "--cutoff", "0",
            "--ml-g", "LinearRegression", "--ml-m", "LogisticRegression", "--n-folds", "3",
            "--n-rep", "2", "--seed", "8", "--fs-specification", "cutoff and score", "-q"]  # fmt: skip

    def doublemls():  # DoubleML's RDFlex of the same frame and options, after the same seed
        np.random.seed(8)
        return dml.rdd.RDFlex(
            dml.DoubleMLRDDData(frame, y_col=data.y_col, d_cols=data.d_cols, x_cols=data.x_cols,
                                score_col=data.score_col),
            LinearRegression(), LogisticRegression(), fuzzy=True, cutoff=0.0, n_folds=3,
            n_rep=2, fs_specification="cutoff and score",
        )  # fmt: skip

    # WHEN it runs THEN it prints DoubleML's RDFlex of the same data after the same seed
    assert main(argv) == 0
    assert str(doublemls().fit()) in capsys.readouterr().out
    # ... given folds replace the drawn ones, as DoubleML's _smpls
    folds = np.stack([np.arange(400) % 3, (np.arange(400) // 7) % 3], axis=1)
    pd.DataFrame(folds).to_csv(tmp_path / "folds.csv", index=False, header=False)
    assert main([*argv, "--folds", str(tmp_path / "folds.csv")]) == 0
    theirs = doublemls()
    theirs._smpls = fdml.folds_to_smpls(folds)
    assert str(theirs.fit()) in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "match"),
    [([], "needs --score-col"), (["--score-col", "s", "--z", "x1"], "takes no --z"),
     (["--score-col", "s", "--detach"], "does not take --detach"),
     (["--score-col", "s", "--fuzzy"], "needs --ml-g and, fuzzy, --ml-m")],
)  # fmt: skip
def test_the_command_line_refuses_what_rdflex_cannot_take(tmp_path, capsys, extra, match) -> None:
    from fanfit.cli import main

    path = tmp_path / "d.csv"
    path.write_text("y,d,s,x1\n1,0,-1,2\n2,1,1,3\n")
    argv = ["estimate", "--data", str(path), "--model", "rdflex", "--y", "y", "--d", "d", *extra]
    if "--fuzzy" not in extra:
        argv += ["--ml-g", "LinearRegression"]
    assert main(argv) != 0
    assert match in capsys.readouterr().err


def test_the_steps_on_moto_take_the_clients_inputs_and_estimate(moto_stack, tmp_path) -> None:
    # GIVEN the job fanfit's RDFlex sends (one iteration, n_rep 2) and the estimate the class
    # computes from it (fitted on the fake client)
    import boto3
    from pipeline_steps import run_estimate

    from fanfit import storage
    from fanfit.client.doubleml.base import _check
    from fanfit.report import write_report

    data = _data(True, 300)
    learners = (LinearRegression(), LogisticRegression())
    np.random.seed(8)
    model = RDFlex(data, *learners, fuzzy=True, n_folds=3, n_rep=2)
    _, checked = _check(model._fanfit_frame(), model.fanfit_options(1, 0))
    np.random.seed(8)
    reference = RDFlex(data, *learners, fuzzy=True, n_folds=3, n_rep=2)
    fake = FakeClient()
    reference.fit(1, client=fake)
    sent: list = []

    def client(step, plan) -> None:  # what EstimateJob.send_stage_inputs / send_estimate write
        store = storage.JobStore("fanfit-unit", boto3.client("s3"))
        sent.append((step, plan.client_inputs))
        if step == storage.CLIENT_ESTIMATE_STEP:
            store.put_json(storage.client_estimate_key(plan.job_id), fake.jobs[0].estimate)
        else:
            weights = [np.asarray(model.w, dtype=float).tolist()] * 2
            store.put_json(storage.stage_inputs_key(plan.job_id, step),
                           {"sample_weights": [weights]})  # fmt: skip

    with moto_stack():
        # WHEN Prepare, the wait, Schedule, CrossFit, the wait and Aggregate run it
        store, planned, result = run_estimate(
            checked.columns, checked.values, checked.spec, checked.folds, "rd", client=client
        )
        preds = store.get_arrays(storage.predictions_key("rd"))
    # THEN the steps waited for the stage's weights and the estimate, the shards' predictions are
    # the fake client's (fitted here with the same weights), result.json holds the client's
    # estimate, and the report renders it
    assert sent == [(0, True), (storage.CLIENT_ESTIMATE_STEP, True)]
    assert [p.n_units for p in planned] == [12]
    key = next(k for k in preds if k.endswith("ml_g_iter0"))
    np.testing.assert_array_equal(preds[key][:, :], fake.jobs[0].preds["ml_g_iter0"][:, :, 0])
    assert result["d_cols"] == ["Conventional", "Bias-Corrected", "Robust"]
    assert result["coef"] == fake.jobs[0].estimate["coef"] and result["rdd"]["fuzzy"] is True
    assert write_report(result, tmp_path / "report").exists()


def test_from_doubleml_runs_an_unfitted_rdflex_with_its_folds() -> None:
    # GIVEN DoubleML's unfitted RDFlex (its folds and first bandwidth drawn at construction)
    data = _data(False)
    np.random.seed(8)
    model = dml.rdd.RDFlex(data, LinearRegression(), n_folds=3)
    np.random.seed(8)
    theirs = dml.rdd.RDFlex(data, LinearRegression(), n_folds=3).fit()
    # WHEN fanfit runs it THEN its class is fanfit's and its numbers DoubleML's
    fitted = fanfit.from_doubleml(model, FakeClient())
    assert isinstance(fitted, RDFlex)
    _same(theirs, fitted)
    # ... a fitted one is refused by name
    with pytest.raises(errors.UnsupportedArgumentError, match="unfitted doubleml.rdd.RDFlex"):
        fanfit.from_doubleml(theirs, FakeClient())


def test_a_resume_of_an_rdflex_job_is_refused_by_name(moto_stack, moto_client) -> None:
    # GIVEN an rdflex job's spec in the stack's bucket WHEN it is resumed THEN InvalidJobError
    # names why: only its client can run rdrobust between the stages
    from fanfit import storage

    with moto_stack():
        client = moto_client()
        client.store.put_json(storage.spec_key("rd-1"),
                              {"kind": "estimate", "dml": {"model": "rdflex"}})  # fmt: skip
        with pytest.raises(errors.InvalidJobError, match="fit it again with fanfit.RDFlex"):
            client.resume("rd-1")


def test_ctrl_c_on_the_client_fails_the_job_rather_than_leave_it_waiting(monkeypatch) -> None:
    # GIVEN a Ctrl-C while the client waits for a stage
    model = RDFlex(_data(False), LinearRegression(), n_folds=3)
    client = FakeClient()

    def interrupted(self, stage):
        raise KeyboardInterrupt

    monkeypatch.setattr(FakeJob, "stage_predictions", interrupted)
    # WHEN it reaches fit THEN the job is failed by name (its execution would wait an hour)
    with pytest.raises(KeyboardInterrupt):
        model.fit(client=client)
    assert client.jobs[0].log[-1] == ("failure", 1, "KeyboardInterrupt")
