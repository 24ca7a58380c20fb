import copy

import pytest
import torch

from algorithms.models.torsos import Layers, MlpTorso, NatureConvTorso, build_torso

torch.set_num_threads(1)


def test_nature_conv_torso_shapes_and_scaling():
    torso = NatureConvTorso((4, 84, 84), fc_size=None)
    assert torso.output_size == 3136  # 64 x 7 x 7, Mnih et al. 2015
    frames = torch.randint(0, 256, (3, 2, 4, 84, 84), dtype=torch.uint8)
    out = torso(frames)
    assert out.shape == (3, 2, 3136)
    # Leading dims are only flattened: [T, B] and [B] and unbatched agree row by row.
    assert torch.allclose(torso(frames[1]), out[1], atol=1e-6)
    assert torch.allclose(torso(frames[1, 0]), out[1, 0], atol=1e-6)
    # Scaling by 1/255 happens inside: the first conv sees the float frame / 255.
    x = frames[0, :1].float() / 255.0
    expected = torso.conv(x)
    assert torch.allclose(out[0, :1], expected, atol=1e-6)


def test_nature_conv_torso_fc_and_errors():
    torso = NatureConvTorso((4, 84, 84))
    assert torso.output_size == 512
    assert torso(torch.zeros(5, 4, 84, 84, dtype=torch.uint8)).shape == (5, 512)
    with pytest.raises(TypeError, match="uint8"):
        torso(torch.zeros(5, 4, 84, 84))
    with pytest.raises(ValueError, match="does not end in"):
        torso(torch.zeros(5, 3, 84, 84, dtype=torch.uint8))


def test_mlp_torso_shapes():
    torso = MlpTorso(4, (32, 16))
    assert torso.output_size == 16
    assert torso(torch.zeros(7, 3, 4)).shape == (7, 3, 16)
    assert torso(torch.zeros(4, dtype=torch.float64)).shape == (16,)
    with pytest.raises(ValueError, match="!= 4"):
        torso(torch.zeros(3, 5))
    assert isinstance(build_torso((4,)), MlpTorso)
    assert isinstance(build_torso((4, 84, 84)), NatureConvTorso)
    with pytest.raises(ValueError, match="no torso"):
        build_torso((2, 3))


@pytest.mark.parametrize("fc_size", [512, None])
def test_nature_conv_torso_channels_last_matches_contiguous_math(fc_size):
    """Training on CPU runs the convolutions on channels-last frames (no-grad calls keep the
    contiguous layout); outputs and gradients must equal the plain contiguous (N, C, H, W)
    computation through the same layers to float tolerance."""
    torch.manual_seed(0)
    torso = NatureConvTorso((4, 84, 84), fc_size=fc_size)
    reference = copy.deepcopy(torso)
    frames = torch.randint(0, 256, (2, 3, 4, 84, 84), dtype=torch.uint8)

    seen = []
    torso.conv[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    out = torso(frames)
    assert seen[0].is_contiguous(memory_format=torch.channels_last) and not seen[0].is_contiguous()
    with torch.no_grad():
        torso(frames)
    assert seen[1].is_contiguous()

    x = frames.reshape(6, 4, 84, 84).float() / 255.0
    assert x.is_contiguous()
    expected = reference.conv(x)
    if fc_size is not None:
        expected = reference.fc(expected)
    expected = expected.reshape(2, 3, -1)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)

    weights = torch.randn_like(out)
    (out * weights).sum().backward()
    (expected * weights).sum().backward()
    for (name, p), q in zip(torso.named_parameters(), reference.parameters()):
        assert p.is_contiguous(), name  # checkpoints hold plain tensors
        # Relative to the gradient's norm: a weight gradient sums thousands of products whose order
        # differs between the two layouts, so single elements near zero differ relatively more.
        error = float((p.grad - q.grad).norm() / q.grad.norm())
        assert error < 1e-5, f"{name}: relative gradient error {error:.2e}"


def test_layers_equal_nn_sequential_with_the_same_parameters():
    """``Layers`` skips each inner layer's hook dispatch: same outputs, gradients and state-dict
    names as ``nn.Sequential`` of the same layers."""
    torch.manual_seed(0)
    layers = Layers(torch.nn.Conv2d(4, 16, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(1024, 6))
    sequential = torch.nn.Sequential(*copy.deepcopy(list(layers)))
    assert list(layers.state_dict()) == list(sequential.state_dict())
    x = (torch.rand(5, 4, 10, 10) < 0.3).float()
    out, expected = layers(x), sequential(x)
    assert torch.equal(out, expected)
    out.square().sum().backward()
    expected.square().sum().backward()
    for a, b in zip(layers.parameters(), sequential.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
