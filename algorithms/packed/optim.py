"""One optimizer over stacked parameters that steps K members at once, and each member's view of it.

Adam and RMSprop are elementwise: one step over ``[K, ...]`` stacks is K member steps (their shared
step count is every member's, as the members update in lockstep). What is not elementwise, the
gradient norm, is clipped per member (``stack.clip_member_gradients``). ``MemberOptimizer`` stands
in for a member algorithm's own optimizer, so the member's checkpoint holds its slice of the state
in a single run's layout.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch


def stacked_optimizer(
    members: Sequence[torch.optim.Optimizer], params: list[torch.Tensor]
) -> torch.optim.Optimizer:
    """An optimizer of the members' class and settings over ``params`` (the stacks, in the members'
    parameter order, split into the members' parameter groups), its state the members' states
    stacked (a resumed run's, or none)."""
    first = members[0]
    groups, start = [], 0
    for group in first.param_groups:
        settings = {key: value for key, value in group.items() if key != "params"}
        groups.append({**settings, "params": params[start : start + len(group["params"])]})
        start += len(group["params"])
    if start != len(params):
        raise ValueError(f"packed optimizer: {len(params)} stacks for {start} member parameters")
    optimizer = type(first)(groups, **first.defaults)
    states = [m.state_dict() for m in members]
    if not states[0]["state"]:
        return optimizer
    stacked: dict[int, dict[str, Any]] = {}
    for index, entry in states[0]["state"].items():
        stacked[index] = {}
        for key, value in entry.items():
            values = [s["state"][index][key] for s in states]
            if torch.is_tensor(value) and value.dim() > 0:
                stacked[index][key] = torch.stack(values)
            elif any(not torch.equal(torch.as_tensor(v), torch.as_tensor(value)) for v in values):
                raise ValueError(
                    f"packed optimizer: members differ in {key!r} ({values}); they must be in lockstep"
                )
            else:
                stacked[index][key] = value
    optimizer.load_state_dict({"state": stacked, "param_groups": copy.deepcopy(states[0]["param_groups"])})
    return optimizer


class MemberOptimizer:
    """Member ``k``'s slice of a stacked optimizer, with a single optimizer's ``state_dict`` and
    ``param_groups`` (shared: the members' settings are one setting's)."""

    def __init__(self, stacked: torch.optim.Optimizer, k: int) -> None:
        self.stacked = stacked
        self.k = k

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.stacked.param_groups

    def state_dict(self) -> dict[str, Any]:
        full = self.stacked.state_dict()
        state = {
            index: {
                key: value[self.k].clone() if torch.is_tensor(value) and value.dim() > 0 else copy.copy(value)
                for key, value in entry.items()
            }
            for index, entry in full["state"].items()
        }
        return {"state": state, "param_groups": copy.deepcopy(full["param_groups"])}
