"""fanfit.DoubleMLDIDMulti runs as ONE job whose parts select their rows from one panel upload
(issue 28, items 1, 2 and 4).

GIVEN DoubleML's staggered-adoption panel (make_did_CS2021: 150 units, 4 periods, fixed seeds) and
DoubleML 0.11.4's DoubleMLDIDMulti with its per-combination sample splitting, WHEN fanfit's class
is fitted on moto and the state machine's steps (Prepare, Schedule, CrossFit, Aggregate) run in
process (panel data, and repeated cross-sections: make_did_cs_CS2021, ``panel=False``), THEN there is one spec, one upload (the panel in long format), one plan, one job record
and one result; each part selects its rows and derives its columns in the pipeline exactly as
DoubleMLDIDBinary (DoubleMLDIDCSBinary) builds its ``data_subset``, with its own folds (DoubleML's ``smpls``); coef,
se and all_coef of every combination and the group, time and event-study aggregations equal
DoubleML's at 1e-9. Prepare draws stratified folds per part when none are given, and refuses a
bad selection naming the part.
"""

from __future__ import annotations

import json
import re
import warnings
from typing import Any

import numpy as np
import pytest

from fanfit import errors, storage
from fanfit.client.estimate import EstimateJob
from fanfit.dml.folds import smpls_to_folds
from fanfit.jobs.documents.estimate import EstimatePlan, PartSelect
from fanfit.jobs.estimate.data import n_train, stage_folds

doubleml = pytest.importorskip("doubleml")

from doubleml.did.datasets import make_did_CS2021, make_did_cs_CS2021  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402

import fanfit  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:DoubleMLDIDData is deprecated",
    "ignore:DoubleMLDID.* is deprecated",
    "ignore:The inplace keyword",
    "ignore:The estimated nu2",
)

RTOL = 1e-9


@pytest.fixture
def client(moto_stack, moto_client, monkeypatch) -> Any:
    # the test runs the execution's steps itself, when the class first waits for its job
    from pipeline_steps import run_steps

    ran: set[str] = set()

    def wait(self: EstimateJob, timeout: float = 0.0, progress: Any = False) -> None:
        if self.job_id not in ran:
            ran.add(self.job_id)
            c = self.client
            throughput = storage.ThroughputRecords(
                "fanfit-throughput", c.session.client("dynamodb")
            )
            run_steps(c.store, c.records, throughput, self.job_id)

    monkeypatch.setattr(EstimateJob, "wait", wait)
    with moto_stack():
        yield moto_client()


def _panel(n_obs: int = 150, seed: int = 3, make: Any = make_did_CS2021) -> Any:
    np.random.seed(seed)  # DoubleML's DID generators draw from the global state
    frame = make(n_obs=n_obs, dgp_type=1, n_periods=4, n_pre_treat_periods=2, time_type="float")
    x_cols = [c for c in frame.columns if c.startswith("Z")]
    return doubleml.data.DoubleMLPanelData(frame, y_col="y", d_cols="d", id_col="id", t_col="t",
                                           x_cols=x_cols)  # fmt: skip


def _both(**options: Any) -> tuple[Any, Any]:
    data = _panel() if options.get("panel", True) else _panel(200, make=make_did_cs_CS2021)
    learners = (LinearRegression(), LogisticRegression())
    np.random.seed(5)  # each DoubleMLDIDBinary draws its splitting at construction
    ours = fanfit.DoubleMLDIDMulti(data, *learners, n_folds=2, n_rep=2, **options)
    np.random.seed(5)
    theirs = doubleml.did.DoubleMLDIDMulti(data, *learners, n_folds=2, n_rep=2, **options)
    return ours, theirs


@pytest.mark.parametrize(
    "options",
    [{}, {"control_group": "not_yet_treated", "anticipation_periods": 1}, {"panel": False}],
    ids=["never-treated", "not-yet-treated-anticipation", "cross-sections"],
)
def test_did_multi_is_one_job_whose_parts_select_their_rows(client, options) -> None:
    # GIVEN fanfit's and DoubleML's DoubleMLDIDMulti, same panel, learners, options and seed
    ours, theirs = _both(**options)
    # WHEN fanfit's is fitted through the real steps on moto and DoubleML's in-process
    ours.fit(client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs.fit()
    n_gt = theirs.n_gt_atts
    assert n_gt >= 4
    # THEN one job: one id for every part, one spec of n_gt selecting parts on one upload
    (job_id,) = {job.job_id for job in ours.fanfit_jobs}
    spec = client.store.get_json(storage.spec_key(job_id))
    assert spec["model"] == "did_multi" and len(spec["parts"]) == n_gt
    assert [p["label"] for p in spec["parts"]] == list(theirs.gt_labels)
    columns, values = client.store.get_data(spec["data_key"])
    data = ours._dml_data
    assert columns == [data.id_col, data.t_col, data.g_col, data.y_col, *data.x_cols]
    assert values.shape == (data.n_obs, 4 + len(data.x_cols))  # the long panel, once
    # AND each part's selection is its combination's, with its own folds: DoubleML's smpls
    plan = EstimatePlan.parse(client.store.get_json(storage.plan_key(job_id)))
    assert plan.parts is not None
    for k, (part, binary) in enumerate(zip(plan.parts, theirs.modellist, strict=True)):
        assert part.select is not None
        assert (part.select.g_value, part.select.t_value_pre, part.select.t_value_eval) == (
            binary.g_value, binary.t_value_pre, binary.t_value_eval)  # fmt: skip
        assert part.select.control_group == theirs.control_group
        assert part.select.panel is theirs.panel
        assert part.n_obs == binary.n_obs_subset
        np.testing.assert_array_equal(
            ours.fanfit_jobs[k].folds(), smpls_to_folds(binary.smpls, binary.n_obs_subset)
        )
    # AND one stage whose units are every part's; one job record, SUCCEEDED
    units = client.store.get_json(storage.units_key(job_id, 0))
    assert sorted({u.get("part", 0) for u in units}) == list(range(n_gt))
    # AND Schedule counts a unit's training rows among its own part's rows
    folds = stage_folds(client.store, plan)
    for unit in plan.units(0):
        binary = theirs.modellist[unit.part]
        train, _ = binary.smpls[unit.i_rep][unit.i_fold]
        assert n_train(folds, unit, plan.dml) == len(train)
    assert client.records.get(job_id)["status"] == "SUCCEEDED"
    # AND the job's own printout (fanfit result JOB) lists every combination's estimate
    text = str(ours.fanfit_jobs[0].job.result())
    assert "Parts of this job" in text and all(label in text for label in theirs.gt_labels)
    # AND every combination's coef, se and all_coef are DoubleML's, as a whole and part by part
    for name in ("coef", "se", "all_coef"):
        np.testing.assert_allclose(getattr(ours, name), getattr(theirs, name), rtol=RTOL,
                                   atol=0, err_msg=name)  # fmt: skip
    for result, binary in zip(ours.fanfit_results, theirs.modellist, strict=True):
        np.testing.assert_allclose(result.coef, binary.coef, rtol=RTOL, atol=0)
        np.testing.assert_allclose(result.all_coef, binary.all_coef, rtol=RTOL, atol=0)
        np.testing.assert_allclose(result.se, binary.se, rtol=RTOL, atol=0)
    # AND the group, time and event-study aggregations are DoubleML's
    for aggregation in ("group", "time", "eventstudy"):
        mine, dmls = ours.aggregate(aggregation), theirs.aggregate(aggregation)
        for attr in ("aggregated_frameworks", "overall_aggregated_framework"):
            for name in ("thetas", "ses"):
                np.testing.assert_allclose(
                    getattr(getattr(mine, attr), name), getattr(getattr(dmls, attr), name),
                    rtol=RTOL, atol=0, err_msg=f"{aggregation} {attr} {name}",
                )  # fmt: skip


def _respec(client: Any, job_id: str, new_id: str, change: Any) -> None:
    """Write job ``new_id``'s spec: ``job_id``'s with ``change(spec)`` applied."""
    spec = client.store.get_json(storage.spec_key(job_id))
    change(spec)
    client.store.put_bytes(storage.spec_key(new_id), json.dumps(spec).encode())


def _submitted(client: Any) -> tuple[Any, str]:
    """A DIDMulti submitted (not run): the model and its job id."""
    ours, _ = _both()
    parts = ours._fanfit_parts(0)
    (job,) = {j.job_id for j in ours._fanfit_submit(client, parts, {})}
    return ours, job


def test_prepare_draws_stratified_folds_per_part_when_none_are_given(client) -> None:
    from fanfit.jobs.estimate.prepare import prepare_stage

    # GIVEN a DIDMulti's spec whose parts carry no folds
    ours, job_id = _submitted(client)

    def drop_folds(spec: dict) -> None:
        for part in spec["parts"]:
            part.pop("folds_key")

    _respec(client, job_id, "est-drawn", drop_folds)
    # WHEN Prepare plans it
    prepare_stage(client.store, client.records, "est-drawn", storage.spec_key("est-drawn"), 0)
    plan = EstimatePlan.parse(client.store.get_json(storage.plan_key("est-drawn")))
    # THEN each part has folds over its own rows, every fold with treated and control units
    assert plan.parts is not None
    for k, binary in enumerate(ours.modellist):
        folds = client.store.get_array(plan.part_folds_key(k))
        assert folds.shape == (binary.n_obs_subset, 2)
        g = binary.data_subset["G_indicator"].to_numpy()
        for i_rep in range(2):
            for i_fold in range(2):
                in_fold = folds[:, i_rep] == i_fold
                assert 0 < g[in_fold].sum() < in_fold.sum()
    # AND the parts' draws differ (each combination its own stream)
    first = client.store.get_array(plan.part_folds_key(0))
    second = client.store.get_array(plan.part_folds_key(1))
    assert first.shape != second.shape or not np.array_equal(first, second)


def test_prepare_refuses_a_bad_selection_naming_the_part(client) -> None:
    from fanfit.jobs.estimate.prepare import prepare_stage

    # GIVEN a DIDMulti's spec whose second part selects an outcome the panel lacks
    ours, job_id = _submitted(client)

    def bad_outcome(spec: dict) -> None:
        for part in spec["parts"]:
            part.pop("folds_key")  # (another job's: the new job draws its own)
        spec["parts"][1]["select"]["y_col"] = "nope"

    _respec(client, job_id, "est-bad", bad_outcome)
    # WHEN Prepare plans it THEN the error names the part and the column
    label = ours.gt_labels[1]
    with pytest.raises(errors.InvalidDataError, match=rf"part '{re.escape(label)}'.*'nope'"):
        prepare_stage(client.store, client.records, "est-bad", storage.spec_key("est-bad"), 0)


def test_a_selection_is_plain_validated_data() -> None:
    base = dict(id_col="id", t_col="t", g_col="d", y_col="y", g_value=2.0, t_value_pre=0.0,
                t_value_eval=1.0)  # fmt: skip
    # GIVEN a selection document THEN it round-trips through JSON
    select = PartSelect.parse(base)
    assert PartSelect.parse(select.to_json_dict()) == select
    # AND an unknown key, a control group DoubleML lacks, equal periods and a negative
    # anticipation are refused by name
    for bad, field in (
        ({"code": "__import__('os')"}, "code"),
        ({"control_group": "everyone"}, "control_group"),
        ({"t_value_eval": 0.0}, "two different periods"),
        ({"anticipation_periods": -1}, "anticipation_periods"),
    ):
        with pytest.raises(errors.InvalidDocumentError, match=field):
            PartSelect.parse({**base, **bad})


def test_a_spec_whose_parts_select_takes_folds_per_part_only() -> None:
    from fanfit.jobs.documents.estimate import EstimateSpec

    select = {"id_col": "id", "t_col": "t", "g_col": "d", "y_col": "y", "g_value": 2.0,
              "t_value_pre": 0.0, "t_value_eval": 1.0}  # fmt: skip
    dml_doc = {"model": "did", "y_col": "y_diff", "d_cols": ["G_indicator"]}
    key = "data/" + "0" * 64 + ".npz"
    part = {"label": "ATT(2.0,0,1)", "dml": dml_doc, "select": select,
            "folds_key": "jobs/j/input-folds.npy"}  # fmt: skip
    spec = {"dml": dml_doc, "model": "did_multi", "data_key": key, "parts": [part]}
    # GIVEN a spec of one selecting part THEN it parses and keeps the part's folds_key
    assert EstimateSpec.parse(spec).parts[0].folds_key == "jobs/j/input-folds.npy"
    # AND selecting and plain parts mixed, a job-level folds_key next to selecting parts and a
    # part's folds_key without its select are refused by name
    plain = {"label": "other", "dml": dml_doc}
    for bad, message in (
        ({**spec, "parts": [part, plain]}, "every part selects its rows"),
        ({**spec, "folds_key": "jobs/j/input-folds.npy"}, "folds per part"),
        ({**spec, "parts": [{**plain, "folds_key": "jobs/j/f.npy"}]}, "needs its select"),
    ):
        with pytest.raises(errors.InvalidDocumentError, match=message):
            EstimateSpec.parse(bad)
