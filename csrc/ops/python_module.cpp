// Makes the op library importable as the Python module flip_loss._C; importing it runs the
// static TORCH_LIBRARY registrations. No Python bindings: everything goes through torch.ops.flip.
#include <Python.h>

PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_C", "flip-loss operator library", -1, nullptr};
  return PyModule_Create(&def);
}
