"""fanfit.DoubleMLDIDMulti without a stack: the fake client of test_doubleml_classes.py runs each
``did`` job in-process (what the pipeline computes) on the data and options ``fit()`` sends.

GIVEN DoubleML's staggered-adoption panel (make_did_CS2021, few units and periods) and the same
global seed, WHEN fanfit's DoubleMLDIDMulti is fitted on the fake stack and DoubleML's
in-process, THEN ONE ``did_multi`` job ran, of one ``did`` part per group-time combination on
the one panel upload, whose rows and columns the pipeline selects as DoubleMLDIDBinary's subset,
with its folds, and coef, se, the predictions, the nuisance losses,
the bootstrap and the event-study, group and time aggregations are DoubleML's; bad input is
refused by name. With ``panel=False`` (repeated cross-sections, make_did_cs_CS2021) each
combination is one ``didcs`` part selecting exactly DoubleMLDIDCSBinary's subset, with its folds.
"""

from __future__ import annotations

import numpy as np
import pytest

dml = pytest.importorskip("doubleml")

from doubleml.did.datasets import make_did_CS2021, make_did_cs_CS2021  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from test_doubleml_classes import FakeClient  # noqa: E402

import fanfit  # noqa: E402
from fanfit import dml as fdml  # noqa: E402
from fanfit import errors  # noqa: E402
from fanfit.client.doubleml.did import cs_subset  # noqa: E402
from fanfit.dml.folds import smpls_to_folds  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:DoubleMLDIDData is deprecated",
    "ignore:DoubleMLDID.* is deprecated",
    "ignore:A learner ml_m has been provided",
    "ignore:'trimming_threshold' is deprecated",
    "ignore:The inplace keyword",
    "ignore:The estimated nu2",
)

RTOL = 1e-9
AGGREGATIONS = ("eventstudy", "group", "time")


def _panel(n_obs: int = 150, seed: int = 3, make=make_did_CS2021):
    np.random.seed(seed)  # DoubleML's DID generators draw from the global state
    frame = make(n_obs=n_obs, dgp_type=1, n_periods=4, n_pre_treat_periods=2, time_type="float")
    x_cols = [c for c in frame.columns if c.startswith("Z")]
    return dml.data.DoubleMLPanelData(frame, y_col="y", d_cols="d", id_col="id", t_col="t",
                                      x_cols=x_cols)  # fmt: skip


def _both(data=None, **options):
    data = _panel() if data is None else data
    learners = {"ml_g": LinearRegression(), "ml_m": LogisticRegression()}
    if options.get("score") == "experimental":
        learners["ml_m"] = None
    np.random.seed(5)  # each DoubleMLDIDBinary draws its splitting at construction
    ours = fanfit.DoubleMLDIDMulti(data, **learners, n_folds=2, n_rep=2, **options)
    np.random.seed(5)
    theirs = dml.did.DoubleMLDIDMulti(data, **learners, n_folds=2, n_rep=2, **options)
    return ours, theirs


class OrderedClient(FakeClient):
    """The fake client, recording when each job is submitted and when it is awaited."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []
        self.frames: list = []

    def submit_estimate(self, data, options=None, **keywords):
        self.events.append("submit")
        self.frames.append(data if options is None else options.data)
        job = super().submit_estimate(data, options, **keywords)
        result, events = job.result, self.events

        def awaited(timeout=None, progress=False):
            events.append("await")
            return result(timeout, progress)

        job.result = awaited
        return job


def _fit_side_by_side(ours, theirs) -> OrderedClient:
    """Fit fanfit's on the fake stack and DoubleML's in-process; assert that every combination
    (at least 3) was submitted before any was awaited, as the parts of ONE ``did_multi`` job."""
    client = OrderedClient()
    ours.fit(client=client)
    theirs.fit()
    n_gt = theirs.n_gt_atts
    assert n_gt >= 3
    assert client.events == ["submit"] * n_gt + ["await"] * n_gt
    assert client.parts_submitted == [("did_multi", list(theirs.gt_labels))]
    return client


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"score": "experimental", "control_group": "not_yet_treated",
         "in_sample_normalization": False},
        {"anticipation_periods": 1, "trimming_threshold": 0.05},
    ],
    ids=["observational", "experimental-not-yet-treated", "anticipation"],
)  # fmt: skip
def test_did_multi_on_the_fake_stack_is_doublemls(options) -> None:
    # GIVEN fanfit's and DoubleML's DoubleMLDIDMulti, same panel, learners, options and seed
    ours, theirs = _both(**options)
    # WHEN fanfit's is fitted on the fake stack and DoubleML's in-process
    # THEN ONE did_multi job of one did part per group-time combination (all submitted before
    # any was awaited), each part selecting its rows from the one panel upload
    client = _fit_side_by_side(ours, theirs)
    for sent, frame, binary in zip(client.submitted, client.frames, theirs.modellist):
        assert (sent["model"], sent["y"], sent["d"]) == ("did", "y_diff", ["G_indicator"])
        assert sent["score"] == theirs.score
        assert sent["in_sample_normalization"] is theirs.in_sample_normalization
        assert sent["trimming_threshold"] == theirs.trimming_threshold
        # AND the pipeline's selection is exactly DoubleMLDIDBinary's rows, covariates, outcome
        # difference and group indicator, with its folds
        x_cols = list(ours._dml_data.x_cols)
        np.testing.assert_array_equal(frame[x_cols], binary.data_subset[x_cols])
        np.testing.assert_array_equal(frame["y_diff"], binary.data_subset["y_diff"])
        np.testing.assert_array_equal(frame["G_indicator"], binary.data_subset["G_indicator"])
        np.testing.assert_array_equal(
            sent["folds"], smpls_to_folds(binary.smpls, binary.n_obs_subset)
        )
    # AND coef, se, confint, predictions and nuisance losses are DoubleML's
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL)
    np.testing.assert_allclose(ours.confint(), theirs.confint(), rtol=RTOL)
    for mine, dmls in zip(ours.modellist, theirs.modellist):
        for key, value in dmls.predictions.items():
            np.testing.assert_allclose(mine.predictions[key], value, rtol=RTOL, atol=1e-12)
    for key, value in theirs.nuisance_loss.items():
        np.testing.assert_allclose(ours.nuisance_loss[key], value, rtol=RTOL)
    # AND the event-study, group and time aggregations are DoubleML's
    for aggregation in AGGREGATIONS:
        mine, dmls = ours.aggregate(aggregation), theirs.aggregate(aggregation)
        for name in ("thetas", "ses"):
            np.testing.assert_allclose(
                getattr(mine.aggregated_frameworks, name),
                getattr(dmls.aggregated_frameworks, name), rtol=RTOL, err_msg=aggregation,
            )  # fmt: skip
            np.testing.assert_allclose(
                getattr(mine.overall_aggregated_framework, name),
                getattr(dmls.overall_aggregated_framework, name), rtol=RTOL,
            )  # fmt: skip


def test_did_multi_bootstrap_and_aggregated_confint_are_doublemls() -> None:
    # GIVEN both classes fitted on the same panel
    ours, theirs = _both()
    ours.fit(client=FakeClient())
    theirs.fit()
    # WHEN both bootstrap with the same seed, and the event study is aggregated and bootstrapped
    np.random.seed(11)
    ours.bootstrap(n_rep_boot=200)
    np.random.seed(11)
    theirs.bootstrap(n_rep_boot=200)
    # THEN the joint intervals are DoubleML's
    np.testing.assert_allclose(ours.confint(joint=True), theirs.confint(joint=True), rtol=RTOL)
    mine, dmls = ours.aggregate("eventstudy"), theirs.aggregate("eventstudy")
    np.random.seed(12)
    mine.aggregated_frameworks.bootstrap(n_rep_boot=200)
    np.random.seed(12)
    dmls.aggregated_frameworks.bootstrap(n_rep_boot=200)
    np.testing.assert_allclose(
        mine.aggregated_frameworks.confint(joint=True),
        dmls.aggregated_frameworks.confint(joint=True), rtol=RTOL,
    )  # fmt: skip


def test_did_multi_parity_check_fires_on_a_different_job_estimate() -> None:
    # GIVEN a stack whose jobs report a coef 0.1 off DoubleML's on the same predictions
    ours, _ = _both()
    # WHEN fanfit's class is fitted THEN the parity check names the combination
    with pytest.raises(errors.ParityError, match=r"ATT\(2.0,0,1\)"):
        ours.fit(client=FakeClient(coef_shift=0.1))


def test_did_multi_refuses_bad_input_by_name() -> None:
    data = _panel()
    lin, logit = LinearRegression(), LogisticRegression()
    # GIVEN data that is not a DoubleMLPanelData THEN the error names DoubleMLPanelData
    with pytest.raises(errors.InvalidDataError, match="DoubleMLPanelData"):
        fanfit.DoubleMLDIDMulti(data.data, lin, logit)
    plain = dml.DoubleMLData(data.data, "y", "t", x_cols=data.x_cols)
    with pytest.raises(errors.InvalidDataError, match="DoubleMLPanelData"):
        fanfit.DoubleMLDIDMulti(plain, lin, logit)
    # AND a calibration and a callable score are refused by name
    calibrated = dml.utils.PSProcessorConfig(calibration_method="isotonic")
    with pytest.raises(errors.UnsupportedArgumentError, match="calibration"):
        fanfit.DoubleMLDIDMulti(data, lin, logit, ps_processor_config=calibrated)
    with pytest.raises(errors.UnsupportedArgumentError, match="callable score"):
        fanfit.DoubleMLDIDMulti(data, lin, logit, score=lambda *a: None)
    # AND a learner outside the allow-list names its argument
    with pytest.raises(errors.InvalidLearnerError, match="ml_g"):
        fanfit.DoubleMLDIDMulti(data, object(), logit)
    # AND fit() refuses external predictions and unknown options by name
    model = fanfit.DoubleMLDIDMulti(data, lin, logit, n_folds=2)
    with pytest.raises(errors.UnsupportedArgumentError, match="external_predictions"):
        model.fit(client=FakeClient(), external_predictions={})
    with pytest.raises(errors.InvalidJobError, match="bogus"):
        model.fit(client=FakeClient(), bogus=1)


def _cross_sections(n_obs: int = 200, seed: int = 3):
    """Repeated cross-sections: make_did_cs_CS2021 (each unit observed in one period)."""
    return _panel(n_obs, seed, make_did_cs_CS2021)


@pytest.mark.parametrize(
    "options",
    [{}, {"score": "experimental", "control_group": "not_yet_treated",
          "in_sample_normalization": False}],
    ids=["observational", "experimental-not-yet-treated"],
)  # fmt: skip
def test_did_multi_cross_sections_send_doublemls_subsets_as_didcs_jobs(options) -> None:
    # GIVEN fanfit's and DoubleML's DoubleMLDIDMulti with panel=False, same data and seed
    data = _cross_sections()
    ours, theirs = _both(data, panel=False, **options)
    # WHEN fanfit's is fitted on the fake stack and DoubleML's in-process
    # THEN ONE did_multi job of one didcs part per combination (all submitted before any was
    # awaited), each selecting its rows from the one upload
    client = _fit_side_by_side(ours, theirs)
    x_cols = list(data.x_cols)
    for sent, frame, binary in zip(client.submitted, client.frames, theirs.modellist):
        assert type(binary).__name__ == "DoubleMLDIDCSBinary"
        assert (sent["model"], sent["y"], sent["d"], sent["t"]) == (
            "didcs", "y", ["G_indicator"], "t_indicator")  # fmt: skip
        assert sent["in_sample_normalization"] is theirs.in_sample_normalization
        # AND the pipeline's selection is exactly DoubleMLDIDCSBinary's rows (in its order),
        # columns and folds
        subset = binary.data_subset
        assert len(frame) == binary.n_obs_subset
        for col in (*x_cols, "y", "G_indicator"):
            np.testing.assert_array_equal(frame[col].to_numpy(), subset[col].to_numpy(), col)
        np.testing.assert_array_equal(frame["t_indicator"], subset["t_indicator"].astype(int))
        np.testing.assert_array_equal(
            sent["folds"], smpls_to_folds(binary.smpls, binary.n_obs_subset)
        )
    # AND coef, se, the predictions and the aggregations are DoubleML's
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL)
    for mine, dmls in zip(ours.modellist, theirs.modellist):
        for key, value in dmls.predictions.items():
            np.testing.assert_allclose(mine.predictions[key], value, rtol=RTOL, atol=1e-12)
    for aggregation in AGGREGATIONS:
        np.testing.assert_allclose(
            ours.aggregate(aggregation).overall_aggregated_framework.thetas,
            theirs.aggregate(aggregation).overall_aggregated_framework.thetas, rtol=RTOL,
        )  # fmt: skip


def test_cross_section_subset_scores_equal_doublemls_binary() -> None:
    # GIVEN DoubleML's panel=False DIDMulti fitted in-process, and each combination's subset as
    # cs_subset builds it
    data = _cross_sections()
    np.random.seed(7)
    theirs = dml.did.DoubleMLDIDMulti(data, LinearRegression(), LogisticRegression(), n_folds=2,
                                      panel=False)  # fmt: skip
    theirs.fit()
    for binary in theirs.modellist:
        frame = cs_subset(binary, list(data.x_cols), "y")
        # WHEN fanfit's didcs score runs on that subset with DoubleML's own predictions
        spec = fdml.DMLSpec(model="didcs", score="observational", y_col="y",
                            d_cols=("G_indicator",), x_cols=tuple(data.x_cols), n_folds=2,
                            t_col="t_indicator", trimming_threshold=theirs.trimming_threshold,
                            learners={"ml_g": "LinearRegression", "ml_m": "LogisticRegression"})  # fmt: skip
        spec.validate()
        sub = fdml.validate_data(spec, list(frame.columns), frame.to_numpy(dtype=float))
        preds = {k: v[binary.id_positions] for k, v in binary.predictions.items()}
        psi_a, psi_b = fdml.score_elements(spec, sub, preds, 0, 0)
        # THEN the score elements are DoubleMLDIDCSBinary's at 1e-12 (at its rows)
        np.testing.assert_allclose(psi_a, binary.psi_elements["psi_a"][binary.id_positions, 0, 0],
                                   rtol=1e-12)  # fmt: skip
        np.testing.assert_allclose(psi_b, binary.psi_elements["psi_b"][binary.id_positions, 0, 0],
                                   rtol=1e-12)  # fmt: skip


def test_cs_subset_refuses_a_column_named_like_doublemls() -> None:
    # GIVEN a covariate named t_indicator WHEN the subset is built THEN the error names it
    data = _cross_sections()
    np.random.seed(7)
    theirs = dml.did.DoubleMLDIDMulti(data, LinearRegression(), LogisticRegression(), n_folds=2,
                                      panel=False)  # fmt: skip
    with pytest.raises(errors.InvalidDataError, match="'t_indicator'"):
        cs_subset(theirs.modellist[0], ["t_indicator"], "y")


@pytest.mark.parametrize("panel", [True, False], ids=["panel", "cross-sections"])
def test_did_multi_with_datetime_periods_and_string_ids_is_one_job(panel) -> None:
    # GIVEN a panel with datetime periods (never treated: NaT) and string unit ids
    np.random.seed(3)
    make = make_did_CS2021 if panel else make_did_cs_CS2021
    frame = make(n_obs=150, dgp_type=1, n_periods=4, n_pre_treat_periods=2, time_type="datetime")
    frame["id"] = "unit-" + frame["id"].astype(str)
    x_cols = [c for c in frame.columns if c.startswith("Z")]
    data = dml.data.DoubleMLPanelData(frame, y_col="y", d_cols="d", id_col="id", t_col="t",
                                      x_cols=x_cols, datetime_unit="M")  # fmt: skip
    # WHEN fanfit's class is fitted on the fake stack and DoubleML's in-process
    ours, theirs = _both(data, panel=panel)
    client = _fit_side_by_side(ours, theirs)
    # THEN the upload codes ids and periods by rank, and each part's selection from it is
    # DoubleML's subset
    columns, values = ours.fanfit_panel()
    assert columns[:3] == ["id", "t", "d"] and np.all(np.isfinite(values[:, :2]))
    assert np.isinf(values[:, 2]).any()  # the never-treated units (NaT)
    for frame_sent, binary in zip(client.frames, theirs.modellist, strict=True):
        assert len(frame_sent) == binary.n_obs_subset
        np.testing.assert_array_equal(frame_sent["G_indicator"], binary.data_subset["G_indicator"])
    # AND the effects are DoubleML's
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL)
