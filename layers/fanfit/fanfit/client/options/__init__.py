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

Modules, bottom to top (each imports only those before it):

- :mod:`~fanfit.client.options.fields`: how an option is declared (:class:`OptionInfo`), the
  options models' base, :func:`with_option_parameters`;
- :mod:`~fanfit.client.options.spec`: :func:`build_spec`, :func:`read_learner_params`, :func:`read_mapping_option`, and model
  ``apos``'s checks (:func:`parse_treatment_levels`, :func:`check_apos_options`);
- :mod:`~fanfit.client.options.estimate`: :class:`EstimateOptions`;
- :mod:`~fanfit.client.options.train`: :class:`TrainOptions`.

This package only re-exports their public names and the type checks of
:mod:`fanfit.client.values` (``check_int``, ``check_weight``, ...).
"""

from fanfit.client.options.estimate import (
    CLIENT_MODELS,
    COLUMN_ALIASES,
    LEARNER_KEYS,
    EstimateOptions,
)
from fanfit.client.options.fields import OptionInfo
from fanfit.client.options.fields import (
    with_option_parameters as with_option_parameters,  # fanfit.client.client's; not in __all__
)
from fanfit.client.options.spec import (
    build_spec,
    check_apos_options,
    parse_treatment_levels,
    read_learner_params,
    read_mapping_option,
)
from fanfit.client.options.train import TrainOptions
from fanfit.client.values import (
    check_budget,
    check_columns,
    check_deadline,
    check_int,
    check_learners,
    check_number,
    check_objective,
    check_str,
    check_weight,
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
    "read_mapping_option",
]
