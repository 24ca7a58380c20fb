"""A fake Atari stream for the replay tests: unique frames, zero-padded stacks, episodes ending both ways."""

import numpy as np

from algorithms.arrays import NamedArrays


def make_stream(T, B, seed, frame_stack=4, p_term=0.04, p_trunc=0.03, hw=(2, 3)):
    """A fake Atari stream [T, B]: zero-padded stacks of unique frames, episodes ending both ways.

    ``final_observation`` is the true last stack where an episode ended and the next stack elsewhere,
    and ``observation`` after an end is the next episode's first stack (same-step autoreset, Contract 1).
    """
    rng = np.random.default_rng(seed)
    C, (H, W) = frame_stack, hw
    frame_id = [0]

    def new_frame():
        frame_id[0] += 1
        f = np.zeros((H, W), np.uint8)
        f[0, 0], f[0, 1], f[1, 0] = frame_id[0] % 255 + 1, (frame_id[0] // 255) % 256, 9  # never all zero
        return f

    def reset():
        s = np.zeros((C, H, W), np.uint8)
        s[-1] = new_frame()
        return s

    stacks = [reset() for _ in range(B)]
    obs, final = np.zeros((T, B, C, H, W), np.uint8), np.zeros((T, B, C, H, W), np.uint8)
    u = rng.random((T, B))
    terminated, truncated = u < p_term, (u >= p_term) & (u < p_term + p_trunc)
    for t in range(T):
        for b in range(B):
            obs[t, b] = stacks[b]
            final[t, b] = np.concatenate([stacks[b][1:], new_frame()[None]])
            stacks[b] = reset() if terminated[t, b] or truncated[t, b] else final[t, b]
    done = terminated | truncated
    first = np.vstack([np.ones((1, B), bool), done[:-1]])
    action = rng.integers(0, 5, (T, B))
    reward = rng.normal(size=(T, B)).astype(np.float32)
    stream = {
        "observation": obs,
        "action": action,
        "reward": reward,
        "terminated": terminated,
        "truncated": truncated,
        "final_observation": final,
    }
    for name in ("action", "reward"):  # of the step before, zero at an episode's first step
        x = stream[name]
        stream[f"prev_{name}"] = np.where(first, 0, np.vstack([np.zeros_like(x[:1]), x[:-1]])).astype(x.dtype)
    return NamedArrays(stream)
