// csrc/flip/environment.h on its own: each value below, set as the variable, read as a switch, as a
// choice of FLIP_LOSS_CPU_CAPABILITY's names and as bytes, one line per reading:
// "kind<TAB>value<TAB>result" (result: what was read, "unset", or "error:" and the message).
// tests/packaging/test_environment_switches.py reads the same values with flip_loss/environment.py
// and holds the two to each other.
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>

#include "flip/environment.h"

namespace {

constexpr const char* kName = "FLIP_LOSS_TEST_SWITCH";

template <class F>
void show(const char* kind, const char* value, F&& read) {
  std::cout << kind << '\t' << value << '\t';
  try {
    std::cout << read() << '\n';
  } catch (const std::runtime_error& e) {
    std::cout << "error:" << e.what() << '\n';
  }
}

}  // namespace

int main() {
  const char* values[] = {"1",
                          "0",
                          "true",
                          "FALSE",
                          "On",
                          "oFF",
                          "yes",
                          "No",
                          "",
                          " 0",
                          "0 ",
                          "False ",
                          "2",
                          "enable",
                          "avx2",
                          "AVX512",
                          "default",
                          "avx3",
                          "4096",
                          "32MiB",
                          "-5",
                          "0x10",
                          "99999999999999999999"};
  for (const char* v : values) {
    setenv(kName, v, 1);
    show("switch", v, [] {
      const std::string unset = flip::environment::choice(kName, {"1", "true", "on", "yes", "0", "false", "off", "no"});
      if (unset.empty()) return std::string("unset");
      return std::string(flip::environment::switch_on(kName, false) ? "on" : "off");
    });
    show("choice", v, [] {
      const std::string c = flip::environment::choice(kName, {"baseline", "default", "avx2", "avx512"});
      return c.empty() ? std::string("unset") : c;
    });
    show("bytes", v, [] {
      const int64_t b = flip::environment::bytes(kName, -1);
      return b < 0 ? std::string("unset") : std::to_string(b);
    });
  }
  unsetenv(kName);
  show("switch", "(unset)", [] { return std::string(flip::environment::switch_on(kName, true) ? "on" : "off"); });
  std::cout << "ALL CHECKED\n";
  return 0;
}
