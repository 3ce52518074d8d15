"""Saves the TorchScript modules that the C++ examples (examples/cpp) load.

    python examples/export_torchscript.py --out-dir build/examples-cpp [--ppd 67.02]

writes
  flip_loss.pt   torch.jit.script(FLIPLoss(reduction="none", eps=0)): forward(test, reference) -> the
                 N x 1 x H x W error map. eps=0 gives the published metric's values, as the
                 flip-loss command line and NVIDIA's evaluator compute them. Used by flip_infer.
  flip_model.pt  a tiny image-restoration model with the FLIP loss built in (TinyRestorer below):
                 forward(image) -> restored image, training_loss(image, reference) -> FLIP mean,
                 flip_map(image, reference) -> error map of the restored image. Its parameters are
                 trained in C++ by flip_train (torch::optim::Adam on module.parameters()).

The model's weights are fixed by a seed, so every export is identical. Loading either file needs
the flip ops in the process: C++ programs link flip_loss::flip_ops; Python imports flip_loss.
"""

import argparse
import os
import sys
import warnings

import torch

import flip_loss


class TinyRestorer(torch.nn.Module):
    """Three 3x3 convolutions predicting a residual: out = clamp(image + net(image), 0, 1).

    The last layer starts with small weights, so an untrained model returns almost its input and
    training starts from the FLIP of the input pair. The loss is a FLIPLoss submodule; in
    TorchScript it calls torch.ops.flip.ldr_flip, whose autograd kernel serves C++ training too.
    """

    def __init__(self, pixels_per_degree: float = flip_loss.DEFAULT_PPD, channels: int = 16, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, channels, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(channels, channels, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(channels, 3, 3, padding=1),
        )
        with torch.no_grad():
            for layer in self.net:
                if isinstance(layer, torch.nn.Conv2d):
                    fan_in = layer.in_channels * layer.kernel_size[0] * layer.kernel_size[1]
                    layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen) * (2.0 / fan_in) ** 0.5)
                    layer.bias.zero_()
            self.net[-1].weight.zero_()
        self.loss = flip_loss.FLIPLoss(pixels_per_degree=pixels_per_degree, reduction="mean")
        self.error_map = flip_loss.FLIPLoss(pixels_per_degree=pixels_per_degree, reduction="none", eps=0.0)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return (image + self.net(image)).clamp(0.0, 1.0)

    @torch.jit.export
    def training_loss(self, image: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
        return self.loss(self.forward(image), reference)

    @torch.jit.export
    def flip_map(self, image: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
        return self.error_map(self.forward(image), reference)


def _script(module: torch.nn.Module) -> torch.jit.ScriptModule:
    # torch.jit.script warns that TorchScript is deprecated (a FutureWarning from torch 2.15 on, a
    # DeprecationWarning before) and still works: this example exists to make TorchScript files
    # for the C++ programs.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`torch.jit.script` is deprecated")
        return torch.jit.script(module)


def export(out_dir: str, pixels_per_degree: float = flip_loss.DEFAULT_PPD):
    """Writes flip_loss.pt and flip_model.pt into out_dir; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    loss_path = os.path.join(out_dir, "flip_loss.pt")
    model_path = os.path.join(out_dir, "flip_model.pt")
    _script(flip_loss.FLIPLoss(pixels_per_degree=pixels_per_degree, reduction="none", eps=0.0)).save(loss_path)
    _script(TinyRestorer(pixels_per_degree=pixels_per_degree).eval()).save(model_path)
    return loss_path, model_path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default=".", help="directory for flip_loss.pt and flip_model.pt")
    parser.add_argument(
        "--ppd",
        type=float,
        default=flip_loss.DEFAULT_PPD,
        help="pixels per degree of both modules (default: %(default).4f)",
    )
    args = parser.parse_args(argv)
    if not flip_loss.HAS_EXTENSION:
        print(f"export_torchscript: flip_loss._C is not built: {flip_loss._ops.IMPORT_ERROR}", file=sys.stderr)
        return 1
    for path in export(args.out_dir, args.ppd):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
