"""Designed ablations (``design`` in an ablation plan, protocol/design.py): the design's balance,
orthogonality, resolution, endpoints and aliases, the arms and jobs of the shipped 16-arm plan, its
plan record and ``show``, and bad designs refused in one line (exit 2, nothing written)."""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from algorithms.configs import ConfigError
from protocol.design import STANDARD, Design, check_design, standard_generators
from repro.ablation import ablation_arms, deviation_groups
from repro.cli import main
from repro.plans import expand, load_plan, plan_analysis
from repro.power import frozen_family, plan_design_seeds
from repro.record import plan_record
from tests.refusals import refused_run_line

REPO = Path(__file__).resolve().parents[1]
BASE, PUBLISHED = "r2d1_minatar_corrected", "rlpyt_r2d1_minatar_published"
PLAN = "r2d1_minatar_factorial"
IV_16 = ("E=BCD", "F=ACD", "G=ABC", "H=ABD")


def _design(k: int, generators=()) -> Design:
    return Design("fractional" if generators else "factorial", tuple(f"s{i}" for i in range(k)), generators)


@pytest.mark.parametrize("k, generators", [(3, ()), (5, ()), (8, IV_16), (6, ("E=ABC", "F=BCD"))])
def test_designs_are_balanced_orthogonal_and_hold_both_endpoints(k, generators):
    design = check_design(_design(k, generators), "test")
    x = design.matrix
    runs = 2 ** (k - len(generators))
    assert x.shape == (runs, k) and set(np.unique(x)) == {-1, 1}
    assert (x.sum(axis=0) == 0).all()  # each switch on in half the arms
    np.testing.assert_array_equal(x.T @ x, runs * np.eye(k, dtype=int))  # main effects orthogonal
    rows = {tuple(r) for r in x}
    assert len(rows) == runs and (-1,) * k in rows and (1,) * k in rows
    if not generators:
        assert rows == set(itertools.product((-1, 1), repeat=k))


def test_the_16_arm_resolution_iv_design_has_the_hand_derived_aliases():
    design = check_design(_design(8, IV_16), "test")
    assert design.resolution == 4 and len(design.words) == 15
    # I = BCDE = ACDF = ABCG = ABDH and their products (Montgomery 2013, Table 8.14's 2^(8-4)).
    assert {"BCDE", "ACDF", "ABCG", "ABDH", "ABEF", "CDGH", "ABCDEFGH"} <= set(design.words)
    assert design.alias_groups == [
        *[(c,) for c in "ABCDEFGH"],  # every main effect clear of two-factor interactions
        ("AB", "CG", "DH", "EF"),
        ("AC", "BG", "DF", "EH"),
        ("AD", "BH", "CF", "EG"),
        ("AE", "BF", "CH", "DG"),
        ("AF", "BE", "CD", "GH"),
        ("AG", "BC", "DE", "FH"),
        ("AH", "BD", "CE", "FG"),
    ]
    # The columns: generated letters are products of their basic letters; 2FIs of a group coincide.
    np.testing.assert_array_equal(design.column("E"), design.column("BCD"))
    np.testing.assert_array_equal(design.column("AB"), design.column("EF"))


@pytest.mark.parametrize("k", sorted(STANDARD))
def test_the_standard_table_states_each_fractions_resolution(k):
    for arms, resolution, generators in STANDARD[k]:
        design = _design(k, generators)
        assert len(design.matrix) == arms and design.resolution == resolution, generators


@pytest.mark.parametrize(
    "k, resolution, expected",
    [
        (8, 4, IV_16),
        (8, 3, IV_16),  # the 8-arm III fractions lack the all-off arm
        (8, 5, ("H=ABCDEFG",)),  # the 64-arm V lacks it too: the 128-arm VIII is the smallest with both
        (7, 4, ("E=ABC", "F=BCD", "G=ACD")),
        (4, 3, ("D=ABC",)),
    ],
)
def test_a_resolution_picks_the_smallest_standard_fraction_with_both_endpoints(k, resolution, expected):
    assert standard_generators(k, resolution, "test") == expected


@pytest.mark.parametrize(
    "k, generators, message",
    [
        (8, ("E=BCD", "F=ACD", "G=ABC", "H=ABX"), "names 'X'; the 8 switches are ABCDEFGH"),
        (8, ("E=BCD", "F=ACD", "G=ABC", "J=ABD"), "names 'J'"),
        (5, ("D=AB", "E=ABC"), "even number of letters on its right"),
        (6, ("E=ABC", "F=ABC"), "alias main effects E and F"),
        (5, ("E=B",), "aliases main effects E and B"),
        (5, ("E=ABC", "D=ABE"), "uses generated letter E"),
        (5, ("E=ABC", "E=ABD"), "generated twice"),
        (5, ("E ABC",), "expected LETTER=LETTERS"),
    ],
)
def test_bad_generators_are_refused(k, generators, message):
    with pytest.raises(ConfigError, match=message):
        check_design(_design(k, generators), "test")


def test_unreachable_resolutions_are_refused():
    with pytest.raises(ConfigError, match="lack the all-off arm"):
        standard_generators(5, 4, "test")
    with pytest.raises(ConfigError, match="no fraction of resolution 9 or more"):
        standard_generators(8, 9, "test")
    with pytest.raises(ConfigError, match="below III"):
        standard_generators(8, 2, "test")
    with pytest.raises(ConfigError, match=r"give resolution 4 \(I=ABCG\), below the resolution 5"):
        check_design(_design(8, IV_16), "test", resolution=5)


def test_the_shipped_plan_runs_16_arms_with_the_endpoints_as_base_and_published(tmp_path):
    plan = load_plan(PLAN)
    assert (plan.design, plan.resolution, plan.envs, plan.seeds) == (
        "fractional",
        4,
        ("minatar_breakout",),
        "300-302",
    )
    section = plan_analysis(plan)  # frozen before the run's first job (repro/preregister.py)
    assert section.seeds == (300, 301, 302) and section.correction == "holm" and len(section.endpoints) == 9
    assert {e.switch for e in section.endpoints if e.kind == "effect"} == set(deviation_groups(plan)[2])
    arms = ablation_arms(plan)
    assert len(arms) == 16 and arms[0].name == BASE and arms[-1].name == PUBLISHED
    assert arms[0].deviation is None and arms[-1].deviation is None and arms[-1].setting == PUBLISHED
    assert arms[1].name == f"{BASE}_on_afgh"  # A (swapped exponents) with F, G, H, their generators' product
    jobs = expand(plan, "300-301", "smoke", tmp_path)
    # Seed by seed over the whole design: a study stopped after a seed has a whole replicate.
    assert [(j.seed, j.arm) for j in jobs] == [(s, a.name) for s in (300, 301) for a in arms]
    by_arm = {j.arm: j for j in jobs if j.seed == 300}
    base, published = by_arm[BASE].config, by_arm[PUBLISHED].config

    def flat(config):
        return {
            f"{s}.{k}": v
            for s in ("algo", "env", "sampler")
            for k, v in dataclasses.asdict(config.algo_config if s == "algo" else getattr(config, s)).items()
        }

    # An arm's keys are those of its switches, at the published values; the rest stay the base's.
    for arm in arms[1:-1]:
        changed = {k for k, v in flat(by_arm[arm.name].config).items() if flat(base)[k] != v}
        assert changed <= set(arm.deviation[2]) and changed, arm.name
        assert all(flat(by_arm[arm.name].config)[k] == flat(published)[k] for k in arm.deviation[2])
    record = plan_record(plan, jobs, (300, 301))["plans"][0]["ablation"]
    assert (record["base"], record["ablate"]) == (BASE, PUBLISHED)
    design = record["design"]
    assert design["generators"] == list(IV_16) and design["switches"][5]["name"] == "nstep_done_bug"
    assert design["arms"][BASE] == [-1] * 8 and design["arms"][PUBLISHED] == [1] * 8


def test_show_prints_the_design_matrix_and_aliases(capsys):
    assert main(["show", PLAN]) == 0
    out = capsys.readouterr().out
    assert (
        "design:   a 2^(8-4) fraction, resolution IV, generators E=BCD, F=ACD, G=ABC, H=ABD: 16 arms" in out
    )
    assert "  F  nstep_done_bug: algo.nstep_done_bug=true" in out
    assert f"  {BASE}_on_afgh  + - - - - + + +" in out
    assert "  AB = CG = DH = EF" in out and "main effects A, B, C, D, E, F, G, H: each clear" in out


def _plan(tmp_path: Path, design: str, analysis: str = "") -> Path:
    path = tmp_path / "designed.toml"
    path.write_text(
        textwrap.dedent(f"""
        [plan]
        title = "t"
        arms = ["{BASE}"]
        ablate = "{PUBLISHED}"
        envs = ["minatar_breakout"]
        envs_source = "test"
        """)
        + design
        + analysis
    )
    return path


def test_a_full_factorial_and_an_analysis_table_pass(tmp_path):
    analysis = '\n[analysis]\nalpha = 0.05\nhypotheses = [{switch = "nstep_done_bug", direction = "less"}]\n'
    plan = load_plan(str(_plan(tmp_path, 'design = "factorial"\n', analysis)))
    assert plan.analysis == {"alpha": 0.05, "hypotheses": [{"switch": "nstep_done_bug", "direction": "less"}]}
    arms = ablation_arms(plan)
    assert len(arms) == 256 and len({a.name for a in arms}) == 256


@pytest.mark.parametrize(
    "design, message",
    [
        ('design = "fractional"\nresolution = 9\n', "'resolution': no fraction of resolution 9"),
        (
            'design = "fractional"\ngenerators = ["E=BCD", "F=ACD", "G=ABC", "H=ABQ"]\n',
            "'generators': generator",
        ),
        (
            'design = "fractional"\ngenerators = ["E=BCD", "F=ACD", "G=ABC", "H=BCD"]\n',
            "alias main effects E and H",
        ),
        ('design = "fractional"\n', "a fraction needs resolution = N or generators"),
        ('design = "factorial"\nresolution = 4\n', "'resolution': the full factorial has none"),
        ('design = "screening"\n', "'design': 'screening'"),
        ("resolution = 4\n", "'resolution': needs design"),
    ],
)
def test_bad_designs_are_one_line_exit_2(tmp_path, capsys, design, message):
    path = _plan(tmp_path, design)
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and message in err[0]


def test_a_design_without_ablate_is_refused(tmp_path):
    path = tmp_path / "plain.toml"
    path.write_text(
        f'[plan]\ntitle = "t"\narms = ["{BASE}"]\nenvs = ["minatar_breakout"]\nenvs_source = "t"\n'
    )
    path.write_text(path.read_text() + 'design = "factorial"\n')
    with pytest.raises(ConfigError, match=r"'design': a design needs ablate = SETTING"):
        load_plan(str(path))


def test_run_refuses_a_bad_design_before_writing_anything(tmp_path):
    path = _plan(tmp_path, 'design = "fractional"\ngenerators = ["E=AB", "F=ACD", "G=ABC", "H=ABD"]\n')
    line = refused_run_line(path, tmp_path / "runs")
    assert str(path) in line and "'E=AB' has an even number of letters" in line


def test_the_dry_run_plans_seeds_per_arm_for_a_main_effect_from_a_pilot(tmp_path):
    pilot = REPO / "docs/results/r2d1_minatar_ablation.csv"

    def dry(*extra: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "repro", "run", PLAN, "--profile", "smoke", "--dry-run", "--no-estimate",
             "--root", str(tmp_path / "runs"), "--pilot", str(pilot), "--detect", "6", *extra],
            cwd=REPO, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    # the frozen family: Holm over the plan's nine endpoints, two-sided (four effects are)
    family = frozen_family(load_plan(PLAN).analysis, PLAN)
    assert (family.correction, family.endpoints, family.sides) == ("holm", 9, "two")
    found = plan_design_seeds(pilot, ["minatar_breakout"], 16, 0.06, family=family)
    planned = dry()
    assert f"each arm needs {found.seeds} seeds per game" in planned
    assert "at the family level (two-sided t test at holm's first step over the 9 frozen endpoints" in planned
    assert f"seeds: 300-{299 + found.seeds}" in planned  # from the plan's first seed
    assert planned.count("/minatar_breakout/seed300 ") == 16
    given = dry("--seeds", "300-302")
    assert f"3 seeds per arm have {found.power_with(3):.0%} power at 6 points" in given
    assert f"is {found.detectable_with(3) * 100:.3g} points" in given
    alone = plan_design_seeds(pilot, ["minatar_breakout"], 16, 0.06)  # one two-sided test at 0.05
    assert found.detectable_with(3) > alone.detectable_with(3)
    assert not (tmp_path / "runs").exists()
