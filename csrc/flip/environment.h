// The C++ reading of the FLIP_LOSS_* environment variables the kernels read (docs/environment.md),
// by the rule of flip_loss/environment.py and with its messages: a switch takes 1, true, on, yes or
// 0, false, off, no, a choice one of its names, both in any case; an empty value counts as unset;
// any other value throws std::runtime_error naming the variable (a RuntimeError in Python), so
// that a value read loosely cannot leave a switch other than its user meant.
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace flip::environment {

// The lower-case value of `name`, one of `choices`; "" when unset or empty.
inline std::string choice(const char* name, std::initializer_list<const char*> choices) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return "";
  std::string value(raw);
  for (auto& ch : value) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  std::string names;
  for (const char* c : choices) {
    if (value == c) return value;
    names += (names.empty() ? "" : ", ") + std::string(c);
  }
  throw std::runtime_error(std::string("flip_loss: ") + name + "='" + raw + "' must be one of " + names +
                           " (any case)");
}

// Whether switch `name` is on; `fallback` when unset or empty.
inline bool switch_on(const char* name, bool fallback) {
  const std::string v = choice(name, {"1", "true", "on", "yes", "0", "false", "off", "no"});
  if (v.empty()) return fallback;
  return v == "1" || v == "true" || v == "on" || v == "yes";
}

// A positive whole number of bytes (decimal digits only); `fallback` when unset or empty.
inline int64_t bytes(const char* name, int64_t fallback) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return fallback;
  int64_t value = 0;
  for (const char* p = raw; *p != '\0'; ++p) {
    const bool digit = *p >= '0' && *p <= '9';
    if (!digit || value > (INT64_MAX - 9) / 10) {
      value = 0;
      break;
    }
    value = value * 10 + (*p - '0');
  }
  if (value <= 0)
    throw std::runtime_error(std::string("flip_loss: ") + name + "='" + raw +
                             "' must be a positive whole number of bytes");
  return value;
}

}  // namespace flip::environment
