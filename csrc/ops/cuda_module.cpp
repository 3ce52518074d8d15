// Makes the CUDA kernels importable as the Python module flip_loss._C_cuda; importing it runs the
// static STABLE_TORCH_LIBRARY_IMPL(flip, CUDA) registration of csrc/ops/cuda.cpp. The ops' schemas
// stay in flip_loss._C (schema.cpp), which must be imported first (flip_loss/_ops.py does). The
// CUDA kernels live in their own module so that flip_loss._C, the schemas and the CPU kernels,
// links no CUDA library and loads with a CPU-only torch; this module alone needs libtorch_cuda and
// the CUDA runtime, and flip_loss imports it only when torch is a CUDA build.
#include <Python.h>

namespace {

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_C_cuda", "flip-loss CUDA kernels", -1, nullptr, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__C_cuda(void) { return PyModule_Create(&module_def); }
