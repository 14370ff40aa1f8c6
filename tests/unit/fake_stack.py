"""A stack without a stack: jobs run in-process, for the tests of the client models that are
several jobs (``apos``: test_cli_apos.py; ``qte``: test_cli_qte.py).

Imported by name (``from fake_stack import ...``): pytest puts tests/unit on ``sys.path``.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from fanfit import dml as fdml
from fanfit.client.check import CheckedEstimate, check_estimate
from fanfit.client.estimate import EstimateResult
from fanfit.client.options import EstimateOptions
from fanfit.dml.combined import PartScores, combine_parts
from fanfit.dml.interop import predictions_from_arrays, predictions_to_arrays


class FakeJob:
    """A job run here: fanfit's in-process estimate of the checked options (what the pipeline
    computes, a fold procedure included); its result, folds and predictions as a job's."""

    def __init__(self, checked: Any, log: list[tuple[str, str]], n: int) -> None:
        self.checked, self.log, self.job_id = checked, log, f"est-fake-{n}"
        self.execution_arn = f"arn:fake:{n}"
        spec, data = checked.spec, checked.data
        self._folds = (
            checked.folds if checked.folds is not None else fdml.draw_spec_folds(spec, data)
        )
        self.res = fdml.estimate_in_process(spec, data, self._folds)

    def spec(self) -> Any:
        return self.checked.spec

    def folds(self) -> Any:
        return self._folds

    def predictions(self) -> Any:
        """As the stack stores and reads them (a fold procedure's fold scalars included)."""
        arrays = predictions_to_arrays(self.checked.spec.d_cols, self.res.predictions)
        return predictions_from_arrays(arrays)

    def result(self, timeout: Any = None, progress: Any = False) -> EstimateResult:
        self.log.append(("result", self.job_id))
        return EstimateResult(raw=self.raw())

    def raw(self) -> dict[str, Any]:
        """The result.json of this job (of one) as Aggregate writes it."""
        raw = {**self.res.to_dict(), "job_id": self.job_id, "execution_arn": self.execution_arn,
               "predictions_key": "p", "folds_key": "f", "spec": self.checked.spec.to_dict(),
               "timings": {"shards": [], "billed_gb_s": 0.0, "lambda_cost_usd": 0.0,
                           "aggregate": {"memory_mb": 1769, "peak_rss_mb": 100.0},
                           "price_usd_per_gb_s": 1.6667e-05, "price_usd_per_request": 2e-07}}  # fmt: skip
        return dict(json.loads(json.dumps(raw)))


class FakeClient:
    """``submit_estimate`` runs a :class:`FakeJob`; ``log`` records submits and awaits in order,
    ``checks`` the parts it had to check (none when they come checked)."""

    s3 = None

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self.submitted: list[EstimateOptions] = []
        self.checks = 0
        self.parts_submitted: list[tuple[str, list[str]]] = []

    def submit_estimate(self, data: Any, *, options: EstimateOptions) -> FakeJob:
        """As :func:`fanfit.client.estimate.submit_estimate`: checks ``data`` unless it is a
        CheckedEstimate already (``checks`` counts the checks made here)."""
        self.submitted.append(options)
        if not isinstance(data, CheckedEstimate):
            self.checks += 1
            data = check_estimate(data, options=options)
        job = FakeJob(data, self.log, len(self.submitted))
        self.log.append(("submit", job.job_id))
        return job

    def submit_parts_job(
        self, model: str, labels: Any, checked: Any, options: Any, boot_method: Any = None,
        n_rep_boot: Any = None,
    ) -> Any:  # fmt: skip
        """As :meth:`fanfit.client.Client.submit_parts_job`: one job whose parts run here, its
        result.json with every part and the combined result (Aggregate's
        :func:`fanfit.dml.combined.combine_parts`)."""
        self.submitted.extend(options)
        n = len(self.parts_submitted) + 1  # the job's number among the parts jobs
        job = FakePartsJob(model, list(labels), [FakeJob(c, self.log, n) for c in checked],
                           boot_method, n_rep_boot or 500)  # fmt: skip
        self.parts_submitted.append((model, list(labels)))
        self.parts_checked = list(checked)
        self.log.append(("submit", job.job_id))
        return job


class FakePartsJob:
    """A job of several parts run here: one :class:`FakeJob` per part, sharing one job id (each
    part's ``job`` is this job)."""

    def __init__(self, model: str, labels: list[str], parts: list[FakeJob], boot_method: Any,
                 n_rep_boot: int) -> None:  # fmt: skip
        self.model, self.labels, self.parts = model, labels, parts
        self.boot = (boot_method, n_rep_boot)
        self.job_id = parts[0].job_id
        for job in parts:
            job.job_id = self.job_id
            job.job = self

    def result(self, timeout: Any = None, progress: Any = False) -> EstimateResult:
        """The job's result.json: the first part's estimate, every part's, and the combined."""
        raws = [p.raw() for p in self.parts]
        combined = combine_parts(self.model, [p.checked.spec for p in self.parts],
                                 [PartScores.of(p.res) for p in self.parts],
                                 boot_method=self.boot[0], n_rep_boot=self.boot[1])  # fmt: skip
        parts = [{**{k: v for k, v in r.items() if k != "timings"}, "label": label}
                 for r, label in zip(raws, self.labels, strict=True)]  # fmt: skip
        raw = {**raws[0], "parts": parts}
        if combined is not None:
            raw["combined"] = json.loads(json.dumps(combined.to_dict()))
        return EstimateResult(raw=raw)

    def part(self, index: int, label: str = "") -> FakeJob:
        return self.parts[index]


def patch_stack_client(monkeypatch: Any) -> FakeClient:
    """``fanfit estimate`` against a :class:`FakeClient` (no stack): ``common.stack_client``
    yields it; returns it."""
    from fanfit.cli import common

    client = FakeClient()
    monkeypatch.setattr(common, "stack_client", lambda args: contextlib.nullcontext(client))
    return client
