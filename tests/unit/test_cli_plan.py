"""``fanfit plan`` through :func:`fanfit.cli.main`: the placement next to the baselines; exit codes."""

from __future__ import annotations

import json

import pytest

from fanfit.cli import main

STAGES = [
    "--stage", "ml_l:100000:2000:5",
    "--stage", "ml_m:100000:2000:5",
    "--stage", "mlp_l:3000000:400:10",
]  # fmt: skip


def test_plan_json_reports_the_plan_and_the_baselines(capsys) -> None:
    # GIVEN three stages from options, three Lambda sizes and a deadline
    argv = ["plan", *STAGES, "--memory", "885,1769,3538", "--deadline", "600", "--output", "json"]
    # WHEN the command runs
    code = main(argv)
    out = json.loads(capsys.readouterr().out)
    # THEN it exits 0 with one JSON object: the plan within the deadline, never dearer than a
    # baseline that meets it
    assert code == 0
    assert out["meets_deadline"] and out["plan"]["total_s"] <= 600
    assert [s["stage"] for s in out["plan"]["stages"]] == ["ml_l", "ml_m", "mlp_l"]
    for method in ("all_cpu", "all_gpu", "greedy"):
        cost = out[f"{method}_cost_usd"]
        if cost is not None and out["baselines_meet_deadline"][method.replace("_", "-")]:
            assert cost >= out["plan_cost_usd"] * (1 - 1e-9)
    assert set(out["baselines"]) == {"all-cpu", "all-gpu", "greedy"}


def test_plan_table_shows_the_placement_and_the_baselines(capsys) -> None:
    # WHEN the command prints its table
    assert main(["plan", *STAGES, "--deadline", "900"]) == 0
    text = capsys.readouterr().out
    # THEN the stages, the baselines and the costs are in it
    for word in ("Placement", "ml_l", "mlp_l", "all-cpu", "all-gpu", "greedy", "USD"):
        assert word in text


def test_plan_from_a_stages_file(tmp_path, capsys) -> None:
    # GIVEN a stages file with a GPU-only stage
    path = tmp_path / "stages.json"
    path.write_text(
        json.dumps(
            {
                "stages": [
                    {
                        "name": "torch",
                        "n_samples": 50000,
                        "resources": {"gpu:g4dn.xlarge": {"samples_per_s": 5000, "startup_s": 60}},
                    }
                ]
            }
        )
    )
    # WHEN it is planned
    assert main(["plan", "--stages-file", str(path), "--output", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # THEN the stage goes to the GPU and all-CPU has no plan
    assert out["plan"]["stages"][0]["resource"] == "gpu:g4dn.xlarge"
    assert out["all_cpu_cost_usd"] is None


@pytest.mark.parametrize(
    "argv",
    [
        [
            "plan",
            "--stage",
            "a:100:10",
            "--deadline",
            "0.5",
        ],  # infeasible: the fastest takes longer
        ["plan", "--stage", "a:x:10"],  # not a number
        ["plan", "--stage", "a:100"],  # missing field
        ["plan"],  # no stages
        ["plan", "--stage", "a:100:10", "--memory", "64"],  # Lambda memory out of range
        ["plan", "--stage", "a:100:10", "--gpu-only", "a"],  # nowhere to run
        ["plan", "--stages-file", "/nonexistent/stages.json"],
    ],
)
def test_invalid_input_exits_2_with_a_named_error(argv, capsys) -> None:
    # WHEN the command gets invalid input
    code = main(argv)
    # THEN it exits 2 and names the error on stderr
    assert code == 2
    assert "fanfit: error:" in capsys.readouterr().err


def test_an_unknown_option_exits_2(capsys) -> None:
    # argparse's own errors exit 2 too, as one line naming the option
    assert main(["plan", "--stage", "a:1:1", "--no-such-option"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--no-such-option" in err
