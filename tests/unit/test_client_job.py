"""The client's job handles and its estimate options (moto).

GIVEN a :class:`fanfit.client.Client` of a moto bucket, job table and two state machines, WHEN an
earlier job is looked up by id, THEN :meth:`Client.job` returns the handle of the job's kind, read
from the job record or else from the spec in S3; and the estimate options are one model
(:class:`fanfit.client.options.EstimateOptions`) that the client, ``check_estimate`` and the
``fanfit estimate`` parser all follow.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from fanfit.errors import InvalidJobError

ESTIMATE_OPTIONS = dict(y="y", d="d", x=["x1", "x2", "x3"], ml_l="LinearRegression",
                        ml_m="LinearRegression", n_folds=2)  # fmt: skip


@pytest.fixture
def client(moto_stack, moto_client) -> Any:
    """A :class:`fanfit.client.Client` of the moto stack (no CloudFormation, no functions)."""
    with moto_stack():
        yield moto_client()


def test_job_returns_the_handle_of_the_jobs_kind_from_its_spec(client, make_plr_frame) -> None:
    from fanfit.client import EstimateJob, TrainJob

    # GIVEN an estimate and a train job submitted, whose records hold only their executions
    est = client.submit_estimate(make_plr_frame(200), job_id="est-k", **ESTIMATE_OPTIONS)
    train = client.submit_train(make_plr_frame(200), model="kmeans", features=["x1", "x2"],
                                n_clusters=3, workers=2, job_id="train-k")  # fmt: skip
    client.records.update("est-k", execution_arn=est.execution_arn)
    client.records.update("train-k", execution_arn=train.execution_arn)
    # WHEN they are looked up by id
    est_handle, train_handle = client.job("est-k"), client.job("train-k")
    # THEN each handle is of its job's kind (read from the spec in S3), on its execution
    assert type(est_handle) is EstimateJob and est_handle.execution_arn == est.execution_arn
    assert type(train_handle) is TrainJob and train_handle.execution_arn == train.execution_arn
    assert (est_handle.kind, train_handle.kind) == ("estimate", "train")


def test_job_reads_the_kind_from_the_record_first(client) -> None:
    from fanfit.client import EstimateJob, TrainJob

    # GIVEN records naming their kind and no spec in S3 at all
    client.records.update("t-1", execution_arn="arn:exec:t-1", kind="train")
    client.records.update("e-1", execution_arn="arn:exec:e-1", kind="estimate")
    client.records.update("old-1", execution_arn="arn:exec:old-1")
    # WHEN looked up THEN the record's kind decides; a record without one is an estimate
    assert type(client.job("t-1")) is TrainJob
    assert type(client.job("e-1")) is EstimateJob
    assert type(client.job("old-1")) is EstimateJob


def test_job_of_an_unknown_id_is_refused_by_name(client) -> None:
    with pytest.raises(InvalidJobError, match="no job 'nope' on stack 'fanfit'"):
        client.job("nope")


def test_options_given_as_a_model_or_as_keywords_write_the_same_spec(
    client, make_plr_frame
) -> None:
    from fanfit import storage
    from fanfit.client import EstimateOptions

    frame = make_plr_frame(200)
    # WHEN the same options are given as keywords and as one EstimateOptions
    client.submit_estimate(frame, job_id="est-a", weight=2.0, **ESTIMATE_OPTIONS)
    options = EstimateOptions(data=frame, weight=2.0, **ESTIMATE_OPTIONS)
    client.submit_estimate(job_id="est-b", options=options)
    # THEN the specs are the same
    a, b = (client.store.get_json(storage.spec_key(j)) for j in ("est-a", "est-b"))
    assert a == b and a["weight"] == 2.0


def test_a_checked_estimate_is_submitted_as_checked(client, make_plr_frame, monkeypatch) -> None:
    from fanfit import storage
    from fanfit.client import EstimateOptions, check_estimate
    from fanfit.client.estimate import submit as cestimate

    # GIVEN options submitted as data, and the same options checked beforehand
    options = EstimateOptions(data=make_plr_frame(200), **ESTIMATE_OPTIONS)
    client.submit_estimate(job_id="est-a", options=options)
    checked = check_estimate(options=options)

    # WHEN the CheckedEstimate is submitted with its options, the client's checks disabled
    def unexpected(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("checked again")

    monkeypatch.setattr(cestimate, "check_estimate", unexpected)
    monkeypatch.setattr(cestimate, "check_estimate_in_place", unexpected)
    client.submit_estimate(checked, job_id="est-b", options=options)
    # THEN it writes the same spec and data, without checking again; without options it is refused
    a, b = (client.store.get_json(storage.spec_key(j)) for j in ("est-a", "est-b"))
    assert a == b
    with pytest.raises(TypeError, match="CheckedEstimate comes with options="):
        client.submit_estimate(checked, job_id="est-c")


def test_an_unknown_or_missing_option_is_a_type_error(client, make_plr_frame) -> None:
    from fanfit.client import check_estimate

    with pytest.raises(TypeError, match="n_fold"):
        client.submit_estimate(make_plr_frame(50), n_fold=3, **ESTIMATE_OPTIONS)
    with pytest.raises(TypeError, match="'d'"):  # x is optional (every other column), d is not
        check_estimate(make_plr_frame(50), y="y", x="x1")


@pytest.mark.parametrize(
    ("command", "model", "required"),
    [
        ("estimate", "EstimateOptions", ["--data", "f", "--y", "y", "--d", "d", "--x", "x"]),
        ("train", "TrainOptions", ["--data", "f", "--model", "kmeans", "--features", "a,b"]),
    ],
)
def test_a_commands_parser_is_generated_from_its_options_model(
    command: str, model: str, required: list[str]
) -> None:
    from fanfit.cli import build_parser
    from fanfit.client import options as options_module

    infos = getattr(options_module, model).infos()
    sub = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices[command]
    actions = {a.dest: a for a in sub._actions}
    parsed = sub.parse_args(required)
    fields = parsed._config_fields
    # GIVEN every option of the model WHEN the command's parser is built THEN each is one flag
    # with the model's spelling, help (with the default it shows), choices, and (as a config
    # field) its default and kind
    for info in infos:
        action = actions[info.name]
        # a bool without a default (None: the model's own) also has its --no- form
        negated = [f"--no-{info.flag[2:]}"] if info.kind == "bool" and info.default is None else []
        assert action.option_strings == [info.flag, *negated]
        shown = info.help or ""
        if not info.required and "default" not in shown and info.default not in (None, False, ""):
            shown = f"{shown} (default: {info.default})".lstrip()  # --help shows the default
        assert (action.help or None) == (shown or None)
        assert (tuple(action.choices) if action.choices else None) == info.choices
        field = fields[info.name]
        assert field.required == info.required
        if not info.required:
            assert field.default == info.default
        assert field.kind == ("str" if info.kind == "path" else info.kind)
        assert field.path == (info.kind == "path")
    # AND the job options come first (after -h, -v and -q, which every command has), in the
    # model's order
    flags = [a.dest for a in sub._actions if a.dest not in ("help", "verbose", "quiet")]
    assert flags[: len(infos)] == [i.name for i in infos]


@pytest.mark.parametrize("method", ["estimate", "submit_estimate"])
def test_the_estimate_methods_show_every_option_with_its_default(method):
    # GIVEN the options model WHEN a user asks for the method's signature (help(), Jupyter)
    import inspect

    from fanfit.client import Client
    from fanfit.client.options import EstimateOptions

    params = inspect.signature(getattr(Client, method)).parameters
    # THEN every option is a keyword with the model's default, and no **kwargs is left
    for name in EstimateOptions.names():
        assert name in params, name
    assert params["n_folds"].default == 5 and params["trimming_threshold"].default == 0.01
    assert params["y"].default is inspect.Parameter.empty
    assert not any(p.kind is p.VAR_KEYWORD for p in params.values())


def test_the_train_methods_show_every_option():
    import inspect

    from fanfit.client import Client
    from fanfit.client.options import TrainOptions

    for method in (Client.train, Client.submit_train):
        params = inspect.signature(method).parameters
        assert set(TrainOptions.names()) <= set(params)
        assert params["gpu_workers"].default == 0


def test_wait_sees_a_jobs_end_within_a_quarter_second_or_2_percent_of_its_wall_time(
    monkeypatch,
) -> None:
    import fanfit.client.jobs as jobs_module
    from fanfit.client.jobs import JobHandle

    # GIVEN a job that runs for 40 s of a fake clock, which every pause advances
    clock = {"now": 0.0}
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        clock["now"] += seconds

    monkeypatch.setattr(jobs_module.time, "sleep", sleep)
    monkeypatch.setattr(jobs_module.time, "monotonic", lambda: clock["now"])
    handle = JobHandle(client=None, job_id="est-x", execution_arn="arn:x")  # type: ignore[arg-type]
    monkeypatch.setattr(
        handle,
        "_describe_execution",
        lambda: {"status": "RUNNING" if clock["now"] < 40.0 else "SUCCEEDED"},
    )
    # WHEN it is waited for
    handle.wait(timeout=100.0, poll=0.1)
    # THEN the pauses grow from 0.1 s, to at most 0.25 s or 2 % of the time waited, at most 2 s
    starts = _cumulative(pauses)
    assert (
        pauses[0] == 0.1
        and max(p for p, at in zip(pauses, starts, strict=True) if at <= 12.5) == 0.25
    )
    assert all(p <= max(0.25, 0.02 * at) + 1e-9 for p, at in zip(pauses, starts, strict=True))
    # AND the job's end is seen within 2 % of the time waited
    assert 40.0 <= clock["now"] <= 40.0 * 1.02 + 1e-9


def _cumulative(pauses: list[float]) -> list[float]:
    """The fake clock when each pause starts."""
    out, at = [], 0.0
    for p in pauses:
        out.append(at)
        at += p
    return out
