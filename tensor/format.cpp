// torch-style text for local tensors: nested brackets, aligned columns, and past 1000
// elements only the first and last 3 entries of each dim.
#include <cmath>
#include <sstream>

#include "kernels.hpp"

namespace dtr::local {

namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  const Shape& shape;
  std::vector<std::string> cells;  // one per element of the packed tensor, in order
  size_t width = 0;
  bool summarize = false;

  void emit(std::ostringstream& os, int64_t dim, int64_t offset, int indent) const {
    if (shape.empty()) {
      os << cells[0];
      return;
    }
    int64_t size = shape[dim];
    int64_t block = 1;
    for (size_t i = dim + 1; i < shape.size(); ++i) block *= shape[i];
    os << "[";
    bool last = dim + 1 == static_cast<int64_t>(shape.size());
    for (int64_t i = 0; i < size; ++i) {
      if (summarize && size > 2 * kEdgeItems && i == kEdgeItems) {
        os << (last ? "..., " : "...,\n" + std::string(indent + 1, ' '));
        i = size - kEdgeItems;
      }
      if (last) {
        std::string c = cells[offset + i];
        os << std::string(width - c.size(), ' ') << c;
      } else {
        emit(os, dim + 1, offset + i * block, indent + 1);
      }
      if (i + 1 < size) {
        os << ",";
        if (last) {
          os << " ";
        } else {
          os << std::string(shape.size() - dim - 1, '\n') << std::string(indent + 1, ' ');
        }
      }
    }
    os << "]";
  }
};

template <typename T>
std::vector<std::string> format_cells(const std::vector<T>& v) {
  std::vector<std::string> cells;
  cells.reserve(v.size());
  if constexpr (std::is_same_v<T, bool>) {
    for (bool b : v) cells.push_back(b ? "True" : "False");
  } else if constexpr (std::is_integral_v<T>) {
    for (T x : v) cells.push_back(std::to_string(x));
  } else {
    double max_abs = 0;
    bool all_int = true;
    for (T x : v) {
      if (std::isfinite(x)) {
        max_abs = std::max(max_abs, std::abs(static_cast<double>(x)));
        all_int &= std::floor(x) == x;
      }
    }
    bool sci = max_abs >= 1e8 || (max_abs > 0 && max_abs < 1e-4);
    for (T x : v) {
      if (std::isnan(x))
        cells.push_back("nan");
      else if (std::isinf(x))
        cells.push_back(x > 0 ? "inf" : "-inf");
      else if (sci)
        cells.push_back(fmt::format("{:.4e}", x));
      else if (all_int)
        cells.push_back(fmt::format("{:.0f}.", x));
      else
        cells.push_back(fmt::format("{:.4f}", x));
    }
  }
  return cells;
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  Formatter f{shape(), {}, 0, numel() > kSummarizeAbove};
  if (numel() > 0) {
    f.cells = detail::dispatch(dtype(), [&]<typename T>() {
      if constexpr (std::is_same_v<T, bool>)
        return format_cells(to_vector<bool>());
      else if constexpr (is_half_v<T>)  // every float16 and bfloat16 value is a float
        return format_cells(to_vector<float>());
      else
        return format_cells(to_vector<T>());
    });
  }
  for (const std::string& c : f.cells) f.width = std::max(f.width, c.size());
  std::ostringstream os;
  os << "tensor(";
  if (numel() == 0) {
    os << "[]";
  } else {
    f.emit(os, 0, 0, 7);
  }
  os << ", shape=" << dtr::to_string(shape()) << ", dtype=" << dtype_name(dtype()) << ")";
  return os.str();
}

}  // namespace dtr::local
