"""Job reports: figures of an estimate or a train job and a self-contained HTML page.

>>> from fanfit.report import write_report
>>> write_report(client.job("est-...").result(), "report/")   # report/report.html + PNGs

``fanfit report JOB --out DIR`` does the same from the command line. The figures
(:mod:`fanfit.report.figures`) and the page take result objects, their ``to_dict()`` or
``result.json``, parsed into the typed report inputs of :mod:`fanfit.report.inputs`, so they are
tested without AWS. Client side only: the Lambda functions never import this package (matplotlib is not
in the layers).
"""

from __future__ import annotations

from fanfit.report.figures import (
    coef_figure,
    overlap_figure,
    round_records,
    thetas_figure,
    timeline_figure,
    train_progress_figure,
    train_timeline_records,
    worker_rounds_figure,
)
from fanfit.report.inputs import (
    EstimateReportInput,
    TrainReportInput,
    as_dict,
    estimate_input,
    train_input,
)
from fanfit.report.page import REPORT_HTML, report_kind, write_report

__all__ = [
    "REPORT_HTML",
    "EstimateReportInput",
    "TrainReportInput",
    "as_dict",
    "coef_figure",
    "estimate_input",
    "overlap_figure",
    "report_kind",
    "round_records",
    "thetas_figure",
    "timeline_figure",
    "train_progress_figure",
    "train_input",
    "train_timeline_records",
    "worker_rounds_figure",
    "write_report",
]
