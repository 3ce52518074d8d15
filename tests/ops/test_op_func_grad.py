"""Reverse-mode torch.func transforms through the ops: ``torch.func.grad``, ``vjp`` and ``jacrev``
give the gradients eager autograd gives, bit for bit, through the public ops, the Python API and
``FLIPLoss``, also with vmap inside them (computed per example) or around them (per-example
gradients). Beyond one gradient level (grad of grad, jacrev of jacrev) and with forward mode around
a gradient (jvp of grad, hessian) the Python API computes with the portable path, whose autograd
graph every transform follows; the raw ops, whose nodes are first order, raise NotImplementedError
naming what is missing, never a silent zero."""

import pytest
import torch
from torch.func import grad, hessian, jacfwd, jacrev, jvp, vmap, vjp

import flip_loss
from flip_loss import oracle
from flip_loss.constants import DEFAULT_EPS

PPD = 67.0


def _images(seed, shape=(3, 12, 14), scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * scale for _ in range(2))


def _eager_grad(f, x):
    x = x.detach().clone().requires_grad_()
    f(x).backward()
    return x.grad


LDR_TEST, LDR_REF = _images(1)
HDR_TEST, HDR_REF = _images(2, (1, 3, 12, 14), 4.0)
OPPONENT, _ = _images(3)

SCALARS = {
    "ldr_flip, test": (lambda x: flip_loss.ldr_flip(x, LDR_REF, PPD).mean(), LDR_TEST),
    "ldr_flip, reference": (lambda x: flip_loss.ldr_flip(LDR_TEST, x, PPD).mean(), LDR_REF),
    "ldr_flip, two scales": (lambda x: flip_loss.ldr_flip(x, LDR_REF, [PPD, 30.0]).mean(), LDR_TEST),
    "hdr_flip": (lambda x: flip_loss.hdr_flip(x, HDR_REF, PPD).mean(), HDR_TEST),
    "FLIPLoss": (lambda x: flip_loss.FLIPLoss()(x, LDR_REF), LDR_TEST),
    "csf_filter": (lambda x: torch.ops.flip.csf_filter(x, PPD).square().sum(), OPPONENT),
    "hunt_hyab": (lambda x: torch.ops.flip.hunt_hyab(x, OPPONENT, 0.0).sum(), LDR_TEST),
    "feature_difference": (lambda x: torch.ops.flip.feature_difference(x, LDR_REF[:1], PPD, 0.0).sum(), LDR_TEST[:1]),
}


@pytest.mark.parametrize("name", sorted(SCALARS))
def test_grad_is_eager_autograd(name):
    f, x = SCALARS[name]
    expected = _eager_grad(f, x)
    assert expected.abs().sum() > 0
    assert torch.equal(grad(f)(x), expected)


def test_vjp_and_jacrev_are_eager_autograd():
    def per_channel(x):
        return flip_loss.ldr_flip(x, LDR_REF, PPD).sum(dim=(-1, -2))

    out, pull = vjp(per_channel, LDR_TEST)
    (by_vjp,) = pull(torch.ones_like(out))
    assert torch.equal(by_vjp, _eager_grad(lambda x: per_channel(x).sum(), LDR_TEST))
    jacobian = jacrev(lambda x: flip_loss.ldr_flip(x, LDR_REF, PPD).mean())(LDR_TEST)
    assert torch.equal(jacobian, _eager_grad(lambda x: flip_loss.ldr_flip(x, LDR_REF, PPD).mean(), LDR_TEST))


@pytest.mark.parametrize("name", ["ldr_flip, test", "ldr_flip, two scales", "FLIPLoss"])
def test_vmap_inside_grad_is_per_sample(name):
    f, x = SCALARS[name]
    batch = torch.stack([x, x.flip(-1)])
    by_func = grad(lambda xs: vmap(f)(xs).sum())(batch)
    for i in range(2):
        assert torch.equal(by_func[i], _eager_grad(f, batch[i]))


def test_two_scales_under_vmap_keep_what_each_example_needs():
    """A vmapped image never says that it requires grad itself: multi-scale LDR-FLIP's one-op path
    looks inside, so that eager backward through vmap keeps the sensitivities it needs."""
    f, x = SCALARS["ldr_flip, two scales"]
    batch = torch.stack([x, x.flip(-2)]).requires_grad_()
    vmap(f)(batch).sum().backward()
    for i in range(2):
        assert torch.equal(batch.grad[i], _eager_grad(f, batch[i]))


BEYOND_FIRST_ORDER = {
    "jvp of grad": lambda f, x: jvp(grad(f), (x,), (x,))[1],
    "hessian": lambda f, x: hessian(f)(x),
    "jacfwd of jacrev": lambda f, x: jacfwd(jacrev(f))(x),
}


@pytest.mark.parametrize("transform", list(BEYOND_FIRST_ORDER))
def test_forward_mode_around_a_gradient_is_the_portable_paths(transform):
    x = LDR_TEST[..., :6, :7]
    ref = LDR_REF[..., :6, :7]
    run = BEYOND_FIRST_ORDER[transform]
    got = run(lambda y: flip_loss.ldr_flip(y, ref, PPD).mean(), x)
    expected = run(lambda y: oracle.ldr_flip(y, ref, PPD, "srgb", DEFAULT_EPS).mean(), x)
    assert expected.abs().max() > 1e-3
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("transform", list(BEYOND_FIRST_ORDER))
def test_forward_mode_around_a_gradient_of_a_raw_op_is_refused_as_forward_mode(transform):
    def f(x):
        return torch.ops.flip.ldr_flip(x, LDR_REF, PPD, "srgb", 0.0).mean()

    with pytest.raises(
        NotImplementedError, match="forward-mode automatic differentiation .* flip::ldr_flip has no JVP"
    ):
        BEYOND_FIRST_ORDER[transform](f, LDR_TEST)


@pytest.mark.parametrize("name", ["ldr_flip, test", "ldr_flip, reference", "hdr_flip", "FLIPLoss"])
def test_vmap_around_grad_gives_each_example_its_gradient(name):
    f, x = SCALARS[name]
    batch = torch.stack([x, x.flip(-1), x.flip(-2)])
    per_example = vmap(grad(f))(batch)
    for i in range(len(batch)):
        assert torch.equal(per_example[i], _eager_grad(f, batch[i]))


SECOND_LEVELS = [
    (lambda f: grad(lambda x: grad(f)(x).sum()), "grad over grad"),
    (lambda f: jacrev(jacrev(f)), "grad over grad"),
    (lambda f: grad(lambda x: vmap(grad(f))(torch.stack([x, x])).sum()), "grad over vmap over grad"),
]
SECOND_LEVEL_IDS = ["grad of grad", "jacrev of jacrev", "grad of vmap of grad"]


@pytest.mark.parametrize("transform, words", SECOND_LEVELS, ids=SECOND_LEVEL_IDS)
def test_a_second_gradient_level_is_the_portable_paths(transform, words):
    x = LDR_TEST[..., :6, :7]
    ref = LDR_REF[..., :6, :7]
    got = transform(lambda y: flip_loss.ldr_flip(y, ref, PPD).mean())(x)
    expected = transform(lambda y: oracle.ldr_flip(y, ref, PPD, "srgb", DEFAULT_EPS).mean())(x)
    assert expected.abs().max() > 1e-3
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("transform, words", SECOND_LEVELS, ids=SECOND_LEVEL_IDS)
def test_a_second_gradient_level_of_a_raw_op_is_refused(transform, words):
    def f(x):
        return torch.ops.flip.ldr_flip(x, LDR_REF, PPD, "srgb", 0.0).mean()

    with pytest.raises(NotImplementedError, match=f"flip: under torch.func .* this call is under {words}$"):
        transform(f)(LDR_TEST)


AROUND = {
    "ldr_flip": (
        lambda x: flip_loss.ldr_flip(x, LDR_REF, PPD),
        LDR_TEST,
        lambda x: oracle.ldr_flip(x, LDR_REF, PPD, "srgb", DEFAULT_EPS),
    ),
    "FLIPLoss": (
        lambda x: flip_loss.FLIPLoss(PPD, reduction="sum")(x, LDR_REF),
        LDR_TEST,
        lambda x: oracle.ldr_flip(x, LDR_REF, PPD, "srgb", DEFAULT_EPS).sum(),
    ),
}


@pytest.mark.parametrize("name", sorted(AROUND))
def test_autograd_around_a_func_gradient_is_the_portable_paths(name):
    """torch.func.grad of a function of a parameter that eager autograd differentiates: the gradient
    depends on the parameter, and its derivative is the portable path's (the compiled ops' node at
    the transform's level alone gave about half of it, silently)."""
    f, x, portable = AROUND[name]
    derivatives = []
    for fn in (f, portable):
        w = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
        g = grad(lambda z, fn=fn, w=w: fn(z * w).sum())(x)
        assert g.requires_grad
        derivatives.append(torch.autograd.grad(g.sum(), w)[0])
    assert derivatives[1].abs() > 1e-3
    torch.testing.assert_close(derivatives[0], derivatives[1], rtol=1e-12, atol=0)
    value = torch.func.grad_and_value(lambda z: f(z).sum())(x.clone().requires_grad_())[1]
    assert value.requires_grad  # the value keeps its graph too


def test_autograd_or_forward_mode_around_a_func_gradient_of_a_raw_op_is_refused():
    import torch.autograd.forward_ad as fwAD

    def f(z):
        return torch.ops.flip.ldr_flip(z, LDR_REF, PPD, "srgb", 0.0).sum()

    w = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    with pytest.raises(NotImplementedError, match="under grad with autograd or forward mode around it"):
        grad(lambda z: f(z * w))(LDR_TEST)
    with fwAD.dual_level(), pytest.raises(NotImplementedError, match="under grad with autograd or forward mode"):
        grad(f)(fwAD.make_dual(LDR_TEST, torch.ones_like(LDR_TEST)))
    with fwAD.dual_level(), pytest.raises(NotImplementedError, match="under grad with autograd or forward mode"):
        grad(lambda z: flip_loss.ldr_flip(z, LDR_REF, PPD).sum())(fwAD.make_dual(LDR_TEST, torch.ones_like(LDR_TEST)))
