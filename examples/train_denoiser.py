"""Trains a small CNN denoiser with L1 and with L1 + lambda * FLIP, and compares them.

The images are the colour photographs bundled inside the scikit-image wheel (``skimage.data``:
nothing is downloaded). For each run (L1 alone, then L1 + lambda * FLIP for each
``--flip-weights`` value) the same network (same initial weights, same data order) is trained on
fresh random crops and noise; the script prints each run's mean FLIP (``flip_loss.FLIPMetric``, the
published metric) and PSNR on held-out crops, and writes into ``--out`` ``loss_curves.png``,
``error_maps.png`` (a held-out crop, each run's output and FLIP map) and ``metrics.json``.

    python examples/train_denoiser.py                      # defaults: a few minutes on 2 CPU cores
    python examples/train_denoiser.py --flip-weights 0.3 1 3 --steps 600
    python examples/train_denoiser.py --steps 3 --crop 32  # smoke test
    torchrun --nproc_per_node=2 examples/train_denoiser.py # the same training on 2 processes (DDP)

Needs ``scikit-image`` (``pip install -r requirements-test.txt``) and matplotlib. Uses CUDA when
available (``--device``). Under ``torchrun`` it trains with ``DistributedDataParallel`` the model
one process would (``Processes``), and reports the FLIP over all held-out crops.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import flip_loss
from flip_loss.colormaps import MAGMA, apply_colormap

TRAIN_IMAGES = ("astronaut", "coffee", "rocket", "hubble_deep_field")
HELD_OUT_IMAGES = ("chelsea", "immunohistochemistry")


def load_images(names):
    """The named skimage.data images as 3 x H x W float32 sRGB tensors in [0, 1]."""
    try:
        from skimage import data
    except ImportError:
        sys.exit(
            "train_denoiser.py needs scikit-image for its bundled images: "
            "pip install -r requirements-test.txt (or pip install scikit-image)"
        )
    out = []
    for name in names:
        a = np.asarray(getattr(data, name)())
        if a.ndim == 2:
            a = np.repeat(a[..., None], 3, axis=2)
        out.append(torch.from_numpy(np.ascontiguousarray(a[..., :3])).permute(2, 0, 1).float() / 255.0)
    return out


def random_crops(images, n, size, gen):
    crops = []
    for _ in range(n):
        img = images[int(torch.randint(len(images), (1,), generator=gen))]
        _, h, w = img.shape
        y = int(torch.randint(h - size + 1, (1,), generator=gen))
        x = int(torch.randint(w - size + 1, (1,), generator=gen))
        crop = img[:, y : y + size, x : x + size]
        if bool(torch.rand((), generator=gen) < 0.5):
            crop = crop.flip(-1)
        crops.append(crop)
    return torch.stack(crops)


def add_noise(clean, sigma, gen):
    return (clean + sigma * torch.randn(clean.shape, generator=gen)).clamp(0.0, 1.0)


class Denoiser(nn.Module):
    """A DnCNN-style residual denoiser: predicts the noise and subtracts it."""

    def __init__(self, channels=32, depth=5):
        super().__init__()
        layers = [nn.Conv2d(3, channels, 3, padding=1), nn.ReLU(inplace=True)]
        for _ in range(depth - 2):
            layers += [nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(inplace=True)]
        layers.append(nn.Conv2d(channels, 3, 3, padding=1))
        self.net = nn.Sequential(*layers)

    def forward(self, noisy):
        return noisy - self.net(noisy)


class Processes:
    """This process's part of the work: all of it when run on its own; under torchrun (``WORLD_SIZE``
    > 1, one machine or several) its rank's share, in a process group it joins (gloo on the CPU,
    NCCL on ``cuda:LOCAL_RANK``) unless the program calling it has one already. Every step still
    draws the same ``--batch`` crops (the global batch, which must divide among the processes); each
    process takes its share, computes L1 and FLIP on it, and DDP averages the gradients, so the
    processes train the same model as one process would (up to float rounding) and their parameters
    stay identical. The held-out crops are shared out too, and ``FLIPMetric`` syncs its statistics
    across the processes in ``compute()``: the reported FLIP is the number one process reports.
    Only rank 0 prints and writes the outputs."""

    def __init__(self, device_choice):
        import torch.distributed as dist

        use_cuda = device_choice == "cuda" or (device_choice == "auto" and torch.cuda.is_available())
        self.device = torch.device("cuda" if use_cuda else "cpu")
        self.rank, self.size, self._owns_group = 0, 1, False
        joined = dist.is_available() and dist.is_initialized()
        if not joined and int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return
        if use_cuda:
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(self.device)
        if not joined:
            dist.init_process_group("nccl" if use_cuda else "gloo")
            self._owns_group = True
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    @property
    def main(self):
        """Whether this process prints and writes (rank 0)."""
        return self.rank == 0

    def share(self, batch):
        """This process's share of a batch that every process holds alike: every size-th item."""
        return batch[self.rank :: self.size]

    def sum(self, values):
        """The element-wise sums of ``values`` (floats) over the processes."""
        if self.size == 1:
            return list(values)
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    def wrap(self, model):
        """The model as the training step uses it: under DistributedDataParallel when shared out."""
        if self.size == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[self.device] if self.device.type == "cuda" else None)

    def close(self):
        if self._owns_group:
            import torch.distributed as dist

            dist.destroy_process_group()


def psnr_per_image(output, clean):
    """float64, so that sums over the processes' shares match one process's sum closely."""
    mse = (output.clamp(0, 1).double() - clean.double()).square().flatten(1).mean(1)
    return 10 * torch.log10(1.0 / mse.clamp_min(1e-12))


def psnr(output, clean):
    return psnr_per_image(output, clean).mean().item()


@torch.no_grad()
def evaluate(model, noisy, clean, ppd, processes, batch=16):
    """(mean FLIP over all held-out pixels, mean PSNR) of the model's outputs (or of the noisy
    input when model is None). Each process evaluates its share of the crops; FLIPMetric syncs
    across the processes in compute() (every process must call this)."""
    metric = flip_loss.FLIPMetric(pixels_per_degree=ppd)
    noisy, clean = processes.share(noisy), processes.share(clean)
    psnr_sum = 0.0
    for i in range(0, len(noisy), batch):
        x = noisy[i : i + batch].to(processes.device)
        c = clean[i : i + batch].to(processes.device)
        y = (x if model is None else model(x)).clamp(0, 1)
        metric.update(y, c)
        psnr_sum += psnr_per_image(y, c).sum().item()
    psnr_sum, count = processes.sum([psnr_sum, len(noisy)])
    return metric.compute().pooled.mean, psnr_sum / count


def train(run_name, flip_weight, args, train_images, eval_noisy, eval_clean, processes):
    """Trains one run; returns (model, history, held-out results). Under torchrun every process
    calls it and trains the same model on its share of each batch."""
    device = processes.device
    torch.manual_seed(args.seed)  # the same initial weights in every process (DDP checks them)
    model = Denoiser(args.channels, args.depth).to(device)
    net = processes.wrap(model)
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(args.steps, 1), eta_min=args.lr * 0.05)
    flip = flip_loss.FLIPLoss(pixels_per_degree=args.ppd)
    gen = torch.Generator().manual_seed(args.seed + 1)  # same data and noise for every run
    history = {"step": [], "l1": [], "flip": [], "eval_step": [], "eval_flip": []}
    eval_every = max(args.steps // 10, 1)
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        # Every process draws the whole batch (the same generator) and keeps its share.
        clean = random_crops(train_images, args.batch, args.crop, gen)
        noisy = add_noise(clean, args.sigma, gen)
        clean, noisy = processes.share(clean).to(device), processes.share(noisy).to(device)
        out = net(noisy)
        l1 = F.l1_loss(out, clean)
        if flip_weight > 0:
            f = flip(out, clean)
            loss = l1 + flip_weight * f
        else:
            with torch.no_grad():
                f = flip(out, clean)  # logged only
            loss = l1
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        # The batch's losses: the mean of the processes' (equal) shares.
        l1_sum, flip_sum = processes.sum([l1.item(), f.item()])
        history["step"].append(step)
        history["l1"].append(l1_sum / processes.size)
        history["flip"].append(flip_sum / processes.size)
        if step % eval_every == 0 or step == args.steps:
            model.eval()
            history["eval_step"].append(step)
            history["eval_flip"].append(evaluate(model, eval_noisy, eval_clean, args.ppd, processes)[0])
            model.train()
    seconds = time.perf_counter() - t0
    model.eval()
    mean_flip, mean_psnr = evaluate(model, eval_noisy, eval_clean, args.ppd, processes)
    if processes.main:
        print(
            f"  {run_name:<18} trained {args.steps} steps in {seconds:6.1f} s: held-out mean FLIP "
            f"{mean_flip:.4f}, PSNR {mean_psnr:.2f} dB",
            flush=True,
        )
    return model, history, {"flip": mean_flip, "psnr": mean_psnr, "seconds": seconds}


def smooth(values, k):
    if len(values) < k or k <= 1:
        return np.asarray(values, dtype=np.float64)
    c = np.cumsum(np.insert(np.asarray(values, dtype=np.float64), 0, 0.0))
    head = c[1:k] / np.arange(1, k)
    return np.concatenate([head, (c[k:] - c[:-k]) / k])


def plot_curves(path, runs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4), dpi=80)
    for name, (history, _) in runs.items():
        k = max(len(history["step"]) // 25, 1)
        axes[0].plot(history["step"], smooth(history["l1"], k), label=name)
        axes[1].plot(history["step"], smooth(history["flip"], k), label=name)
        axes[2].plot(history["eval_step"], history["eval_flip"], marker="o", markersize=3, label=name)
    axes[0].set_title("training L1 (smoothed)")
    axes[1].set_title("training FLIP (smoothed)")
    axes[2].set_title("held-out mean FLIP")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


@torch.no_grad()
def plot_error_maps(path, clean, noisy, outputs, ppd):
    """clean / noisy / outputs (name -> 3 x H x W) in the top row, FLIP maps below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = [("noisy input", noisy)] + list(outputs.items())
    fig, axes = plt.subplots(2, len(cols) + 1, figsize=(2.4 * (len(cols) + 1), 5.4), dpi=72, layout="constrained")
    axes[0, 0].imshow(clean.permute(1, 2, 0).numpy())
    axes[0, 0].set_title("clean (reference)", fontsize=9)
    axes[1, 0].axis("off")
    for j, (name, img) in enumerate(cols, start=1):
        img = img.clamp(0, 1)
        emap = flip_loss.ldr_flip(img[None], clean[None], ppd, eps=0.0)[0, 0]
        axes[0, j].imshow(img.permute(1, 2, 0).numpy())
        axes[0, j].set_title(f"{name}\nPSNR {psnr(img[None], clean[None]):.2f} dB", fontsize=9)
        axes[1, j].imshow(apply_colormap(emap.numpy(), MAGMA))
        axes[1, j].set_title(f"FLIP map, mean {emap.mean().item():.4f}", fontsize=9)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.savefig(path)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=400, help="training steps per run (default 400)")
    p.add_argument("--crop", type=int, default=48, help="training and evaluation crop size (default 48)")
    p.add_argument(
        "--batch",
        type=int,
        default=8,
        help="crops per training step, shared out among the processes under torchrun (default 8)",
    )
    p.add_argument("--sigma", type=float, default=0.1, help="noise standard deviation in sRGB units (default 0.1)")
    p.add_argument(
        "--flip-weights",
        type=float,
        nargs="+",
        default=[0.3],
        metavar="LAMBDA",
        help="lambda of each L1 + lambda * FLIP run (default: 0.3, the README's advice)",
    )
    p.add_argument("--eval-crops", type=int, default=24, help="held-out crops (default 24)")
    p.add_argument("--display-size", type=int, default=128, help="size of the crop in error_maps.png")
    p.add_argument("--channels", type=int, default=32)
    p.add_argument("--depth", type=int, default=5)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument(
        "--ppd",
        type=float,
        default=flip_loss.DEFAULT_PPD,
        help="pixels per degree of the FLIP loss and metric (default 67)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--out", default="denoiser_out", help="output directory (default denoiser_out)")
    args = p.parse_args(argv)
    if args.steps < 1 or args.crop < 8 or args.batch < 1 or args.eval_crops < 1:
        p.error("--steps, --batch and --eval-crops must be >= 1 and --crop >= 8")
    if any(w < 0 or not math.isfinite(w) for w in args.flip_weights):
        p.error("--flip-weights must be finite and >= 0")

    processes = Processes(args.device)
    try:
        return run(args, processes)
    finally:
        processes.close()


def run(args, processes):
    if args.batch % processes.size:
        raise SystemExit(
            f"train_denoiser.py: --batch {args.batch} must be a multiple of the {processes.size} "
            "processes, which share every batch"
        )
    device = processes.device
    if processes.main:
        os.makedirs(args.out, exist_ok=True)
    train_images = load_images(TRAIN_IMAGES)
    held_out = load_images(HELD_OUT_IMAGES)
    crop = min(args.crop, *(min(img.shape[1:]) for img in train_images + held_out))
    args.crop = crop
    eval_gen = torch.Generator().manual_seed(12345)
    eval_clean = random_crops(held_out, args.eval_crops, crop, eval_gen)
    eval_noisy = add_noise(eval_clean, args.sigma, eval_gen)
    # The displayed crop: the cat's face region of chelsea, fixed noise.
    d = min(args.display_size, *held_out[0].shape[1:])
    show_clean = (
        held_out[0][:, 60 : 60 + d, 150 : 150 + d]
        if held_out[0].shape[1] >= 60 + d and held_out[0].shape[2] >= 150 + d
        else held_out[0][:, :d, :d]
    )
    show_noisy = add_noise(show_clean, args.sigma, torch.Generator().manual_seed(7))

    where = f"{processes.size} processes (DDP), rank 0 on {device}" if processes.size > 1 else f"device {device}"
    if processes.main:
        print(
            f"{where}; {args.steps} steps of {args.batch} crops of {crop}x{crop}, noise sigma "
            f"{args.sigma}; held out: {args.eval_crops} crops of {', '.join(HELD_OUT_IMAGES)}",
            flush=True,
        )
    base_flip, base_psnr = evaluate(None, eval_noisy, eval_clean, args.ppd, processes)
    runs = {}
    results = {"noisy input": {"flip": base_flip, "psnr": base_psnr}}
    outputs = {}
    configs = [("L1", 0.0)] + [(f"L1 + {w:g}*FLIP", w) for w in args.flip_weights if w > 0]
    for name, w in configs:
        model, history, res = train(name, w, args, train_images, eval_noisy, eval_clean, processes)
        runs[name] = (history, res)
        results[name] = dict(res, flip_weight=w)
        if processes.main:
            with torch.no_grad():
                outputs[name] = model(show_noisy[None].to(device))[0].cpu()

    if not processes.main:
        return 0
    plot_curves(os.path.join(args.out, "loss_curves.png"), runs)
    plot_error_maps(os.path.join(args.out, "error_maps.png"), show_clean, show_noisy, outputs, args.ppd)
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(
            {
                "args": vars(args),
                "device": str(device),
                "processes": processes.size,
                "held_out": results,
                "history": {k: v[0] for k, v in runs.items()},
            },
            f,
            indent=1,
        )

    print(f"\nheld-out results ({args.eval_crops} crops, FLIP at {args.ppd:.1f} ppd):")
    print(f"  {'run':<18} {'mean FLIP':>10} {'PSNR (dB)':>10}")
    for name, r in results.items():
        print(f"  {name:<18} {r['flip']:>10.4f} {r['psnr']:>10.2f}")
    print(
        f"wrote {os.path.join(args.out, 'loss_curves.png')}, {os.path.join(args.out, 'error_maps.png')} "
        f"and {os.path.join(args.out, 'metrics.json')}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
