// SPDX-License-Identifier: Apache-2.0
// The parser of the forced-path environment variables (VLLM_MYOPS_*_PATH
// and the like) every op family reads once: tests and A/B runs force one
// kernel path per process; a value the op does not know is an error naming
// the variable and what it takes, never a silent default.
#pragma once

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

#include <c10/util/Exception.h>

namespace vllm_myops::env {

// Unset, empty or "auto" -> auto_value; the name of one of `choices` -> its
// value. Whether this process can run the chosen path is the caller's check.
template <typename E>
E choice(const char* name, E auto_value,
         std::initializer_list<std::pair<const char*, E>> choices) {
  const char* env = std::getenv(name);
  const std::string v = env ? env : "";
  if (v.empty() || v == "auto") return auto_value;
  std::string accepted = "auto";
  for (const auto& [key, value] : choices) {
    if (v == key) return value;
    accepted += ", ";
    accepted += key;
  }
  TORCH_CHECK(false, name, " must be one of ", accepted, "; got '", v, "'");
  return auto_value;
}

}  // namespace vllm_myops::env
