// Makes the op library importable as the Python module flip_loss._C; importing it runs the
// static STABLE_TORCH_LIBRARY registrations. The module is written against Python's limited API
// (one binary for every Python from 3.10 on) and links no part of torch's Python bindings.
// Everything goes through torch.ops.flip; the module's functions say which instruction-set level
// the CPU kernels run with (for benchmarks and bug reports), the limits the kernels enforce, and
// carry a Python exception raised during a long CPU loop (Ctrl-C) back to Python.
#include <Python.h>

#include <atomic>
#include <stdexcept>

#include "../flip/cpu/interrupt.h"
#include "../flip/cpu/kernels.h"
#include "../flip/plane_counts.h"
#include "../flip/tone_mapper.h"
#include "../include/flip_loss/limits.h"

namespace {

// The exception a signal handler raised inside a kernel (KeyboardInterrupt from SIGINT, or
// whatever a user's handler raises), held until flip_loss re-raises it (take_interrupt). A C++
// exception crosses the stable ABI as its standard class and message only, so the Python object
// itself waits here; the GIL guards it.
PyObject* pending_interrupt = nullptr;

// Cleared at interpreter exit (an atexit handler), before finalisation starts: from then on the
// GIL may be gone, so kernels still running in other threads stop polling.
std::atomic<bool> polling{true};

// Runs Python's signal handlers (main thread only; elsewhere this does nothing) and, when one
// raised, stops the op: the exception is kept for take_interrupt() and the op fails with a
// RuntimeError whose message names it.
void raise_pending_python_signal() {
  if (!polling.load(std::memory_order_acquire) || !Py_IsInitialized()) return;
  const PyGILState_STATE gil = PyGILState_Ensure();
  if (PyErr_CheckSignals() == 0) {
    PyGILState_Release(gil);
    return;
  }
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (value != nullptr && traceback != nullptr) PyException_SetTraceback(value, traceback);
  Py_XDECREF(type);
  Py_XDECREF(traceback);
  Py_XDECREF(pending_interrupt);
  pending_interrupt = value;
  PyGILState_Release(gil);
  throw std::runtime_error("flip: interrupted by a Python signal handler (flip_loss re-raises its exception)");
}

PyObject* take_interrupt(PyObject*, PyObject*) {
  PyObject* exc = pending_interrupt;
  pending_interrupt = nullptr;
  if (exc == nullptr) Py_RETURN_NONE;
  return exc;  // the reference the module held
}

PyObject* stop_polling(PyObject*, PyObject*) {
  polling.store(false, std::memory_order_release);
  Py_RETURN_NONE;
}

PyObject* cpu_capability(PyObject*, PyObject*) { return PyUnicode_FromString(flip::cpu::capability()); }

// The ops' argument limits and tone mappers (limits.h, tone_mapper.h), so that the Python package's
// copies of them (flip_loss/constants.py) can be checked against the ones the ops enforce.
PyObject* limits(PyObject*, PyObject*) {
  PyObject* names = PyTuple_New(flip::kToneMapperCount);
  if (names == nullptr) return nullptr;
  for (int i = 0; i < flip::kToneMapperCount; ++i) {
    PyObject* name = PyUnicode_FromString(flip::kToneMapperNames[i]);
    if (name == nullptr || PyTuple_SetItem(names, i, name) != 0) {
      Py_DECREF(names);
      return nullptr;
    }
  }
  return Py_BuildValue("{s:d,s:d,s:d,s:L,s:L,s:N,s:L,s:L}", "min_ppd", flip_loss::kMinPpd, "max_ppd",
                       flip_loss::kMaxPpd, "max_eps", flip_loss::kMaxEps, "min_exposures",
                       static_cast<long long>(flip_loss::kMinExposures), "max_exposures",
                       static_cast<long long>(flip_loss::kMaxExposures), "tone_mappers", names,
                       "sensitivity_planes_per_image", static_cast<long long>(flip::kResponsePlanesPerImage),
                       "cuda_kept_sensitivities_bytes", flip::kCudaKeptSensitivitiesBytes);
}

PyMethodDef methods[] = {
    {"cpu_capability", &cpu_capability, METH_NOARGS,
     "The instruction-set level of the CPU kernels: 'avx512', 'avx2' or 'baseline'."},
    {"limits", &limits, METH_NOARGS,
     "The ops' argument limits (min_ppd, max_ppd, max_eps, min_exposures, max_exposures), tone mapper "
     "names, the planes per image of the kept sensitivities and the most bytes of them CUDA keeps, as "
     "the C++ kernels use them."},
    {"take_interrupt", &take_interrupt, METH_NOARGS,
     "The exception a Python signal handler raised inside the last interrupted op (then forgotten), or None."},
    {"_stop_polling", &stop_polling, METH_NOARGS, "Stops the kernels' polling for signals (at interpreter exit)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_C", "flip-loss operator library", -1, methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__C(void) {
  PyObject* module = PyModule_Create(&module_def);
  if (module == nullptr) return nullptr;
  PyObject* atexit = PyImport_ImportModule("atexit");
  PyObject* stop = atexit ? PyObject_GetAttrString(module, "_stop_polling") : nullptr;
  PyObject* done = stop ? PyObject_CallMethod(atexit, "register", "O", stop) : nullptr;
  Py_XDECREF(done);
  Py_XDECREF(stop);
  Py_XDECREF(atexit);
  if (done == nullptr) {
    Py_DECREF(module);
    return nullptr;
  }
  flip::cpu::set_interrupt_check(&raise_pending_python_signal);
  return module;
}
