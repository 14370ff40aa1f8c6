"""Job config files: ``fanfit estimate --config job.yaml`` and ``fanfit train --config job.yaml``.

A config file is a YAML mapping (read with ``yaml.safe_load`` only) of the command's options, named
as its long flags with underscores or dashes (``n_folds`` or ``n-folds`` for ``--n-folds``)::

    data: data/sipp1991.dta          # relative paths are relative to the config file
    model: plr
    y: net_tfa
    d: e401
    x: [age, inc, educ]              # a list, or the flag's comma-separated string
    quantiles: [0.25, 0.5, 0.75]     # (model qte) numbers: a list, a number or the flag's string
    ml_l: {name: RandomForestRegressor, params: {n_estimators: 100}}
    ml_m: 'RandomForestClassifier:{"n_estimators": 100}'   # or the flag's string form
    n_folds: 5

Precedence: a flag given on the command line overrides the file, which overrides the flag's
default. The fields are the parser's own options (derived from it by :func:`prepare_parser`), so
an option added to the command is a config key at once; a job option's kind (columns, integer
list, learner, file) and check come from its options model
(:class:`fanfit.client.options.EstimateOptions`, :class:`~fanfit.client.options.TrainOptions`). Unknown keys, wrong types and values
outside a flag's choices raise :class:`fanfit.errors.InvalidJobError` naming the key and the file.

This module is client-side only (PyYAML is not in the Lambda layer).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fanfit.errors import InvalidJobError

if TYPE_CHECKING:
    from fanfit.client.options import OptionInfo

__all__ = ["ConfigField", "load_config", "prepare_parser", "resolve_args"]

#: Options of a command that are not job fields (never read from a config file): also the logging
#: options every subcommand shares with the top-level parser (``-v``, ``--quiet``).
_NOT_FIELDS = frozenset({"help", "config", "dry_run", "verbose", "quiet"})
#: Where prepare_parser keeps the fields on the parsed namespace.
_FIELDS_ATTR = "_config_fields"


@dataclass(frozen=True)
class ConfigField:
    """One option of a command, as a config file may set it.

    Attributes
    ----------
    dest : str
        The argparse destination (``n_folds``); the config key.
    flag : str
        The long flag (``--n-folds``).
    default : Any
        The flag's default, used when neither the command line nor the file sets it.
    required : bool
        Whether the command needs it (from the command line or the file).
    kind : str
        ``'str'``, ``'int'``, ``'float'``, ``'bool'``, ``'columns'``, ``'ints'``, ``'numbers'``
        (a number or a list of numbers, ``quantiles: [0.25, 0.5]``) or ``'learner'``.
    choices : tuple or None
        The flag's choices.
    path : bool
        A file: a relative path in a config file is relative to the file's directory.
    check : callable or None
        A range check ``check(value, name) -> value`` (``weight``).
    """

    dest: str
    flag: str
    default: Any
    required: bool
    kind: str
    choices: tuple[Any, ...] | None = None
    path: bool = False
    check: Callable[[Any, str], Any] | None = None


def _kind(action: argparse.Action) -> str:
    """The kind of an option no options model describes (``--output``, ``--timeout``)."""
    if action.nargs == 0 and isinstance(action.const, bool):
        return "bool"
    if action.type is int:
        return "int"
    if action.type is float:
        return "float"
    return "str"


def prepare_parser(
    parser: argparse.ArgumentParser, options: Sequence[OptionInfo] = ()
) -> dict[str, ConfigField]:
    """Let a command's options come from a config file as well as the command line.

    Records every long option of ``parser`` (except ``--help``, ``--config``, ``--dry-run``) as a
    :class:`ConfigField`, then sets its default to None and makes it not required, so that after
    parsing None means "not on the command line"; :func:`resolve_args` then fills it from the file
    or the recorded default, and checks the required ones. Call it after the last
    ``add_argument`` of the command.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The command's (sub)parser.
    options : sequence of fanfit.client.options.OptionInfo
        The command's job options (:class:`fanfit.client.options.EstimateOptions` or
        :class:`~fanfit.client.options.TrainOptions`), which carry their kind (``'path'`` is a
        str that is a file) and check; the other options' kinds are told from the parser.

    Returns
    -------
    dict of str to ConfigField
        By destination; also stored on the parsed namespace for :func:`resolve_args`.
    """
    infos = {info.name: info for info in options}
    fields: dict[str, ConfigField] = {}
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs or action.dest in _NOT_FIELDS or action.dest == argparse.SUPPRESS:
            continue
        info = infos.get(action.dest)
        if info is not None:
            kind, path, check = (
                ("str" if info.kind == "path" else info.kind),
                info.kind == "path",
                info.check,
            )
        else:
            kind, path, check = _kind(action), False, None
        fields[action.dest] = ConfigField(
            dest=action.dest,
            flag=longs[0],
            default=action.default,
            required=bool(action.required),
            kind=kind,
            choices=tuple(action.choices) if action.choices is not None else None,
            path=path,
            check=check,
        )
        text = action.help or ""
        if (  # --help shows the default the file or the command line may override
            action.help is not argparse.SUPPRESS
            and "default" not in text
            and action.default not in (None, False, "")
        ):
            shown = str(action.default).replace("%", "%%")
            action.help = f"{text} (default: {shown})".lstrip()
        action.required = False
    parser.set_defaults(**{dest: None for dest in fields}, **{_FIELDS_ATTR: fields})
    return fields


def _yaml_problem(exc: Exception) -> str:
    """One line of a YAML error: its problem and where (``line 3, column 1``)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _check(path: str, key: str, field: ConfigField, value: Any, base: Path) -> Any:
    """The file's value of one field, checked and in the form the command line gives it."""

    def bad(expected: str) -> InvalidJobError:
        return InvalidJobError(
            f"{path}: {key} must be {expected}, got {value!r} ({_type_name(value)})"
        )

    kind = field.kind
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        out: Any = value
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad("a number")
        out = float(value)
        if field.check is not None:
            return field.check(out, f"{path}: {key}")
    elif kind == "columns":
        if isinstance(value, str):
            return value
        if not isinstance(value, list) or not all(isinstance(c, str) and c for c in value):
            raise bad("a list of column names (quote names YAML reads as numbers)")
        return list(value)
    elif kind == "ints":
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, str):
            return value
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise bad("an integer or a list of integers")
        return ",".join(str(v) for v in value)
    elif kind == "numbers":
        if isinstance(value, str):
            return value
        if not isinstance(value, list):
            value = [value]
        if not value or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value
        ):
            raise bad("a number or a list of numbers")
        return ",".join(repr(v) for v in value)
    elif kind == "learner":
        from fanfit.learners import LearnerSpec

        if not isinstance(value, str | dict):
            raise bad('a learner: "NAME", "NAME:{json params}" or {name: NAME, params: {...}}')
        try:
            return str(LearnerSpec.from_dict(value))
        except InvalidJobError as exc:
            raise type(exc)(f"{path}: {key}: {exc}") from exc
    else:
        if not isinstance(value, str):
            raise bad("a string (quote values YAML reads as numbers or booleans)")
        out = value
        if field.path and not out.startswith("s3://"):
            expanded = Path(os.path.expanduser(out))
            out = str(expanded if expanded.is_absolute() else base / expanded)
    if field.choices is not None and out not in field.choices:
        raise InvalidJobError(
            f"{path}: {key} must be one of {', '.join(map(repr, field.choices))}, got {value!r}"
        )
    return out


def load_config(path: str | os.PathLike[str], fields: dict[str, ConfigField]) -> dict[str, Any]:
    """Read and check a config file against a command's fields.

    Parameters
    ----------
    path : str or path-like
        A YAML file holding one mapping.
    fields : dict of str to ConfigField
        The command's fields (:func:`prepare_parser`).

    Returns
    -------
    dict
        Destination -> value, in the form the command line gives it: ints, floats, bools and
        strings; column lists as lists of str; integer lists and learners as the flags' strings
        (learners canonical ``NAME:{json}``); ``data`` and ``folds`` paths resolved against the
        file's directory. Keys set to null are left out (the flag's default applies).

    Raises
    ------
    InvalidJobError
        The file is missing or not YAML (with the parser's line), is not a mapping, has an unknown
        key (named, with the known keys), a key given twice (``n_folds`` and ``n-folds``), a value
        of the wrong type or outside the flag's choices (key and file named).
    InvalidLearnerError
        A learner outside the allow-list or with bad parameters (key and file named).
    """
    import yaml

    name = os.fspath(path)
    try:
        text = Path(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidJobError(f"cannot read config file {name!r}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidJobError(f"config file {name!r} is not UTF-8 text (a YAML file?)") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidJobError(f"{name}: not valid YAML: {_yaml_problem(exc)}") from exc
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidJobError(
            f"{name}: a config file must hold a mapping of options (key: value), got {_type_name(raw)}"
        )
    base = Path(name).resolve().parent
    out: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, value in raw.items():
        dest = str(key).replace("-", "_")
        if not isinstance(key, str) or dest not in fields:
            known = ", ".join(sorted(fields))
            raise InvalidJobError(f"{name}: unknown key {key!r}; known keys: {known}")
        if dest in given_as:
            raise InvalidJobError(f"{name}: {key!r} and {given_as[dest]!r} set the same option")
        given_as[dest] = key
        if value is not None:
            out[dest] = _check(name, key, fields[dest], value, base)
    return out


def resolve_args(args: argparse.Namespace) -> argparse.Namespace:
    """Merge a command's config file into its parsed arguments, in place.

    For every field of the command (:func:`prepare_parser`): the command line's value if it gave
    one, else the file's (``args.config``), else the flag's default.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed by a parser that went through :func:`prepare_parser`; ``args.config`` is a path or None.

    Returns
    -------
    argparse.Namespace
        ``args``, every field set.

    Raises
    ------
    InvalidJobError
        What :func:`load_config` raises, or a required option set neither on the command line nor
        in the file (the message names the flag and the key).
    """
    fields: dict[str, ConfigField] = getattr(args, _FIELDS_ATTR, None) or {}
    path = getattr(args, "config", None)
    from_file = load_config(path, fields) if path else {}
    for dest, field in fields.items():
        if getattr(args, dest, None) is None:
            setattr(args, dest, from_file.get(dest, field.default))
    missing = [f for f in fields.values() if f.required and getattr(args, f.dest) is None]
    if missing:
        where = f" or in {path}" if path else " or in a --config file"
        raise InvalidJobError(
            "missing "
            + ", ".join(f"{f.flag} ({f.dest}:)" for f in missing)
            + f": give it on the command line{where}"
        )
    return args
