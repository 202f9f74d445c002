// Internal: helpers that build error messages naming the op and the values involved.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "dtr/dims.hpp"
#include "dtr/dtype.hpp"
#include "dtr/error.hpp"

template <>
struct fmt::formatter<dtr::Dims> : fmt::formatter<std::string_view> {
  auto format(const dtr::Dims& d, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(dtr::to_string(d), ctx);
  }
};
template <>
struct fmt::formatter<dtr::DType> : fmt::formatter<std::string_view> {
  auto format(dtr::DType t, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(dtr::dtype_name(t), ctx);
  }
};

namespace dtr::detail {

// Throws E with "op: message".
template <typename E, typename... Args>
[[noreturn]] void fail(std::string_view op, fmt::format_string<Args...> format, Args&&... args) {
  throw E(fmt::format("{}: {}", op, fmt::format(format, std::forward<Args>(args)...)));
}

}  // namespace dtr::detail
