"""``fanfit report`` and ``fanfit cost`` of a job of several parts (issue 28, item 2).

GIVEN a QTE run as one job of four parts on the in-process fake stack (its result.json with every
part and the combined result Aggregate computes), WHEN its report is written and its cost printed,
THEN the report lists every part on a line of its own and the combined effects with their
pointwise intervals and joint bands; the cost gives each part's units, fit seconds, billed
GB-seconds and share, split from the shards by their units' fit seconds, and the total.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import numpy as np
import pytest

from fanfit import cli
from fanfit.client import qte as cqte
from fanfit.client.options import EstimateOptions
from fanfit.cost import JobCost, part_costs
from fanfit.cost.pricing import CostItem
from fanfit.report import write_report

pytest.importorskip("doubleml")

from doubleml.irm.datasets import make_irm_data  # noqa: E402
from fake_stack import FakeClient  # noqa: E402

T0 = 1_700_000_000.0


def _shard(shard_id: str, unit_fit_s: dict[str, float], billed_gb_s: float | None) -> dict:
    return {"shard_id": shard_id, "stage": 0, "n_units": len(unit_fit_s), "unit_fit_s": unit_fit_s,
            "started_at": T0, "ended_at": T0 + 2.0, "fit_s": sum(unit_fit_s.values()), "io_s": 0.1,
            "memory_mb": 1024, "peak_rss_mb": 90.0, "cold_start": False,
            "billed_gb_s": billed_gb_s}  # fmt: skip


#: Two shards of a job of three parts: the first fits a unit of part 0 (3 s) and one of part 2
#: (1 s), the second two units of part 1 that measured no fit seconds.
SHARDS = [
    _shard("s0-w0-0", {"s0-t0-r0-f0-ml_g": 3.0, "p2-s0-t0-r0-f0-ml_g": 1.0}, 8.0),
    _shard("s0-w0-1", {"p1-s0-t0-r0-f0-ml_g": 0.0, "p1-s0-t0-r0-f1-ml_g": 0.0}, 2.0),
]


def test_part_costs_split_each_shard_by_its_units_fit_seconds() -> None:
    # WHEN the job's 0.5 USD is split among its three parts
    costs = part_costs(SHARDS, ["a", "b", "c"], 0.5)
    # THEN shard 0's 8 GB-s go 6 to part 0 and 2 to part 2 (3 s and 1 s of fits), shard 1's
    # 2 GB-s to part 1 (by unit count: no fit seconds measured); the shares of 10 GB-s
    assert [(c.label, c.n_units, c.fit_s) for c in costs] == [("a", 1, 3.0), ("b", 2, 0.0),
                                                               ("c", 1, 1.0)]  # fmt: skip
    np.testing.assert_allclose([c.billed_gb_s for c in costs], [6.0, 2.0, 2.0])
    np.testing.assert_allclose([c.share for c in costs], [0.6, 0.2, 0.2])
    np.testing.assert_allclose([c.usd for c in costs], [0.3, 0.1, 0.1])
    # AND a shard record without billed_gb_s is billed from its times: 2 s x 1 GB
    unbilled = [dict(SHARDS[1], billed_gb_s=None)]
    assert part_costs(unbilled, ["a", "b"], 1.0)[1].billed_gb_s == pytest.approx(2.0)
    # AND a unit of a part the job does not have is refused, naming the shard
    with pytest.raises(Exception, match="shard s0-w0-0 fitted unit p2-s0-t0-r0-f0-ml_g of part 2"):
        part_costs(SHARDS[:1], ["a", "b"], 1.0)


@pytest.fixture(scope="module")
def qte_job() -> tuple[Any, Any]:
    """A QTE at two quantiles as one job of four parts on the fake stack, bootstrapped; its
    whole result with shards naming every part's units (1, 2, 3, 4 GB-s), and its cost."""
    from fanfit.client.estimate import EstimateResult

    np.random.seed(11)
    frame = make_irm_data(n_obs=200, dim_x=4, theta=0.5, return_type="DataFrame")
    options = EstimateOptions(
        data=frame, model="qte", y="y", d="d", x=["X1", "X2", "X3", "X4"], n_folds=2, n_rep=1,
        seed=4, ml_g="LogisticRegression", ml_m="LogisticRegression", quantiles="0.4,0.6",
        normalize_ipw=True, boot_method="normal", n_rep_boot=50,
    )  # fmt: skip
    jobs = cqte.submit_qte(FakeClient(), options=options)
    raw = jobs.jobs[0].job.result().raw
    shards = [_shard(f"s0-w0-{k}", {f"p{k}-s0-t0-r0-f0-ml_g" if k else "s0-t0-r0-f0-ml_g": 1.0 + k},
                     1.0 + k) for k in range(4)]  # fmt: skip
    raw = {**raw, "timings": {**raw["timings"], "shards": shards}}
    cost = JobCost(items=(CostItem("lambda", "CrossFit", 10.0, "GB-s", 1e-5),))
    return EstimateResult(raw=raw, timings={"shards": shards}, cost=cost.to_dict()), cost


def test_the_report_of_a_qte_job_lists_every_part_and_the_combined_bands(tmp_path, qte_job) -> None:
    # GIVEN a QTE job of four parts with joint bands
    whole, _ = qte_job
    combined = whole.doc.combined
    assert combined is not None and combined.effects.ci_joint_95 is not None
    # WHEN its report is written
    shares = part_costs(whole.raw["timings"]["shards"], [p.label for p in whole.doc.parts],
                        whole.cost["total_usd"])  # fmt: skip
    text = write_report(whole, tmp_path / "rep", part_costs=shares).read_text()
    # THEN every part has its line, and the combined effects their intervals and joint bands
    labels = [p.label for p in whole.doc.parts]
    assert len(labels) == 4 and all(text.count(f"<td>{label}</td>") == 2 for label in labels)
    assert "<h2>Combined result</h2>" in text and "normal multiplier bootstrap, 50 draws" in text
    for i, name in enumerate(["0.4", "0.6"]):
        f = combined.effects
        row = (f"<td>{name}</td><td>{f.coef[i]:.6g}</td><td>{f.se[i]:.6g}</td>"
               f"<td>{f.t_stat[i]:.6g}</td><td>{f.pval[i]:.6g}</td><td>{f.ci_95[i][0]:.6g}</td>"
               f"<td>{f.ci_95[i][1]:.6g}</td><td>{f.ci_joint_95[i][0]:.6g}</td>"
               f"<td>{f.ci_joint_95[i][1]:.6g}</td>")  # fmt: skip
        assert row in text
    # AND each part's share of the cost: 1, 2, 3, 4 GB-s of 10
    assert "<h3>Cost per part</h3>" in text
    assert f"<td>{labels[3]}</td><td>1</td><td>4</td><td>4</td><td>40</td>" in text


class _Job:
    kind = "estimate"

    def __init__(self, whole: Any, cost: JobCost, status: str = "SUCCEEDED") -> None:
        self.whole, self._cost, self._status = whole, cost, status

    def status(self) -> str:
        return self._status

    def cost(self, prices: Any = None) -> JobCost:
        return self._cost

    def result(self, timeout: float = 3600.0) -> Any:
        return self.whole


def _run_cost(monkeypatch, job: Any, *argv: str) -> int:
    class _Client:
        def job(self, job_id: str) -> Any:
            return job

    monkeypatch.setattr(cli, "_client", lambda args: contextlib.nullcontext(_Client()))
    return cli.main(["cost", "est-fake-1", *argv])


def test_fanfit_cost_of_a_qte_job_gives_each_part_and_the_total(
    monkeypatch, capsys, qte_job
) -> None:
    # GIVEN a QTE job of four parts whose shards took 1, 2, 3 and 4 GB-s, costing 1e-4 USD
    whole, cost = qte_job
    # WHEN fanfit cost JOB --output json
    assert _run_cost(monkeypatch, _Job(whole, cost), "--output", "json") == 0
    out = json.loads(capsys.readouterr().out)
    # THEN the job's items and total, and one entry per part with its share of the total
    assert out["cost"]["total_usd"] == pytest.approx(1e-4)
    parts = out["parts"]
    assert [p["label"] for p in parts] == [p.label for p in whole.doc.parts]
    np.testing.assert_allclose([p["share"] for p in parts], [0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose([p["usd"] for p in parts], [1e-5, 2e-5, 3e-5, 4e-5])
    assert [p["fit_s"] for p in parts] == [1.0, 2.0, 3.0, 4.0]
    # AND as a table: a line per part, then the total
    assert _run_cost(monkeypatch, _Job(whole, cost)) == 0
    text = capsys.readouterr().out
    assert "quantile 0.6 of treatment 1" in text and "40.0 %" in text
    total = [line for line in text.splitlines() if " total " in line]
    assert len(total) == 1 and "100.0 %" in total[0] and "0.000100" in total[0]
    # AND a failed job's cost is printed without parts, with exit code 3
    assert _run_cost(monkeypatch, _Job(whole, cost, "FAILED"), "--output", "json") == 3
    assert json.loads(capsys.readouterr().out)["parts"] is None


def test_fanfit_report_of_a_qte_job_shows_each_parts_share(monkeypatch, capsys, tmp_path, qte_job):
    # GIVEN the QTE job of four parts whose shards took 1, 2, 3 and 4 GB-s
    whole, cost = qte_job

    class _Client:
        def job(self, job_id: str) -> Any:
            return _Job(whole, cost)

    monkeypatch.setattr(cli, "_client", lambda args: contextlib.nullcontext(_Client()))
    # WHEN fanfit report JOB --out DIR
    assert cli.main(["report", "est-fake-1", "--out", str(tmp_path / "rep")]) == 0
    # THEN the page has the cost per part the CLI computed (fanfit.cost.part_costs): 40 % last
    text = (tmp_path / "rep" / "report.html").read_text()
    label = whole.doc.parts[3].label
    assert "<h3>Cost per part</h3>" in text
    assert f"<td>{label}</td><td>1</td><td>4</td><td>4</td><td>40</td>" in text
