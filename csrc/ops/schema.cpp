// Every public op of the flip library, in one place. Each differentiable op has a separately
// registered backward op, so that torch.compile, opcheck and C++ autograd all see the same graph;
// the backward ops are first-order only (differentiating them raises, see autograd.cpp).
// Every kernel checks the arguments alike (checks.h): a non-empty batch; pixels_per_degree, eps,
// the number E of exposures (N x E) and each counts[n] (at most E) within the limits of
// csrc/include/flip_loss/limits.h. The C++ signatures of these schemas are in
// csrc/include/flip_loss/op_signatures.h.
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY(flip, m) {
  // Opponent (YCxCz) image -> CSF-filtered linear RGB, clamped to [0, 1].
  m.def("csf_filter(Tensor opponent, float pixels_per_degree) -> Tensor");
  m.def("csf_filter_backward(Tensor grad, Tensor opponent, float pixels_per_degree) -> Tensor");
  // Two filtered linear-RGB images -> colour error dE_c. In [0, 1] for inputs in [0, 1] (as
  // csf_filter returns them); inputs are not clamped, so values outside [0, 1] give values above 1.
  m.def("hunt_hyab(Tensor test, Tensor reference, float eps=1e-15) -> Tensor");
  m.def(
      "hunt_hyab_backward(Tensor grad, Tensor test, Tensor reference, float eps, bool[2] output_mask)"
      " -> (Tensor, Tensor)");
  // Two normalised achromatic images -> feature error dE_f. In [0, 1] for inputs in [0, 1]; inputs
  // are not clamped, so values outside [0, 1] can give values above 1.
  m.def(
      "feature_difference(Tensor test, Tensor reference, float pixels_per_degree, float eps=1e-15)"
      " -> Tensor");
  m.def(
      "feature_difference_backward(Tensor grad, Tensor test, Tensor reference, float pixels_per_degree,"
      " float eps, bool[2] output_mask) -> (Tensor, Tensor)");
  // The whole LDR-FLIP error map.
  m.def(
      "ldr_flip(Tensor test, Tensor reference, float pixels_per_degree=67.02064327658225,"
      " str input_space=\"srgb\", float eps=1e-15) -> Tensor");
  m.def(
      "ldr_flip_backward(Tensor grad, Tensor test, Tensor reference, float pixels_per_degree,"
      " str input_space, float eps, bool[2] output_mask) -> (Tensor, Tensor)");
  // The forward and backward that ldr_flip's autograd uses where it keeps the sensitivities (on the
  // CPU always, on CUDA within a budget: autograd.cpp): the forward
  // also returns the sensitivities, N x 7k x H x W in the compute dtype (float32 for float16 /
  // bfloat16 images): per pixel, the gradient of its error w.r.t. the 7 filtered responses of each
  // image in output_mask (test first; k of them). The backward takes them instead of recomputing
  // them, for the images in its output_mask, which must be those the forward kept (only the shape of
  // the sensitivities can be checked, not which image they belong to).
  m.def(
      "_ldr_flip_with_sensitivities(Tensor test, Tensor reference, float pixels_per_degree, str input_space,"
      " float eps, bool[2] output_mask) -> (Tensor, Tensor)");
  m.def(
      "_ldr_flip_backward_from_sensitivities(Tensor grad, Tensor sensitivities, Tensor test, Tensor reference,"
      " float pixels_per_degree, str input_space, bool[2] output_mask) -> (Tensor, Tensor)");
  // Multi-scale LDR-FLIP, CPU only (the Python API uses it for a list of
  // pixels_per_degree values on the CPU): the map sum_k weights[k] * ldr_flip(pixels_per_degree[k])
  // (weights finite and non-negative, one per value), with the input conversion computed once for
  // all scales; and, for the images in output_mask (none: an empty tensor), the sensitivities of
  // each scale in turn, N x (K * 7k) x H x W. The backward takes them for the images in its
  // output_mask, which must be those the forward kept.
  m.def(
      "_ldr_flip_multiscale(Tensor test, Tensor reference, float[] pixels_per_degree, float[] weights,"
      " str input_space, float eps, bool[2] output_mask) -> (Tensor, Tensor)");
  m.def(
      "_ldr_flip_multiscale_backward(Tensor grad, Tensor sensitivities, Tensor test, Tensor reference,"
      " float[] pixels_per_degree, float[] weights, str input_space, bool[2] output_mask) -> (Tensor, Tensor)");
  // HDR-FLIP: per-pixel maximum of LDR-FLIP over exposures (stops) exposures[n, :counts[n]] of the
  // exposed, tone-mapped images. Returns the error map, the exposure map (winning exposure index /
  // (count - 1), 0 where none wins) and the winning index (int32, -1 where none wins).
  m.def(
      "hdr_flip(Tensor test, Tensor reference, Tensor exposures, Tensor counts, float pixels_per_degree,"
      " str tone_mapper=\"aces\", float eps=1e-15) -> (Tensor, Tensor, Tensor)");
  m.def(
      "hdr_flip_backward(Tensor grad, Tensor test, Tensor reference, Tensor exposures, Tensor counts,"
      " Tensor exposure_index, float pixels_per_degree, str tone_mapper, float eps, bool[2] output_mask)"
      " -> (Tensor, Tensor)");
}
