// Makes the CUDA kernels importable as the Python module flip_loss._C_cuda; importing it runs the
// static STABLE_TORCH_LIBRARY_IMPL(flip, CUDA) registration of csrc/ops/cuda.cpp. The ops' schemas
// stay in flip_loss._C (schema.cpp), which must be imported first (flip_loss/_ops.py does). The
// CUDA kernels live in their own module so that flip_loss._C, the schemas and the CPU kernels,
// links no CUDA library and loads with a CPU-only torch; this module alone needs libtorch_cuda and
// the CUDA runtime, and flip_loss imports it only when torch is a CUDA build. Its two functions say
// what the build holds and whether a GPU can run it (flip_loss/_ops.py asks once per device).
#include <Python.h>

#include "../flip/cuda/kernels.h"

namespace {

PyObject* architectures(PyObject*, PyObject*) { return PyUnicode_FromString(flip::cuda::compiled_architectures()); }

PyObject* kernel_image(PyObject*, PyObject* arg) {
  const long device = PyLong_AsLong(arg);
  if (device == -1 && PyErr_Occurred()) return nullptr;
  int binary = 0, ptx = 0;
  const cudaError_t err = flip::cuda::kernel_image(static_cast<int>(device), &binary, &ptx);
  if (err == cudaSuccess) return Py_BuildValue("(Oii)", Py_None, binary, ptx);
  return Py_BuildValue("(sii)", cudaGetErrorName(err), 0, 0);
}

PyMethodDef methods[] = {
    {"architectures", &architectures, METH_NOARGS,
     "The compute capabilities the CUDA kernels were compiled for, as nvcc lists them: '800,860,900'."},
    {"kernel_image", &kernel_image, METH_O,
     "(error, binary_version, ptx_version) for a device index: error None when the kernels have an image the "
     "device runs (SASS of its generation or PTX it can JIT), whose versions follow; else the CUDA runtime's error "
     "name (cudaErrorNoKernelImageForDevice, ...)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_C_cuda", "flip-loss CUDA kernels", -1, methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__C_cuda(void) { return PyModule_Create(&module_def); }
