"""The names of the ops the shipped library registers (csrc/ops/schema.cpp), for the tests that
check the registry: the public ops with their backward ops, and the CPU-only internal ops: the pair
that ldr_flip's CPU autograd uses (docs/algorithm.md §8.9) and the multi-scale pair of the Python
API's multi-scale LDR-FLIP."""

FORWARD_OPS = ["ldr_flip", "hdr_flip", "csf_filter", "hunt_hyab", "feature_difference"]
BACKWARD_OPS = [name + "_backward" for name in FORWARD_OPS]
PUBLIC_OPS = FORWARD_OPS + BACKWARD_OPS
CPU_ONLY_OPS = [
    "_ldr_flip_with_sensitivities",
    "_ldr_flip_backward_from_sensitivities",
    "_ldr_flip_multiscale",
    "_ldr_flip_multiscale_backward",
]
PRODUCT_OPS = PUBLIC_OPS + CPU_ONLY_OPS
