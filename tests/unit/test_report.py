"""fanfit.report: the figures plot the result's numbers, and the page is self-contained."""

from __future__ import annotations

import base64
import copy
import re
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from fanfit.errors import InvalidJobError
from fanfit.report import (
    coef_figure,
    overlap_figure,
    report_kind,
    thetas_figure,
    timeline_figure,
    train_progress_figure,
    worker_rounds_figure,
    write_report,
)

T0 = 1_700_000_000.0

#: What every shard record of ESTIMATE has besides its own times (a valid ShardStats).
_SHARD = {"stage": 0, "n_units": 1, "unit_fit_s": {}, "fit_s": 1.0, "io_s": 0.0, "memory_mb": 1769,
          "peak_rss_mb": 100.0}  # fmt: skip

ESTIMATE = {
    "model": "plr",
    "score": "partialling out",
    "d_cols": ["d1", "d2"],
    "coef": {"d1": 0.52, "d2": -1.25},
    "se": {"d1": 0.1, "d2": 0.2},
    "t_stat": {"d1": 5.2, "d2": -6.25},
    "pval": {"d1": 1e-7, "d2": 4e-10},
    "ci_95": {"d1": [0.3240, 0.7160], "d2": [-1.6420, -0.8580]},
    "all_coef": {"d1": [0.50, 0.52, 0.61], "d2": [-1.3, -1.25, -1.1]},
    "all_se": {"d1": [0.09, 0.1, 0.11], "d2": [0.19, 0.2, 0.21]},
    "n_obs": 500,
    "n_folds": 2,
    "n_rep": 3,
    "job_id": "est-test",
    "execution_arn": "arn:aws:states:us-east-1:000000000000:execution:fanfit-estimate:est-test",
    "timings": {
        "shards": [
            {
                "shard_id": "s0-w0-0",
                "pid": 11,
                "started_at": T0 + 0.0,
                "ended_at": T0 + 2.0,
                "cold_start": True,
                **_SHARD,
            },
            {
                "shard_id": "s0-w0-1",
                "pid": 12,
                "started_at": T0 + 0.25,
                "ended_at": T0 + 1.75,
                "cold_start": True,
                **_SHARD,
            },
            {
                "shard_id": "s0-w1-0",
                "pid": 12,
                "started_at": T0 + 2.0,
                "ended_at": T0 + 3.5,
                "cold_start": False,
                **_SHARD,
            },
            {
                "shard_id": "s0-w1-1",
                "pid": 11,
                "started_at": T0 + 2.5,
                "ended_at": T0 + 4.0,
                "cold_start": False,
                **_SHARD,
            },
        ]  # fmt: skip
    },
    "cost": {
        "total_usd": 0.0001,
        "items": [
            {
                "service": "lambda",
                "name": "CrossFit",
                "quantity": 6.0,
                "unit": "GB-s",
                "unit_usd": 1.66667e-05,
                "usd": 0.0001,
            }
        ],  # fmt: skip
        "notes": ["a <note> to escape"],
    },
}


def _result_json():
    """ESTIMATE as the Aggregate step writes ``result.json`` (a valid EstimateResultDoc)."""
    raw = {k: v for k, v in ESTIMATE.items() if k not in ("cost", "timings")}
    timings = {"shards": ESTIMATE["timings"]["shards"], "billed_gb_s": 6.0, "lambda_cost_usd": 0.0001,
               "aggregate": {"memory_mb": 1769, "peak_rss_mb": 120.0},
               "price_usd_per_gb_s": 1.66667e-05, "price_usd_per_request": 2e-07}  # fmt: skip
    return {**raw, "predictions_key": "jobs/est-test/predictions.npz",
            "folds_key": "jobs/est-test/folds.npy", "timings": timings}  # fmt: skip


#: An IRM estimate as result.json has it: with nuisance losses, the spec and the propensity overlap.
IRM = {
    **{k: v for k, v in ESTIMATE.items() if k not in ("cost",)},
    "model": "irm",
    "score": "ATE",
    "d_cols": ["d"],
    "coef": {"d": 0.52}, "se": {"d": 0.1}, "t_stat": {"d": 5.2}, "pval": {"d": 1e-7},
    "ci_95": {"d": [0.324, 0.716]}, "all_coef": {"d": [0.50, 0.52]}, "all_se": {"d": [0.09, 0.1]},
    "n_rep": 2,
    "nuisance_loss": {"ml_g0": [[1.25], [1.5]], "ml_g1": [[0.875], [0.625]],
                      "ml_m": [[0.4375], [0.5625]]},
    "nuisance_metric": {"ml_g0": "RMSE", "ml_g1": "RMSE", "ml_m": "Log Loss"},
    "spec": {"model": "irm", "score": "ATE", "y_col": "net_tfa", "d_cols": ["d"],
             "x_cols": ["age", "inc"], "z_cols": [], "n_folds": 2, "n_rep": 2, "seed": 4242,
             "learners": {"ml_g": {"name": "LassoCV", "params": {"cv": 3}},
                          "ml_m": {"name": "LogisticRegression", "params": {}}},
             "trimming_threshold": 0.05, "normalize_ipw": False, "n_rep_boot": 500,
             "boot_method": None},
    "propensity_overlap": {"variable": "d", "bin_edges": [0.0, 0.25, 0.5, 0.75, 1.0],
                           "counts": {"0": [[4, 3, 1, 0], [5, 2, 1, 0]],
                                      "1": [[0, 1, 2, 3], [0, 2, 2, 2]]},
                           "trimming_threshold": 0.05},
}  # fmt: skip


def _worker(i, batch, compute_s, start, memory=1769, cold=False):
    """A worker of a round record as TrainReduce writes it (a valid WorkerRecord)."""
    return {"worker": i, "batch": batch, "compute_s": compute_s, "memory_mb": memory,
            "resource": f"lambda-{memory}", "io_s": 0.1, "samples_per_s": batch / compute_s,
            "predicted_samples_per_s": batch / compute_s, "started_at": start,
            "ended_at": start + compute_s + 0.1, "cold_start": cold, "peak_rss_mb": 100.0}  # fmt: skip


#: What every round record of TRAIN has besides its own figures (a valid RoundRecord).
_ROUND = {"phase": "train", "groups": [[0, 1]], "prediction_source": "job"}


TRAIN = {
    "model": "logreg",
    "balance": "lb-bsp",
    "sync": "bsp",
    "n_workers": 2,
    "n_iter": 3,
    "job_id": "train-test",
    "rounds": [
        {
            **_ROUND,
            "span_s": 2.1,
            "round": 0,
            "loss": 0.69,
            "round_s": 2.0,
            "idle_fraction": 0.25,
            "workers": [_worker(0, 500, 1.0, T0, cold=True), _worker(1, 500, 2.0, T0, 885, True)],
        },
        {
            **_ROUND,
            "span_s": 1.5,
            "round": 1,
            "loss": 0.51,
            "round_s": 1.4,
            "idle_fraction": 0.05,
            "workers": [_worker(0, 660, 1.3, T0 + 3), _worker(1, 340, 1.4, T0 + 3, 885)],
        },
        {
            **_ROUND,
            "span_s": 1.45,
            "round": 2,
            "loss": 0.44,
            "round_s": 1.35,
            "idle_fraction": 0.02,
            "workers": [_worker(0, 670, 1.32, T0 + 6), _worker(1, 330, 1.35, T0 + 6, 885)],
        },
    ],  # fmt: skip
}


def test_coef_figure_plots_the_coefficients_and_their_intervals():
    # GIVEN an estimate of two treatments WHEN its coefficient figure is drawn
    ax = coef_figure(ESTIMATE).axes[0]
    # THEN the first error bar's centres are the coefs (top to bottom in d_cols order)
    data_line, _caps, (bars,) = ax.containers[0].lines
    x, y = _xy(data_line)
    np.testing.assert_allclose(x, [0.52, -1.25])
    np.testing.assert_allclose(y, [1, 0])
    # AND its bars run from the lower to the upper bound of ci_95
    ends = [(seg[0][0], seg[1][0]) for seg in bars.get_segments()]
    np.testing.assert_allclose(ends, [ESTIMATE["ci_95"]["d1"], ESTIMATE["ci_95"]["d2"]])
    labels = {t.get_text(): t.get_position()[1] for t in ax.get_yticklabels()}
    assert labels == {"d1": 1, "d2": 0}


def test_coef_figure_without_ci_uses_coef_plus_minus_1_96_se_and_draws_joint_intervals():
    # GIVEN a result with no ci_95 but a joint interval
    r = copy.deepcopy(ESTIMATE)
    del r["ci_95"]
    r["ci_joint_95"] = {"d1": [0.2, 0.8], "d2": [-1.8, -0.7]}
    ax = coef_figure(r).axes[0]
    # THEN the pointwise bars are coef -/+ 1.96 se and the second container is the joint one
    (pointwise,) = ax.containers[0].lines[2]
    np.testing.assert_allclose(pointwise.get_segments()[0][:, 0], [0.52 - 0.196, 0.52 + 0.196],
                               atol=1e-4)  # fmt: skip
    (joint,) = ax.containers[1].lines[2]
    np.testing.assert_allclose([s[:, 0] for s in joint.get_segments()], [[0.2, 0.8], [-1.8, -0.7]])


def test_thetas_figure_plots_every_repetition_and_the_aggregate():
    # GIVEN an estimate with 3 repetitions WHEN the spread figure is drawn
    fig = thetas_figure(ESTIMATE)
    # THEN one panel per treatment, each with its repetitions' thetas and the aggregated coef
    assert len(fig.axes) == 2
    for ax, d in zip(fig.axes, ["d1", "d2"]):
        data_line, _caps, (bars,) = ax.containers[0].lines
        x, y = _xy(data_line)
        np.testing.assert_allclose(x, [1, 2, 3])
        np.testing.assert_allclose(y, ESTIMATE["all_coef"][d])
        half = [(s[1][1] - s[0][1]) / 2 for s in bars.get_segments()]
        np.testing.assert_allclose(half, 1.959964 * np.array(ESTIMATE["all_se"][d]), rtol=1e-5)
        hlines = [ln for ln in ax.lines if list(ln.get_xdata()) == [0, 1]]
        np.testing.assert_allclose(hlines[0].get_ydata(), [ESTIMATE["coef"][d]] * 2)


def test_timeline_bars_are_the_shards_start_and_end_times_on_their_workers():
    # GIVEN four shards on two warm environments (pids), two of them cold starts
    shards = ESTIMATE["timings"]["shards"]
    ax = timeline_figure(shards).axes[0]
    # THEN bar k spans [started_at - t0, ended_at - t0] of shard k
    bars = ax.patches
    assert [b.get_gid() for b in bars] == [s["shard_id"] for s in shards]
    np.testing.assert_allclose([b.get_x() for b in bars], [s["started_at"] - T0 for s in shards])
    np.testing.assert_allclose([b.get_width() for b in bars],
                               [s["ended_at"] - s["started_at"] for s in shards])  # fmt: skip
    # AND sits on its worker's lane (pid 11 started first: lane 0)
    lanes = [round(b.get_y() + b.get_height() / 2) for b in bars]
    assert lanes == [0, 1, 1, 0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["pid 11", "pid 12"]
    # AND the cold starts are hatched
    assert [b.get_hatch() == "//" for b in bars] == [s["cold_start"] for s in shards]


def test_timeline_without_worker_ids_packs_bars_on_free_lanes():
    shards = [{k: v for k, v in s.items() if k != "pid"} for s in ESTIMATE["timings"]["shards"]]
    ax = timeline_figure(shards).axes[0]
    lanes = [round(b.get_y() + b.get_height() / 2) for b in ax.patches]
    # 0-2 on lane 0, 0.25-1.75 on lane 1, 2.0-3.5 on lane 0 (the first free at 2.0), 2.5-4 lane 1
    assert lanes == [0, 1, 0, 1]


def test_train_progress_plots_the_loss_per_round():
    ax = train_progress_figure(TRAIN).axes[0]
    (line,) = ax.lines
    np.testing.assert_allclose(line.get_xdata(), [0, 1, 2])
    np.testing.assert_allclose(line.get_ydata(), [0.69, 0.51, 0.44])
    assert ax.get_ylabel() == "loss"


def test_train_progress_plots_inertia_for_kmeans():
    r = copy.deepcopy(TRAIN)
    for rd, inertia in zip(r["rounds"], [10.0, 8.0, 7.5]):
        del rd["loss"]
        rd["inertia"] = inertia
    ax = train_progress_figure(r).axes[0]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [10.0, 8.0, 7.5])
    assert ax.get_ylabel() == "inertia"


def test_worker_rounds_plots_each_workers_batch_and_compute_time():
    # GIVEN three LB-BSP rounds of two workers WHEN the per-worker figure is drawn
    ax_b, ax_t, ax_i = worker_rounds_figure(TRAIN).axes
    rounds = TRAIN["rounds"]
    # THEN line i of the top panel is worker i's batch per round, of the middle its compute time
    for i in range(2):
        np.testing.assert_allclose(ax_b.lines[i].get_xdata(), [0, 1, 2])
        np.testing.assert_allclose(ax_b.lines[i].get_ydata(),
                                   [rd["workers"][i]["batch"] for rd in rounds])  # fmt: skip
        np.testing.assert_allclose(ax_t.lines[i].get_ydata(),
                                   [rd["workers"][i]["compute_s"] for rd in rounds])  # fmt: skip
    # AND the barrier time and idle fraction per round
    np.testing.assert_allclose(ax_t.lines[2].get_ydata(), [2.0, 1.4, 1.35])
    np.testing.assert_allclose(ax_i.lines[0].get_ydata(), [25.0, 5.0, 2.0])


def test_figures_reject_results_of_the_other_kind():
    with pytest.raises(InvalidJobError, match="rounds"):
        train_progress_figure(ESTIMATE)
    with pytest.raises(InvalidJobError, match="coef"):
        coef_figure(TRAIN)
    with pytest.raises(InvalidJobError):
        report_kind({"nothing": 1})


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs: list[dict[str, str | None]] = []
        self.links: list[str] = []
        self.scripts = 0
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a)
        if tag == "script":
            self.scripts += 1
        for key in ("href", "src"):
            if a.get(key):
                self.links.append(a[key])


def _xy(line):
    return np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)


def _check_report(out: Path, expected_pngs: set[str]) -> _Page:
    page_path = out / "report.html"
    assert page_path.is_file()
    pngs = {p.name for p in out.glob("*.png")}
    assert pngs == expected_pngs
    for name in pngs:  # every PNG parses as an image
        img = matplotlib.image.imread(out / name)
        assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50
    parser = _Page()
    text = page_path.read_text(encoding="utf-8")
    parser.feed(text)
    parser.close()
    assert parser.tags[0] == "html" and "body" in parser.tags
    # the page references every image, inlined byte for byte
    inlined = {}
    for img in parser.imgs:
        src = img["src"] or ""
        assert src.startswith("data:image/png;base64,")
        inlined[img["data-file"]] = base64.b64decode(src.split(",", 1)[1])
    assert set(inlined) == pngs
    for name, data in inlined.items():
        assert data == (out / name).read_bytes()
    # and loads nothing from anywhere
    assert parser.scripts == 0
    assert all(link.startswith("data:") for link in parser.links)
    assert not re.search(r"https?://", text)
    return parser


def test_write_report_of_an_estimate(tmp_path):
    # GIVEN an estimate result dict WHEN its report is written
    path = write_report(ESTIMATE, tmp_path / "rep")
    # THEN the page and the three PNGs exist, parse, and the page inlines every PNG
    assert path == tmp_path / "rep" / "report.html"
    _check_report(tmp_path / "rep", {"coef.png", "thetas.png", "timeline.png"})
    text = path.read_text()
    assert "est-test" in text and "partialling out" in text and "0.52" in text
    # AND the cost table is there, its notes escaped
    assert "CrossFit" in text and "a &lt;note&gt; to escape" in text


def test_overlap_figure_draws_each_groups_density_and_the_clipping_bounds():
    # GIVEN an IRM result with propensity counts per treatment group and repetition
    # WHEN its overlap figure is drawn
    ax = overlap_figure(IRM).axes[0]
    # THEN one filled step per group, the counts pooled over repetitions as a density over [0, 1]
    d0, d1 = ax.patches[0], ax.patches[1]
    np.testing.assert_allclose(d0.get_data().values, np.array([9, 5, 2, 0]) / (16 * 0.25))
    np.testing.assert_allclose(d1.get_data().values, np.array([0, 3, 4, 5]) / (12 * 0.25))
    np.testing.assert_allclose(d0.get_data().edges, [0.0, 0.25, 0.5, 0.75, 1.0])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["d = 0 (16 rows)", "d = 1 (12 rows)"]
    # AND dashed lines at the clipping bounds t and 1 - t
    xs = sorted(float(line.get_xdata()[0]) for line in ax.lines)
    assert xs == pytest.approx([0.05, 0.95])


def test_overlap_figure_of_a_result_without_propensity_is_refused():
    # GIVEN a PLR result WHEN / THEN the overlap figure is refused, naming the key and the models
    with pytest.raises(InvalidJobError, match="propensity_overlap.*IRM and IIVM"):
        overlap_figure(ESTIMATE)


def test_report_of_an_irm_estimate_shows_overlap_learners_columns_seed_and_losses(tmp_path):
    # GIVEN an IRM result with losses, spec and overlap WHEN its report is written
    path = write_report(IRM, tmp_path)
    # THEN the overlap figure is one of the inlined PNGs
    _check_report(tmp_path, {"coef.png", "thetas.png", "overlap.png", "timeline.png"})
    text = path.read_text()
    # AND the page names the columns, the seed and the learners of the job
    for expected in ("net_tfa", "age, inc", "4242", "LassoCV:{&quot;cv&quot;:3}",
                     "LogisticRegression:{}", "trimming_threshold"):  # fmt: skip
        assert expected in text, expected
    # AND each learner's loss with its metric: mean, min and max over the two repetitions
    assert re.search(
        r"<td>ml_g0</td><td>RMSE</td><td>d</td><td>1.375</td><td>1.25</td><td>1.5</td>", text
    )
    assert re.search(
        r"<td>ml_m</td><td>Log Loss</td><td>d</td><td>0.5</td><td>0.4375</td><td>0.5625</td>", text
    )


def test_report_of_an_older_estimate_says_what_was_not_stored(tmp_path):
    # GIVEN a result.json from before losses and spec were stored WHEN its report is written
    path = write_report(ESTIMATE, tmp_path)
    text = path.read_text()
    # THEN no overlap figure, and the page says the learners and losses were not stored
    assert not (tmp_path / "overlap.png").exists()
    assert "columns, learners and seed were not stored" in text
    assert "No nuisance losses were stored" in text


def test_write_report_of_a_train_job(tmp_path):
    path = write_report(TRAIN, tmp_path)
    _check_report(tmp_path, {"progress.png", "workers.png", "timeline.png"})
    text = path.read_text()
    assert "lb-bsp" in text and "not counted" in text  # no cost in this result


def test_write_report_accepts_result_objects(tmp_path):
    # GIVEN the client's result object (to_dict() is what the report reads)
    from fanfit.client import EstimateResult

    raw = _result_json()
    res = EstimateResult(raw=raw, timings=ESTIMATE["timings"])
    res.cost = ESTIMATE["cost"]
    write_report(res, tmp_path)
    _check_report(tmp_path, {"coef.png", "thetas.png", "timeline.png"})
    ax = coef_figure(res).axes[0]
    np.testing.assert_allclose(_xy(ax.containers[0].lines[0])[0], res.coef)


class _FakeJob:
    def __init__(self, status, result=None, kind="estimate"):
        self.job_id, self.execution_arn = "est-test", "arn:exec"
        self._status, self._result, self._kind = status, result, kind

    def status(self):
        return self._status

    def record(self):
        return {"job_id": self.job_id, "status": self._status, "kind": self._kind}

    def result(self, timeout=3600.0):
        return self._result


class _FakeClient:
    def __init__(self, job):
        self._job = job

    def job(self, job_id):
        if self._job is None:
            raise InvalidJobError(f"no job {job_id!r} on stack 'fanfit'")
        return self._job


def _run_cli(monkeypatch, job, *argv):
    import contextlib

    from fanfit import cli

    @contextlib.contextmanager
    def fake_client(args):
        yield _FakeClient(job)

    monkeypatch.setattr(cli, "_client", fake_client)
    return cli.main(["report", "est-test", *argv])


def test_cli_report_writes_the_report_of_an_ended_job(tmp_path, monkeypatch, capsys):
    # GIVEN a succeeded estimate job WHEN `fanfit report JOB --out DIR --output json`
    from fanfit.client import EstimateResult

    raw = _result_json()
    res = EstimateResult(raw=raw, timings=ESTIMATE["timings"], cost=ESTIMATE["cost"])
    code = _run_cli(monkeypatch, _FakeJob("SUCCEEDED", res), "--out", str(tmp_path / "r"),
                    "--output", "json")  # fmt: skip
    # THEN exit 0, the files are written and the JSON names them and carries the cost
    assert code == 0
    out = __import__("json").loads(capsys.readouterr().out)
    assert out["report"] == str(tmp_path / "r" / "report.html")
    assert len(out["figures"]) == 3 and out["cost"]["total_usd"] == 0.0001
    _check_report(tmp_path / "r", {"coef.png", "thetas.png", "timeline.png"})


@pytest.mark.parametrize(("status", "code"), [("RUNNING", 2), ("FAILED", 3), ("ABORTED", 3)])
def test_cli_report_of_a_job_without_result_exits_with_the_documented_code(
    tmp_path, monkeypatch, capsys, status, code
):
    assert _run_cli(monkeypatch, _FakeJob(status), "--out", str(tmp_path)) == code
    assert "est-test" in capsys.readouterr().err
    assert not (tmp_path / "report.html").exists()


def test_cli_report_of_an_unknown_job_or_bad_out_is_invalid_input(tmp_path, monkeypatch):
    assert _run_cli(monkeypatch, None, "--out", str(tmp_path)) == 2
    a_file = tmp_path / "f"
    a_file.write_text("x")
    assert _run_cli(monkeypatch, _FakeJob("SUCCEEDED"), "--out", str(a_file)) == 2


def test_a_malformed_field_of_the_result_is_named():
    # GIVEN an estimate result whose se of d2 is not a number, and a train result with a bad round
    from fanfit.errors import InvalidDocumentError

    bad_estimate = copy.deepcopy(ESTIMATE)
    bad_estimate["se"]["d2"] = "wide"
    bad_train = copy.deepcopy(TRAIN)
    del bad_train["rounds"][1]["round_s"]
    # WHEN a figure or the page is drawn THEN the named error names the field
    with pytest.raises(InvalidDocumentError, match=r"se\.d2"):
        coef_figure(bad_estimate)
    with pytest.raises(InvalidDocumentError, match=r"rounds\.1\.round_s"):
        worker_rounds_figure(bad_train)
