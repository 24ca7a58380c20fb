"""The update loops of the algorithm families, shared by single and packed runs.

``common``: what ``optimize`` returns (``OptInfo``) and the optimizers every algorithm uses;
``q_replay``: Q-learning from replay (DQN, C51, Rainbow, R2D1); ``policy_gradient``: the
actor-critic policy gradients (A2C, PPO); ``qpg``: the Q-value policy gradients (DDPG, TD3, SAC).
Each family's loop takes its gradient computation and optimizer step from a small object (its
gradient step: ``GradStep``, ``MinibatchGradStep``, ``QpgGradStep``): a single run's backpropagates
through the algorithm's loss and steps its optimizer, a packed run's (``algorithms.packed``)
computes K members' gradients at once over stacked parameters. Each algorithm's loss stays in its
own file in ``algorithms/algos``.
"""
