// TORCH_LIBRARY_IMPL(flip, AutocastCPU / AutocastCUDA) of the LibTorch CMake package: under
// autocast the inputs of every forward op of op::AutocastOps (op_signatures.h) are cast to float32
// (like PyTorch's own losses) and the result stays float32, so mixed-precision training needs no
// casts around the loss. The backward ops see float32 only. One kernel for every op, made from its
// signature: a new op is a name in that list. The Python extension registers the same rule from
// Python (flip_loss/op_registration.py, AUTOCAST_OPS).
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include <tuple>
#include <type_traits>

#include "../include/flip_loss/op_signatures.h"

namespace flip_ops {
namespace {

namespace op = flip_loss::op;

template <c10::DispatchKey Key, c10::DeviceType Dev, class Op, class Signature = typename Op::Signature>
struct CastToFloat;

// Op called below autocast with its floating tensor arguments in float32 (cached_cast leaves the
// others, such as integer counts and float64, as they are); every other argument as given.
template <c10::DispatchKey Key, c10::DeviceType Dev, class Op, class R, class... Args>
struct CastToFloat<Key, Dev, Op, R(Args...)> {
  template <class T>
  static decltype(auto) cast(T&& value) {
    if constexpr (std::is_same_v<std::decay_t<T>, at::Tensor>) {
      return at::autocast::cached_cast(at::kFloat, value, Dev);
    } else {
      return std::forward<T>(value);
    }
  }
  static R kernel(Args... args) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(Key);
    return op::call<Op>(cast(std::forward<Args>(args))...);
  }
};

template <c10::DispatchKey Key, c10::DeviceType Dev, class... Ops>
void register_autocast(torch::Library& m, std::tuple<Ops...>*) {
  (m.impl(Ops::name, &CastToFloat<Key, Dev, Ops>::kernel), ...);
}

}  // namespace

TORCH_LIBRARY_IMPL(flip, AutocastCPU, m) {
  register_autocast<c10::DispatchKey::AutocastCPU, c10::DeviceType::CPU>(m, static_cast<op::AutocastOps*>(nullptr));
}
TORCH_LIBRARY_IMPL(flip, AutocastCUDA, m) {
  register_autocast<c10::DispatchKey::AutocastCUDA, c10::DeviceType::CUDA>(m, static_cast<op::AutocastOps*>(nullptr));
}

}  // namespace flip_ops
