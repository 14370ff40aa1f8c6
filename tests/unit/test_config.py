"""Config files of ``fanfit estimate`` and ``fanfit train`` (:mod:`fanfit.cli.config`).

GIVEN YAML files of a command's options, WHEN the command's arguments are parsed and resolved,
THEN the file fills what the command line did not give, a flag on the command line wins even when it
equals the default, and bad files raise InvalidJobError naming the key and the file.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from fanfit.cli import build_parser, config
from fanfit.client import build_spec
from fanfit.errors import InvalidJobError, InvalidLearnerError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "plr_401k.yaml"
DATA = ROOT / "examples" / "data" / "sipp1991.dta"
ESTIMATE_OPTIONS = ("y", "d", "x", "z", "model", "score", "ml_l", "ml_m", "ml_g", "ml_r",
                    "n_folds", "n_rep", "seed", "folds", "trimming_threshold", "boot_method",
                    "n_rep_boot", "max_concurrency", "units_per_shard", "sharding")  # fmt: skip


def _resolve(argv: list[str]):
    return config.resolve_args(build_parser().parse_args(argv))


def _write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _spec_dict(args) -> dict:
    options = {k: getattr(args, k) for k in ESTIMATE_OPTIONS}
    spec, _ = build_spec(
        **{k: options[k] for k in ("y", "d", "x", "z", "model", "score", "n_folds", "n_rep", "seed",
                                   "trimming_threshold", "boot_method", "n_rep_boot")},
        learners={k: options[k] for k in ("ml_l", "ml_m", "ml_g", "ml_r")},
    )  # fmt: skip
    return spec.to_dict()


def _make_demo_plr_argv() -> list[str]:
    """The `fanfit estimate ... --model plr` command of the Makefile's demo target, as argv."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    x401k = re.search(r"^X401K := (.+)$", text, re.M).group(1).strip()
    line = next(ln for ln in text.splitlines() if "fanfit estimate" in ln and "--model plr" in ln)
    tokens = shlex.split(line.replace("$(X401K)", x401k))
    return tokens[tokens.index("estimate") :]


def test_example_file_reproduces_make_demos_plr_job() -> None:
    # GIVEN the demo's PLR command line and the example config file
    from_flags = _resolve(_make_demo_plr_argv())
    from_file = _resolve(["estimate", "--config", str(EXAMPLE)])
    # THEN they give the same job: spec, data file and options
    assert _spec_dict(from_file) == _spec_dict(from_flags)
    assert Path(from_file.data) == DATA.resolve()
    assert (ROOT / from_flags.data).resolve() == DATA.resolve()
    for key in ("sharding", "max_concurrency", "units_per_shard", "folds", "output", "timeout"):
        assert getattr(from_file, key) == getattr(from_flags, key), key


def test_flags_override_the_file_and_the_file_overrides_defaults(tmp_path: Path) -> None:
    # GIVEN a file with n_folds 3, n_rep 4, sharding per-fold
    path = _write(
        tmp_path, "data: d.csv\ny: y\nd: d\nx: a,b\nn_folds: 3\nn-rep: 4\nsharding: per-fold\n"
    )
    # WHEN flags set n_folds to its default (5) and the seed
    args = _resolve(["estimate", "--config", str(path), "--n-folds", "5", "--seed", "7"])
    # THEN the flags win, even the one equal to the default
    assert args.n_folds == 5 and args.seed == 7
    # ... the file wins over defaults (dashed keys too)
    assert args.n_rep == 4 and args.sharding == "per-fold"
    # ... and what neither sets takes the flag's default
    assert args.trimming_threshold == 0.01 and args.model == "plr" and args.n_rep_boot == 500
    assert args.output == "table" and args.dry_run is False
    # ... and a relative data path is relative to the file
    assert Path(args.data) == tmp_path / "d.csv"


def test_without_a_config_file_flags_and_defaults_are_unchanged() -> None:
    args = _resolve(["estimate", "--data", "d.csv", "--y", "y", "--d", "d", "--x", "a"])
    assert (args.data, args.n_folds, args.n_rep, args.seed, args.sharding) == (
        "d.csv", 5, 1, 0, "auto"
    )  # fmt: skip
    assert args.ml_l is None and args.max_concurrency is None and args.config is None


def test_learners_as_mapping_or_string_and_columns_as_list_or_string(tmp_path: Path) -> None:
    # GIVEN learners in both forms and columns as a list
    path = _write(
        tmp_path,
        "data: s3://bucket/k.csv\ny: y\nd: [d1, d2]\nx: a, b\n"
        "ml_l: {name: LassoCV, params: {cv: 3}}\n"
        "ml_m: 'RandomForestRegressor:{\"n_estimators\": 10}'\n"
        "ml_g: {name: LinearRegression}\n",
    )
    args = _resolve(["estimate", "--config", str(path)])
    # THEN learners are the flags' canonical strings, columns a list, an S3 URI untouched
    assert args.ml_l == 'LassoCV:{"cv":3}'
    assert args.ml_m == 'RandomForestRegressor:{"n_estimators":10}'
    assert args.ml_g == "LinearRegression:{}"
    assert args.d == ["d1", "d2"] and args.x == "a, b"
    assert args.data == "s3://bucket/k.csv"


@pytest.mark.parametrize(
    ("text", "quantiles", "levels"),
    [
        ("quantiles: [0.25, 0.5, 0.75]\ntreatment_levels: [0, 1, 2]\n", "0.25,0.5,0.75", "0,1,2"),
        ("quantiles: 0.5\ntreatment_levels: 1\n", "0.5", "1"),
        ("quantiles: '0.25,0.5'\ntreatment_levels: 0,1\n", "0.25,0.5", "0,1"),
    ],
)
def test_quantiles_and_treatment_levels_as_a_yaml_list_a_number_or_the_flags_string(
    tmp_path: Path, text: str, quantiles: str, levels: str
) -> None:
    # GIVEN a job file giving qte's quantiles and apos's levels as a YAML user would write them
    path = _write(tmp_path, "data: s3://bucket/k.csv\ny: y\nd: d\n" + text)
    # WHEN it is resolved
    args = _resolve(["estimate", "--config", str(path)])
    # THEN each is the flag's comma-separated string, which the models parse
    assert (args.quantiles, args.treatment_levels) == (quantiles, levels)
    from fanfit.client.qte import qte_quantiles

    assert qte_quantiles(args.quantiles) == tuple(float(q) for q in quantiles.split(","))


def test_train_config(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "data: /abs/blobs.csv\nmodel: kmeans\nfeatures: [a, b, c]\nn_clusters: 3\n"
        "worker_memory: [1769, 885]\nworkers: 2\nstandardize: true\nlr: 1\n",
    )
    args = _resolve(["train", "--config", str(path), "--rounds", "3"])
    assert args.features == ["a", "b", "c"] and args.n_clusters == 3 and args.workers == 2
    assert args.worker_memory == "1769,885" and args.standardize is True
    assert args.lr == 1.0 and isinstance(args.lr, float)
    assert args.rounds == 3 and args.balance == "uniform" and args.data == "/abs/blobs.csv"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("n_fold: 3\n", r"unknown key 'n_fold'; known keys: .*n_folds"),
        ("n_folds: five\n", r"n_folds must be an integer, got 'five' \(str\)"),
        ("n_folds: 2.5\n", r"n_folds must be an integer"),
        ("n_folds: true\n", r"n_folds must be an integer, got True \(bool\)"),
        ("trimming_threshold: low\n", r"trimming_threshold must be a number"),
        ("x: [1, 2]\n", r"x must be a list of column names"),
        ("y: 401\n", r"y must be a string"),
        ("quantiles: [0.5, low]\n", r"quantiles must be a number or a list of numbers"),
        ("quantiles: []\n", r"quantiles must be a number or a list of numbers"),
        ("treatment_levels: [true]\n", r"treatment_levels must be a number or a list of numbers"),
        (
            "model: ols\n",
            r"model must be one of 'plr', 'irm', 'pliv', 'iivm', 'apo', 'did', 'didcs', 'ssm', "
            r"'pq', 'cvar', 'lpq', 'lplr', 'rdflex', 'apos', 'qte', got 'ols'",
        ),
        ("ml_l: 5\n", r"ml_l must be a learner"),
        ("n_folds: 3\nn-folds: 4\n", r"'n-folds' and 'n_folds' set the same option"),
        ("dry_run: true\n", r"unknown key 'dry_run'"),
        ("config: other.yaml\n", r"unknown key 'config'"),
        ("- data\n- y\n", r"must hold a mapping of options"),
        ("n_folds: [3\n", r"not valid YAML"),
        ("data: !!python/object/apply:os.system [echo]\n", r"not valid YAML"),
    ],
)
def test_bad_files_name_the_key_and_the_file(tmp_path: Path, text: str, named: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InvalidJobError, match=named) as info:
        _resolve(["estimate", "--config", str(path)])
    assert str(path) in str(info.value)


def test_a_learner_outside_the_allow_list_is_named_with_key_and_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "ml_l: {name: SVR, params: {C: 1}}\n")
    with pytest.raises(InvalidLearnerError, match=r"job\.yaml: ml_l: Unknown learner 'SVR'"):
        _resolve(["estimate", "--config", str(path)])
    path = _write(tmp_path, "ml_m: {name: LassoCV, params: {depth: 3}}\n", "p.yaml")
    with pytest.raises(InvalidLearnerError, match=r"p\.yaml: ml_m: .*no parameter 'depth'"):
        _resolve(["estimate", "--config", str(path)])


def test_train_types_are_checked(tmp_path: Path) -> None:
    path = _write(tmp_path, "standardize: 'yes'\n")
    with pytest.raises(InvalidJobError, match=r"standardize must be true or false"):
        _resolve(["train", "--config", str(path)])
    path = _write(tmp_path, "worker_memory: [1769, big]\n", "m.yaml")
    with pytest.raises(
        InvalidJobError, match=r"m\.yaml: worker_memory must be an integer or a list"
    ):
        _resolve(["train", "--config", str(path)])
    path = _write(tmp_path, "n_folds: 3\n", "e.yaml")
    with pytest.raises(InvalidJobError, match=r"unknown key 'n_folds'"):
        _resolve(["train", "--config", str(path)])


def test_required_options_come_from_either_place(tmp_path: Path) -> None:
    # GIVEN a file without the data and the covariates (x is optional: every other column)
    path = _write(tmp_path, "y: y\nd: d\n")
    # THEN the command names what is missing, as flag and key, and the file
    with pytest.raises(InvalidJobError, match=r"missing --data \(data:\): .*job\.yaml"):
        _resolve(["estimate", "--config", str(path)])
    assert _resolve(["estimate", "--config", str(path), "--data", "f.csv"]).x is None
    # ... and the command line can complete it
    args = _resolve(["estimate", "--config", str(path), "--data", "f.csv", "--x", "a"])
    assert (args.data, args.y, args.d, args.x) == ("f.csv", "y", "d", "a")
    # ... and without any file, the flags are required as before
    with pytest.raises(InvalidJobError, match=r"missing --model \(model:\), --features"):
        _resolve(["train", "--data", "f.csv"])


def test_empty_file_null_values_and_missing_file(tmp_path: Path) -> None:
    empty = _write(tmp_path, "# nothing\n")
    args = _resolve(["estimate", "--config", str(empty), "--data", "f", "--y", "y", "--d", "d",
                     "--x", "a"])  # fmt: skip
    assert args.n_folds == 5
    nulls = _write(tmp_path, "data: f\ny: y\nd: d\nx: a\nn_folds: null\nscore: ~\n", "n.yaml")
    args = _resolve(["estimate", "--config", str(nulls)])
    assert args.n_folds == 5 and args.score is None
    with pytest.raises(InvalidJobError, match=r"cannot read config file .*nowhere\.yaml"):
        _resolve(["estimate", "--config", str(tmp_path / "nowhere.yaml")])


def test_fields_are_the_parsers_long_options() -> None:
    # GIVEN the estimate parser after prepare_parser
    sub = build_parser()._subparsers._group_actions[0].choices["estimate"]
    fields = sub.get_default("_config_fields")
    # THEN every long flag but --help, --config, --dry-run is a field, with its default kept
    assert {"data", "n_folds", "ml_l", "sharding", "timeout"} <= set(fields)
    assert not {"help", "config", "dry_run"} & set(fields)
    assert fields["n_folds"].default == 5 and fields["n_folds"].kind == "int"
    assert fields["data"].required and fields["ml_l"].kind == "learner"
    assert fields["sharding"].choices == ("auto", "per-fold", "per-repetition")
