"""Per-pixel agreement of our LDR-FLIP maps with flip-evaluator 1.7 (the parity target, docs/algorithm.md §7.1)."""

import functools

import numpy as np
import pytest
import torch

import conformance as C

pytest.importorskip("flip_evaluator")

IMPLEMENTATIONS = ("oracle-float64", "oracle-float32", "extension")


@functools.lru_cache(maxsize=None)
def _evaluator(case_id):
    _, test_hwc, ref_hwc, ppd = C.get_case(case_id)
    return C.evaluator_map(test_hwc, ref_hwc, ppd)


def _nchw(hwc, dtype):
    return torch.from_numpy(np.array(hwc, dtype=np.float32)).permute(2, 0, 1).unsqueeze(0).contiguous().to(dtype)


def _ours(impl, test_hwc, ref_hwc, ppd):
    if impl.startswith("oracle"):
        from flip_loss import oracle

        dtype = torch.float64 if impl.endswith("float64") else torch.float32
        out = oracle.ldr_flip(_nchw(test_hwc, dtype), _nchw(ref_hwc, dtype), ppd)
        assert out.dtype == dtype
    else:
        from flip_loss import _ops

        if not _ops.HAS_EXTENSION:
            pytest.skip(f"compiled extension not available ({_ops.IMPORT_ERROR})")
        out = torch.ops.flip.ldr_flip(
            _nchw(test_hwc, torch.float32), _nchw(ref_hwc, torch.float32), float(ppd), "srgb", 1e-15
        )
        assert out.dtype == torch.float32
    h, w = test_hwc.shape[:2]
    assert tuple(out.shape) == (1, 1, h, w)
    return out[0, 0].detach().to(torch.float64).numpy()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("case_id", C.case_ids())
def test_matches_flip_evaluator(case_id, impl):
    _, test_hwc, ref_hwc, ppd = C.get_case(case_id)
    ours = _ours(impl, test_hwc, ref_hwc, ppd)
    C.assert_agrees(ours, _evaluator(case_id), label=f"{case_id} [{impl}]")


def test_cases_are_varied():
    cs = C.cases()
    assert len(cs) >= 12
    assert len({c[0] for c in cs}) == len(cs)
    ppds = {round(c[3], 2) for c in cs}
    assert {30.0, 67.02, 120.0} <= ppds
    sizes = {c[1].shape[:2] for c in cs}
    assert (5, 7) in sizes and (1, 1) in sizes
    assert any(h != w for h, w in sizes)
    for cid, t, r, _ in cs:
        assert t.dtype == np.float32 and r.dtype == np.float32, cid
        assert t.min() >= 0 and t.max() <= 1 and r.min() >= 0 and r.max() <= 1, cid
    # Deterministic: built twice from scratch, identical.
    C._cases_cached.cache_clear()
    again = C.cases()
    for (ida, ta, ra, pa), (idb, tb, rb, pb) in zip(cs, again):
        assert ida == idb and pa == pb and np.array_equal(ta, tb) and np.array_equal(ra, rb)


def test_evaluator_argument_order_and_sanity():
    """The evaluator map of an identical pair is zero and of black vs white is near one."""
    _, _, ref_hwc, ppd = C.get_case("blocks-identical-67")
    assert np.all(C.evaluator_map(ref_hwc, ref_hwc, ppd) == 0)
    _, black, white, ppd = C.get_case("black-white-16x16-67")
    m = C.evaluator_map(black, white, ppd)
    assert m.shape == (16, 16) and np.all(m > 0.95)


def test_assert_agrees_reports_worst_pixel():
    a = np.zeros((4, 5))
    b = a.copy()
    b[2, 3] = 0.01
    with pytest.raises(AssertionError, match=r"\(2, 3\)"):
        C.assert_agrees(a, b, label="probe")
    C.assert_agrees(a, a + 1e-6, label="probe")
