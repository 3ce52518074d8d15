"""flip-loss beyond one process (README, "Beyond one machine"), with 2 CPU processes on gloo:
FLIPMetric and FLIPTorchMetric synced across ranks against one process, folder mode under torchrun
against one process, and a few DDP training steps of examples/train_denoiser.py.

Every launch is bounded (distributed_cases.launch, subprocess timeouts), so a hang fails."""
from fractions import Fraction

import pytest
import torch

import distributed_cases as cases
import flip_loss
from flip_loss import FLIPMetric

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")


def rank_maps(rank):
    """The maps rank ``rank`` folds in, in its update order."""
    return [i for batch in cases.RANK_MAPS[rank] for i in batch]


# The order of the per-image means after a sync: rank 0's images, then rank 1's.
RANK_ORDER = rank_maps(0) + rank_maps(1)


def one_process(indices, maps):
    metric = FLIPMetric()
    for i in indices:
        metric.update_error_map(maps[i])
    return metric.compute()


def assert_same_result(got, want):
    """Bit for bit: pooled values, per-image means (in order), counts."""
    assert got.pooled == want.pooled
    assert torch.equal(got.per_image_means, want.per_image_means)
    assert (got.num_images, got.num_pixels) == (want.num_images, want.num_pixels)


@pytest.fixture(scope="module")
def metric_runs(tmp_path_factory):
    return cases.launch(cases.metric_worker, str(tmp_path_factory.mktemp("metric")))


def test_synced_metric_equals_one_process(metric_runs):
    maps = cases.error_maps()
    test, reference = cases.image_pair()
    # One process over the same images, in the documented order: rank 0's, then rank 1's.
    single = FLIPMetric()
    for i in RANK_ORDER:
        single.update_error_map(maps[i])
    single.update(test, reference)
    want = single.compute()
    for run in metric_runs:
        assert_same_result(run["synced"], want)
    assert want.num_images == 9 and want.num_pixels == sum(m.numel() for m in maps) + 2 * 18 * 22
    # The mean is the exact mean of every value, rounded once; min and max are exact.
    values = torch.cat([m.reshape(-1) for m in maps] + [flip_loss.ldr_flip(test, reference, eps=0.0).reshape(-1)])
    assert want.pooled.mean == float(sum(Fraction(v) for v in values.double().tolist()) / values.numel())
    assert (want.pooled.min, want.pooled.max) == (values.min().item(), values.max().item())

    # After compute, each rank folded one more map (rank r: map r); the result grows accordingly.
    again = FLIPMetric()
    for i in rank_maps(0) + [0] + rank_maps(1):
        again.update_error_map(maps[i])
    again.update(test, reference)
    again.update_error_map(maps[1])
    got = metric_runs[0]["synced_again"]
    assert got.pooled == again.compute().pooled and got.num_images == 11
    assert metric_runs[1]["synced_again"].pooled == got.pooled


def test_rank_order_of_per_image_means(metric_runs):
    """Rank 0's images first, each rank's in its update order."""
    maps = cases.error_maps()
    means = metric_runs[1]["synced"].per_image_means
    expected = [maps[i].double().mean().item() for i in RANK_ORDER]
    assert RANK_ORDER == [0, 2, 6, 4, 1, 3, 5]
    torch.testing.assert_close(means[:7], torch.tensor(expected, dtype=torch.float64), rtol=1e-14, atol=0)


def test_sync_off_and_an_idle_rank(metric_runs):
    maps = cases.error_maps()
    for rank, run in enumerate(metric_runs):
        assert_same_result(run["local"], one_process(rank_maps(rank), maps))
        # Rank 1 never updated: both ranks get rank 0's one image.
        assert_same_result(run["rank0_only"], one_process([0], maps))


def test_torchmetrics_metric_equals_flip_metric(metric_runs):
    single = FLIPMetric()
    for i in RANK_ORDER:
        single.update(*cases.pair_of(i))
    want = single.compute()
    alone = FLIPMetric()
    alone.update(*cases.pair_of(0))
    for run in metric_runs:
        assert_same_result(run["torchmetrics"], run["plain_for_torchmetrics"])
        assert_same_result(run["torchmetrics"], want)
        assert_same_result(run["rank0_only_torchmetrics"], alone.compute())


def test_same_error_on_every_rank(metric_runs):
    for run in metric_runs:
        assert run["nothing"][0] is None and run["nothing"][1][0] == "RuntimeError"
        assert "before any update() on any rank" in run["nothing"][1][1]
        assert run["bins_mismatch"][0] is None and run["bins_mismatch"][1][0] == "ValueError"
        assert "different bins (256, 512" in run["bins_mismatch"][1][1]


def test_no_sync_without_a_process_group():
    """Without an initialised group compute() is local (and says so before any update)."""
    assert not torch.distributed.is_initialized()
    maps = cases.error_maps()
    metric = FLIPMetric()
    with pytest.raises(RuntimeError, match="before any update"):
        metric.compute()
    for m in maps[:3]:
        metric.update_error_map(m)
    assert_same_result(metric.compute(), one_process([0, 1, 2], maps))
