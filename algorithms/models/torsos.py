"""Feature extractors shared by value-based and policy-gradient models.

A torso maps observations with any leading dims ``[..., *obs_shape]`` to features
``[..., output_size]``; heads (``heads.py``) and policies sit on top of it.

* ``NatureConvTorso``: the convolutional network of Mnih et al. 2015, "Human-level control through
  deep reinforcement learning" (Nature), Methods "Model architecture": 32 filters 8x8 stride 4,
  64 filters 4x4 stride 2, 64 filters 3x3 stride 1, each followed by a ReLU, optionally followed by
  a fully connected layer of 512 ReLU units. Input frames are uint8 and scaled by 1/255 here, so
  replay buffers keep storing one byte per pixel. When training on CPU the frames enter the
  convolutions in channels-last memory order (the same fp32 operations; only the order of the sums
  inside the convolutions differs, see ``forward``).
* ``MinAtarConvTorso``: the MinAtar networks for 10x10 channel maps (Young & Tian 2019, "MinAtar: An
  Atari-Inspired Testbed for Thorough and Reproducible Reinforcement Learning Experiments", Sec. 4:
  16 filters 3x3 stride 1 and a 128-unit layer; Obando-Ceron & Castro 2021, "Revisiting Rainbow",
  their MinAtar network: the same convolution with SAME padding and no hidden layer).
* ``MlpTorso``: fully connected layers for vector observations (CartPole, MuJoCo); ``FlatMlpTorso``
  the same on flattened channel maps (MinAtar's MLP policies).

``build_torso`` picks one by the observation's rank and a ``conv`` name (``CONV_TORSOS``), the
``conv_torso`` field of the algorithms' configs. Torsos and heads chain their layers in ``Layers``.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class Layers(nn.Sequential):
    """``nn.Sequential`` that runs each layer's ``forward`` directly.

    Calling a module goes through ``Module.__call__``'s hook dispatch, a few microseconds per layer:
    on Young & Tian's MinAtar network (batch of 32, one thread) the module calls were 15% of a forward
    pass (316 -> 266 us with every layer called directly, outputs equal; probe, 2026-12-05), paid on
    every update and every acting step. Forward hooks on the layers inside do not run (nothing here
    registers any); the ``Layers`` itself is called as a module, and its parameters' names are
    ``nn.Sequential``'s, so checkpoints are unchanged.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self:
            x = layer.forward(x)
        return x


class NatureConvTorso(nn.Module):
    """Nature DQN convolutions on ``[..., C, H, W]`` uint8 frames -> ``[..., output_size]``.

    ``fc_size`` adds the Nature net's fully connected ReLU layer (512 units in the paper); ``None``
    returns the flattened convolution features (the dueling head of Wang et al. 2016 puts its own
    512-unit layer in each stream).
    """

    def __init__(self, observation_shape: tuple[int, int, int], fc_size: int | None = 512) -> None:
        super().__init__()
        if len(observation_shape) != 3:
            raise ValueError(f"NatureConvTorso: observation_shape must be (C, H, W), got {observation_shape}")
        channels, height, width = observation_shape
        self.observation_shape = tuple(int(s) for s in observation_shape)
        # nn.Sequential: the per-layer call overhead ``Layers`` saves is negligible beside these
        # convolutions, and layer hooks (the channels-last test) keep working.
        self.conv = nn.Sequential(
            nn.Conv2d(channels, 32, kernel_size=8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        h, w = height, width
        for kernel, stride in ((8, 4), (4, 2), (3, 1)):
            h, w = (h - kernel) // stride + 1, (w - kernel) // stride + 1
        if h < 1 or w < 1:
            raise ValueError(f"NatureConvTorso: frames {height}x{width} are too small for the Nature convs")
        self.conv_output_size = 64 * h * w  # 3136 for 84x84 frames
        self.fc = None
        if fc_size is not None:
            self.fc = nn.Sequential(nn.Linear(self.conv_output_size, fc_size), nn.ReLU())
        self.output_size = self.conv_output_size if fc_size is None else int(fc_size)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        if observation.dtype != torch.uint8:
            raise TypeError(f"NatureConvTorso expects uint8 frames, got {observation.dtype}")
        if tuple(observation.shape[-3:]) != self.observation_shape:
            raise ValueError(
                f"NatureConvTorso: observation shape {tuple(observation.shape)} "
                f"does not end in {self.observation_shape}"
            )
        lead = observation.shape[:-3]
        frames = observation.reshape(math.prod(lead), *self.observation_shape)
        if frames.device.type == "cpu" and torch.is_grad_enabled() and self.conv[0].weight.requires_grad:
            # Channels-last frames make PyTorch run all three convolutions in oneDNN's NHWC layout
            # (each output feeds the next in that layout; ``Flatten`` restores the (C, H, W) feature
            # order): faster forward + backward on CPU, while forward alone gains nothing and pays
            # for the conversion, so no-grad calls (acting, target networks) keep the contiguous
            # layout. The weights stay contiguous (their layout made no measurable difference), so
            # ``nn.init.orthogonal_`` and state dicts see plain tensors. Unmeasured on CUDA, where
            # cuDNN keeps its own layout choice. Frames from the frame replay arrive channels-last
            # (``FrameObservations.gather``): no copy here then. Timings:
            # docs/results/core_measurements.md (torsos.py).
            frames = frames.contiguous(memory_format=torch.channels_last)
        # .to() keeps the memory format; scaling in place saves a batch-sized allocation (timing:
        # docs/results/core_measurements.md, torsos.py).
        x = frames.to(torch.float32).mul_(1.0 / 255.0)
        features = self.conv(x)
        if self.fc is not None:
            features = self.fc(features)
        return features.reshape(*lead, self.output_size)


class MlpTorso(nn.Module):
    """Fully connected layers on ``[..., D]`` vector observations -> ``[..., hidden_sizes[-1]]``.

    An empty ``hidden_sizes`` is the identity on the flattened input (``output_size = D``).
    """

    def __init__(
        self,
        input_size: int,
        hidden_sizes: tuple[int, ...] = (64, 64),
        activation: type[nn.Module] = nn.ReLU,
    ) -> None:
        super().__init__()
        if input_size < 1 or any(h < 1 for h in hidden_sizes):
            raise ValueError(f"MlpTorso: sizes must be positive, got {input_size} and {hidden_sizes}")
        layers: list[nn.Module] = []
        last = int(input_size)
        for size in hidden_sizes:
            layers += [nn.Linear(last, size), activation()]
            last = int(size)
        self.input_size = int(input_size)
        self.net = Layers(*layers)
        self.output_size = last

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        if observation.shape[-1] != self.input_size:
            raise ValueError(f"MlpTorso: observation last dim {observation.shape[-1]} != {self.input_size}")
        return self.net(observation.to(torch.float32))


class MinAtarConvTorso(nn.Module):
    """One convolution of 16 filters 3x3 stride 1 + ReLU on ``[..., C, H, W]`` 0/1 channel maps (bool or
    any number type; not rescaled), flattened, then optionally a ``fc_size`` ReLU layer.

    ``padding="valid"``: Young & Tian 2019's network (16 x 8 x 8 = 1024 features on 10x10 maps, then
    128 units); ``"same"``: Obando-Ceron & Castro 2021's (16 x 10 x 10 = 1600 features, no layer).
    """

    def __init__(
        self, observation_shape: tuple[int, int, int], padding: str = "valid", fc_size: int | None = 128
    ) -> None:
        super().__init__()
        if len(observation_shape) != 3:
            raise ValueError(
                f"MinAtarConvTorso: observation_shape must be (C, H, W), got {observation_shape}"
            )
        if padding not in ("valid", "same"):
            raise ValueError(f"MinAtarConvTorso: padding must be 'valid' or 'same', got {padding!r}")
        channels, height, width = (int(s) for s in observation_shape)
        if padding == "valid" and (height < 3 or width < 3):
            raise ValueError(f"MinAtarConvTorso: maps {height}x{width} are too small for a 3x3 convolution")
        self.observation_shape = (channels, height, width)
        self.conv = Layers(nn.Conv2d(channels, 16, 3, stride=1, padding=padding), nn.ReLU(), nn.Flatten())
        self.conv_output_size = 16 * (height * width if padding == "same" else (height - 2) * (width - 2))
        self.fc = None if not fc_size else Layers(nn.Linear(self.conv_output_size, fc_size), nn.ReLU())
        self.output_size = int(fc_size) if fc_size else self.conv_output_size

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        if tuple(observation.shape[-3:]) != self.observation_shape:
            raise ValueError(
                f"MinAtarConvTorso: observation shape {tuple(observation.shape)} "
                f"does not end in {self.observation_shape}"
            )
        lead = observation.shape[:-3]
        x = observation.reshape(math.prod(lead), *self.observation_shape).to(torch.float32)
        features = self.conv(x)
        if self.fc is not None:
            features = self.fc(features)
        return features.reshape(*lead, self.output_size)


class FlatMlpTorso(MlpTorso):
    """``MlpTorso`` on ``[..., C, H, W]`` maps flattened to ``C * H * W`` inputs."""

    def __init__(self, observation_shape: tuple[int, int, int], hidden_sizes, activation=nn.ReLU) -> None:
        super().__init__(math.prod(observation_shape), tuple(hidden_sizes), activation)
        self.observation_shape = tuple(int(s) for s in observation_shape)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return super().forward(observation.flatten(-3))


# ``conv_torso`` names: the torso for (C, H, W) observations.
CONV_TORSOS: tuple[str, ...] = ("nature", "minatar", "minatar_same", "flatten")


def build_torso(
    observation_shape: tuple[int, ...],
    fc_size: int | None = 512,
    hidden_sizes: tuple[int, ...] = (64, 64),
    conv: str = "nature",
    activation: type[nn.Module] = nn.ReLU,
) -> nn.Module:
    """The torso for an observation space: for (D,) an MLP of ``hidden_sizes``; for (C, H, W) by ``conv``:
    ``"nature"`` (Mnih et al. 2015) or ``"minatar"`` / ``"minatar_same"`` (``MinAtarConvTorso``, valid
    or SAME padding) followed by a ``fc_size`` layer (None or 0: none), or ``"flatten"``, an MLP of
    ``hidden_sizes`` on the flattened maps. A shape the torso cannot take is a one-line ``ValueError``.
    """
    shape = tuple(int(s) for s in observation_shape)
    if len(shape) == 1:
        return MlpTorso(shape[0], tuple(hidden_sizes), activation)
    if len(shape) != 3:
        raise ValueError(f"no torso for observation shape {shape}: expected (C, H, W) or (D,)")
    if conv == "nature":
        return NatureConvTorso(shape, fc_size=fc_size or None)
    if conv in ("minatar", "minatar_same"):
        return MinAtarConvTorso(shape, "valid" if conv == "minatar" else "same", fc_size or None)
    if conv == "flatten":
        return FlatMlpTorso(shape, tuple(hidden_sizes), activation)
    raise ValueError(f"unknown conv torso {conv!r}; one of {CONV_TORSOS}")
