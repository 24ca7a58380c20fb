# Every target installs what it needs into .venv on first use (the stamp below),
# so `make test` alone works on a fresh machine. The editable install also puts the console command
# .venv/bin/rlrepro on the venv's PATH (pyproject's [project.scripts]).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
STAMP_BENCH := $(VENV)/.installed-bench
STAMP_RAY := $(VENV)/.installed-ray

SEEDS ?= 3
# SUITE picks the R2D1 plan: cpu (repro/configs/plans/r2d1_breakout_cpu.toml, the default: the confirmed
# Breakout finding on fresh seeds, under an hour on 2 cores), atari (r2d1.toml, the published scale) or
# minatar (r2d1_minatar_published_vs_corrected.toml, the five MinAtar games). An Atari profile given
# without a SUITE (PROFILE=smoke, mini or paper) asks for the Atari plan, as it did before cpu existed.
ifndef SUITE
SUITE := $(if $(filter paper mini smoke,$(PROFILE)),atari,cpu)
endif
SUITES := cpu atari minatar
PROFILE ?= $(if $(filter atari,$(SUITE)),paper,minatar_cpu)
GAMES ?=
BACKEND ?= local
# BACKEND=ray: ADDRESS of the cluster's head (host:port; empty starts a local Ray instance), and
# SHARED_FS=1 when runs/ is at this path on every node (docs/ray_cluster.md). Both backends:
# CPUS_PER_JOB (also the job's torch threads) and GPUS_PER_JOB (0.25 puts four jobs on a GPU).
ADDRESS ?=
SHARED_FS ?=
CPUS_PER_JOB ?=
GPUS_PER_JOB ?=
JOBS ?=
EXP ?=
# PACK=K trains up to K seeds of an arm and game in one process (repro/README.md, Packed runs);
# PACK=auto chooses K from the slots. Empty: one process per run.
PACK ?=

.PHONY: help venv test test-stress test-gpu lint format bench-env bench-minatar-dqn bench-r2d1-minatar bench-packed bench-learn-dqn bench-dqn-speed bench-learn-pg bench-pg-speed bench-sb3-ppo-atari bench-sampler bench-replay \
	reproduce-r2d1 repro-dry-run check-suite report regress regress-update clean

help:
	@echo "make test | test-stress | test-gpu | lint | bench-env | bench-minatar-dqn | bench-r2d1-minatar | bench-packed | bench-learn-dqn | bench-learn-pg | bench-sampler"
	@echo "make reproduce-r2d1 [SEEDS=3]   (SUITE=cpu: the R2D1 finding on MinAtar Breakout, under an hour on 2 cores)"
	@echo "make reproduce-r2d1 SUITE=atari SEEDS=3 PROFILE=smoke|mini|paper [GAMES=pong,qbert] [BACKEND=local|ray] [JOBS=n] [PACK=K|auto]"
	@echo "    [ADDRESS=head:6379] [SHARED_FS=1] [CPUS_PER_JOB=n] [GPUS_PER_JOB=0.25]   (docs/ray_cluster.md)"
	@echo "make reproduce-r2d1 SUITE=minatar SEEDS=5 [PROFILE=minatar_cpu|smoke]"
	@echo "make report EXP=<experiment> | regress | regress-update"

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt -e '.[dev]'
	touch $@

$(STAMP_BENCH): $(STAMP)
	$(PIP) install -q -c constraints.txt -e '.[dev,bench]'
	touch $@

# The suite also runs the Box2D settings (LunarLander), so it installs the box2d extra.
$(STAMP_RAY): $(STAMP)
	$(PIP) install -q -c constraints.txt -e '.[dev,ray,box2d]'
	touch $@

venv: $(STAMP)

# The suite includes the Ray backend test against a local Ray instance, so it installs the ray extra.
# The stress tier (many trials of one race; minutes of both cores) runs apart: make test-stress, in CI.
test: $(STAMP_RAY)
	$(PY) -m pytest -q -n 2 --dist loadgroup -m "not stress"

test-stress: $(STAMP_RAY)
	$(PY) -m pytest -q -n 2 --dist loadgroup -m stress

# The GPU tier (tests/test_gpu.py): every algorithm, the parallel samplers, the asynchronous runner
# and a packed run with the agent on RLREPRO_TEST_DEVICE (default cuda); skipped without that device.
test-gpu: $(STAMP)
	$(PY) -m pytest -q -rs tests/test_gpu.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Reproduction layer (repro/README.md). R2D1_EXP is the experiment directory under runs/.
R2D1_PLAN = $(if $(filter cpu,$(SUITE)),r2d1_breakout_cpu,$(if $(filter minatar,$(SUITE)),r2d1_minatar_published_vs_corrected,r2d1))
# The minatar experiment keeps the name it had before the plan was renamed (runs/r2d1_minatar-minatar_cpu
# in docs/results/r2d1_minatar.md), so that a rerun resumes it.
R2D1_EXP = $(if $(filter cpu,$(SUITE)),r2d1_breakout_cpu,$(if $(filter minatar,$(SUITE)),r2d1_minatar,r2d1))-$(PROFILE)
REPRO_RUN_ARGS = $(R2D1_PLAN) --seeds "$(SEEDS)" --profile "$(PROFILE)" --games "$(GAMES)" --jobs "$(JOBS)" \
	--backend "$(BACKEND)" $(if $(ADDRESS),--address "$(ADDRESS)") $(if $(SHARED_FS),--shared-fs) \
	--cpus-per-job "$(CPUS_PER_JOB)" --gpus-per-job "$(GPUS_PER_JOB)" $(if $(PACK),--pack "$(PACK)")

check-suite:
	@test -n "$(filter $(SUITES),$(SUITE))" || { echo "error: SUITE=$(SUITE) is not one of: $(SUITES)" >&2; exit 2; }

# Prints the estimated duration (repro/probe.py), runs the plan (skipping finished runs, resuming
# interrupted ones), prints each arm's final score and the verdict (analysis/ending.py) and builds the
# report. The default suite says what it runs and how to ask for the Atari study.
CPU_SUITE_LINE = SUITE=cpu: rlpyt's R2D1 as published vs corrected on MinAtar Breakout, fresh seeds, read beside \
	the confirmatory run (docs/results/r2d1_minatar_factorial.md); the Atari study: make reproduce-r2d1 \
	SUITE=atari PROFILE=smoke|mini|paper
reproduce-r2d1: check-suite $(if $(filter ray,$(BACKEND)),$(STAMP_RAY),$(STAMP))
	@$(if $(filter cpu,$(SUITE)),echo "$(CPU_SUITE_LINE)",true)
	$(PY) -m repro run $(REPRO_RUN_ARGS) --exp $(R2D1_EXP) --report

# Self-contained HTML report of one experiment (analysis + reports); prints the page's path.
# EXP is the experiment's directory or its name under runs/.
report: $(STAMP)
	@test -n "$(EXP)" || { echo "make report: set EXP=<experiment> (its name under runs/, or its path)" >&2; exit 2; }
	$(PY) -m reports build "$(EXP)"

# Learning-curve regression suite (analysis/regress.py; tasks in analysis/regress/suite.toml): every
# task's plan runs through the reproduction layer, then the check compares its normalised AUCs with
# the committed references (analysis/data/regress_reference.csv) and fails on a regression.
# Seeds are 0..N-1 in both: the reference uses more of them. No estimated duration: the suite's
# runs are fixed and CPU-sized, and a throughput probe would only lengthen them.
REGRESS_SEEDS ?= 3
REGRESS_REFERENCE_SEEDS ?= 5
REGRESS_RUN = $(PY) -m repro run "$$plan" --profile analysis/regress/profile.toml --no-progress --no-estimate \
	--jobs "$(JOBS)"

regress: $(STAMP)
	rm -rf runs/regress
	for plan in $$($(PY) -m analysis.regress plans); do \
		$(REGRESS_RUN) --seeds $(REGRESS_SEEDS) --exp regress || exit 1; done
	$(PY) -m analysis.regress check --runs runs/regress

# Regenerates the references from the current code; each reference run records its commit.
regress-update: $(STAMP)
	rm -rf runs/regress-reference
	for plan in $$($(PY) -m analysis.regress plans); do \
		$(REGRESS_RUN) --seeds $(REGRESS_REFERENCE_SEEDS) --exp regress-reference || exit 1; done
	$(PY) -m analysis.regress update --runs runs/regress-reference

# The plan, its totals and an estimated duration from a short throughput probe; runs nothing.
repro-dry-run: check-suite $(STAMP)
	$(PY) -m repro run $(REPRO_RUN_ARGS) --exp $(R2D1_EXP) --dry-run

# ENV_ARGS="--sections minatar" for the MinAtar rows only (in-process envs against worker processes).
bench-env: $(STAMP)
	$(PY) -m bench.bench_env --out runs/bench/env.csv $(ENV_ARGS)

# MinAtar DQN (setting dqn_minatar) against MinAtar's examples/dqn.py run unmodified from a scratch copy
# (/tmp/minatar_ref/dqn.py, see bench/bench_minatar_dqn.py; without it the reference is left out) and
# the same update as plain PyTorch (eager, compiled optimizer step, 5 members packed): what any
# implementation could reach here. MINATAR_DQN_ARGS="--quick" for a smoke run; "--after 20000
# --impls ours,reference" times the steps 20,000 updates in, where a job spends its time.
bench-minatar-dqn: $(STAMP)
	$(PY) -m bench.bench_minatar_dqn --out runs/bench/minatar_dqn.csv $(MINATAR_DQN_ARGS)

# R2D1 on MinAtar (setting r2d1_minatar_corrected): the job loop against a plain-PyTorch floor of the
# same work, interleaved, per CPU second; the results land in docs/results/. R2D1_MINATAR_ARGS="--quick"
# for a smoke run (written to runs/bench/ then: R2D1_MINATAR_OUT=runs/bench/r2d1_minatar.csv).
R2D1_MINATAR_OUT ?= docs/results/r2d1_minatar_bench.csv
bench-r2d1-minatar: $(STAMP)
	$(PY) -m bench.bench_r2d1_minatar --out $(R2D1_MINATAR_OUT) $(R2D1_MINATAR_ARGS)

# Packed runs: 5 seeds in one packed process against 5 single-seed processes on 2 slots,
# MinAtar DQN, the MinAtar R2D1 arm and SAC on Pendulum; PACKED_ARGS="--settings dqn_minatar --repeats 1 --scale 0.3" is short.
bench-packed: $(STAMP)
	$(PY) -m bench.bench_packed --out runs/bench/packed.csv $(PACKED_ARGS)

# SAMPLER_ARGS="--quick" for a short run; "--sections trivial,nature_cnn,runners" picks sections.
bench-sampler: $(STAMP)
	$(PY) -m bench.bench_sampler --out runs/bench/sampler.csv $(SAMPLER_ARGS)

# DQN-family learning checks: 5 seeds per arm; LEARN_DQN_ARGS="--arms dqn --seeds 2 --budget-scale 0.5"
bench-learn-dqn: $(STAMP)
	$(PY) -m bench.bench_learn_dqn --out runs/bench/learn_dqn.csv $(LEARN_DQN_ARGS)

# DQN on Pong against Stable-Baselines3 (same settings, same machine, all cores, median of 3)
bench-dqn-speed: $(STAMP_BENCH)
	$(PY) -m bench.bench_dqn_speed --out runs/bench/dqn_speed.csv $(DQN_SPEED_ARGS)

# Prioritized replay sample + update vs cpprb at 1M, and frame replay bytes/step at 1M (allocates ~7 GB).
# REPLAY_ARGS="--frame-capacity 100000" where memory is short.
bench-replay: $(STAMP_BENCH)
	$(PY) -m bench.bench_replay --out runs/bench/replay.csv $(REPLAY_ARGS)

# Policy-gradient learning checks: 5 seeds per arm;
# LEARN_PG_ARGS="--arms ppo_cartpole,sac_pendulum --seeds 2 --budget-scale 0.5 --jobs 2"
bench-learn-pg: $(STAMP)
	$(PY) -m bench.bench_learn_pg --out runs/bench/learn_pg.csv $(LEARN_PG_ARGS)

# PPO on Pong and SAC on HalfCheetah-v5 against Stable-Baselines3 (same envs and threads: all cores, median of 3)
bench-pg-speed: $(STAMP_BENCH)
	$(PY) -m bench.bench_pg_speed --out runs/bench/pg_speed.csv $(PG_SPEED_ARGS)

# Stable-Baselines3's PPO with rl-baselines3-zoo's Atari hyperparameters, recorded as arm sb3_ppo_atari_zoo
# of runs/<exp>/ (issue 53); rerun to resume. SB3_PPO_ARGS="--exp atari_ppo --game breakout --seed 1
# [--steps N] [--dry-run]".
SB3_PPO_ARGS ?= --exp atari_ppo --game pong --seed 0
bench-sb3-ppo-atari: $(STAMP_BENCH)
	$(PY) -m bench.sb3_ppo_atari $(SB3_PPO_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
