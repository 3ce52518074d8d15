// Makes the op library importable as the Python module flip_loss._C; importing it runs the
// static STABLE_TORCH_LIBRARY registrations. The module is written against Python's limited API
// (one binary for every Python from 3.10 on) and links no part of torch's Python bindings.
// Everything goes through torch.ops.flip; the module's functions say which instruction-set level
// the CPU kernels run with (for benchmarks and bug reports), the limits and constants the kernels
// use, carry a Python exception raised during a long CPU loop (Ctrl-C) back to Python, walk an
// error map in order for its pooled values, reverse the row filters of an 8-bit PNG image, and turn
// 8-bit samples into float planes and a map's values into colours.
#include <Python.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>

#include "../flip/cpu/interrupt.h"
#include "../flip/constants.h"
#include "../flip/cpu/kernels.h"
#include "../flip/cpu/byte_images.h"
#include "../flip/cpu/png_unfilter.h"
#include "../flip/cpu/pooling_order.h"
#include "../flip/hdr_pixel.h"
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

// A tuple of the n objects item(0), ..., item(n - 1) (new references, which it takes), or nullptr
// with the Python error set.
template <class Item>
PyObject* tuple_of(int n, Item item) {
  PyObject* t = PyTuple_New(n);
  if (t == nullptr) return nullptr;
  for (int i = 0; i < n; ++i) {
    PyObject* v = item(i);
    if (v == nullptr || PyTuple_SetItem(t, i, v) != 0) {
      Py_DECREF(t);
      return nullptr;
    }
  }
  return t;
}

template <class Value>
PyObject* doubles(int n, Value value) {
  return tuple_of(n, [&](int i) { return PyFloat_FromDouble(static_cast<double>(value(i))); });
}

template <class Entry>
PyObject* matrix3(Entry m) {
  return tuple_of(3, [&](int i) { return doubles(3, [&](int j) { return m(i, j); }); });
}

// The ops' argument limits and tone mappers (limits.h, tone_mapper.h: the names and coefficients
// by ToneMapper value), so that the Python package's copies of them (flip_loss/constants.py) can
// be checked against the ones the ops enforce.
PyObject* limits(PyObject*, PyObject*) {
  PyObject* names =
      tuple_of(flip::kToneMapperCount, [](int i) { return PyUnicode_FromString(flip::kToneMapperNames[i]); });
  PyObject* coefficients = tuple_of(flip::kToneMapperCount, [](int i) {
    const flip::ToneCoefficients row = flip::tone_coefficients(static_cast<flip::ToneMapper>(i));
    return doubles(6, [&](int j) { return row.k[j]; });
  });
  if (names == nullptr || coefficients == nullptr) {
    Py_XDECREF(names);
    Py_XDECREF(coefficients);
    return nullptr;
  }
  return Py_BuildValue(
      "{s:d,s:d,s:d,s:L,s:L,s:N,s:N,s:L,s:L}", "min_ppd", flip_loss::kMinPpd, "max_ppd", flip_loss::kMaxPpd, "max_eps",
      flip_loss::kMaxEps, "min_exposures", static_cast<long long>(flip_loss::kMinExposures), "max_exposures",
      static_cast<long long>(flip_loss::kMaxExposures), "tone_mappers", names, "tone_coefficients", coefficients,
      "sensitivity_planes_per_image", static_cast<long long>(flip::kResponsePlanesPerImage),
      "cuda_kept_sensitivities_bytes", flip::kCudaKeptSensitivitiesBytes);
}

// FLIP's published constants (csrc/flip/constants.h) and HDR-FLIP's luminance weights and cap
// (hdr_pixel.h) as the kernels use them, so that the Python package's copies (flip_loss/constants.py,
// flip_loss/oracle.py) can be checked against them.
PyObject* constants(PyObject*, PyObject*) {
  PyObject* parts[] = {doubles(3, [](int i) { return flip::kCsfA1[i]; }),
                       doubles(3, [](int i) { return flip::kCsfB1[i]; }),
                       doubles(3, [](int i) { return flip::kCsfA2[i]; }),
                       doubles(3, [](int i) { return flip::kCsfB2[i]; }),
                       matrix3([](int i, int j) { return flip::rgb_to_xyz_m(i, j); }),
                       matrix3([](int i, int j) { return flip::xyz_to_rgb_m(i, j); }),
                       doubles(3, [](int i) { return flip::white(i); }),
                       doubles(3, [](int i) { return flip::inv_white(i); }),
                       doubles(3, [](int i) {  // the luminance weights, as the kernels' floats
                         float unit[3] = {0.0f, 0.0f, 0.0f};
                         unit[i] = 1.0f;
                         return flip::luminance(unit);
                       })};
  for (PyObject* part : parts) {
    if (part == nullptr) {
      for (PyObject* p : parts) Py_XDECREF(p);
      return nullptr;
    }
  }
  return Py_BuildValue("{s:d,s:d,s:d,s:d,s:d,s:N,s:N,s:N,s:N,s:d,s:d,s:d,s:d,s:d,s:d,s:N,s:N,s:N,s:N,s:N,s:d,s:d}",
                       "qc", flip::kQc, "pc", flip::kPc, "pt", flip::kPt, "gw", flip::kGw, "qf", flip::kQf, "csf_a1",
                       parts[0], "csf_b1", parts[1], "csf_a2", parts[2], "csf_b2", parts[3], "csf_b_max",
                       flip::kCsfBMax, "pi", flip::kPi, "lab_delta3", flip::kLabDelta3, "lab_lin_slope",
                       flip::kLabLinSlope, "lab_lin_offset", flip::kLabLinOffset, "srgb_knee", flip::kSrgbKnee,
                       "rgb_to_xyz", parts[4], "xyz_to_rgb", parts[5], "white", parts[6], "inv_white", parts[7],
                       "luminance_weights", parts[8], "hdr_cap", flip::hdr_cap<double>(), "gamut_gradient_slack",
                       flip::gamut_gradient_slack<double>());
}

// Runs work() with the GIL released, for the helpers below that read and write buffers Python holds;
// false if it ran out of memory (its caller then raises MemoryError).
template <class Work>
bool without_gil(const Work& work) {
  bool out_of_memory = false;
  Py_BEGIN_ALLOW_THREADS;
  try {
    work();
  } catch (const std::bad_alloc&) {
    out_of_memory = true;
  }
  Py_END_ALLOW_THREADS;
  return !out_of_memory;
}

// pooling_order(source, sorted, running, count, itemsize) -> total: pooling_order.h's walk over
// `count` floats of `itemsize` bytes (4 or 8) at address `source`, into the buffers at `sorted` and
// `running`, without the GIL. Python's limited API of the oldest supported Python has no buffer
// protocol, so flip_loss/pooling.py, the one caller, passes the addresses of C-contiguous, aligned
// numpy arrays it holds meanwhile.
PyObject* pooling_order(PyObject*, PyObject* args) {
  unsigned long long source = 0, sorted = 0, running = 0;
  Py_ssize_t count = 0, itemsize = 0;
  if (!PyArg_ParseTuple(args, "KKKnn", &source, &sorted, &running, &count, &itemsize)) return nullptr;
  if (count < 0 || (itemsize != 4 && itemsize != 8) || (count > 0 && (source == 0 || sorted == 0 || running == 0))) {
    PyErr_SetString(PyExc_ValueError,
                    "pooling_order: expected three addresses, a count >= 0 and an itemsize of 4 or 8");
    return nullptr;
  }
  double total = 0.0;
  const bool done = without_gil([&] {
    const auto n = static_cast<std::size_t>(count);
    if (itemsize == 4) {
      total = flip::cpu::pooling_order(reinterpret_cast<const float*>(source), reinterpret_cast<float*>(sorted),
                                       reinterpret_cast<float*>(running), n);
    } else {
      total = flip::cpu::pooling_order(reinterpret_cast<const double*>(source), reinterpret_cast<double*>(sorted),
                                       reinterpret_cast<double*>(running), n);
    }
  });
  return done ? PyFloat_FromDouble(total) : PyErr_NoMemory();
}

// png_unfilter(filtered, out, height, row_bytes, bytes_per_pixel, planar) -> bool: png_unfilter.h's
// reversal of the row filters of `height` scanlines, each a filter type byte and `row_bytes` bytes
// at address `filtered`, into the height * row_bytes bytes at address `out` (as rows, or as planes
// where `planar` is true), without the GIL; False for a filter type beyond 4. As for pooling_order,
// flip_loss/imageio.py, the one caller, passes the addresses of buffers it holds meanwhile.
PyObject* png_unfilter(PyObject*, PyObject* args) {
  unsigned long long filtered = 0, out = 0;
  Py_ssize_t height = 0, row_bytes = 0, bytes_per_pixel = 0;
  int planar = 0;
  if (!PyArg_ParseTuple(args, "KKnnnp", &filtered, &out, &height, &row_bytes, &bytes_per_pixel, &planar))
    return nullptr;
  if (height < 0 || row_bytes < 1 || bytes_per_pixel < 1 || bytes_per_pixel > 4 || row_bytes % bytes_per_pixel != 0 ||
      (height > 0 && (filtered == 0 || out == 0))) {
    PyErr_SetString(PyExc_ValueError,
                    "png_unfilter: expected two addresses, a height >= 0, bytes_per_pixel from 1 to 4 and row_bytes "
                    "a multiple of it");
    return nullptr;
  }
  bool known = false;
  const bool done = without_gil([&] {
    known =
        flip::cpu::png_unfilter(reinterpret_cast<const std::uint8_t*>(filtered), reinterpret_cast<std::uint8_t*>(out),
                                static_cast<std::size_t>(height), static_cast<std::size_t>(row_bytes),
                                static_cast<std::size_t>(bytes_per_pixel), planar != 0);
  });
  return done ? PyBool_FromLong(known ? 1 : 0) : PyErr_NoMemory();
}

// byte_planes(samples, planes, height, width, channels, row_stride, pixel_stride): byte_images.h's
// 8-bit samples (strides in bytes, each channel one byte after the last) into float planes at address
// `planes`, without the GIL. flip_loss/imageio.py, the one caller, holds the buffers meanwhile.
PyObject* byte_planes(PyObject*, PyObject* args) {
  unsigned long long samples = 0, planes = 0;
  Py_ssize_t height = 0, width = 0, channels = 0, row_stride = 0, pixel_stride = 0;
  if (!PyArg_ParseTuple(args, "KKnnnnn", &samples, &planes, &height, &width, &channels, &row_stride, &pixel_stride))
    return nullptr;
  if (height < 0 || width < 0 || channels < 1 || pixel_stride < channels || row_stride < width * pixel_stride ||
      (height > 0 && width > 0 && (samples == 0 || planes == 0))) {
    PyErr_SetString(PyExc_ValueError,
                    "byte_planes: expected two addresses, sizes >= 0, channels >= 1 and strides that hold them");
    return nullptr;
  }
  without_gil([&] {
    flip::cpu::byte_planes(reinterpret_cast<const std::uint8_t*>(samples), row_stride, pixel_stride,
                           static_cast<std::size_t>(height), static_cast<std::size_t>(width),
                           static_cast<std::size_t>(channels), reinterpret_cast<float*>(planes));
  });
  Py_RETURN_NONE;
}

// colour_map(values, count, table, colours): byte_images.h's colours of `count` float32 values
// through a 256 x 3 table of bytes, without the GIL. flip_loss/colormaps.py, the one caller, holds
// the buffers meanwhile.
PyObject* colour_map(PyObject*, PyObject* args) {
  unsigned long long values = 0, table = 0, colours = 0;
  Py_ssize_t count = 0;
  if (!PyArg_ParseTuple(args, "KnKK", &values, &count, &table, &colours)) return nullptr;
  if (count < 0 || table == 0 || (count > 0 && (values == 0 || colours == 0))) {
    PyErr_SetString(PyExc_ValueError, "colour_map: expected three addresses and a count >= 0");
    return nullptr;
  }
  without_gil([&] {
    flip::cpu::colour_map(reinterpret_cast<const float*>(values), static_cast<std::size_t>(count),
                          reinterpret_cast<const std::uint8_t*>(table), reinterpret_cast<std::uint8_t*>(colours));
  });
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"cpu_capability", &cpu_capability, METH_NOARGS,
     "The instruction-set level of the CPU kernels: 'avx512', 'avx2' or 'baseline'."},
    {"limits", &limits, METH_NOARGS,
     "The ops' argument limits (min_ppd, max_ppd, max_eps, min_exposures, max_exposures), tone mapper "
     "names, the planes per image of the kept sensitivities and the most bytes of them CUDA keeps, as "
     "the C++ kernels use them; the tone mappers' coefficients (k0..k5) by tone mapper, in the names' order."},
    {"constants", &constants, METH_NOARGS,
     "FLIP's published constants as the C++ kernels use them (csrc/flip/constants.h): qc, pc, pt, gw, qf, the CSF "
     "parameters, the Lab and sRGB break points, the colour matrices, the white point, HDR-FLIP's luminance weights "
     "and cap."},
    {"catch_interrupts", &catch_interrupts, METH_NOARGS,
     "Until the matching take_interrupt(), keeps the exception a Python signal handler raises inside this "
     "thread's ops for take_interrupt() (else the op's RuntimeError names it and it is dropped)."},
    {"take_interrupt", &take_interrupt, METH_NOARGS,
     "Ends this thread's innermost catch_interrupts() and returns the exception a Python signal handler "
     "raised inside it (then forgotten), or None."},
    {"pooling_order", &pooling_order, METH_VARARGS,
     "pooling_order(source, sorted, running, count, itemsize) -> total: the values at address source sorted into "
     "the buffer at sorted, their running sums into running, and their sum in their own order (flip_loss.pooling's "
     "private helper)."},
    {"png_unfilter", &png_unfilter, METH_VARARGS,
     "png_unfilter(filtered, out, height, row_bytes, bytes_per_pixel, planar) -> bool: the row filters of an 8-bit "
     "PNG image's scanlines at address filtered reversed into the buffer at out, as rows or as planes; False for an "
     "unknown filter type "
     "(flip_loss.imageio's private helper)."},
    {"byte_planes", &byte_planes, METH_VARARGS,
     "byte_planes(samples, planes, height, width, channels, row_stride, pixel_stride): 8-bit samples / 255 into "
     "float planes (flip_loss.imageio's private helper)."},
    {"colour_map", &colour_map, METH_VARARGS,
     "colour_map(values, count, table, colours): float32 values in [0, 1] to the colours of a 256 x 3 byte table "
     "(flip_loss.colormaps' private helper)."},
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
