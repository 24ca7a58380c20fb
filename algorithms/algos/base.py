"""What an algorithm's ``optimize`` returns to the runner (docs/ARCHITECTURE.md, Contract 4)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class OptInfo:
    """Work done by one ``optimize`` call.

    ``samples_trained`` counts the steps that entered the loss; ``samples_replayed`` adds the burn-in
    steps that were run through the network but not trained on (R2D1). The runner passes both to
    ``Counters.add_updates`` so the replay ratio can be reported both ways.
    """

    updates: int = 0
    samples_trained: int = 0
    samples_replayed: int = 0
    diagnostics: dict[str, float] = field(default_factory=dict)
