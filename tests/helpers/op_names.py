"""The names of the ops the shipped library registers (csrc/ops/schema.cpp), for the tests that
check the registry: the public ops with their backward ops, and the internal ops: the pair that
ldr_flip's autograd uses to keep the sensitivities (docs/algorithm.md §8.9; CPU and CUDA) and the
CPU-only multi-scale pair of the Python API's multi-scale LDR-FLIP. The public forward ops are the
public entries of the op registry (op_registry.py): a new op is named there once."""

from op_registry import OPS

FORWARD_OPS = [entry.name for entry in OPS if not entry.name.startswith("_")]
BACKWARD_OPS = [name + "_backward" for name in FORWARD_OPS]
PUBLIC_OPS = FORWARD_OPS + BACKWARD_OPS
SENSITIVITY_OPS = ["_ldr_flip_with_sensitivities", "_ldr_flip_backward_from_sensitivities"]
CPU_ONLY_OPS = ["_ldr_flip_multiscale", "_ldr_flip_multiscale_backward"]
PRODUCT_OPS = PUBLIC_OPS + SENSITIVITY_OPS + CPU_ONLY_OPS
