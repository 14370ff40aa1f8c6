"""Every error a user can cause is one line on stderr with its exit code, never a traceback.

GIVEN the ``fanfit`` command's :func:`fanfit.cli.main` and, per case, a user error (a missing or
unreadable file, a bad config file, an option out of range, a usage error, an unknown job, a failed
job, and AWS's errors: a missing stack, AccessDenied, no credentials, no endpoint), WHEN the command
runs, THEN stderr holds exactly one line, ``fanfit: error: ...``, naming the flag, file, job or AWS
error code, no traceback, and the exit code is the one :mod:`fanfit.cli.common` names for it. Also:
``--version``, ``-v`` and ``--quiet`` after the subcommand, and defaults in ``--help``.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from fanfit import cli, errors
from fanfit.cli import build_parser, common, main
from fanfit.client.options import EstimateOptions

ROOT = Path(__file__).resolve().parents[2]
DATA = str(ROOT / "examples" / "data" / "sipp1991.dta")
PLR = ["estimate", "--data", DATA, "--model", "plr", "--y", "net_tfa", "--d", "e401",
       "--x", "age,inc", "--ml-l", "Lasso", "--ml-m", "LogisticRegression", "--dry-run"]  # fmt: skip


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _files(tmp_path: Path) -> dict[str, str]:
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("model: plr\n  y: [unclosed\n", encoding="utf-8")
    unknown_key = tmp_path / "unknown.yaml"
    unknown_key.write_text("n_foldz: 3\n", encoding="utf-8")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00\x81 not text")
    return {"bad_yaml": str(bad_yaml), "unknown_key": str(unknown_key), "binary": str(binary),
            "dir": str(tmp_path), "missing": str(tmp_path / "missing.csv")}  # fmt: skip


# (argv with {file} placeholders, expected exit code, regex the one line must match)
INPUT_CASES = [
    ([*PLR, "--folds", "{missing}"], common.EXIT_INVALID,
     r"^fanfit: error: --folds '.*missing\.csv': No such file or directory$"),
    ([*PLR, "--folds", "{dir}"], common.EXIT_INVALID, r"^fanfit: error: --folds '.*': Is a directory$"),
    (["estimate", "--data", "{missing}", "--model", "plr", "--y", "a", "--d", "b", "--dry-run"],
     common.EXIT_INVALID, r"^fanfit: error: InvalidDataError: data file '.*missing\.csv' does not exist"),
    (["estimate", "--config", "{missing}", "--dry-run"], common.EXIT_INVALID,
     r"^fanfit: error: InvalidJobError: cannot read config file '.*missing\.csv'"),
    (["estimate", "--config", "{bad_yaml}", "--dry-run"], common.EXIT_INVALID,
     r"^fanfit: error: InvalidJobError: .*bad\.yaml: not valid YAML: .* at line 2, column \d+$"),
    (["estimate", "--config", "{unknown_key}", "--dry-run"], common.EXIT_INVALID,
     r"^fanfit: error: InvalidJobError: .*unknown\.yaml: unknown key 'n_foldz'"),
    (["estimate", "--config", "{binary}", "--dry-run"], common.EXIT_INVALID,
     r"^fanfit: error: InvalidJobError: config file '.*binary\.yaml' is not UTF-8 text"),
    ([*PLR, "--n-folds", "1"], common.EXIT_INVALID,
     r"^fanfit: error: InvalidJobError: --n-folds must be an integer in \[2, 100\], got 1\.$"),
    ([*PLR, "--ml-m", "NoSuchLearner"], common.EXIT_INVALID,
     r"^fanfit: error: InvalidLearnerError: --ml-m: Unknown learner 'NoSuchLearner'"),
    ([*PLR, "--n-folds", "five"], common.EXIT_INVALID,
     r"^fanfit estimate: error: argument --n-folds: invalid int value: 'five' \(see `fanfit estimate --help`\)$"),
    (["estimate", "--model", "ols", "--dry-run"], common.EXIT_INVALID,
     r"^fanfit estimate: error: argument --model: invalid choice: 'ols'"),
    (["no-such-command"], common.EXIT_INVALID, r"^fanfit: error: argument command: invalid choice"),
    (["plan", "--stages-file", "{missing}"], common.EXIT_INVALID,
     r"^fanfit: error: .*missing\.csv"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "code", "line"), INPUT_CASES)
def test_a_bad_input_is_one_line_naming_it_and_exits_2(
    argv: list[str], code: int, line: str, tmp_path: Path, capsys
) -> None:
    # GIVEN a command line with one user error (files made in tmp_path)
    files = _files(tmp_path)
    argv = [a.format(**files) for a in argv]
    # WHEN the command runs
    got = main(argv)
    # THEN one line names the error, without a traceback, and the exit code is bad input's
    assert got == code
    assert re.search(line, _one_line(capsys))


class _FailingClient:
    """A client whose every job call raises ``exc``: what the real client raises on AWS."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def job(self, job_id: str) -> Any:
        raise self.exc

    def resume(self, job_id: str) -> Any:
        raise self.exc


def _client_error(code: str, operation: str, message: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


STACK_CASES = [
    (errors.InvalidJobError("no job 'est-nope' on stack 'fanfit'"), ["status", "est-nope"],
     common.EXIT_INVALID, r"^fanfit: error: InvalidJobError: no job 'est-nope' on stack 'fanfit'$"),
    (errors.JobNotFoundError("no spec of job 'est-nope' in the stack's bucket"),
     ["resume", "est-nope"], common.EXIT_INVALID, r"JobNotFoundError: .*'est-nope'"),
    (errors.ShardFailedError("shard 3 failed: MemoryError"), ["resume", "est-1"],
     common.EXIT_FAILED, r"^fanfit: error: ShardFailedError: shard 3 failed"),
    (_client_error("AccessDenied", "StartExecution", "User: arn:aws:iam::1:user/u is not authorized"),
     ["resume", "est-1"], common.EXIT_STACK,
     r"^fanfit: error: AWS error AccessDenied in StartExecution: User: .*; check the caller's IAM permissions"),
    (_client_error("ExpiredTokenException", "GetItem", "The security token included in the request is expired"),
     ["status", "est-1"], common.EXIT_STACK,
     r"^fanfit: error: AWS error ExpiredTokenException in GetItem: .*; check the credentials: they expired"),
    (EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), ["status", "est-1"],
     common.EXIT_STACK, r"^fanfit: error: cannot connect to http://127\.0\.0\.1:9 \(EndpointConnectionError\)"),
    (RuntimeError("something no input explains"), ["status", "est-1"], common.EXIT_UNEXPECTED,
     r"^fanfit: error: unexpected RuntimeError: something no input explains \(run again with -v"),
]  # fmt: skip


@pytest.mark.parametrize(("exc", "argv", "code", "line"), STACK_CASES)
def test_a_job_or_aws_error_is_one_line_with_its_code(
    exc: BaseException, argv: list[str], code: int, line: str, monkeypatch, capsys
) -> None:
    # GIVEN a stack whose client raises what AWS or the stack answers
    monkeypatch.setattr(cli, "_client", lambda args: contextlib.nullcontext(_FailingClient(exc)))
    # WHEN a command reaches it
    got = main(argv)
    # THEN one line names the job or the AWS error code and what to check, with its exit code
    assert got == code
    assert re.search(line, _one_line(capsys))


def test_an_unexpected_error_shows_its_traceback_only_under_v(monkeypatch, capsys) -> None:
    # GIVEN a client raising an error no input explains
    exc = RuntimeError("boom")
    monkeypatch.setattr(cli, "_client", lambda args: contextlib.nullcontext(_FailingClient(exc)))
    # WHEN run with -v after the subcommand
    assert main(["status", "est-1", "-v"]) == common.EXIT_UNEXPECTED
    err = capsys.readouterr().err
    # THEN the traceback comes first, then the one line
    assert "Traceback" in err and "RuntimeError: boom" in err
    assert err.splitlines()[-1] == "fanfit: error: unexpected RuntimeError: boom"


@pytest.fixture
def aws_env(monkeypatch, tmp_path: Path) -> None:
    """No credentials, profile or config file from this machine; no instance metadata."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_ENDPOINT_URL", "FANFIT_STACK"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


class _Session:
    """A boto3 session whose CloudFormation answers DescribeStacks as AWS does for a stack that
    does not exist."""

    region_name = "us-east-1"

    def client(self, service: str, endpoint_url: str | None = None) -> Any:
        assert service == "cloudformation"

        class _CloudFormation:
            def describe_stacks(self, StackName: str) -> Any:
                raise _client_error(
                    "ValidationError", "DescribeStacks", f"Stack with id {StackName} does not exist"
                )

        return _CloudFormation()


def test_a_missing_stack_names_the_aws_error_and_what_to_check(monkeypatch, capsys) -> None:
    # GIVEN AWS's answer to DescribeStacks of a stack that is not deployed, read by the client's
    # own stack reader (fanfit.client.stack.Stack.from_cloudformation)
    from fanfit.client.stack import Stack

    def opener(args: Any) -> Any:
        Stack.from_cloudformation(args.stack, _Session())
        raise AssertionError("the stack was read")

    monkeypatch.setattr(cli, "_client", opener)
    # WHEN a command names that stack
    code = main(["status", "est-1", "--stack", "nosuch", "--region", "us-east-1"])
    # THEN one line: the stack, CloudFormation's error code, and --stack/--region to check
    assert code == common.EXIT_STACK
    line = _one_line(capsys)
    assert line == (
        "fanfit: error: cannot read stack 'nosuch': AWS error ValidationError in DescribeStacks: "
        "Stack with id nosuch does not exist; check --stack and --region: a stack of that name "
        "must be deployed in that region"
    )


def test_no_credentials_is_one_line_on_what_to_set(aws_env, capsys) -> None:
    # GIVEN no AWS credentials anywhere botocore looks
    # WHEN a command names a deployed stack
    code = main(["jobs", "--stack", "fanfit", "--region", "us-east-1"])
    # THEN one line says so and what to set
    assert code == common.EXIT_STACK
    line = _one_line(capsys)
    assert "NoCredentialsError" in line and "aws configure" in line


def test_python_names_the_keyword_where_the_cli_names_the_flag() -> None:
    # GIVEN the same bad option from Python
    options = EstimateOptions(
        data=DATA, y="net_tfa", d="e401", x="age", ml_l="Lasso", ml_m="Lasso", n_folds=1
    )
    # WHEN checked THEN the message names the keyword (the CLI's line, above, the flag)
    with pytest.raises(errors.InvalidJobError, match=r"^n_folds must be an integer"):
        options.build_spec()


def test_version_prints_the_package_version(capsys) -> None:
    # GIVEN the installed package WHEN `fanfit --version` THEN its version, exit 0
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"fanfit {cli.version()}"
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", cli.version())


@pytest.mark.parametrize(
    ("argv", "verbose", "quiet"),
    [
        (["status", "J"], False, False),
        (["-v", "status", "J"], True, False),
        (["status", "J", "-v"], True, False),
        (["--quiet", "jobs"], False, True),
        (["jobs", "--quiet"], False, True),
        (["-v", "resume", "J", "-q"], True, True),
    ],
)
def test_v_and_quiet_go_before_or_after_the_subcommand(argv, verbose, quiet) -> None:
    # GIVEN -v / --quiet before or after the subcommand WHEN parsed THEN both places count
    args = build_parser().parse_args(argv)
    assert (args.verbose, args.quiet) == (verbose, quiet)


def test_help_shows_defaults_and_choices(capsys) -> None:
    # GIVEN fanfit estimate WHEN --help THEN options show their defaults and choices
    assert main(["estimate", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--n-folds N_FOLDS (default: 5)" in out
    assert "--output {table,json} (default: table)" in out
    assert "{plr,irm,pliv,iivm,apo,did,didcs,ssm,pq,cvar,lpq,lplr,rdflex,apos,qte}" in out
