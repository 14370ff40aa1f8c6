"""User options: the estimate options defined once (:class:`EstimateOptions`), and type checks.

:class:`EstimateOptions` holds every option of an estimate job with its type, default, help text,
command-line flag and check: :meth:`fanfit.client.Client.submit_estimate`,
:func:`fanfit.client.check_estimate`, the ``fanfit estimate`` parser (built from it by
:func:`fanfit.cli.estimate.add_parser`), its ``--config`` job files (:mod:`fanfit.cli.config`) and
``--dry-run`` all read it, so an option is added or changed here only.

The spec builders (:func:`build_spec`, :func:`fanfit.client.train.build_train_spec`) take options
from Python callers, the CLI and YAML configs; a value of the wrong type (``learners=0``, ``d=0``,
``lr=None``, ``features=0``) must be a named :class:`fanfit.errors.InvalidJobError` naming the
option, never a ``TypeError`` or ``AttributeError`` from deep inside.

This package only re-exports the public names of its modules.
"""

from fanfit.client.options.estimate import (
    CLIENT_MODELS,
    COLUMN_ALIASES,
    LEARNER_KEYS,
    EstimateOptions,
    OptionInfo,
    TrainOptions,
    build_spec,
    check_apos_options,
    check_budget,
    check_columns,
    check_deadline,
    check_int,
    check_learners,
    check_number,
    check_objective,
    check_str,
    check_weight,
    parse_treatment_levels,
    read_learner_params,
)
from fanfit.client.options.estimate import (
    with_option_parameters as with_option_parameters,  # fanfit.client.client's; not in __all__
)

__all__ = [
    "CLIENT_MODELS",
    "COLUMN_ALIASES",
    "LEARNER_KEYS",
    "EstimateOptions",
    "OptionInfo",
    "TrainOptions",
    "build_spec",
    "check_apos_options",
    "check_columns",
    "check_int",
    "check_learners",
    "check_number",
    "check_str",
    "check_budget",
    "check_deadline",
    "check_objective",
    "check_weight",
    "parse_treatment_levels",
    "read_learner_params",
]
