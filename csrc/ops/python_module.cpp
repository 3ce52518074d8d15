// Makes the op library importable as the Python module flip_loss._C; importing it runs the
// static STABLE_TORCH_LIBRARY registrations. The module is written against Python's limited API
// (one binary for every Python from 3.10 on) and links no part of torch's Python bindings.
// Everything goes through torch.ops.flip; the module's functions say which instruction-set level
// the CPU kernels run with (for benchmarks and bug reports), the limits the kernels enforce, and
// carry a Python exception raised during a long CPU loop (Ctrl-C) back to Python.
#include <Python.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "../flip/cpu/interrupt.h"
#include "../flip/cpu/kernels.h"
#include "../flip/plane_counts.h"
#include "../flip/tone_mapper.h"
#include "../include/flip_loss/limits.h"

namespace {

// Per thread, the state of a Ctrl-C inside this thread's ops. The kernels poll on the op's calling
// thread only (interrupt.h), so a thread's ops never see another thread's state. `catching` counts
// the flip_loss wrappers (op_registration.py's BackendSelect kernels of the ops that poll) waiting
// on this thread for their op to return: catch_interrupts() raises it, take_interrupt() lowers it.
// `pending` is the exception a signal handler raised inside one of them (KeyboardInterrupt from
// SIGINT, or whatever a user's handler raises): a C++ exception crosses the stable ABI as its
// standard class and message only, so the Python object waits here until the wrapper that caught
// the RuntimeError takes it back (in a `finally`, so on every exit path) and re-raises it. Only a
// caught call ever keeps one, so nothing outlives the call it belongs to; the GIL guards the
// reference counts.
thread_local int catching = 0;
thread_local PyObject* pending = nullptr;

// The message of the RuntimeError that stops an interrupted op.
constexpr const char* kInterruptedMessage =
    "flip: interrupted by a Python signal handler (flip_loss re-raises its exception)";

// Cleared at interpreter exit (an atexit handler), before finalisation starts: from then on the
// GIL may be gone, so kernels still running in other threads stop polling.
std::atomic<bool> polling{true};

// The name of an exception's class, for a message ("KeyboardInterrupt"); "an exception" if unknown.
std::string exception_name(PyObject* value) {
  std::string name = "an exception";
  if (value == nullptr) return name;
  PyObject* type_name = PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(value)), "__name__");
  if (type_name != nullptr) {
    Py_ssize_t size = 0;
    if (const char* text = PyUnicode_AsUTF8AndSize(type_name, &size)) name.assign(text, static_cast<size_t>(size));
    Py_DECREF(type_name);
  }
  PyErr_Clear();
  return name;
}

// Runs Python's signal handlers (main thread only; elsewhere this does nothing) and, when one
// raised, stops the op with a RuntimeError. Inside a caught call the exception is kept for
// take_interrupt(); outside one (a raw call with flip_loss's Python kernels not registered, the
// only way to reach a polling kernel without them) nothing would take it back, so it is dropped
// and the RuntimeError names it instead: nothing stays pending either way.
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
  if (catching > 0) {
    Py_XDECREF(pending);
    pending = value;
    PyGILState_Release(gil);
    throw std::runtime_error(kInterruptedMessage);
  }
  const std::string name = exception_name(value);
  Py_XDECREF(value);
  PyGILState_Release(gil);
  throw std::runtime_error("flip: interrupted by " + name + " from a Python signal handler");
}

PyObject* catch_interrupts(PyObject*, PyObject*) {
  ++catching;
  Py_RETURN_NONE;
}

PyObject* take_interrupt(PyObject*, PyObject*) {
  if (catching > 0) --catching;
  PyObject* exc = pending;
  pending = nullptr;
  if (exc == nullptr) Py_RETURN_NONE;
  return exc;  // the reference the thread held
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
    {"catch_interrupts", &catch_interrupts, METH_NOARGS,
     "Until the matching take_interrupt(), keeps the exception a Python signal handler raises inside this "
     "thread's ops for take_interrupt() (else the op's RuntimeError names it and it is dropped)."},
    {"take_interrupt", &take_interrupt, METH_NOARGS,
     "Ends this thread's innermost catch_interrupts() and returns the exception a Python signal handler "
     "raised inside it (then forgotten), or None."},
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
