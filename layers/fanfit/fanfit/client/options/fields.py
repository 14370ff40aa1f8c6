"""How the options models declare an option: its field (:func:`_option`) and its
:class:`OptionInfo`, the models' base (:class:`_Options`), and the signature of a method that takes
a model's options as keywords (:func:`with_option_parameters`)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from fanfit import limits

__all__ = ["OptionInfo", "with_option_parameters"]


@dataclass(frozen=True)
class OptionInfo:
    """How one option is shown and checked outside Python: its flag, help, parsing and check.

    Attributes
    ----------
    name : str
        The keyword (``n_folds``); also the config-file key and the argparse destination.
    default : Any
        The default (:data:`dataclasses.MISSING` for a required option).
    help : str or None
        The flag's help text.
    kind : str
        ``'str'``, ``'int'``, ``'float'``, ``'bool'`` (a flag without a value), ``'columns'``
        (one name or a list), ``'ints'`` (one integer, a list, or ``"1,2,3"``), ``'numbers'`` (one
        number, a list, or ``"0.25,0.5"``), ``'learner'`` or
        ``'path'`` (a file; relative to a config file's directory).
    choices : tuple or None
        The values the command line and config files accept.
    metavar : str or None
        The flag's metavar.
    check : callable or None
        A range check ``check(value, name) -> value`` run on the command line and config files
        with the flag or the key as ``name`` (``weight``: :func:`fanfit.limits.check_weight`).
    """

    name: str
    default: Any
    help: str | None = None
    kind: str = "str"
    choices: tuple[Any, ...] | None = None
    metavar: str | None = None
    check: Callable[[Any, str], Any] | None = None

    @property
    def flag(self) -> str:
        """The long flag: ``--n-folds`` for ``n_folds``."""
        return "--" + self.name.replace("_", "-")

    @property
    def required(self) -> bool:
        """Whether the option has no default."""
        return self.default is dataclasses.MISSING


def _option(
    default: Any = dataclasses.MISSING,
    *,
    help: str | None = None,  # noqa: A002 - argparse's name
    kind: str = "str",
    choices: Sequence[Any] | None = None,
    metavar: str | None = None,
    check: Callable[[Any, str], Any] | None = None,
) -> Any:
    """A field of :class:`EstimateOptions` with its :class:`OptionInfo` (name filled in later)."""
    info = {"help": help, "kind": kind, "choices": None if choices is None else tuple(choices),
            "metavar": metavar, "check": check}  # fmt: skip
    return field(default=default, metadata={"option": info})


def _weight() -> Any:
    return _option(
        limits.DEFAULT_WEIGHT,
        kind="float",
        metavar="W",
        help="the job's weight in the fair shares of the account's concurrency when jobs run at "
        "once: a number in (0, 100], default 1",
        check=limits.check_weight,
    )


#: ``--data`` of every job kind.
_DATA_HELP = "CSV, Parquet or Stata (.dta) file, or s3:// URI"


def _learner(name: str) -> Any:
    return _option(
        None,
        kind="learner",
        metavar="SPEC",
        help=f"learner {name}: a scikit-learn class name, optionally NAME:{{json params}}, or a "
        'JSON object such as {"name": "Pipeline", "params": {"steps": ["StandardScaler", "Lasso"]}}',
    )


class _Options:
    """What an options model gives its users: its options' :class:`OptionInfo` and names."""

    @classmethod
    def infos(cls) -> tuple[OptionInfo, ...]:
        """Every option's :class:`OptionInfo`, in the order of the fields (and of ``--help``)."""
        return tuple(
            OptionInfo(name=f.name, default=f.default, **f.metadata["option"])
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The options' names, in order."""
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


def with_option_parameters(function: Any, options: type[_Options]) -> inspect.Signature:
    """``function``'s signature with its ``**kwargs`` written out as the options' keywords.

    The methods that take options as keywords (:meth:`fanfit.client.Client.estimate` and friends)
    accept exactly the fields of ``options``; giving them this signature (``__signature__``) lets
    ``help()``, Jupyter and IDEs that ask :func:`inspect.signature` show every option with its
    default, while the fields stay defined once, on the options model.

    Parameters
    ----------
    function : callable
        A function whose last parameter is ``**kwargs``.
    options : type
        :class:`EstimateOptions` or :class:`TrainOptions`.

    Returns
    -------
    inspect.Signature
        The parameters of ``function`` before ``**kwargs``, then one keyword-only parameter per
        field of ``options`` not already among them (defaults as the model's; a field without one
        has none).
    """
    signature = inspect.signature(function)
    params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    taken = {p.name for p in params}
    for f in dataclasses.fields(options):  # type: ignore[arg-type]
        if f.name in taken:
            continue
        default = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        params.append(
            inspect.Parameter(
                f.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=f.type
            )
        )
    return signature.replace(parameters=params)
