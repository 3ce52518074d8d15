"""Tests of the low-level-vision suite (flip_loss.psychophysics): the stimuli carry the contrasts
and luminances they claim (measured back from the frames a metric sees), the scores behave as
defined, the matching solver finds known matches, and a very small run of the whole suite and
its command works."""

import math
import os

import numpy as np
import pytest
import torch

from flip_loss.psychophysics import colour, data, scoring, stimuli, suite
from flip_loss.psychophysics.colour import Display
from flip_loss.psychophysics.metrics import Metric, build_metrics
from flip_loss.psychophysics.suite import MetricEvaluator, Settings

SMOKE = suite.PRESETS["smoke"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # The images here are tiny: one thread avoids OpenMP barrier stalls on a loaded 2-core machine.
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


def _test(key):
    return next(t for t in suite.all_tests() if t.key == key)


def _frames(rgb_abs, display):
    """What a display-input metric receives (float32 sRGB-encoded frames)."""
    return MetricEvaluator.frames("display", rgb_abs, display)


def _dkl_from_frames(frames, display):
    """Absolute DKL measured back from display-encoded frames."""
    return colour.rgb_to_dkl(display.decode(frames.double()))


def _amplitude(delta, pattern):
    """Least-squares amplitude of ``pattern`` in ``delta`` (H×W each)."""
    return float((delta * pattern).sum() / (pattern * pattern).sum())


# ---------------------------------------------------------------------------------------------
# Colour pipeline


def test_dkl_axes_and_background():
    # The adapting grey has zero chromatic DKL components by construction of mc1 and mc2.
    dkl = colour.lms_to_dkl(torch.tensor(colour.LMS_GRAY, dtype=torch.float64))
    assert abs(float(dkl[1])) < 1e-15 and abs(float(dkl[2])) < 1e-15
    # D65 background: Y = L_b, RGB ≈ (1, 1, 1) · L_b, round trip through DKL.
    for l_b in (0.1, 21.4, 90.0):
        rgb = colour.background_rgb(l_b)
        assert float(colour.M_RGB_XYZ[1] @ rgb) == pytest.approx(l_b, rel=1e-12)
        assert torch.allclose(rgb / l_b, torch.ones(3, dtype=torch.float64), atol=3e-4)
        assert torch.allclose(colour.background_rgb_from_dkl(l_b), rgb, rtol=1e-12)
    img = torch.rand(2, 3, 4, 5, dtype=torch.float64)
    assert torch.allclose(colour.rgb_to_dkl(colour.dkl_to_rgb(img)), img, atol=1e-12)
    v = torch.linspace(0, 1, 1001, dtype=torch.float64)
    assert torch.allclose(colour.srgb_decode(colour.srgb_encode(v)), v, atol=1e-12)


def test_compose_is_the_literal_dkl_pipeline():
    g = stimuli.Geometry(64, 48, 30.0)
    comps = [
        stimuli.Component(0.3, stimuli.grating(g, 2.0, "cosine"), colour.SCALED_DIRECTIONS["rg"]),
        stimuli.Component(torch.tensor([0.01, 0.05]), stimuli.gabor(g, 3.0, 0.5), colour.DIRECTIONS["yv"]),
    ]
    fast = stimuli.compose(37.0, comps)
    literal = stimuli.compose_via_dkl(37.0, comps, 2)
    assert fast.shape == (2, 3, 48, 64)
    assert torch.allclose(fast, literal, rtol=1e-12, atol=1e-12)


def test_geometry_coordinates_and_crop():
    g = stimuli.Geometry(1920, 1080, 66.0)
    assert float(g.x[0]) == pytest.approx(-1920 / 66 / 2) and float(g.x[-1]) == pytest.approx(1920 / 66 / 2)
    c = stimuli.Geometry(1920, 1080, 66.0, crop=(1024, 1024))
    assert c.shape == (1024, 1024)
    start = (1920 - 1024) // 2
    assert torch.equal(c.x, g.x[start : start + 1024])


# ---------------------------------------------------------------------------------------------
# Generators: the contrasts and luminances measured back from the frames


@pytest.mark.parametrize("d", ["ach", "rg", "yv"])
def test_gabor_detection_contrast_measured_back(d):
    t = _test(f"detection_sf_gabor_{d}")
    settings = Settings("t", gabor_crop=256)
    geom = t.geometry(settings)
    display = Display(t.y_peak)
    l_b, masker, pattern, direction = t.build(4.0, geom, settings)
    cs = torch.tensor([0.004, 0.02, 0.1])
    test_f = _frames(stimuli.compose(l_b, [stimuli.Component(cs, pattern, direction)]), display)
    ref_f = _frames(stimuli.compose(l_b, [], n=1, shape=geom.shape), display)
    assert test_f.dtype == torch.float32 and float(test_f.min()) >= 0 and float(test_f.max()) <= 1
    ref_dkl = _dkl_from_frames(ref_f, display)[0]
    # The background: luminance L_b and the D65 DKL coordinates, everywhere.
    assert float(colour.luminance(display.decode(ref_f.double())).mean()) == pytest.approx(l_b, rel=1e-6)
    assert torch.allclose(ref_dkl, colour.background_dkl(l_b)[:, None, None].expand_as(ref_dkl), atol=1e-4)
    axis = int(np.argmax(direction))
    for i, c in enumerate(cs.tolist()):
        delta = (_dkl_from_frames(test_f[i : i + 1], display)[0] - ref_dkl) / l_b
        assert _amplitude(delta[axis], pattern) == pytest.approx(c, rel=2e-3)
        # Only the intended DKL axis is modulated.
        others = [delta[j] for j in range(3) if j != axis]
        assert max(float(o.abs().max()) for o in others) < 2e-3 * c + 1e-5
    # Sine phase, vertical bars, Gaussian envelope σ = 2°: the carrier is odd in x, constant in y.
    assert float(pattern.abs().max()) <= 1.0
    assert torch.allclose(pattern, -pattern.flip(1), atol=1e-9)


@pytest.mark.parametrize("d", ["ach", "rg", "yv"])
def test_band_limited_noise_rms_contrast_and_band(d):
    t = _test(f"detection_sf_noise_{d}")
    settings = Settings("t", noise_size=256)
    geom = t.geometry(settings)
    display = Display(t.y_peak)
    f = 4.0
    l_b, _, pattern, direction = t.build(f, geom, settings)
    assert float(pattern.mean()) == pytest.approx(0.0, abs=1e-12)
    assert float(pattern.square().mean().sqrt()) == pytest.approx(1.0, rel=1e-12)
    c = 0.01
    test_f = _frames(stimuli.compose(l_b, [stimuli.Component(c, pattern, direction)], n=1), display)
    ref_f = _frames(stimuli.compose(l_b, [], n=1, shape=geom.shape), display)
    delta = (_dkl_from_frames(test_f, display) - _dkl_from_frames(ref_f, display))[0] / l_b
    axis = int(np.argmax(direction))
    assert float(delta[axis].square().mean().sqrt()) == pytest.approx(c, rel=2e-3)
    # The power of the measured modulation lies in the octave band around f.
    power = torch.fft.rfft2(delta[axis]).abs().square()
    rho = stimuli._radial_frequency(geom)
    band = (rho >= f / math.sqrt(2) * 0.99) & (rho <= f * math.sqrt(2) * 1.01)
    assert float(power[band].sum() / power.sum()) > 0.999
    # Fixed seed: the same field every time, and another seed gives another field.
    again = t.build(f, geom, settings)[2]
    assert torch.equal(again, pattern)
    other = t.build(f, geom, Settings("t", noise_size=256, noise_seed=1))[2]
    assert not torch.allclose(other, pattern)


def test_luminance_test_background_luminance_measured_back():
    t = _test("detection_luminance")
    settings = Settings("t", gabor_crop=128)
    geom = t.geometry(settings)
    display = Display(t.y_peak)
    for l_b_claim in t.x_values(5):
        l_b, _, pattern, direction = t.build(float(l_b_claim), geom, settings)
        ref_f = _frames(stimuli.compose(l_b, [], n=1, shape=geom.shape), display)
        measured = float(colour.luminance(display.decode(ref_f.double())).mean())
        assert measured == pytest.approx(l_b_claim, rel=1e-5)
        c = float(data.castle_table("luminance_ach").threshold(l_b_claim))
        test_f = _frames(stimuli.compose(l_b, [stimuli.Component(c, pattern, direction)], n=1), display)
        delta = (_dkl_from_frames(test_f, display) - _dkl_from_frames(ref_f, display))[0] / l_b
        assert _amplitude(delta[0], pattern) == pytest.approx(c, rel=5e-3)


def test_size_test_envelope_sigma():
    t = _test("detection_size")
    settings = Settings("t", size_crop=512)
    geom = t.geometry(settings)
    for sigma in (0.25, 1.0):
        pattern = t.build(sigma, geom, settings)[2]
        # Envelope along y through the centre column pair: measured σ from the second moment.
        env = torch.exp(-(geom.y**2) / (2 * sigma**2))
        col = pattern.abs().max(dim=1).values
        assert torch.allclose(col / col.max(), env / env.max(), atol=0.05)


def test_masking_masker_and_target_contrasts():
    display_c = Display(150.0)
    t = _test("masking_phase_coherent")
    geom = t.geometry(SMOKE if False else Settings("t"))
    assert geom.shape == (300, 420)
    l_b, masker, target, direction = t.build(0.1, geom, Settings("t"))
    assert l_b == 32.0
    ref_f = _frames(stimuli.compose(l_b, masker, n=1, shape=geom.shape), display_c)
    test_f = _frames(stimuli.compose(l_b, masker + [stimuli.Component(0.02, target, direction)], n=1), display_c)
    bg = colour.background_dkl(l_b)[:, None, None]
    ref_delta = (_dkl_from_frames(ref_f, display_c)[0] - bg) / l_b
    assert _amplitude(ref_delta[0], masker[0].pattern) == pytest.approx(0.1, rel=1e-3)
    tgt_delta = (_dkl_from_frames(test_f, display_c) - _dkl_from_frames(ref_f, display_c))[0] / l_b
    assert _amplitude(tgt_delta[0], target) == pytest.approx(0.02, rel=2e-3)
    # In phase: the masker's and the target's carriers peak together at the centre column.
    assert float((masker[0].pattern * target).sum()) > 0

    t = _test("masking_phase_incoherent")
    display_i = Display(173.0)
    geom = t.geometry(Settings("t"))
    l_b, masker, target, direction = t.build(0.08, geom, Settings("t"))
    ref_f = _frames(stimuli.compose(l_b, masker, n=1, shape=geom.shape), display_i)
    ref_delta = (_dkl_from_frames(ref_f, display_i)[0] - colour.background_dkl(l_b)[:, None, None]) / l_b
    assert float(ref_delta[0].square().mean().sqrt()) == pytest.approx(0.08, rel=2e-3)
    power = torch.fft.rfft2(ref_delta[0]).abs().square()
    assert float(power[stimuli._radial_frequency(geom) > 12.0 * 1.01].sum() / power.sum()) < 1e-6


def test_matching_stimuli_contrasts():
    # Gratings of the frequency matching test, and square waves of the colour matching test.
    t = suite.FrequencyMatchingTest()
    geom = stimuli.Geometry(t.size, t.size, t.ppd)
    display = Display(t.y_peak)
    pattern = stimuli.grating(geom, 2.0, "sine", "vertical")
    test_f = _frames(stimuli.compose(t.l_b, [stimuli.Component(0.3, pattern)], n=1), display)
    ref_f = _frames(stimuli.compose(t.l_b, [], n=1, shape=geom.shape), display)
    delta = (_dkl_from_frames(test_f, display) - _dkl_from_frames(ref_f, display))[0] / t.l_b
    assert _amplitude(delta[0], pattern) == pytest.approx(0.3, rel=1e-3)
    assert float(colour.luminance(display.decode(ref_f.double())).mean()) == pytest.approx(10.0, rel=1e-6)

    t = suite.ColourMatchingTest()
    geom = stimuli.Geometry(t.size, t.size, t.ppd)
    display = Display(t.y_peak)
    sq = stimuli.square_wave(geom, 1.0, "horizontal")
    assert torch.all(sq[:, 0:1] == sq)  # horizontal bars: constant along x
    ref_f = _frames(stimuli.compose(t.l_b, [], n=1, shape=geom.shape), display)
    for d, axis in (("ach", 0), ("rg", 1), ("yv", 2)):
        scale = colour.SCALED_DIRECTIONS[d][axis]
        test_f = _frames(
            stimuli.compose(t.l_b, [stimuli.Component(0.1, sq, colour.SCALED_DIRECTIONS[d])], n=1), display
        )
        delta = (_dkl_from_frames(test_f, display) - _dkl_from_frames(ref_f, display))[0] / t.l_b
        assert _amplitude(delta[axis], sq) == pytest.approx(0.1 * scale, rel=2e-3)


def test_reference_tables():
    for name in (
        "spatial_freq_ach",
        "spatial_freq_rg",
        "spatial_freq_yv",
        "spatial_freq_ach_band_limited_noise",
        "spatial_freq_rg_band_limited_noise",
        "spatial_freq_yv_band_limited_noise",
        "luminance_ach",
        "size_ach",
    ):
        tab = data.castle_table(name)
        assert len(tab.x) == len(tab.c) == 100 and np.all(tab.c > 0)
        # Interpolation hits the tabulated points.
        assert np.allclose(tab.threshold(tab.x[[0, 37, 99]]), tab.c[[0, 37, 99]], rtol=1e-12)
    assert data.castle_table("spatial_freq_ach").x[-1] == pytest.approx(32.0)
    foley = data.foley_table(0)
    assert len(foley.x) == 10 and np.all(np.diff(foley.x) > 0)
    assert foley.x[0] == pytest.approx(10 ** (-46.0887949260042 / 20))
    assert data.foley_unmasked(0) == pytest.approx(10 ** (-31.6666666666667 / 20))
    assert len(data.noise_masking_table().x) == 9
    m = data.contrast_matching_table()
    assert m.matches.shape == (8, 9) and list(m.frequencies) == [0.25, 0.5, 1, 2, 5, 10, 15, 20, 25]
    # The package reads only its own data folder.
    assert os.path.dirname(data.DATA_DIR) == os.path.dirname(os.path.abspath(data.__file__))
    assert os.path.exists(os.path.join(data.DATA_DIR, "README.md"))


# ---------------------------------------------------------------------------------------------
# Scores


def test_spearman_and_ranks():
    assert list(scoring.rankdata([3.0, 1.0, 2.0, 2.0])) == [4.0, 1.0, 2.5, 2.5]
    assert scoring.spearman([1, 2, 3, 4], [10, 20, 25, 100]) == pytest.approx(1.0)
    assert scoring.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(scoring.spearman([1, 2, 3], [5, 5, 5]))
    k = scoring.sensitivity_multipliers(10)
    assert k[0] == pytest.approx(0.5) and k[-1] == pytest.approx(2.0) and len(k) == 10


def test_alignment_score_of_function_of_k_and_of_noise():
    k = np.broadcast_to(scoring.sensitivity_multipliers(10)[None, :], (20, 10))
    assert scoring.alignment_score(k, 1.0 / k) == pytest.approx(1.0)
    assert scoring.alignment_score(k, np.exp(-3 * k) + 7) == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    assert abs(scoring.alignment_score(k, rng.random(k.shape))) < 0.2


def _luminance_oracle(ks):
    """A synthetic metric whose response is a function of k alone on the luminance test: it
    measures the background luminance and the target's contrast from the frames, divides the
    contrast by castleCSF's threshold at that luminance (≈ 1/k), snaps that to the nearest k of
    the grid and returns g(k) = 5 − log k."""
    table = data.castle_table("luminance_ach")
    display = Display(100.0)
    log_k = torch.from_numpy(np.log(ks))

    def oracle(test, reference, ppd):
        y_t = colour.luminance(display.decode(test.double()))
        y_r = colour.luminance(display.decode(reference.double()))
        l_b = y_r.mean(dim=(1, 2))
        c = (y_t - y_r).abs().amax(dim=(1, 2)) / l_b
        measured_log_k = -torch.log(c / torch.from_numpy(table.threshold(l_b.numpy())))
        oracle.measured.append(measured_log_k)
        nearest = (measured_log_k[:, None] - log_k[None, :]).abs().argmin(dim=1)
        return 5.0 - log_k[nearest]

    oracle.measured = []
    return Metric("oracle", oracle)


def test_alignment_end_to_end_oracle_scores_one_and_random_near_zero():
    gen = torch.Generator().manual_seed(1)

    def random_metric(test, reference, ppd):
        return torch.rand(test.shape[0], generator=gen, dtype=torch.float64)

    settings = Settings("t", n_x=8, n_k=6, gabor_crop=64)
    oracle = _luminance_oracle(scoring.sensitivity_multipliers(6))
    res = suite.run_suite(
        {"oracle": oracle, "random": random_metric},
        settings,
        suite.select_tests(["detection_luminance"]),
        progress=False,
    )
    (r,) = res.results
    assert r.scores["oracle"] == pytest.approx(1.0, abs=1e-12)
    assert abs(r.scores["random"]) < 0.3
    # The stimuli are at c_T(x)/k: the oracle measured k before snapping it, up to one constant
    # factor (luminance contrast vs DKL contrast: the background's L+M is 1.051 · L_b) within 0.5 %.
    measured = torch.cat(oracle.fn.measured).numpy().reshape(r.contrast.shape)
    offset = measured - np.log(r.k)[None, :]
    assert np.ptp(offset) < 5e-3 and abs(offset.mean() - math.log(colour.background_dkl(1.0)[0])) < 5e-3
    # Unsnapped (k up to measurement noise), ties across x break at random: the score is just
    # under 1, sqrt(between-k rank variance / total) = 0.986 for this 8 × 6 grid.
    unsnapped = scoring.alignment_score(np.broadcast_to(r.k, r.contrast.shape), -measured)
    assert 0.98 < unsnapped < 1.0


def test_solver_finds_known_roots_and_flags_missing_ones():
    def resp(c):
        return 3.0 * np.asarray(c) ** 0.7

    truth = np.array([0.0015, 0.01, 0.3, 0.9])
    r = scoring.solve_matching_contrast(resp, resp(truth), grid=7, iterations=4)
    assert np.allclose(np.log10(r.contrast), np.log10(truth), atol=1e-5)
    assert not r.no_root.any()
    # Below the smallest response → the lower bracket end; above the largest → the upper end.
    r = scoring.solve_matching_contrast(resp, [resp(1e-4), resp(3.0)], grid=7, iterations=4)
    assert r.no_root.all() and np.allclose(r.contrast, [1e-3, 1.0])
    # A decreasing response (a similarity) is solved as well.
    r = scoring.solve_matching_contrast(lambda c: -np.log(c), [-np.log(0.05)], grid=5, iterations=8)
    assert r.contrast[0] == pytest.approx(0.05, rel=1e-4)


def _linear_rms(test, reference, ppd):
    """RMS of the linear-light difference: exactly linear in the contrast (no clipping)."""
    d = colour.srgb_decode(test.double()) - colour.srgb_decode(reference.double())
    return d.square().mean(dim=(1, 2, 3)).sqrt()


def _blurred_linear_rms(test, reference, ppd):
    """Linear in the contrast with a frequency-dependent gain (a 3-px box blur along x)."""
    d = colour.srgb_decode(test.double()) - colour.srgb_decode(reference.double())
    d = (d[..., :-2] + d[..., 1:-1] + d[..., 2:]) / 3.0
    return d.square().mean(dim=(1, 2, 3)).sqrt()


def test_frequency_matching_recovers_a_known_match():
    settings = Settings("t", matching_crop=128, matching_references=(0, 2, 4, 6, 7), match_grid=7, match_iterations=4)
    metrics = [Metric("rms", _linear_rms), Metric("blur", _blurred_linear_rms)]
    res = suite.run_suite(metrics, settings, [suite.FrequencyMatchingTest()], progress=False)
    (r,) = res.results
    t = suite.FrequencyMatchingTest()
    geom = stimuli.Geometry(t.size, t.size, t.ppd, (128, 128))
    display = Display(t.y_peak)
    uniform = _frames(stimuli.compose(t.l_b, [], n=1, shape=geom.shape), display)

    def gain(metric, f):  # response at unit contrast; the response is c · gain(f)
        frame = _frames(stimuli.compose(t.l_b, [stimuli.Component(1.0, stimuli.grating(geom, f))], n=1), display)
        return float(metric(frame, uniform, t.ppd)[0])

    for m in metrics:
        expected = r.reference_contrasts[:, None] * gain(m.fn, 5.0) / np.array([gain(m.fn, f) for f in r.frequencies])
        inside = (expected > 1e-3) & (expected < 1.0)
        assert inside.sum() >= 25
        assert np.allclose(np.log10(r.matches[m.name][inside]), np.log10(expected[inside]), atol=2e-3)
        assert r.no_root[m.name] == int((~inside).sum())
        assert r.scores[m.name] == pytest.approx(scoring.log_rmse(r.matches[m.name], r.human))
    # The blur's gain falls with frequency, so its matches rise with frequency.
    assert r.matches["blur"][2, -1] > 2 * r.matches["blur"][2, 0]


def test_colour_matching_of_a_dkl_contrast_metric_is_exact():
    t = suite.ColourMatchingTest()
    display = Display(t.y_peak)
    scale = torch.tensor([1.0, 0.610649, 4.203636], dtype=torch.float64)[None, :, None, None]

    def dkl_contrast(test, reference, ppd):
        d = (_dkl_from_frames(test, display) - _dkl_from_frames(reference, display)) / t.l_b / scale
        return d.square().sum(dim=1).mean(dim=(1, 2)).sqrt()

    res = suite.run_suite(
        [Metric("dkl", dkl_contrast)], Settings("t", matching_crop=64, colour_n=4), [t], progress=False
    )
    (r,) = res.results
    assert r.scores["dkl"] < 5e-3
    assert r.no_root["dkl"] == 0


# ---------------------------------------------------------------------------------------------
# The suite and its command


def test_metrics_registry():
    ms, notes = build_metrics(["ldr-flip", "PSNR", "hyab"])
    assert [m.name for m in ms] == ["LDR-FLIP", "PSNR", "HyAB"]
    with pytest.raises(ValueError, match="unknown metric"):
        build_metrics(["nope"])
    a = torch.full((2, 3, 32, 32), 0.5)
    b = a.clone()
    b[1, :, 8:16, 8:16] = 0.6
    for m in ms:
        v = m(b, a, 60.0)
        assert v.shape == (2,)
        assert float(v[1]) > float(v[0])


def test_select_tests():
    keys = [t.key for t in suite.select_tests(["masking_*", "matching_sf"])]
    assert keys == ["masking_phase_coherent", "masking_phase_incoherent", "matching_sf"]
    assert len(suite.all_tests()) == 12
    with pytest.raises(ValueError, match="no test matches"):
        suite.select_tests(["flicker"])


@pytest.mark.slow
def test_smoke_run_of_the_command(tmp_path, capsys):
    from flip_loss.psychophysics.cli import main

    out = tmp_path / "report"
    threads = torch.get_num_threads()
    backend = __import__("matplotlib").get_backend()
    rc = main(
        [
            "--out",
            str(out),
            "--preset",
            "smoke",
            "--metrics",
            "ldr-flip,psnr",
            "hyab",
            "--no-progress",
            "--threads",
            "1",
        ]
    )
    assert rc == 0
    # The run changed nothing process-wide: torch's thread count, matplotlib's backend.
    assert torch.get_num_threads() == threads and __import__("matplotlib").get_backend() == backend
    text = (out / "report.md").read_text()
    assert "| test | score | reference | LDR-FLIP | PSNR | HyAB |" in text
    for t in suite.all_tests():
        assert t.title in text
    assert (out / "results.json").exists()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "No plots" in text
    else:
        assert (out / "detection_sf_gabor_ach.png").exists() and (out / "matching_sf.png").exists()
        assert f"![{suite.all_tests()[0].title}](detection_sf_gabor_ach.png)" in text
    printed = capsys.readouterr().out
    assert "report:" in printed


def test_command_errors(tmp_path, capsys):
    from flip_loss.psychophysics.cli import main

    assert main(["--out", str(tmp_path), "--metrics", "nope"]) == 2
    assert "flip-loss psychophysics: error: unknown metric" in capsys.readouterr().err
    assert main(["--out", str(tmp_path), "--tests", "flicker"]) == 2
    assert main(["--out", str(tmp_path), "--quick", "--preset", "full"]) == 2
    assert main([]) == 2
