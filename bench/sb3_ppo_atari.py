"""Stable-Baselines3's PPO on Atari with rl-baselines3-zoo's hyperparameters, recorded as a run of
this harness (arm ``sb3_ppo_atari_zoo``), for issue 53's side-by-side test of our PPO against SB3's.

Why: an equivalence test needs the peer's training curve on the same axis, in the same units and
with the same score as ours. Rather than converting SB3's logs afterwards, this driver writes the run
directory while SB3 trains, through the harness's own writers (``bench.sb3_record``), so that
``analysis`` (``load_experiment``, ``last_training_returns``) reads it exactly as one of our runs.

What runs (SB3 2.9.2, unmodified, through its public API only):

* the zoo's Atari env: ``make_atari_env("<Game>NoFrameskip-v4", n_envs=8, seed=seed)`` (each env a
  ``Monitor`` beneath ``AtariWrapper``: 30 no-ops, frame skip 4 with max-pool, life loss ends a
  training episode, fire on reset, 84x84 gray, rewards clipped for training) and
  ``VecFrameStack(n_stack=4)``;
* ``PPO("CnnPolicy", env, n_steps=128, n_epochs=4, batch_size=256, learning_rate=lin 2.5e-4,
  clip_range=lin 0.1, vf_coef=0.5, ent_coef=0.01, seed=seed, device="cpu", verbose=0)``: the zoo's
  ``ppo.yml`` ``atari`` entry, every other argument at SB3's default (config.json lists them);
* the first ``--steps`` env steps (default 2.5M = 10M frames) of the zoo's 10M-step run: the linear
  schedules anneal over ``--anneal-steps`` (``learn(total_timesteps=anneal_steps)``) and a callback
  stops training at the first rollout boundary at or past ``--steps``, the budget rule of this
  harness's runners (ours runs the same prefix: ``anneal_env_steps`` 10M, ``n_steps`` 2.5M);
* ``torch.set_num_threads(--threads)`` (default 1: one core per job).

The record: ``<root>/<exp>/sb3_ppo_atari_zoo/<game>/seed<k>/`` with config.json, metadata.json,
status.json, progress.csv (a row per ``--log-interval`` env steps: the games finished in the window,
whole games, unclipped scores, as SB3's Monitor reports them; counters, wall and CPU time) and
checkpoints/ (SB3's ``model.save`` zip inside the harness's checkpoint, every ~10 minutes and on
SIGTERM/SIGINT/SIGHUP, which then exit 130). Rerunning the command resumes: ``PPO.load`` with fresh
envs and ``learn(anneal_steps - num_timesteps, reset_num_timesteps=False)``, so SB3 keeps the
schedules' horizon at ``anneal_steps``; the envs restart (SB3 does not save them), and metadata.json's
``resumes`` says so. A complete run rerun does nothing. Seeds 200-299 are refused (kept for outside
checks).

    python -m bench.sb3_ppo_atari --exp atari_ppo --game pong --seed 0 [--root runs]
        [--steps 2500000] [--anneal-steps 10000000] [--threads 1] [--log-interval 102400] [--dry-run]

``--dry-run`` prints the run directory, what would run and an estimate from ~30 s of SB3 training on
this machine, and writes nothing.
"""

from __future__ import annotations

import argparse
import inspect
import io
import json
import math
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bench import sb3_record as rec
from bench import sb3_zoo as zoo

PROG = "python -m bench.sb3_ppo_atari"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DRY_RUN_SECONDS = 30.0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + error
        raise zoo.Refused(f"{PROG}: {message}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--exp", required=True, help="experiment directory name under --root")
    p.add_argument("--game", required=True, help="Atari game as ALE names it: pong, breakout, ...")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--root", type=Path, default=Path("runs"))
    p.add_argument("--steps", type=int, default=2_500_000, help="env steps trained (default 10M frames)")
    p.add_argument("--anneal-steps", type=int, default=10_000_000, help="the schedules' horizon")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--log-interval", type=int, default=102_400, help="env steps per progress row")
    p.add_argument("--dry-run", action="store_true", help="print the plan and a timed estimate only")
    args = p.parse_args(argv)
    zoo.check_name("--exp", args.exp)
    zoo.check_seed(args.seed)
    args.env = zoo.check_game(args.game)
    zoo.check_budget(args.steps, args.anneal_steps, args.threads, args.log_interval)
    return args


def check_registered(env: str) -> str:
    """The game's ``NoFrameskip-v4`` id, registered by ale-py (Refused when it has none)."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env_id = zoo.gym_id(env)
    try:
        gym.spec(env_id)
    except gym.error.Error:
        raise zoo.Refused(
            f"--game {env}: ale-py {ale_py.__version__} registers no {env_id} (the zoo's Atari ids)"
        ) from None
    return env_id


def import_sb3() -> Any:
    """Stable-Baselines3, and OpenCV that its AtariWrapper resizes frames with (Refused without)."""
    try:
        import cv2  # noqa: F401
        import stable_baselines3
    except ImportError as error:
        raise zoo.Refused(
            f"{error.name} is not installed: `make bench-sb3-ppo-atari` installs the bench extra and OpenCV"
        ) from None
    return stable_baselines3


def _plain(value: Any) -> Any:
    return value if isinstance(value, int | float | str | bool | type(None)) else repr(value)


def sb3_defaults() -> dict[str, Any]:
    """The arguments of SB3's PPO (``ppo.``) and of ``CnnPolicy`` (``policy.``) the run leaves at
    their defaults, as the installed SB3 declares them."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.policies import ActorCriticCnnPolicy

    passed = set(zoo.ZOO_PPO) | {"self", "env", "seed", "device", "verbose", "_init_setup_model"}
    out = {}
    for prefix, function, skip in (
        ("ppo", PPO.__init__, passed),
        (
            "policy",
            ActorCriticCnnPolicy.__init__,
            {"self", "observation_space", "action_space", "lr_schedule"},
        ),
    ):
        for name, parameter in inspect.signature(function).parameters.items():
            if name not in skip and parameter.default is not inspect.Parameter.empty:
                out[f"{prefix}.{name}"] = _plain(parameter.default)
    return out


def check_atari_wrapper() -> None:
    """The installed SB3's AtariWrapper defaults are what config.json states (``zoo.ATARI_ENV``)."""
    from stable_baselines3.common.atari_wrappers import AtariWrapper

    parameters = inspect.signature(AtariWrapper.__init__).parameters
    for arg, (key, kind) in zoo.ATARI_WRAPPER_ARGS.items():
        found = parameters[arg].default if arg in parameters else None
        if found is None or kind(found) != zoo.ATARI_ENV[key]:
            raise zoo.Refused(
                f"SB3's AtariWrapper has {arg}={found!r}, config.json would state "
                f"{key}={zoo.ATARI_ENV[key]!r}: update bench/sb3_zoo.py ATARI_ENV for this SB3"
            )


def make_env(env_id: str, seed: int) -> Any:
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    return VecFrameStack(make_atari_env(env_id, n_envs=zoo.N_ENVS, seed=seed), n_stack=zoo.N_STACK)


def wrapper_chain(env: Any) -> str:
    """One env's wrappers, outermost first (``<AtariWrapper<...<Monitor<...<AtariEnv<...>>>>``)."""
    inner = getattr(env, "venv", None)
    envs = getattr(inner, "envs", None)
    return str(envs[0]) if envs else repr(env)


class StopFlag:
    """The first stop signal asks for a stop at the next point the run can checkpoint; a second one
    interrupts at once (KeyboardInterrupt; files written atomically stay whole)."""

    def __init__(self) -> None:
        self.requested = False
        self.previous = {}

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            self.previous[sig] = signal.signal(sig, self.handle)

    def handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print(
            f"{signal.Signals(signum).name}: stopping at the next rollout boundary",
            file=sys.stderr,
            flush=True,
        )

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def record_callback(run: Any, recorder: rec.Recorder, steps: int, stop: StopFlag) -> Any:
    """The SB3 callback that feeds ``recorder`` and writes the run directory at rollout boundaries."""
    from stable_baselines3.common.callbacks import BaseCallback

    from algorithms.rundir import rng_state

    class RecordCallback(BaseCallback):
        def __init__(self) -> None:
            super().__init__(verbose=0)
            self.finished = self.interrupted = self.stopping = False
            self.boundary_steps: int | None = None
            self.start_steps: int | None = None
            self.last_save = time.monotonic()
            self.last_zip: bytes | None = None

        def _on_rollout_start(self) -> None:
            self.at_boundary()

        def _on_step(self) -> bool:
            if self.stopping:  # the step SB3 just took is past the record's end: not counted
                return False
            recorder.step(self.locals["infos"])
            if stop.requested:  # mid-rollout: back to the last boundary, where the weights still are
                recorder.rollback()
                self.model.num_timesteps = self.boundary_steps
                if self.boundary_steps > self.start_steps:
                    self.checkpoint()
                self.interrupted = self.stopping = True
                return False
            return True

        def _on_rollout_end(self) -> None:
            recorder.rollout_end()

        def at_boundary(self) -> None:
            """Close the rollout SB3 just trained on; log, checkpoint, stop as due."""
            n = self.model.num_timesteps
            if self.start_steps is None:
                self.start_steps = n
            diagnostics = dict(self.model.logger.name_to_value) if recorder.in_rollout else None
            row = recorder.boundary(n, diagnostics)
            t0 = time.perf_counter()
            if row is not None:
                run.append_progress(row)
            if n >= steps:
                rec.write_rows(run, [recorder.finish_row()])
                self.checkpoint()
                self.finished = self.stopping = True
            elif stop.requested:
                if n > self.start_steps:
                    self.checkpoint()
                self.interrupted = self.stopping = True
            elif time.monotonic() - self.last_save >= rec.CHECKPOINT_INTERVAL_S:
                self.checkpoint()
            recorder.counters.add_time("logging", time.perf_counter() - t0)
            if not self.stopping:
                self.boundary_steps = n
                recorder.rollout_start()

        def checkpoint(self) -> None:
            buf = io.BytesIO()
            self.model.save(buf)
            self.last_zip = buf.getvalue()
            run.save_checkpoint(rec.checkpoint_state(self.last_zip, recorder, rng_state()))
            self.last_save = time.monotonic()

    return RecordCallback()


def train(args: argparse.Namespace, path: Path, config: dict[str, Any], env_id: str) -> int:
    import cv2
    import torch
    from stable_baselines3 import PPO

    from algorithms.rundir import RunBusy, set_rng_state

    torch.set_num_threads(args.threads)
    stop = StopFlag()
    stop.install()
    env = make_env(env_id, args.seed)
    try:
        extra = {"sb3": {"opencv": cv2.__version__, "gym_id": env_id, "wrappers": wrapper_chain(env)}}
        run, checkpoint = rec.open_record(path, config, args.seed, extra)
    except (RunBusy, ValueError) as error:  # another writer; a stored config or checkpoint that differs
        env.close()
        raise zoo.Refused(" ".join(str(error).split())) from None
    except BaseException:
        env.close()
        raise
    try:
        if checkpoint is None:
            model = PPO(env=env, **rec.ppo_kwargs(args.seed, args.anneal_steps))
            recorder = rec.Recorder(args.log_interval)
            reset = True
        else:
            model = PPO.load(rec.sb3_zip_of(checkpoint), env=env, device="cpu")
            set_rng_state(checkpoint["rng"])  # after load: its _setup_model reseeds from the seed
            recorder = rec.Recorder(args.log_interval, state=rec.recorder_state(checkpoint))
            reset = False
            print(
                f"{path}: resuming at {model.num_timesteps:,} env steps with fresh envs "
                "(SB3 does not save its envs)",
                file=sys.stderr,
                flush=True,
            )
        callback = record_callback(run, recorder, args.steps, stop)
        if model.num_timesteps < args.steps and not stop.requested:
            # With reset_num_timesteps=False SB3 adds num_timesteps back: the horizon stays anneal_steps.
            total = args.anneal_steps - (0 if reset else model.num_timesteps)
            model.learn(total_timesteps=total, callback=callback, reset_num_timesteps=reset)
        if not callback.stopping:  # learn ended on its own (steps == anneal_steps) or was not called
            if getattr(callback, "model", None) is None:
                callback.init_callback(model)
            callback.at_boundary()
        if not callback.finished:
            run.set_status("interrupted", rec.INTERRUPTED)
            print(f"{path}: interrupted at {recorder.counters.env_steps:,} env steps; rerun to continue",
                  file=sys.stderr)  # fmt: skip
            return 130
        rec.write_sb3_zip(run, callback.last_zip)
        run.set_status("complete")
        print(f"{path}: complete at {recorder.counters.env_steps:,} env steps")
        return 0
    except KeyboardInterrupt:
        run.set_status("interrupted", rec.INTERRUPTED)
        print(f"{path}: interrupted; rerun to continue from the last checkpoint", file=sys.stderr)
        return 130
    except BaseException as error:
        run.set_status("failed", f"{type(error).__name__}: {error}")
        raise
    finally:
        stop.restore()
        env.close()
        run.close()


def checkpoint_steps(path: Path) -> int | None:
    """Env steps of the run's latest checkpoint (None without one), read without taking its lock."""
    import torch

    latest = path / "checkpoints" / "latest.pt"
    if not latest.exists():
        return None
    try:
        return int(torch.load(latest, weights_only=True, map_location="cpu")["counters"]["env_steps"])
    except Exception:  # a damaged one: the run's next start falls back (RunDir.recover)
        return None


def time_sb3(env_id: str, seed: int, seconds: float) -> tuple[float, float, int]:
    """SB3's training rate here: ``(env steps per wall second, per CPU second, steps timed)`` over
    ~``seconds`` of whole rollouts after one untimed rollout."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    class Timer(BaseCallback):
        def __init__(self) -> None:
            super().__init__(verbose=0)
            self.first: tuple[float, float, int] | None = None
            self.last: tuple[float, float, int] | None = None

        def _on_rollout_start(self) -> None:
            now = (time.perf_counter(), time.process_time(), self.model.num_timesteps)
            if self.model.num_timesteps > 0:
                self.first = self.first or now
                self.last = now

        def _on_step(self) -> bool:
            return self.first is None or self.last[0] - self.first[0] < seconds

    env = make_env(env_id, seed)
    try:
        model = PPO(env=env, **rec.ppo_kwargs(seed, 10_000_000))
        timer = Timer()
        model.learn(total_timesteps=10_000_000, callback=timer)
    finally:
        env.close()
    (w0, c0, s0), (w1, c1, s1) = timer.first, timer.last
    return (s1 - s0) / (w1 - w0), (s1 - s0) / (c1 - c0), s1 - s0


def dry_run(args: argparse.Namespace, path: Path, config: dict[str, Any], env_id: str) -> int:
    import torch

    torch.set_num_threads(args.threads)
    done = checkpoint_steps(path) or 0
    state = f"resumes at {done:,} env steps (fresh envs)" if done else "starts"
    if (path / "config.json").exists() and not done:
        state = "starts again from 0 (no usable checkpoint)"
    print(f"run directory: {path}")
    print(
        f"plan: SB3 {config['sb3']['version']} PPO on {env_id}, {state}; trains to {args.steps:,} env "
        f"steps ({args.steps * zoo.FRAMESKIP:,} frames) of a {args.anneal_steps:,}-step schedule, "
        f"{args.threads} torch thread(s), a progress row every {args.log_interval:,} env steps"
    )
    print(f"PPO arguments: {json.dumps(config['sb3']['ppo_kwargs'])}")
    wall, cpu, timed = time_sb3(env_id, args.seed, DRY_RUN_SECONDS)
    left = max(0, args.steps - done)
    rollout = zoo.ZOO_PPO["n_steps"] * zoo.N_ENVS
    left = math.ceil(left / rollout) * rollout
    print(
        f"estimate: SB3 trains {wall:.0f} env steps per wall second, {cpu:.0f} per CPU second here "
        f"({timed:,} steps timed); the {left:,} env steps left take ~{left / wall / 3600:.1f} h "
        f"({left / cpu / 3600:.1f} CPU h)"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(argv)
        env_id = check_registered(args.env)
        sb3 = import_sb3()
        check_atari_wrapper()
        config = rec.run_config(
            args.env, args.seed, args.steps, args.anneal_steps, args.threads, args.log_interval,
            sb3.__version__, sb3_defaults(),
        )  # fmt: skip
        path = rec.sb3_run_path(args.root, args.exp, args.env, args.seed)
        differs = rec.stored_config_differs(path, config)
        if differs is not None:
            raise zoo.Refused(f"{differs}: cannot resume it with these arguments")
        if rec.is_finished(path):
            print(f"{path}: already complete, nothing to do")
            return 0
        if args.dry_run:
            return dry_run(args, path, config, env_id)
        return train(args, path, config, env_id)
    except zoo.Refused as error:
        print(str(error), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
