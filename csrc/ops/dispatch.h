// Typed handles to the flip ops through the dispatcher (used by autograd and the C++ API).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include "signature.h"

namespace flip_ops {

template <class Sig>
c10::TypedOperatorHandle<Sig> op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

}  // namespace flip_ops
