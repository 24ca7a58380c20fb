"""The per-step logic every sampling mode shares (Contract 3), so that every mode produces
identical samples for identical seeds.

``EnvStepper`` drives B envs with an agent in one process (serial sampler, evaluation, parallel
CPU workers, and the parallel GPU sampler over its remote envs); the alternating sampler calls its
pieces, ``act``, ``advance`` and ``finish``, around each group's env step. ``advance`` computes
what the next ``act`` needs: ``next_inputs`` (the agent inputs of step t+1, zeros where an episode
ended) and ``agent.reset_state(next_state, done)`` (recurrent state); ``finish``, called once the
envs take the next step, builds ``step_record`` (the record of step t) and ``finished_episodes``
(the trajectory infos).

Per-step cost: between ``receive_step`` and the next ``send_step`` the env threads (or workers)
wait for this process, so that stretch holds only what the next action needs; everything else runs
while the envs step. The pieces read fields as ``x["name"]`` (a dict lookup) rather than
``x.name`` (``NamedArrays.__getattr__``, the slower fallback after a failed attribute lookup, and
slower still right after a wait; timings: docs/results/core_measurements.md, samplers/stepper.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from algorithms.arrays import BatchSpec, NamedArrays, buffer_from_example, to_numpy
from algorithms.resume import tree_from_state, tree_state

if TYPE_CHECKING:
    from algorithms.agents.base import Agent
    from algorithms.envs.base import VecEnv


def episode_done(record: NamedArrays) -> np.ndarray:
    """[B] bool: the learner's episode ended at this step (``terminated | truncated``)."""
    return np.logical_or(record["terminated"], record["truncated"])


def step_record(
    inputs: NamedArrays, action: np.ndarray | torch.Tensor, agent_info: NamedArrays, env_step: NamedArrays
) -> NamedArrays:
    """The [B] record of one step in Contract 3's field order.

    ``inputs`` are the agent inputs the action was chosen from (``observation``, ``prev_action``,
    ``prev_reward``); ``env_step`` is the env's Contract 1 output for ``action``. Leaves may alias
    the env's own arrays: copy the record into a buffer before the env steps again.
    """
    return NamedArrays(
        observation=inputs["observation"],
        action=action,
        reward=env_step["reward"],
        terminated=env_step["terminated"],
        truncated=env_step["truncated"],
        final_observation=env_step["final_observation"],
        prev_action=inputs["prev_action"],
        prev_reward=inputs["prev_reward"],
        agent_info=agent_info,
        env_info=env_step["env_info"],
    )


def next_inputs(
    action: torch.Tensor | np.ndarray,
    env_step: NamedArrays,
    done: np.ndarray | None = None,
    copy_observation: bool = True,
) -> NamedArrays:
    """Agent inputs for the next step, numpy arrays [B, ...]: the env's next observation, and this
    step's ``action`` and reward as ``prev_action`` / ``prev_reward``, zeroed where the episode ended
    (the next observation is then already the first of a new episode, Contract 1's same-step
    autoreset). ``env_step`` is the env's Contract 1 output for ``action``; ``done`` is
    ``episode_done(env_step)`` if the caller has it already; ``copy_observation=False`` keeps the
    env's own array, for envs whose outputs are never modified later (``VecEnv.fresh_outputs``).
    numpy rather than torch: the step record and the batch take them as they are, and the agent
    gets ``torch.from_numpy`` views (``EnvStepper.act``)."""
    # In numpy: small torch ops cost more than the work itself here, on every step
    # (docs/results/core_measurements.md, samplers/stepper.py).
    ended = episode_done(env_step) if done is None else done
    prev_action = to_numpy(action).copy()
    reward = np.array(env_step["reward"], copy=True)
    if np.count_nonzero(ended):
        prev_action[ended] = 0
        reward[ended] = 0
    observation = env_step["observation"]
    if copy_observation:
        observation = np.array(observation, copy=True)
    return NamedArrays(observation=observation, prev_action=prev_action, prev_reward=reward)


def finished_episodes(record: NamedArrays, env_ranks: np.ndarray) -> list[dict[str, Any]]:
    """Trajectory infos of the games that ended at this step, in env-rank order.

    A game ended where the env reports a positive ``episode_length`` (Contract 1: valid where the
    game reset, 0 elsewhere); with episodic life, a life loss sets ``terminated`` but no length.
    """
    env_info = record["env_info"]
    lengths = np.asarray(env_info["episode_length"])
    if not np.count_nonzero(lengths):
        return []
    returns = np.asarray(env_info["episode_return"])
    return [
        {"return": float(returns[i]), "length": int(lengths[i]), "env_rank": int(env_ranks[i])}
        for i in np.flatnonzero(lengths > 0)
    ]


def initial_inputs(observation: np.ndarray, prev_action_example: torch.Tensor) -> NamedArrays:
    """Agent inputs right after ``env.reset()`` (numpy, as ``next_inputs``): zero previous action
    and reward."""
    B = observation.shape[0]
    return NamedArrays(
        observation=np.array(observation, copy=True),
        prev_action=np.zeros((B, *prev_action_example.shape), dtype=to_numpy(prev_action_example).dtype),
        prev_reward=np.zeros(B, dtype=np.float32),
    )


def record_example(observation_space: Any, action_space: Any, agent: Agent) -> NamedArrays:
    """One env's step record (no leading dims) for allocating [T, B] buffers before any env steps.

    The action and ``agent_info`` come from one ``agent.step`` on zero inputs, drawing from the
    torch and numpy global RNGs under saved and restored states instead of the agent's per-env
    streams, so allocating never changes what is sampled. ``env_info`` follows Contract 1's field
    list.
    """
    obs = np.zeros(observation_space.shape, dtype=observation_space.dtype)
    act = np.zeros(action_space.shape, dtype=action_space.dtype)
    device = agent.device
    numpy_state = np.random.get_state()
    streams, agent.streams = agent.streams, None
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            action, agent_info, _ = agent.step(
                torch.from_numpy(obs[None]).to(device),
                torch.from_numpy(act[None]).to(device),
                torch.zeros(1, device=device),
                agent.initial_state(1),
            )
    finally:
        agent.streams = streams
        np.random.set_state(numpy_state)
    return NamedArrays(
        observation=obs,
        action=action[0].cpu(),
        reward=np.float32(0),
        terminated=np.False_,
        truncated=np.False_,
        final_observation=obs,
        prev_action=action[0].cpu(),
        prev_reward=np.float32(0),
        agent_info=agent_info[0].map(lambda x: x.detach().cpu()),
        env_info=NamedArrays(
            life_loss=np.False_,
            raw_reward=np.float32(0),
            episode_return=np.float32(0),
            episode_length=np.int64(0),
        ),
    )


def allocate_samples(example: NamedArrays, batch_spec: BatchSpec, shared: bool = False) -> NamedArrays:
    """A zeroed [T, B] sample buffer of torch tensors from ``record_example``'s one-env record."""
    buffer = buffer_from_example(example, (batch_spec.T, batch_spec.B), shared=shared)
    return buffer if shared else buffer.to_torch()


class StepWriter:
    """Writes [B] step records into time steps 0, 1, .., T-1 of a [T, B] sample buffer (or into its
    ``columns``), in that order.

    Goes leaf by leaf through numpy views of the buffer, faster than ``NamedArrays`` item
    assignment, which re-checks every field on every step (docs/results/core_measurements.md,
    samplers/stepper.py); at step 0 of each batch the record's fields are checked against the
    buffer's, so a record that does not match the buffer is an error, not a silent mix-up.

    ``final_observation`` is written in one copy per batch: where step t did not end an episode it
    equals ``observation[t + 1]`` (Contract 1), so ``write`` keeps only the ended envs' final
    observations (a copy of those rows) and, at step T - 1, copies ``observation[1:]`` into
    ``final_observation[:-1]`` and puts the kept rows back: copying both frame fields on every step
    (2 x 225 kB for 8 Atari envs) slowed the env threads stepping beside it several times more than
    one copy does (docs/results/core_measurements.md, samplers/stepper.py). The batch's
    ``final_observation`` is complete once step T - 1 is written. This needs
    ``observation`` in the buffer, written by this writer or, when skipped, by someone else before
    step T - 1's ``write`` (the remote env workers); otherwise every step is copied as it comes.
    """

    def __init__(
        self, buffer: NamedArrays, columns: slice = slice(None), skip: frozenset[str] = frozenset()
    ) -> None:
        """``skip``: dotted names of leaves someone else writes (remote env workers write the env's
        outputs into the batch themselves); records still carry them, they are not copied."""
        self.names = [name for name, _ in buffer.flat_items()]
        views = [leaf.numpy() if isinstance(leaf, torch.Tensor) else leaf for _, leaf in buffer.flat_items()]
        self.leaves = [None if name in skip else view for name, view in zip(self.names, views)]
        self.columns = columns
        self._final: int | None = None  # leaf index of final_observation when it is written per batch
        fields = {"observation", "final_observation", "terminated", "truncated"}
        if fields <= set(self.names) and "final_observation" not in skip:
            self._final = self.names.index("final_observation")
            self._done_leaves = (self.names.index("terminated"), self.names.index("truncated"))
            self._observation = views[self.names.index("observation")][:, columns]
            self._final_columns = views[self._final][:, columns]
        self._ended: list[tuple[int, np.ndarray, np.ndarray]] = []  # (t, done [b], final rows)

    def write(self, t: int, record: NamedArrays) -> None:
        if t == 0:
            names = [name for name, _ in record.flat_items()]
            if names != self.names:
                raise ValueError(f"step record fields {names} do not match the sample buffer's {self.names}")
            self._ended.clear()
        index = (t, self.columns)
        # A tensor's numpy view assigns faster than the tensor itself (numpy's __array__; timing:
        # docs/results/core_measurements.md, samplers/stepper.py);
        # records hold CPU tensors only (``EnvStepper.act`` moves the agent's outputs there).
        values = [value.numpy() if isinstance(value, torch.Tensor) else value for value in record.leaves()]
        for i, (destination, value) in enumerate(zip(self.leaves, values)):
            if destination is not None and i != self._final:
                destination[index] = value
        if self._final is None:
            return
        final = values[self._final]
        last = len(self._final_columns) - 1
        if t < last:
            terminated, truncated = (values[i] for i in self._done_leaves)
            done = np.logical_or(terminated, truncated)
            if np.count_nonzero(done):
                self._ended.append((t, done, final[done]))
            return
        self._final_columns[:last] = self._observation[1:]
        self._final_columns[last] = final
        for step, done, rows in self._ended:
            self._final_columns[step][done] = rows
        self._ended.clear()


class EnvStepper:
    """Drives B environments with an agent, one step at a time, in one process.

    Holds the agent inputs of the next step and the agent's recurrent state; ``reset()`` starts
    every env on a new episode, ``step()`` acts, steps the envs and returns the step's record and
    finished episodes. ``step`` is ``observe(env.step(act()))`` and ``observe`` is ``advance`` then
    ``finish``; ``collect`` fills a batch, calling the envs' next ``send_step`` between the two, so
    that building and writing each record overlaps the envs' next step; a mode that overlaps env
    stepping with other work calls the pieces itself (the alternating sampler's ``GroupStepper``).
    The agent's model may live on any device; inputs move there and records come back as CPU
    tensors. The device is read at ``reset()`` (``agent.device`` walks the model's parameters, too
    slow for every step), so move the model before resetting, as every sampler does.
    """

    def __init__(
        self, env: VecEnv, agent: Agent, env_ranks: np.ndarray, copy_observation: bool | None = None
    ) -> None:
        """``copy_observation``: copy each next observation before keeping it as the agent's input;
        by default only when the env may overwrite its outputs (``VecEnv.fresh_outputs``)."""
        if len(env_ranks) != env.num_envs:
            raise ValueError(f"EnvStepper: {len(env_ranks)} env ranks for {env.num_envs} envs")
        self.env = env
        self.agent = agent
        self.env_ranks = np.asarray(env_ranks, dtype=np.int64)
        self.inputs: NamedArrays | None = None
        self.state: NamedArrays | None = None
        self.device = torch.device("cpu")
        self._on_cpu = True  # then the agent's inputs and outputs need no moves (a cost per step)
        # A vector env whose outputs stay valid need not have its observation copied (~225 kB per
        # step of 8 Atari envs).
        if copy_observation is None:
            copy_observation = not getattr(env, "fresh_outputs", False)
        self.copy_observation = copy_observation
        # (action, agent_info, next_state) of ``act``, for ``advance``
        self._acted: tuple[np.ndarray, NamedArrays, NamedArrays | None] | None = None
        # (inputs, action, agent_info, env_step) of ``advance``, for ``finish``
        self._stepped: tuple[NamedArrays, np.ndarray, NamedArrays, NamedArrays] | None = None

    def state_dict(self) -> dict[str, Any]:
        """The next step's agent inputs and recurrent state, for a checkpoint taken between batches."""
        return {"inputs": tree_state(self.inputs), "state": tree_state(self.state)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict``'s inputs and state (after ``reset``, which set the device)."""
        self.inputs = tree_from_state(state["inputs"]).numpy()
        saved = tree_from_state(state["state"])
        self.state = None if saved is None else saved.to_torch(self.device)

    def reset(self, prev_action_example: torch.Tensor) -> None:
        """Reset every env; ``prev_action_example`` is one env's action (shape and dtype)."""
        self.inputs = initial_inputs(self.env.reset(), prev_action_example)
        self.state = self.agent.initial_state(self.env.num_envs)
        self.device = self.agent.device
        self._on_cpu = self.device.type == "cpu"

    def step(self) -> tuple[NamedArrays, list[dict[str, Any]]]:
        """One step of every env: returns (record [B], traj infos of games that ended)."""
        return self.observe(self.env.step(self.act()))

    def collect(self, writer: StepWriter, T: int) -> list[tuple[int, dict[str, Any]]]:
        """Steps ``T`` times, writing record t into time step t of ``writer``'s buffer; returns ``(t,
        traj info)`` of the games that ended, in order.

        Record t is built and written while the envs compute step t + 1 (``send_step`` never
        modifies what the previous step returned), so it costs no env time when the envs step in
        threads or other processes; the last step's record is written after it.
        """
        finished_games: list[tuple[int, dict[str, Any]]] = []
        self.env.send_step(self.act())
        for t in range(T):
            self.advance(self.env.receive_step())
            if t + 1 < T:
                self.env.send_step(self.act())
            record, finished = self.finish()
            writer.write(t, record)
            finished_games.extend((t, info) for info in finished)
        return finished_games

    def act(self) -> np.ndarray:
        """The agent's actions [B, *act] for the envs' next step (kept for ``advance``)."""
        inputs = self.inputs
        if inputs is None:
            raise RuntimeError(f"{type(self).__name__}.act before reset()")
        observation = torch.from_numpy(inputs["observation"])
        prev_action = torch.from_numpy(inputs["prev_action"])
        prev_reward = torch.from_numpy(inputs["prev_reward"])
        if not self._on_cpu:
            observation, prev_action, prev_reward = (
                x.to(self.device) for x in (observation, prev_action, prev_reward)
            )
        action, agent_info, next_state = self.agent.step(observation, prev_action, prev_reward, self.state)
        if not self._on_cpu:
            action = action.cpu()
            agent_info = agent_info.map(lambda x: x.cpu())
        action = action.numpy()  # the record keeps numpy: the batch writer takes it as it is
        self._acted = (action, agent_info, next_state)
        return action

    def advance(self, env_step: NamedArrays) -> None:
        """Take in ``env_step`` (Contract 1), the envs' output for the last ``act``: moves the inputs
        and the recurrent state to the next step; ``finish`` then gives the step's record."""
        if self._acted is None:
            raise RuntimeError(f"{type(self).__name__}.advance without act()")
        action, agent_info, next_state = self._acted
        self._acted = None
        self._stepped = (self.inputs, action, agent_info, env_step)
        done = episode_done(env_step)
        self.inputs = next_inputs(action, env_step, done, self.copy_observation)
        self.state = (  # recurrent agents only: a feed-forward agent's state stays None
            None if next_state is None else self.agent.reset_state(next_state, torch.from_numpy(done))
        )

    def finish(self) -> tuple[NamedArrays, list[dict[str, Any]]]:
        """The record [B] of the step ``advance`` took in, and the games that ended in it."""
        if self._stepped is None:
            raise RuntimeError(f"{type(self).__name__}.finish without advance()")
        inputs, action, agent_info, env_step = self._stepped
        self._stepped = None
        record = step_record(inputs, action, agent_info, env_step)
        return record, finished_episodes(record, self.env_ranks)

    def observe(self, env_step: NamedArrays) -> tuple[NamedArrays, list[dict[str, Any]]]:
        """``advance`` then ``finish``: the record [B] of the step that ``env_step`` finished after
        ``act``, and the games that ended."""
        self.advance(env_step)
        return self.finish()

    def bootstrap(self) -> NamedArrays:
        """Inputs of the step after the batch (Contract 3's ``bootstrap``), CPU tensors [B]."""
        if self.inputs is None:
            raise RuntimeError("EnvStepper.bootstrap before reset()")
        inputs = self.inputs.to_torch()
        if not self.agent.recurrent:
            return inputs
        return inputs.replace(agent_state=self.state.map(lambda x: x.detach().cpu()))
