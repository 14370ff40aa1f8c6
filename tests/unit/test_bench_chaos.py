"""benchmarks/chaos.py's pure parts: its comparison with the fault-free run, its reading of Lambda's
REPORT lines after a kill, and the JSON it assembles (issue 31, item 4), without a stack.

GIVEN result documents and train results shaped as the client returns them, CloudWatch log events
with REPORT lines around a kill, and the jobs' entries, WHEN the benchmark's functions read them,
THEN the numbers compared are the estimate's and the model's (bit for bit, or to a tolerance), the
seconds after the kill are the last return's and the billed part after it, and the JSON holds the
issue's fields with the targets judged from them.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from bench_module import load_benchmark


def _bench():
    return load_benchmark("chaos")


def _estimate_doc(coef: float) -> dict:
    """A result document of a job of two parts (coef/se per part), with fields not compared."""
    return {
        "job_id": "est-1",
        "timings": {"wall_s": 12.5},
        "se": {"method": "normal"},  # a string under a compared key: not a number, not taken
        "parts": [
            {"coef": [coef], "se": [0.1], "all_coef": [[coef, coef + 0.01]], "label": "q 0.4"},
            {"coef": [coef + 1.0], "se": [0.2], "all_coef": [[coef + 1.0, coef]], "label": "q 0.6"},
        ],
    }


def test_a_result_documents_numbers_by_treatment_are_taken() -> None:
    bench = _bench()
    # GIVEN a result.json as Aggregate writes it: coef/se by treatment, all_coef/all_se by
    # treatment and repetition, and fields that are not compared
    doc = {"coef": {"d": 0.5}, "se": {"d": 0.1}, "all_coef": {"d": [0.5, 0.49]},
           "all_se": {"d": [0.1, 0.11]}, "pval": {"d": 0.01}, "job_id": "e"}  # fmt: skip
    # WHEN fingerprinted THEN the four are taken by treatment, nothing else
    ref = bench.fingerprint(doc, bench.ESTIMATE_KEYS)
    assert sorted(ref) == ["all_coef/d", "all_se/d", "coef/d", "se/d"]
    assert ref["all_se/d"].tolist() == [0.1, 0.11]
    # AND another treatment effect is not equal
    moved = bench.fingerprint({**doc, "coef": {"d": 0.51}}, bench.ESTIMATE_KEYS)
    assert not bench.equal_to_fault_free(moved, ref)


def test_an_estimates_numbers_are_compared_bit_for_bit_and_nothing_else() -> None:
    bench = _bench()
    # GIVEN a fault-free and a chaos result that differ only in what is not compared
    ref = bench.fingerprint(_estimate_doc(0.5), bench.ESTIMATE_KEYS)
    other = {**_estimate_doc(0.5), "job_id": "est-2", "timings": {"wall_s": 99.0}}
    # WHEN fingerprinted THEN each part's coef, se and all_coef are taken, by path
    assert sorted(ref) == ["parts/0/all_coef", "parts/0/coef", "parts/0/se",
                           "parts/1/all_coef", "parts/1/coef", "parts/1/se"]  # fmt: skip
    assert ref["parts/1/all_coef"].shape == (1, 2)
    # ... and equal numbers compare equal whatever the ids and timings
    assert bench.equal_to_fault_free(bench.fingerprint(other, bench.ESTIMATE_KEYS), ref)
    # AND one ulp in one part's coefficient is not equal bit for bit
    off = _estimate_doc(0.5)
    off["parts"][1]["coef"] = [np.nextafter(1.5, 2.0)]
    assert not bench.equal_to_fault_free(bench.fingerprint(off, bench.ESTIMATE_KEYS), ref)
    # ... but is to a relative tolerance of 1e-9
    assert bench.equal_to_fault_free(bench.fingerprint(off, bench.ESTIMATE_KEYS), ref, rtol=1e-9)


def test_a_train_models_attributes_are_compared_and_missing_numbers_never_equal() -> None:
    bench = _bench()
    rng = np.random.default_rng(0)
    centroids = rng.normal(size=(8, 64))
    # GIVEN a K-Means result and one whose centroids moved by 1e-6 relative
    ref = bench.fingerprint(SimpleNamespace(centroids=centroids, inertia=3.0), bench.TRAIN_KEYS)
    moved = bench.fingerprint(
        SimpleNamespace(centroids=centroids * (1 + 1e-6), inertia=3.0), bench.TRAIN_KEYS
    )
    # THEN the centroids and the inertia are compared; a change of 1e-6 fails the 1e-9 tolerance
    assert sorted(ref) == ["centroids", "inertia"]
    assert not bench.equal_to_fault_free(moved, ref, rtol=1e-9)
    assert bench.equal_to_fault_free(dict(ref), ref)
    # AND a failed job's empty fingerprint, another shape, or an empty reference are not equal
    assert not bench.equal_to_fault_free({}, ref)
    assert not bench.equal_to_fault_free({}, {})
    reshaped = {**ref, "centroids": centroids.reshape(64, 8)}
    assert not bench.equal_to_fault_free(reshaped, ref)


def test_the_seconds_after_a_kill_are_read_from_the_report_lines() -> None:
    bench = _bench()
    # GIVEN log events (epoch ms) of three invocations: one ended before the kill at t=1000 s,
    # one running at the kill (ended 3.5 s after it, billed 20 s), one started after it
    events = [
        (990_000, "START RequestId: a Version: $LATEST"),
        (
            995_000,
            "REPORT RequestId: a\tDuration: 5000.00 ms\tBilled Duration: 5000 ms\t"
            "Memory Size: 1769 MB\tMax Memory Used: 200 MB",
        ),  # fmt: skip
        (
            1_003_500,
            "REPORT RequestId: b\tDuration: 19999.20 ms\tBilled Duration: 20000 ms\t"
            "Memory Size: 1769 MB\tMax Memory Used: 210 MB",
        ),  # fmt: skip
        (1_006_000, '{"level": "INFO", "message": "REPORT is not at the start"}'),
        (1_007_000, "REPORT RequestId: c\tDuration: 1500.00 ms\tBilled Duration: 1500 ms\t"),
    ]
    # WHEN the benchmark reads them
    reports = bench.report_lines(events)
    # THEN it has the three REPORT lines as (end, billed seconds)
    assert reports == [(995.0, 5.0), (1003.5, 20.0), (1007.0, 1.5)]
    # ... the last return after the kill came 7 s after it
    assert bench.stop_after(reports, 1000.0) == pytest.approx(7.0)
    # ... and the billed seconds after the kill are b's 3.5 s after it and all of c's 1.5 s
    assert bench.billed_after(reports, 1000.0) == pytest.approx(5.0)
    # AND with nothing running after a kill, both are 0
    assert bench.stop_after(reports, 2000.0) == 0.0 and bench.billed_after(reports, 2000.0) == 0.0


def test_the_json_holds_the_issues_fields_and_judges_the_targets() -> None:
    bench = _bench()
    # GIVEN a cancelled job, a job resumed once to the fault-free numbers, and one that differs
    jobs = [
        bench.job_entry("cancel-victim", "estimate", "CANCELLED", False, None),
        bench.job_entry("train-dssync", "train", "SUCCEEDED", True, True),
        bench.job_entry("estimate-plr", "estimate", "SUCCEEDED", False, True),
    ]
    # WHEN the output is assembled
    out = bench.assemble(jobs, 1.764, 8.0, 31.234, faults="error=0.1", notes=[])
    # THEN it has the issue's fields, seconds to 0.01, and is JSON
    assert list(out)[:4] == ["jobs", "cancel_stop_s", "kill_stop_s", "billed_after_kill_s"]
    assert out["jobs"][1] == {"name": "train-dssync", "kind": "train", "status": "SUCCEEDED",
                              "resumed": True, "equal_to_fault_free": True}  # fmt: skip
    assert (out["cancel_stop_s"], out["billed_after_kill_s"]) == (1.76, 31.23)
    assert json.loads(json.dumps(out)) == out
    # ... and the targets are met (the cancelled job is not judged on its numbers)
    assert out["targets_met"] == {"jobs_equal_fault_free": True, "stopped_within_10_s": True}
    # AND a job off the fault-free numbers, or a stop over 10 s or not measured, misses them
    jobs[2] = bench.job_entry("estimate-plr", "estimate", "SUCCEEDED", False, False)
    missed = bench.assemble(jobs, 1.0, None, None)
    assert missed["targets_met"] == {"jobs_equal_fault_free": False, "stopped_within_10_s": False}
    assert bench.assemble(jobs[:2], 1.0, 10.5, 2.0)["targets_met"]["stopped_within_10_s"] is False


def test_a_wait_on_a_job_that_ended_returns_at_once_naming_why() -> None:
    bench = _bench()
    calls: list[int] = []

    def never() -> None:
        calls.append(1)

    # GIVEN a condition that never holds on a job that has ended
    # WHEN the benchmark waits for it, however long its bound
    value, why = bench._wait_until(never, 600, lambda: "the job ended FAILED")
    # THEN it returns at once (the condition looked at once more after the end), naming the end
    assert (value, why) == (None, "the job ended FAILED") and len(calls) == 2
    # AND a condition that holds returns its value with no reason
    assert bench._wait_until(lambda: [3], 600, lambda: "ended") == ([3], "")
