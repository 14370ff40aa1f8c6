"""What the commands share: opening the stack's client, the common options, progress, dry runs,
cost lines, the help format, and the one place that turns an exception into the line a user reads
and the command's exit code (:func:`error_line`).

Exit codes (named below): 0 done (:data:`EXIT_OK`); 1 an unexpected error, a bug (its traceback
only under ``-v``; :data:`EXIT_UNEXPECTED`); 2 bad input: an option, a file, a config, an unknown
job (:data:`EXIT_INVALID`); 3 the job failed (:data:`EXIT_FAILED`); 4 the command stopped waiting
(``--timeout``, Ctrl-C) and left the job running (:data:`EXIT_DETACHED`); 5 the stack or AWS
cannot be reached, read or refused the call: a missing stack, AccessDenied, no credentials
(:data:`EXIT_STACK`); 130 interrupted before a job was started (:data:`EXIT_INTERRUPTED`).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import re
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from fanfit import errors
from fanfit.cli import config

if TYPE_CHECKING:
    from fanfit.client.options import OptionInfo

__all__ = [
    "EXIT_DETACHED",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_INVALID",
    "EXIT_OK",
    "EXIT_STACK",
    "EXIT_UNEXPECTED",
    "HelpFormatter",
    "Parser",
    "aws_error_line",
    "command_parent",
    "error_line",
    "report_error",
    "add_config_options",
    "add_options",
    "add_quiet_option",
    "add_stack_options",
    "cost_line",
    "fmt",
    "job_cost",
    "open_client",
    "print_dry_run",
    "progress",
    "stack_client",
]

#: The command did what it was asked.
EXIT_OK = 0
#: An error no input explains (a bug): one line, the traceback only under ``-v``.
EXIT_UNEXPECTED = 1
#: Bad input: an option, a file, a config file, a job id; the line names it.
EXIT_INVALID = 2
#: The job failed (and ``fanfit status`` of a FAILED job).
EXIT_FAILED = 3
#: The command stopped waiting (``--timeout``, Ctrl-C while attached); the job runs on.
EXIT_DETACHED = 4
#: The stack or AWS cannot be reached or read, or refused the call (the line names the AWS error
#: code and what to check).
EXIT_STACK = 5
#: Interrupted (Ctrl-C) before a job was started: the shell's 128 + SIGINT.
EXIT_INTERRUPTED = 130


@contextlib.contextmanager
def open_client(args: argparse.Namespace) -> Iterator[Any]:
    """A :class:`fanfit.client.Client` of ``--stack`` (in ``--region``), or of the running local
    stack, started for the command's duration when none runs.

    Raises
    ------
    fanfit.errors.StackError
        The stack cannot be read.
    """
    from fanfit.client import Client

    if args.stack:
        yield Client(stack=args.stack, region_name=args.region)
        return
    from fanfit.local import stack as local_stack

    # The deploy record is trusted (no DescribeStacks before the client's own): if the stack it
    # names is gone, the client cannot read it, and the project is deployed again.
    with local_stack.ensure_local_stack(verify=False):
        try:
            client = Client.local_stack()
        except errors.StackError:
            from fanfit.local.deploy import deploy

            deploy(force=True)
            client = Client.local_stack()
        yield client


def stack_client(args: argparse.Namespace) -> contextlib.AbstractContextManager[Any]:
    """The command's client: through the opener :func:`fanfit.cli.main` put on ``args``
    (``args.open_client``, which tests replace), else :func:`open_client`."""
    opener = getattr(args, "open_client", None) or open_client
    return opener(args)  # type: ignore[no-any-return]


#: argparse's ``type`` of each option kind (the others are strings).
_TYPES: dict[str, type] = {"int": int, "float": float}


def add_options(p: argparse.ArgumentParser, infos: Sequence[OptionInfo]) -> None:
    """One flag per option of an options model (:class:`fanfit.client.options.EstimateOptions`,
    :class:`~fanfit.client.options.TrainOptions`): its spelling, type, default, choices, metavar
    and help; a ``'bool'`` option is a flag without a value (``--x``, or ``--x``/``--no-x``
    when its default is None: unset, the model's default applies)."""
    for info in infos:
        kwargs: dict[str, Any] = {"dest": info.name, "help": info.help}
        if info.kind == "bool" and info.default is None:
            kwargs.update(action=argparse.BooleanOptionalAction, default=None)
        elif info.kind == "bool":
            kwargs["action"] = "store_true"
        elif info.required:
            kwargs["required"] = True
        else:
            kwargs["default"] = info.default
        if info.kind in _TYPES:
            kwargs["type"] = _TYPES[info.kind]
        if info.choices is not None:
            kwargs["choices"] = list(info.choices)
        if info.metavar is not None:
            kwargs["metavar"] = info.metavar
        p.add_argument(info.flag, **kwargs)


def add_stack_options(p: argparse.ArgumentParser) -> None:
    """``--stack`` and ``--region``."""
    p.add_argument("--stack", help="name of a deployed stack (default: the local stack)")
    p.add_argument("--region", help="AWS region of --stack")


#: The help of ``--quiet`` (:func:`command_parent`, :func:`add_quiet_option`).
QUIET_HELP = (
    "no live progress and no info lines on stderr, only the result and warnings "
    "(default: a progress bar on a terminal, plain progress lines otherwise)"
)
VERBOSE_HELP = "debug logs on stderr, and the traceback of an unexpected error"


def add_quiet_option(p: argparse.ArgumentParser) -> None:
    """``--quiet`` / ``-q`` on ``p``, unless it has it already (every subcommand does, from
    :func:`command_parent`). Its default is left out of the namespace, so that
    ``fanfit --quiet COMMAND`` holds as well as ``fanfit COMMAND --quiet``."""
    if "--quiet" in p._option_string_actions:
        return
    p.add_argument("--quiet", "-q", action="store_true", default=argparse.SUPPRESS, help=QUIET_HELP)


def command_parent() -> argparse.ArgumentParser:
    """The options every subcommand takes after its name as well as before it (argparse's
    ``parents=``): ``-v``/``--verbose`` and ``-q``/``--quiet``. Their defaults stay out of the
    namespace (``argparse.SUPPRESS``), so the top-level parser's value holds when they are not
    repeated after the subcommand."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP
    )
    parent.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=QUIET_HELP
    )
    return parent


class HelpFormatter(argparse.HelpFormatter):
    """``--help`` with every option's default (``(default: 5)``) unless its help names one, and
    its choices when a metavar hides them from the usage."""

    def _format_action(self, action: argparse.Action) -> str:
        if action.help is None and action.option_strings:  # no help text: still its default
            action = copy.copy(action)
            action.help = ""
            shown = self._get_help_string(action)
            action.help = shown or None
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.help is argparse.SUPPRESS:
            return text
        if action.choices is not None and action.metavar is not None and "choices" not in text:
            shown = ", ".join(str(c) for c in action.choices).replace("%", "%%")
            text += f" (choices: {shown})"
        default = action.default
        if (
            action.option_strings
            and "default" not in text
            and default is not None
            and default is not False
            and default is not argparse.SUPPRESS
            and default not in ("", [], ())
        ):
            text += " (default: %(default)s)"
        return text.lstrip()


class Parser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose usage errors are one line (the error and where
    to read the usage) with exit code :data:`EXIT_INVALID`."""

    def error(self, message: str) -> Any:  # argparse's NoReturn
        self.exit(EXIT_INVALID, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def progress(args: argparse.Namespace) -> bool:
    """The ``progress=`` of a command's wait: on unless ``--quiet`` (a bar on a terminal, plain
    lines on stderr otherwise; :func:`fanfit.progress.make_renderer`)."""
    return not getattr(args, "quiet", False)


def add_config_options(
    p: argparse.ArgumentParser, command: str, options: Sequence[OptionInfo] = ()
) -> None:
    """``--config FILE`` and ``--dry-run``; then every option of ``p`` becomes a config key
    (:func:`fanfit.cli.config.prepare_parser`, told each option's kind and check by ``options``).
    Call it after the command's last option."""
    p.add_argument("--config", metavar="FILE",
                   help="YAML file of the options (keys as the long flags: n_folds or n-folds); "
                   "flags given here override it")  # fmt: skip
    p.add_argument("--dry-run", dest="dry_run", action="store_true",
                   help=f"check the data and the options, print what would run, and exit "
                   f"without contacting any stack (fanfit {command})")  # fmt: skip
    config.prepare_parser(p, options)


def add_job_options(
    p: argparse.ArgumentParser, command: str, options: Sequence[OptionInfo]
) -> None:
    """The parser of a command that runs a job (``fanfit estimate``, ``fanfit train``): one flag per
    option of its options model, then ``--stack``, ``--output``, ``--timeout``, ``--detach``,
    ``--quiet``, and
    ``--config`` / ``--dry-run`` (which must come last)."""
    add_options(p, options)
    add_stack_options(p)
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="seconds to wait for the job; when they run out the command detaches "
                   "(the job keeps running), prints how to wait for, fetch or cancel it, and "
                   "exits 4 (default: 3600)")  # fmt: skip
    p.add_argument("--detach", action="store_true",
                   help="print the job id (with --output json: job_id and execution_arn) as "
                   "soon as the job starts, and exit 0 without waiting")  # fmt: skip
    add_quiet_option(p)
    add_config_options(p, command, options)


def print_dry_run(command: str, args: argparse.Namespace, info: dict[str, Any]) -> int:
    info = {"command": command, "dry_run": True, "data": str(args.data), **info}
    if args.output == "json":
        print(json.dumps(info, allow_nan=False))
        return 0
    print(f"fanfit {command} --dry-run: valid; nothing was uploaded or started")
    for key, value in info.items():
        if key in ("command", "dry_run", "learners", "n_fits", "prediction_keys") or value in (
            None, [], ()
        ):  # fmt: skip
            continue
        shown = ", ".join(map(str, value)) if isinstance(value, list) else value
        print(f"{key}: {shown}")
    for name, learner in info.get("learners", {}).items():
        print(f"learner {name}: {learner}")
    return 0


def fmt(value: Any) -> str:
    return "n/a" if value is None else f"{float(value):.3g}"


def job_cost(job: Any) -> tuple[Any, str | None]:
    """The job's :class:`fanfit.cost.JobCost` (kept in its record once it has ended), or None and
    why not: the status of a job never fails for want of its cost."""
    try:
        return job.cost(), None
    except Exception as exc:  # history not readable, no permission
        return None, f"{type(exc).__name__}: {exc}"


def cost_line(cost: Any, error: str | None, status: Any) -> str:
    if cost is None:
        return f"cost: n/a ({error})"
    so_far = " so far" if status == "RUNNING" else ""
    return (
        f"cost{so_far}: ${cost.total_usd:.6f} at AWS list prices: Lambda {cost.billed_gb_s:.1f} GB-s "
        f"in {cost.lambda_requests} request(s), {cost.state_transitions} state transition(s), "
        f"Batch {cost.batch_instance_s:.0f} instance-s"
    )


#: What to check for an AWS error code (botocore's ``ClientError``), by code.
_AWS_CHECKS: dict[str, str] = {
    "AccessDenied": "the caller's IAM permissions for this stack's resources "
    "(`aws sts get-caller-identity` names the caller)",
    "AccessDeniedException": "the caller's IAM permissions for this stack's resources "
    "(`aws sts get-caller-identity` names the caller)",
    "UnrecognizedClientException": "the credentials (AWS_PROFILE, `aws configure`)",
    "InvalidClientTokenId": "the credentials (AWS_PROFILE, `aws configure`)",
    "SignatureDoesNotMatch": "the credentials (AWS_PROFILE, `aws configure`)",
    "ExpiredToken": "the credentials: they expired (`aws sso login`, or new keys)",
    "ExpiredTokenException": "the credentials: they expired (`aws sso login`, or new keys)",
    "ValidationError": "--stack and --region: a stack of that name must be deployed in that region",
    "ResourceNotFoundException": "--stack and --region, and that the stack deployed completely",
    "StateMachineDoesNotExist": "that the stack deployed completely (`sam deploy`)",
    "ExecutionDoesNotExist": "the job id (`fanfit jobs` lists the running ones)",
    "NoSuchBucket": "that the stack deployed completely (its data bucket is missing)",
    "NoSuchKey": "the job id, or the s3:// path",
    "404": "the job id, or the s3:// path",
    "403": "the caller's IAM permissions for the bucket (`aws sts get-caller-identity`)",
    "ThrottlingException": "nothing: AWS throttled the calls; run the command again",
    "TooManyRequestsException": "nothing: AWS throttled the calls; run the command again",
}


def aws_error_line(exc: BaseException) -> tuple[str, int] | None:
    """The line and exit code of a botocore error, or None for any other exception.

    ``ClientError``: its error code, operation and message, and what to check
    (AccessDenied: the caller's permissions; ValidationError of DescribeStacks: ``--stack`` and
    ``--region``); ``NoCredentialsError``, ``NoRegionError``, ``EndpointConnectionError`` and
    other ``BotoCoreError``: what botocore says and what to set. Exit code :data:`EXIT_STACK`.
    """
    try:
        from botocore import exceptions as bx
    except ImportError:  # pragma: no cover - boto3 is a dependency
        return None
    if isinstance(exc, bx.ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code") or "Unknown")
        message = str(err.get("Message") or "").strip().rstrip(".")
        operation = getattr(exc, "operation_name", None) or "a call"
        check = _AWS_CHECKS.get(code, "the AWS documentation of this error code")
        said = f": {message}" if message else ""
        return f"AWS error {code} in {operation}{said}; check {check}", EXIT_STACK
    if isinstance(exc, bx.NoCredentialsError):
        return (
            "no AWS credentials found (NoCredentialsError); set AWS_PROFILE or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run `aws configure`; without --stack, "
            "fanfit uses the local stack, which needs none",
            EXIT_STACK,
        )
    if isinstance(exc, bx.NoRegionError):
        return "no AWS region (NoRegionError); give --region or set AWS_DEFAULT_REGION", EXIT_STACK
    if isinstance(exc, bx.EndpointConnectionError):
        return (
            f"cannot connect to {exc.kwargs.get('endpoint_url', 'the endpoint')} "
            "(EndpointConnectionError); check --region and the network, or `fanfit local status` "
            "for the local stack",
            EXIT_STACK,
        )
    if isinstance(exc, bx.BotoCoreError):
        return f"AWS {type(exc).__name__}: {exc}", EXIT_STACK
    return None


def _file_line(exc: OSError, args: argparse.Namespace | None, parser: Any) -> str:
    """``--folds 'missing.csv': No such file or directory``: the option that gave the file, when
    one did."""
    name = exc.filename
    what = f"file {str(name)!r}" if name is not None else "a file"
    for dest, value in vars(args or argparse.Namespace()).items():
        if name is not None and isinstance(value, str | Path) and str(value) == str(name):
            what = f"{_flag_of(dest, parser) or dest} {str(name)!r}"
            break
    return f"{what}: {exc.strerror or exc}"


def _flag_of(dest: str, parser: Any) -> str | None:
    for action in getattr(parser, "_actions", ()):
        if action.dest == dest:
            longs = [o for o in action.option_strings if o.startswith("--")]
            return longs[0] if longs else None
    return None


def cli_words(message: str, parser: Any) -> str:
    """``message`` with the Python keywords of ``parser``'s options written as its flags:
    ``n_folds must be ...`` becomes ``--n-folds must be ...``; ``ml_l`` becomes ``--ml-l``.

    A keyword with an underscore is replaced wherever it stands as a word (not in quotes, not
    already a flag); a one-word keyword (``seed``, ``model``) only where it opens the message
    (``seed must be ...``), as other words of that spelling are prose. A message that names a
    flag already was written for the command line, and is left as it is.
    """
    if re.search(r"(?<![\w-])--[a-z]", message):
        return message
    for action in getattr(parser, "_actions", ()):
        flag = f"--{action.dest.replace('_', '-')}"
        if flag not in action.option_strings:
            continue
        word = re.escape(action.dest)
        if "_" in action.dest:
            message = re.sub(rf"(?<![\w'\"`-]){word}(?![\w'\"`])", flag, message)
        else:
            message = re.sub(rf"^{word}(?= must|:)", flag, message)
    return message


def error_line(
    exc: BaseException, args: argparse.Namespace | None = None, parser: Any = None
) -> tuple[str, int]:
    """The one line a user reads for ``exc``, and the command's exit code.

    Parameters
    ----------
    exc : BaseException
        What the command raised.
    args : argparse.Namespace, optional
        The parsed command line: names the option that gave a missing file.
    parser : argparse.ArgumentParser, optional
        The command's parser: its flags replace the Python keywords in a message (``n_folds``
        -> ``--n-folds``), and name the option of a file.

    Returns
    -------
    tuple of (str, int)
        The line (without ``fanfit: error:``) and one of the ``EXIT_*`` codes: a fanfit error of
        the input, an unknown job, a file that cannot be read: :data:`EXIT_INVALID`; a failed job:
        :data:`EXIT_FAILED`; the stack or AWS (botocore's errors, with their code and what to
        check): :data:`EXIT_STACK`; Ctrl-C: :data:`EXIT_INTERRUPTED`; anything else:
        :data:`EXIT_UNEXPECTED`.
    """
    config_file = getattr(args, "config", None)
    if isinstance(exc, errors.InvalidJobError | errors.JobNotFoundError):
        text = str(exc)
        if not (config_file and str(config_file) in text):  # a config file's message names keys
            text = cli_words(text, parser)
        return f"{type(exc).__name__}: {text}", EXIT_INVALID
    if isinstance(exc, errors.StackError):
        cause = aws_error_line(exc.__cause__) if exc.__cause__ is not None else None
        if cause is not None:
            head = re.match(r"cannot read stack '[^']*'(?: at \S+)?", str(exc))
            return f"{head.group(0) if head else 'stack'}: {cause[0]}", EXIT_STACK
        return str(exc), EXIT_STACK
    if isinstance(exc, errors.JobFailedError):
        return f"{type(exc).__name__}: {exc}", EXIT_FAILED
    if isinstance(exc, errors.FanfitError):
        return f"{type(exc).__name__}: {exc}", EXIT_FAILED
    aws = aws_error_line(exc)
    if aws is not None:
        return aws
    if isinstance(exc, OSError) and exc.filename is not None:
        return _file_line(exc, args, parser), EXIT_INVALID
    if isinstance(exc, UnicodeDecodeError):
        return f"a file is not UTF-8 text: {exc}", EXIT_INVALID
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", EXIT_INTERRUPTED
    return (
        f"unexpected {type(exc).__name__}: {exc} (run again with -v for the traceback)",
        EXIT_UNEXPECTED,
    )


def report_error(
    exc: BaseException,
    args: argparse.Namespace | None = None,
    parser: Any = None,
    stream: TextIO | None = None,
) -> int:
    """Print ``exc`` as one line, ``fanfit: error: ...``, on stderr (:func:`error_line`), with
    the traceback before it only for an unexpected error under ``-v``; returns the exit code."""
    import sys

    out = stream or sys.stderr
    line, code = error_line(exc, args, parser)
    if code == EXIT_UNEXPECTED and getattr(args, "verbose", False):
        traceback.print_exception(exc, file=out)
        line = line.replace(" (run again with -v for the traceback)", "")
    print(f"fanfit: error: {line}", file=out)
    return code
