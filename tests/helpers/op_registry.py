"""The registry of the ops the tests run through one tester (tests/ops/test_op_tester.py): one entry
per differentiable op of ``torch.ops.flip``, saying how to call it, what to compare it with and which
checks apply. The tester runs every entry through the same checks: the forward and its gradients
against the oracle over device x dtype, float64 gradcheck, opcheck (the op and its backward),
autocast and the meta device / FakeTensor; a new op is tested by adding one entry here (and its name
to op_names.py, for the registry checks of test_op_checks.py).

Every call builds its arguments afresh from fixed seeds, in float64 on the CPU; the tester casts and
moves the image tensors (the leading ``images`` arguments) for each dtype and device."""

from dataclasses import dataclass
from typing import Callable

import torch

from flip_loss import oracle
from flip_loss.constants import TONE_MAPPERS

from conformance import load_crop

PPD_SMALL = 4.0  # small radii (CSF 1, features 2) keep gradcheck quick


def pair(shape, seed=0, dtype=torch.float64, lo=0.1, hi=0.9):
    g = torch.Generator().manual_seed(seed)
    a = lo + (hi - lo) * torch.rand(shape, generator=g, dtype=dtype)
    b = lo + (hi - lo) * torch.rand(shape, generator=g, dtype=dtype)
    return a, b


def hdr_pair(shape=(2, 3, 12, 14), seed=0, dtype=torch.float64):
    """HDR images over about six stops and a noisy copy (test, reference)."""
    g = torch.Generator().manual_seed(seed)
    ref = torch.exp2(6 * torch.rand(shape, generator=g, dtype=dtype) - 3)
    test = ref * (1 + 0.2 * torch.randn(shape, generator=g, dtype=dtype)).clamp(min=0.1)
    return test, ref


def crop(name):
    """The committed crop ``tests/data/<name>.png`` as a 1 x 3 x H x W float64 sRGB batch."""
    return torch.from_numpy(load_crop(name)).permute(2, 0, 1).unsqueeze(0).double().contiguous()


@dataclass(frozen=True)
class Call:
    """One call of an op: ``args()`` gives its arguments, the first ``images`` of them the image
    tensors (differentiated by gradcheck, cast and moved per dtype and device)."""

    id: str
    args: Callable[[], tuple]
    images: int = 2


@dataclass(frozen=True)
class OpCheck:
    """One ``torch.library.opcheck`` of ``op`` (the forward or a backward op): float32 arguments on
    the CPU; ``requires_grad``: how many leading tensors require grad."""

    id: str
    op: str
    args: Callable[[], tuple]
    requires_grad: int = 0
    test_utils: tuple = ()


@dataclass(frozen=True)
class OpEntry:
    """One op of ``torch.ops.flip`` and what the tester does with it.

    ``oracle``: the same function in pure PyTorch, taking the op's arguments, or None; its first
    output (the error map) is compared with the op's. ``oracle_calls``: the calls compared on the
    CPU in float64 (maps within ``map_atol``, gradients within ``grad_rtol``/``grad_atol``), in
    float32 (maps) and on CUDA against the CPU kernels (the promised agreement, flip_loss.gpu_agreement).
    ``gradcheck_calls``: float64 gradcheck (``gradcheck_eps``). ``opchecks``: opcheck of the op and its
    backward. ``autocast``: registered for torch.autocast (op_registration.AUTOCAST_OPS)."""

    name: str
    oracle: Callable | None
    oracle_calls: tuple = ()
    gradcheck_calls: tuple = ()
    opchecks: tuple = ()
    autocast: bool = True
    cuda: bool = True  # has CUDA kernels
    gradcheck_eps: float = 1e-7
    map_atol: float = 1e-12
    grad_rtol: float = 1e-9
    grad_atol: float = 1e-12
    autocast_call: Call | None = None  # the autocast check's call (the first gradcheck call if None)


def _ldr(space="srgb", ppd=PPD_SMALL, shape=(2, 3, 5, 6), seed=0):
    def args():
        a, b = pair(shape, seed=seed)
        return a, b, ppd, space, 1e-15

    return args


def _noisy_blocks(ppd):
    def args():
        ref = crop("blocks")
        noise = 0.05 * torch.randn(ref.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        return (ref + noise).clamp(0, 1), ref, ppd, "srgb", 1e-15

    return args


def _toys_linear():
    img = crop("toys")
    return oracle.srgb_to_linear(img), oracle.srgb_to_linear(torch.roll(img, 1, dims=-1))


def _autocast_images(shape=(2, 3, 16, 20)):
    """float32 images and a noisy copy (those of the autocast test this check replaced)."""
    g = torch.Generator().manual_seed(0)
    a = torch.rand(shape, generator=g)
    return a, (a + 0.1 * torch.randn(shape, generator=g)).clamp(0, 1)


def _opcheck_pair():
    return pair((2, 3, 6, 7), dtype=torch.float32)


def _hdr_oracle(test, ref, exposures, counts, ppd, tone_mapper, eps):
    return oracle.hdr_flip(test, ref, ppd, tone_mapper, exposures, counts, eps)


def _hdr_gradcheck(tone_mapper):
    def args():
        test, ref = hdr_pair((1, 3, 5, 6), seed=2)
        exposures = torch.tensor([[-2.0, 0.0, 1.5]], dtype=torch.float64)
        return test, ref, exposures, torch.tensor([3]), 4.0, tone_mapper, 1e-15

    return args


def _hdr_opcheck_args():
    test, ref = hdr_pair((2, 3, 6, 7), dtype=torch.float32)
    return test, ref, torch.tensor([[-1.0, 0.0, 1.0], [0.0, 2.0, 2.0]]), torch.tensor([3, 2]), 30.0, "aces", 1e-15


def _hdr_backward_opcheck_args():
    test, ref, ex, counts, ppd, tm, eps = _hdr_opcheck_args()
    _, _, index = torch.ops.flip.hdr_flip(test, ref, ex, counts, ppd, tm, eps)
    return torch.rand(2, 1, 6, 7), test, ref, ex, counts, index, ppd, tm, eps, [True, True]


def _hdr_oracle_call():
    test, ref = hdr_pair((2, 3, 16, 18), seed=4)
    exposures = torch.tensor([[-2.0, 0.0, 2.0, 4.0], [-1.0, 1.0, 3.0, 3.0]], dtype=torch.float64)
    return test, ref, exposures, torch.tensor([4, 3]), 30.0, "aces", 1e-15


def _sensitivities_images(shape, seed=0):
    """The images of tests/ops/test_sensitivities.py (test, reference, weight), in float64."""
    g = torch.Generator().manual_seed(seed)
    ref = torch.rand(shape, generator=g, dtype=torch.float64)
    test = (ref + 0.08 * torch.randn(shape, generator=g, dtype=torch.float64)).clamp(0, 1)
    weight = torch.rand(shape[:-3] + (1,) + shape[-2:], generator=g, dtype=torch.float64)
    return test, ref, weight


def _kept_sensitivities_backward_args():
    test, ref, weight = (t.float() for t in _sensitivities_images((2, 3, 6, 7)))
    _, sens = torch.ops.flip._ldr_flip_with_sensitivities(test, ref, 30.0, "srgb", 1e-15, [True, False])
    return weight, sens, test, ref, 30.0, "srgb", [True, False]


def _multiscale_gradcheck_images():
    g = torch.Generator().manual_seed(3)
    a = 0.1 + 0.8 * torch.rand(1, 3, 7, 9, generator=g, dtype=torch.float64)
    b = 0.1 + 0.8 * torch.rand(1, 3, 7, 9, generator=g, dtype=torch.float64)
    return a, b


def _multiscale_oracle(a, b, ppds, weights, space, eps, keep):
    total = sum(weights)
    out = 0
    for ppd, w in zip(ppds, weights):
        out = out + oracle.ldr_flip(a, b, ppd, space, eps) * (w / total)
    return out


def _multiscale_backward_args():
    a, b = _multiscale_gradcheck_images()
    _, sens = torch.ops.flip._ldr_flip_multiscale(a, b, [3.0, 5.0], [0.4, 0.6], "srgb", 1e-15, [False, True])
    grad = torch.rand(1, 1, 7, 9, dtype=torch.float64)
    return grad, sens, a, b, [3.0, 5.0], [0.4, 0.6], "srgb", [False, True]


def _code_pair():
    """Two uint8 images of 8-bit codes (ldr_flip's forward takes them; they have no gradient)."""
    g = torch.Generator().manual_seed(5)
    return tuple(torch.randint(0, 256, (2, 3, 6, 7), generator=g, dtype=torch.uint8) for _ in range(2))


# The backward ops' opcheck leaves out the tests that differentiate them (they have no derivative).
NO_DOUBLE_BACKWARD = ("test_schema", "test_autograd_registration", "test_faketensor")

OPS = (
    OpEntry(
        name="ldr_flip",
        oracle=oracle.ldr_flip,
        autocast_call=Call("images", lambda: (*_autocast_images(), 67.0, "srgb", 1e-15)),
        oracle_calls=(Call("blocks-ppd30", _noisy_blocks(30.0)), Call("blocks-ppd67", _noisy_blocks(67.0206451))),
        gradcheck_calls=(
            Call("srgb", _ldr("srgb")),
            Call("linear", _ldr("linear")),
            Call("larger-radius", _ldr("srgb", 12.0, (1, 3, 9, 7), seed=3)),
        ),
        opchecks=(
            OpCheck("8-bit-codes", "ldr_flip", lambda: (*_code_pair(), 30.0, "srgb", 1e-15)),
            OpCheck("batch", "ldr_flip", lambda: (*_opcheck_pair(), 30.0, "srgb", 1e-15), requires_grad=2),
            OpCheck("unbatched", "ldr_flip", lambda: (*(x[0] for x in _opcheck_pair()), 30.0, "linear", 1e-15), 2),
            OpCheck(
                "backward",
                "ldr_flip_backward",
                lambda: (torch.rand(2, 1, 6, 7), *_opcheck_pair(), 30.0, "srgb", 1e-15, [True, True]),
            ),
            OpCheck(
                "backward-one-input",
                "ldr_flip_backward",
                lambda: (torch.rand(2, 1, 6, 7), *_opcheck_pair(), 30.0, "srgb", 1e-15, [True, False]),
            ),
        ),
    ),
    OpEntry(
        name="hdr_flip",
        oracle=_hdr_oracle,
        oracle_calls=(Call("two-images-given-exposures", _hdr_oracle_call),),
        gradcheck_calls=tuple(Call(tm, _hdr_gradcheck(tm)) for tm in TONE_MAPPERS),
        opchecks=(
            OpCheck("given-exposures", "hdr_flip", _hdr_opcheck_args, requires_grad=2),
            OpCheck("backward", "hdr_flip_backward", _hdr_backward_opcheck_args),
        ),
        grad_rtol=1e-8,
    ),
    OpEntry(
        name="csf_filter",
        oracle=oracle.csf_filter,
        oracle_calls=(Call("toys", lambda: (oracle.linear_rgb_to_opponent(_toys_linear()[0]), 67.0), images=1),),
        gradcheck_calls=(
            Call("opponent", lambda: (oracle.linear_rgb_to_opponent(pair((2, 3, 6, 5))[0] * 0.8), PPD_SMALL), images=1),
        ),
        opchecks=(
            OpCheck("opponent", "csf_filter", lambda: (oracle.linear_rgb_to_opponent(_opcheck_pair()[0]), 30.0), 1),
            OpCheck(
                "backward",
                "csf_filter_backward",
                lambda: (torch.rand(2, 3, 6, 7), oracle.linear_rgb_to_opponent(_opcheck_pair()[0]), 30.0),
            ),
        ),
        gradcheck_eps=1e-6,
        grad_atol=1e-10,
    ),
    OpEntry(
        name="hunt_hyab",
        oracle=oracle.hunt_hyab,
        oracle_calls=(Call("toys", lambda: (*_toys_linear(), 1e-15)),),
        gradcheck_calls=(Call("rgb", lambda: (*pair((2, 3, 4, 5)), 1e-15)),),
        opchecks=(
            OpCheck("rgb", "hunt_hyab", lambda: (*_opcheck_pair(), 1e-15), requires_grad=2),
            OpCheck(
                "backward",
                "hunt_hyab_backward",
                lambda: (torch.rand(2, 1, 6, 7), *_opcheck_pair(), 1e-15, [True, True]),
            ),
        ),
        grad_atol=1e-10,
    ),
    OpEntry(
        name="feature_difference",
        oracle=oracle.feature_difference,
        oracle_calls=(Call("toys-green", lambda: (*(x[:, 1:2] for x in _toys_linear()), 67.0, 1e-15)),),
        gradcheck_calls=(Call("one-channel", lambda: (*pair((2, 1, 7, 6)), PPD_SMALL, 1e-15)),),
        opchecks=(
            OpCheck(
                "one-channel",
                "feature_difference",
                lambda: (*pair((2, 1, 6, 7), seed=4, dtype=torch.float32), 30.0, 1e-15),
                requires_grad=2,
            ),
            OpCheck(
                "backward",
                "feature_difference_backward",
                lambda: (
                    torch.rand(2, 1, 6, 7),
                    *pair((2, 1, 6, 7), seed=4, dtype=torch.float32),
                    30.0,
                    1e-15,
                    [False, True],
                ),
            ),
        ),
        grad_atol=1e-10,
    ),
    # ldr_flip's autograd keeps the sensitivities through this pair (tests/ops/test_sensitivities.py).
    OpEntry(
        name="_ldr_flip_with_sensitivities",
        oracle=lambda a, b, ppd, space, eps, keep: oracle.ldr_flip(a, b, ppd, space, eps),
        oracle_calls=(Call("blocks-ppd30", lambda: (*_noisy_blocks(30.0)(), [True, True])),),
        gradcheck_calls=(
            Call(
                "kept",
                lambda: (
                    *(t.clamp(0.05, 0.95) for t in _sensitivities_images((1, 3, 6, 7))[:2]),
                    4.0,
                    "srgb",
                    1e-15,
                    [True, True],
                ),
            ),
        ),
        opchecks=(
            OpCheck(
                "both-kept",
                "_ldr_flip_with_sensitivities",
                lambda: (
                    *(t.float() for t in _sensitivities_images((2, 3, 6, 7))[:2]),
                    30.0,
                    "srgb",
                    1e-15,
                    [True, True],
                ),
                requires_grad=2,
            ),
            OpCheck(
                "one-kept",
                "_ldr_flip_with_sensitivities",
                lambda: (
                    *(t.float() for t in _sensitivities_images((2, 3, 6, 7))[:2]),
                    30.0,
                    "linear",
                    1e-15,
                    [False, True],
                ),
            ),
            OpCheck(
                "backward",
                "_ldr_flip_backward_from_sensitivities",
                _kept_sensitivities_backward_args,
                test_utils=NO_DOUBLE_BACKWARD,
            ),
        ),
        autocast=False,
    ),
    # The CPU-only multi-scale op of the Python API's multi-scale LDR-FLIP (tests/api/test_multiscale.py).
    OpEntry(
        name="_ldr_flip_multiscale",
        oracle=_multiscale_oracle,
        oracle_calls=(
            Call(
                "blocks-three-scales",
                lambda: (
                    *_noisy_blocks(30.0)()[:2],
                    [15.0, 30.0, 67.02],
                    [0.25, 0.0, 0.75],
                    "srgb",
                    1e-15,
                    [True, True],
                ),
            ),
        ),
        gradcheck_calls=(
            Call(
                "two-scales",
                lambda: (*_multiscale_gradcheck_images(), [3.0, 5.0], [0.4, 0.6], "srgb", 1e-15, [True, True]),
            ),
        ),
        opchecks=(
            OpCheck(
                "two-scales",
                "_ldr_flip_multiscale",
                lambda: (*_multiscale_gradcheck_images(), [3.0, 5.0], [0.4, 0.6], "srgb", 1e-15, [True, True]),
                requires_grad=2,
            ),
            OpCheck(
                "one-scale-nothing-kept",
                "_ldr_flip_multiscale",
                lambda: (*_multiscale_gradcheck_images(), [3.0], [1.0], "linear", 0.0, [False, False]),
            ),
            OpCheck(
                "backward", "_ldr_flip_multiscale_backward", _multiscale_backward_args, test_utils=NO_DOUBLE_BACKWARD
            ),
        ),
        cuda=False,
    ),
)

BY_NAME = {entry.name: entry for entry in OPS}
