// Makes the op library importable as the Python module flip_loss._C; importing it runs the
// static TORCH_LIBRARY registrations. Everything goes through torch.ops.flip; the module's one
// function, cpu_capability(), says which instruction-set level the CPU kernels run with (for
// benchmarks and bug reports). It also makes the long CPU loops stoppable with Ctrl-C
// (flip::cpu::poll_interrupt).
#include <Python.h>
#include <torch/csrc/Exceptions.h>

#include "../flip/cpu/interrupt.h"
#include "../flip/cpu/kernels.h"
#include "../flip/tone_mapper.h"
#include "../include/flip_loss/limits.h"

namespace {

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// Runs Python's signal handlers (main thread only; elsewhere this does nothing) and, when one
// raised (KeyboardInterrupt from SIGINT, or whatever a user's handler raises), leaves the op with
// that exception: torch's python_error carries it through the dispatcher and the autograd engine,
// and torch's error handling restores it when the op returns to Python.
void raise_pending_python_signal() {
  if (!Py_IsInitialized() || interpreter_finalizing()) return;  // the GIL may be gone
  const PyGILState_STATE gil = PyGILState_Ensure();
  if (PyErr_CheckSignals() != 0) {
    python_error error;
    error.persist();  // moves the exception out of this thread's error state into the C++ exception
    PyGILState_Release(gil);
    throw error;
  }
  PyGILState_Release(gil);
}

PyObject* cpu_capability(PyObject*, PyObject*) { return PyUnicode_FromString(flip::cpu::capability()); }

// The ops' argument limits and tone mappers (limits.h, tone_mapper.h), so that the Python package's
// copies of them (flip_loss/constants.py) can be checked against the ones the ops enforce.
PyObject* limits(PyObject*, PyObject*) {
  PyObject* names = PyTuple_New(flip::kToneMapperCount);
  if (names == nullptr) return nullptr;
  for (int i = 0; i < flip::kToneMapperCount; ++i) {
    PyTuple_SET_ITEM(names, i, PyUnicode_FromString(flip::kToneMapperNames[i]));
  }
  return Py_BuildValue("{s:d,s:d,s:d,s:L,s:L,s:N}", "min_ppd", flip_loss::kMinPpd, "max_ppd", flip_loss::kMaxPpd,
                       "max_eps", flip_loss::kMaxEps, "min_exposures", static_cast<long long>(flip_loss::kMinExposures),
                       "max_exposures", static_cast<long long>(flip_loss::kMaxExposures), "tone_mappers", names);
}

PyMethodDef methods[] = {
    {"cpu_capability", &cpu_capability, METH_NOARGS,
     "The instruction-set level of the CPU kernels: 'avx512', 'avx2' or 'baseline'."},
    {"limits", &limits, METH_NOARGS,
     "The ops' argument limits (min_ppd, max_ppd, max_eps, min_exposures, max_exposures) and tone mapper "
     "names, as the C++ checks enforce them."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_C", "flip-loss operator library", -1, methods};
  flip::cpu::set_interrupt_check(&raise_pending_python_signal);
  return PyModule_Create(&def);
}
