"""What the commands share: opening the stack's client, the common options, progress, dry runs and
cost lines. Exit codes: 0 done, 2 invalid input, 3 the job failed, 4 the stack cannot be reached."""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from fanfit.cli import config

if TYPE_CHECKING:
    from fanfit.client.options import OptionInfo

__all__ = [
    "EXIT_FAILED",
    "EXIT_INVALID",
    "EXIT_STACK",
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

EXIT_INVALID, EXIT_FAILED, EXIT_STACK = 2, 3, 4


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

    with local_stack.ensure_local_stack():
        yield Client.local_stack()


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
    and help; a ``'bool'`` option is a flag without a value."""
    for info in infos:
        kwargs: dict[str, Any] = {"dest": info.name, "help": info.help}
        if info.kind == "bool":
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


def add_quiet_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no live progress and no info lines on stderr, only the result and "
                   "warnings (default: a progress bar on a terminal, plain progress lines "
                   "otherwise)")  # fmt: skip


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
