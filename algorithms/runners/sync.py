"""The synchronous runner: sample a batch, optimize on it, repeat; log, evaluate and checkpoint on
env-step boundaries; resume from the last checkpoint.

One iteration::

    agent.set_mode("sample", env_steps); samples, traj_infos = sampler.sample(itr)  # "sampling" time
    agent.set_mode("train"); opt_info = algo.optimize(env_steps, samples)           # "optimizing" time
    counters.add_env_steps(T * B, episodes=len(traj_infos))
    counters.add_updates(opt_info.updates, opt_info.samples_trained, opt_info.samples_replayed)

(a schedule read in ``optimize`` sees the env steps before this batch: ``record``).

Boundaries are in env steps (``RunnerConfig``): a progress row when ``log_interval_steps`` is
crossed (counters, return statistics of the episodes finished since the last row, and the mean of
each diagnostic over the ``optimize`` calls since the last row), evaluation episodes to
``eval.csv`` when ``eval_interval_steps`` is crossed, and a checkpoint at
``checkpoint_every_steps``. At the end of the budget: a last row and an evaluation if the last ones
were not at the final step, and a final checkpoint.

Checkpoints (``checkpoints/latest.pt``, plain tensors and numbers, ``torch.load(weights_only=True)``)
hold the agent's parameters, ``algo.state_dict()`` (optimizer, target networks, schedules),
the counters, the global RNG states and the runner's own boundaries and pending log window, and,
as ``RunnerConfig.checkpoint_replay`` asks (by default unless the replay's arrays exceed 1 GiB),
``"replay"``: the replay's contents, priorities, cursors and generators with the algorithm's state
tied to them (``algo.replay_state_dict()``; R2D1's TD errors of unfinished sequences), and
``"sampler"``: the envs (pickled objects in a uint8 tensor, read back by a restricted unpickler:
``algorithms.resume``), the agent's next inputs and recurrent state, the running episodes' returns
and lengths, and the exploration streams' positions (``sampler.state_dict()``). With both, a run
resumed from a checkpoint continues update for update as the uninterrupted one
(tests/test_resume_exact.py). Without the replay (``"never"``, too large, a checkpoint from before
this), a replay-based algorithm restarts with an empty replay and refills it before training again
(the counters keep counting from the checkpoint); without the sampler's state (also where envs
cannot save theirs: ALE; and under the async and DDP runners), a resumed run starts fresh episodes
from envs seeded by (run seed, resume step), see ``algorithms.samplers.seeding``; either is said
once on stderr. On resume, progress and eval rows logged after the checkpoint are dropped
(``RunDir.truncate_progress_after``) and logged again as the run passes those steps, so the table
has every boundary exactly once.

Time not spent sampling, optimizing or evaluating (progress rows, checkpoints) counts as
"logging"; throughput excludes evaluation and logging (``Counters``).
"""

from __future__ import annotations

import pickle
import sys
from typing import TYPE_CHECKING, Any

import torch

from algorithms import registry, resume
from algorithms.arrays import BatchSpec
from algorithms.counters import Counters
from algorithms.learners.common import OptInfo
from algorithms.logger import RunLogger
from algorithms.resume import unpickle_tree
from algorithms.rundir import RunDir, rng_state, set_rng_state
from algorithms.runners.common import LogWindow, build_run_agent, next_boundary, rank_seed, seed_everything
from algorithms.samplers import modes as samplers
from algorithms.samplers.base import BaseSampler

if TYPE_CHECKING:
    from algorithms.agents.base import Agent
    from algorithms.run_config import TrainConfig

CHECKPOINT_FORMAT = 1


class SyncRunner:
    """Runs one training job in this process (see the module docstring).

    Build with ``SyncRunner.build(config, run, checkpoint)``, then ``run()``. ``rank`` / ``world_size``
    are 0 / 1 here; the DDP runner reuses this class with one instance per rank, where only rank 0
    writes the run directory.
    """

    def __init__(
        self,
        config: TrainConfig,
        run: RunDir | None,
        agent: Agent,
        algo: Any,
        sampler: BaseSampler,
        counters: Counters,
        checkpoint: dict[str, Any] | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.config = config
        self.run_dir = run
        self.agent = agent
        self.algo = algo
        self.sampler = sampler
        self.counters = counters
        self.rank = rank
        self.world_size = world_size
        runner = config.runner
        if checkpoint is None:
            self.window = LogWindow()
            self.next_log = runner.log_interval_steps
            self.next_eval = runner.eval_interval_steps or None
            self.next_checkpoint = runner.checkpoint_every_steps
            self.last_log_steps = -1
            self.last_eval_steps = -1
        else:
            state = checkpoint["runner"]
            self.window = LogWindow.from_state_dict(state["window"])
            self.next_log = state["next_log"]
            self.next_eval = state["next_eval"]
            self.next_checkpoint = state["next_checkpoint"]
            self.last_log_steps = state["last_log_steps"]
            self.last_eval_steps = state["last_eval_steps"]
        self.logger: RunLogger | None = None
        self.sampler_state: dict[str, Any] | None = None  # a checkpoint's, loaded once the envs exist
        self._said: set[str] = set()

    @classmethod
    def build(
        cls,
        config: TrainConfig,
        run: RunDir | None,
        checkpoint: dict[str, Any] | None,
        *,
        rank: int = 0,
        world_size: int = 1,
        device: str | None = None,
    ) -> SyncRunner:
        """Seed, build agent, algorithm and sampler, and restore ``checkpoint`` (None: a fresh run).

        ``rank`` / ``world_size`` / ``device`` are for the DDP runner: every rank builds its agent and
        algorithm from the run seed (identical replicas of everything trained), then rank ``r > 0``
        reseeds its RNGs with ``rank_seed(seed, r)`` for its own exploration and minibatches;
        ``device`` overrides ``runner.device``.
        """
        seed_everything(config.runner.seed)
        agent = build_run_agent(config, torch.device(device or config.runner.device))
        cls.prepare_agent(agent)
        batch_spec = BatchSpec(config.sampler.batch_T, config.sampler.batch_B)
        algo = registry.algo_module(config.algo).Algo(
            config.algo_config, agent, config.env.env_frameskip, batch_spec
        )
        if rank > 0:
            seed_everything(rank_seed(config.runner.seed, rank))
        sampler_state = None
        if checkpoint is None:
            counters = Counters(frameskip=config.env.env_frameskip)
        else:
            if checkpoint.get("format") != CHECKPOINT_FORMAT:
                found = checkpoint.get("format")
                raise ValueError(f"checkpoint format {found!r}, expected {CHECKPOINT_FORMAT}")
            try:
                agent.load_state_dict(checkpoint["agent"])
                algo.load_state_dict(checkpoint["algo"])
            except (KeyError, RuntimeError, ValueError) as error:
                # torch lists every missing and unexpected key over several lines; one line names
                # the file and the start of that list (e.g. a checkpoint of the separate TD3/SAC
                # critics that preceded ``QEnsemble``).
                where = run.checkpoint_path if run is not None else "checkpoint"
                detail = " ".join(str(error).split())
                detail = detail if len(detail) <= 240 else detail[:240] + "..."
                raise ValueError(
                    f"{where}: does not fit this run's {config.algo} agent or optimizer ({detail}); "
                    "it was written by another model layout: start the run afresh"
                ) from None
            counters = Counters.from_state_dict(checkpoint["counters"])
            sampler_state = cls.restore_run_state(config, run, checkpoint, algo, counters.env_steps)
            set_rng_state(cls.rng_of_rank(checkpoint, rank))
            if run is not None:
                steps, state = counters.env_steps, checkpoint["runner"]
                run.truncate_progress_after(
                    steps,
                    logged=state["last_log_steps"] == steps,
                    evaluated=state["last_eval_steps"] == steps,
                )
        start = counters.env_steps if sampler_state is None else int(sampler_state["start_env_steps"])
        sampler = cls.make_sampler(config, agent, start, rank, world_size)
        runner = cls(config, run, agent, algo, sampler, counters, checkpoint, rank, world_size)
        runner.sampler_state = sampler_state
        return runner

    # Whether this runner's checkpoints can hold the replay and the sampler's state (module docstring).
    saves_run_state = True

    @classmethod
    def restore_run_state(
        cls, config: TrainConfig, run: RunDir | None, checkpoint: dict[str, Any], algo: Any, env_steps: int
    ) -> dict[str, Any] | None:
        """Load the checkpoint's replay into ``algo`` and return its sampler state, its objects
        unpickled (None when it has none); say on stderr what the resume cannot continue exactly.
        Runs before the RNG states are restored: rebuilding the replay draws a selector seed."""
        missing = []
        if checkpoint.get("replay") is not None:
            algo.load_replay_state_dict(checkpoint["replay"])
        elif "replay" not in checkpoint and hasattr(algo, "replay_state_dict"):
            missing.append("the replay (it refills before training resumes)")
        sampler_state = checkpoint.get("sampler")
        if sampler_state is not None:
            try:
                sampler_state = unpickle_tree(sampler_state)
            except (pickle.UnpicklingError, EOFError, ValueError) as error:
                missing.append(f"the envs' state, which does not load ({error})")
                sampler_state = None
        else:
            missing.append("the envs' state (fresh episodes from seeds mixed with the resume step)")
        if missing and run is not None:
            print(
                f"{run.path}: resuming at {env_steps:,} env steps without {' or '.join(missing)} "
                f"(checkpoint_replay = {config.runner.checkpoint_replay!r}, runner {config.runner.kind!r}): "
                "the run will not continue as the uninterrupted one would have",
                file=sys.stderr,
                flush=True,
            )
        return sampler_state

    @classmethod
    def prepare_agent(cls, agent: Agent) -> None:
        """Hook run after the agent is built and before the algorithm is (DDP wraps the model here)."""

    @classmethod
    def rng_of_rank(cls, checkpoint: dict[str, Any], rank: int) -> dict[str, Any]:
        """The global RNG states rank ``rank`` resumes with."""
        return checkpoint["rng"]

    @classmethod
    def make_sampler(
        cls, config: TrainConfig, agent: Agent, start_env_steps: int, rank: int, world_size: int
    ) -> BaseSampler:
        """The sampler of ``config.sampler.mode``; parallel modes build agent copies from a factory."""
        factory = registry.AgentFactory(
            config.algo, config.algo_config, agent.observation_space, agent.action_space
        )
        return samplers.make_sampler(
            config.sampler.mode,
            config.env,
            agent,
            config.sampler,
            config.runner.seed,
            start_env_steps,
            agent_factory=factory,
        )

    # --- the loop ---------------------------------------------------------------------------------
    def run(self) -> Counters:
        self.start_sampler()
        self.start_logger()
        try:
            while self.counters.env_steps < self.config.runner.n_steps:
                self.iteration(self.counters.sampler_itrs)
                self.cross_boundaries()
            self.finish()
        finally:
            self.sampler.shutdown()
            if self.logger is not None:
                self.logger.close()
        return self.counters

    def start_sampler(self) -> None:
        """Build the sampler's envs and reset them, or continue them from the checkpoint's state."""
        self.sampler.initialize()
        if self.sampler_state is not None:
            self.sampler.load_state_dict(self.sampler_state)
            self.sampler_state = None

    def start_logger(self, description: str = "") -> None:
        """The console bar and progress-table writer (where this process writes the run directory)."""
        if self.run_dir is None:
            return
        runner = self.config.runner
        self.logger = RunLogger(
            self.run_dir,
            runner.n_steps,
            initial_steps=self.counters.env_steps,
            tensorboard=runner.tensorboard,
            console=sys.stderr.isatty(),
            description=description or f"{self.config.algo} {self.config.env.id}",
            diagnostic_keys=getattr(self.algo, "diagnostic_keys", None),
            replays=hasattr(self.config.algo_config, "replay_size_steps"),  # registry.replay_bytes' rule
        )

    def boundary_due(self) -> bool:
        """Whether ``cross_boundaries`` has anything to do at the current env step."""
        steps = self.counters.env_steps
        return (
            steps >= self.next_log
            or steps >= self.next_checkpoint
            or (self.next_eval is not None and steps >= self.next_eval)
        )

    def cross_boundaries(self) -> None:
        """Log, evaluate and checkpoint for every interval the env-step count has just crossed."""
        runner, steps = self.config.runner, self.counters.env_steps
        if steps >= self.next_log:
            self.log_row()
            self.next_log = next_boundary(steps, runner.log_interval_steps)
        if self.next_eval is not None and steps >= self.next_eval:
            self.evaluate()
            self.next_eval = next_boundary(steps, runner.eval_interval_steps)
        if steps >= self.next_checkpoint:
            self.next_checkpoint = next_boundary(steps, runner.checkpoint_every_steps)
            self.save_checkpoint()

    def finish(self) -> None:
        """At the end of the budget: a last row and evaluation unless done at this step, a last checkpoint."""
        steps = self.counters.env_steps
        if self.last_log_steps != steps:
            self.log_row()
        if self.last_eval_steps != steps:
            self.evaluate()
        self.save_checkpoint()

    def iteration(self, itr: int) -> None:
        """Sample one batch and optimize on it, counting steps, updates and time."""
        counters = self.counters
        with counters.timer("sampling"):
            samples, traj_infos = self.sample_batch(itr)
        with counters.timer("optimizing"):
            self.agent.set_mode("train")
            opt_info = self.algo.optimize(counters.env_steps, samples)
        self.record(traj_infos, opt_info)

    def sample_batch(self, itr: int) -> tuple[Any, list[dict[str, Any]]]:
        """The sampler's next batch and the episodes that ended in it (the agent in ``sample`` mode)."""
        self.agent.set_mode("sample", self.counters.env_steps)
        return self.sampler.sample(itr)

    def record(self, traj_infos: list[dict[str, Any]], opt_info: OptInfo) -> None:
        """Count a finished iteration's env steps, episodes and updates, and add them to the log window."""
        counters = self.counters
        traj_infos, opt_info = self.gather(traj_infos, opt_info)
        counters.add_env_steps(self.sampler.batch_spec.size * self.world_size, episodes=len(traj_infos))
        counters.add_updates(opt_info.updates, opt_info.samples_trained, opt_info.samples_replayed)
        self.window.add(traj_infos, opt_info)
        if self.logger is not None:
            self.logger.advance(counters.env_steps)

    def gather(
        self, traj_infos: list[dict[str, Any]], opt_info: OptInfo
    ) -> tuple[list[dict[str, Any]], OptInfo]:
        """This iteration's episodes and optimizer work over the whole run (one process here)."""
        return traj_infos, opt_info

    # --- boundaries -------------------------------------------------------------------------------
    def log_row(self) -> None:
        if self.logger is not None:
            self.logger.log(self.counters, self.window.traj_infos, self.window.mean_diagnostics())
        self.window = LogWindow()
        self.last_log_steps = self.counters.env_steps

    def evaluate(self) -> None:
        n_episodes = self.config.sampler.eval_episodes
        self.last_eval_steps = self.counters.env_steps
        if n_episodes == 0 or self.run_dir is None:
            return
        counters = self.counters
        with counters.timer("evaluating"):
            episodes = self.sampler.evaluate(n_episodes, counters.env_steps)
        stamp = {
            "env_steps": counters.env_steps,
            "frames": counters.frames,
            "updates": counters.updates,
            "wall_time_s": counters.wall_time_s,
        }
        with counters.timer("logging"):
            self.run_dir.append_eval([{**stamp, **episode} for episode in episodes])
            if self.logger is not None:
                self.logger.log_eval(episodes, counters)

    def save_checkpoint(self) -> None:
        if self.run_dir is None:
            return
        with self.counters.timer("logging"):
            self.run_dir.save_checkpoint(self.state_dict())

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs (see the module docstring for what is left out)."""
        return {**self.core_state_dict(), **self.run_state_dict()}

    def run_state_dict(self) -> dict[str, Any]:
        """The replay and the sampler's state, as ``checkpoint_replay`` asks (module docstring);
        what is left out is said once on stderr."""
        setting, kind = self.config.runner.checkpoint_replay, self.config.runner.kind
        if setting == "never":
            return {}
        if not self.saves_run_state:
            self.say_once(
                f"checkpoints of runner kind {kind!r} hold neither the replay nor the envs' state: "
                "a resumed run will not continue as the uninterrupted one would have"
            )
            return {}
        out: dict[str, Any] = {}
        if hasattr(self.algo, "replay_state_dict"):
            replay = self.algo.replay_state_dict()
            size = resume.nbytes(replay)
            if setting == "auto" and size > resume.AUTO_REPLAY_LIMIT_BYTES:
                self.say_once(
                    f"checkpoint_replay 'auto': the replay's arrays take {size / 2**30:.1f} GiB, over "
                    f"{resume.AUTO_REPLAY_LIMIT_BYTES / 2**30:.0f} GiB, so checkpoints leave it out and a "
                    "resumed run refills it before training again (checkpoint_replay = 'always' saves it)"
                )
            else:
                out["replay"] = replay
        sampler = self.sampler.state_dict()
        if sampler is None:
            self.say_once(
                f"the envs' state ({self.config.env.id}, sampler mode {self.config.sampler.mode!r}) cannot "
                "be checkpointed: a resumed run starts fresh episodes, not as the uninterrupted one would"
            )
        else:
            out["sampler"] = sampler
        return out

    def say_once(self, message: str) -> None:
        """``message`` on stderr (the job's log.txt), once per run of this process."""
        if message in self._said or self.run_dir is None:
            return
        self._said.add(message)
        print(f"{self.run_dir.path}: {message}", file=sys.stderr, flush=True)

    def core_state_dict(self) -> dict[str, Any]:
        """The checkpoint without the replay and the sampler's state."""
        return {
            "format": CHECKPOINT_FORMAT,
            "agent": self.agent.state_dict(),
            "algo": self.algo.state_dict(),
            "counters": self.counters.state_dict(),
            "rng": rng_state(),
            "runner": {
                "window": self.window.state_dict(),
                "next_log": self.next_log,
                "next_eval": self.next_eval,
                "next_checkpoint": self.next_checkpoint,
                "last_log_steps": self.last_log_steps,
                "last_eval_steps": self.last_eval_steps,
            },
        }


def run(config: TrainConfig, run_dir: RunDir, resume: bool) -> Counters:
    """Train ``config`` synchronously in this process, writing ``run_dir``."""
    checkpoint = run_dir.load_checkpoint() if resume else None
    return SyncRunner.build(config, run_dir, checkpoint).run()
