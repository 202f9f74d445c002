// Cereal archives over memory, for the codec (protocol/codec.cpp): the byte layout of
// cereal's PortableBinary archives (one endianness byte, then each value in that byte
// order; these write little-endian) without a std::streambuf call per field. Output
// appends to a std::string; input reads from a span and throws cereal::Exception when a
// value runs past its end.
//
// Thread safety: an archive belongs to one thread.
#pragma once

#include <algorithm>
#include <bit>
#include <cereal/cereal.hpp>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>

namespace dtr::protocol {

namespace archive_detail {
inline constexpr bool kHostLittle = std::endian::native == std::endian::little;
inline void swap_each(char* p, std::streamsize size, std::streamsize width) {
  for (std::streamsize i = 0; i + width <= size; i += width)
    for (std::streamsize j = 0; j < width / 2; ++j) std::swap(p[i + j], p[i + width - 1 - j]);
}
}  // namespace archive_detail

class StringOutputArchive
    : public cereal::OutputArchive<StringOutputArchive, cereal::AllowEmptyClassElision> {
 public:
  // Appends to `out` after its current contents. The string grows ahead of the writes
  // (so that a value is one bounds check and one copy): call settle() before using it.
  // `tag`: write the endianness byte now (false: the caller wrote it already).
  explicit StringOutputArchive(std::string& out, bool tag = true)
      : cereal::OutputArchive<StringOutputArchive, cereal::AllowEmptyClassElision>(this),
        out_(out),
        end_(out.size()) {
    if (tag) {
      const uint8_t little = 1;  // as PortableBinaryOutputArchive writes on such hosts
      saveBinary<1>(&little, 1);
    }
  }
  template <std::streamsize Width>
  [[gnu::always_inline]] inline void saveBinary(const void* data, std::streamsize size) {
    const auto n = static_cast<size_t>(size);
    if (out_.size() - end_ < n) [[unlikely]]
      grow(n);
    char* at = out_.data() + end_;
    std::memcpy(at, data, n);
    if constexpr (!archive_detail::kHostLittle) archive_detail::swap_each(at, size, Width);
    end_ += n;
  }
  // Bytes in the string that hold data: what it held before, and what was written since.
  size_t size() const { return end_; }
  // Trims the string to size().
  void settle() { out_.resize(end_); }
  // Starts over after the caller replaced the string's contents: writes go after them.
  void restart() { end_ = out_.size(); }

 private:
  void grow(size_t n) {
    const size_t need = end_ + n;
    size_t size = std::max(out_.size() * 2, need + 256);
    // Within the capacity reserved ahead, when that is enough: no reallocation.
    if (size > out_.capacity() && need <= out_.capacity()) size = out_.capacity();
    out_.resize(size);
  }

  std::string& out_;
  size_t end_;
};

class SpanInputArchive
    : public cereal::InputArchive<SpanInputArchive, cereal::AllowEmptyClassElision> {
 public:
  explicit SpanInputArchive(std::string_view bytes)
      : cereal::InputArchive<SpanInputArchive, cereal::AllowEmptyClassElision>(this),
        p_(bytes.data()),
        end_(bytes.data() + bytes.size()) {
    uint8_t little = 0;
    loadBinary<1>(&little, 1);
    if (little > 1)
      throw cereal::Exception("endianness byte " + std::to_string(little) + " is not 0 or 1");
    swap_ = (little == 1) != archive_detail::kHostLittle;
  }
  // Inlined, so that a value of fixed width is one bounds check and one load.
  template <std::streamsize Width>
  [[gnu::always_inline]] inline void loadBinary(void* data, std::streamsize size) {
    if (size < 0 || static_cast<size_t>(size) > left()) [[unlikely]]
      short_read(size);
    std::memcpy(data, p_, static_cast<size_t>(size));
    p_ += size;
    if (swap_) [[unlikely]]
      archive_detail::swap_each(static_cast<char*>(data), size, Width);
  }
  size_t left() const { return static_cast<size_t>(end_ - p_); }

 private:
  [[noreturn]] void short_read(std::streamsize size) const {
    throw cereal::Exception("Failed to read " + std::to_string(size) +
                            " bytes from input stream! Read " + std::to_string(left()));
  }

  const char* p_;
  const char* end_;
  bool swap_ = false;
};

template <class T>
[[gnu::always_inline]] inline std::enable_if_t<std::is_arithmetic_v<T>> CEREAL_SAVE_FUNCTION_NAME(
    StringOutputArchive& ar, const T& t) {
  static_assert(!std::is_floating_point_v<T> || std::numeric_limits<T>::is_iec559);
  ar.template saveBinary<sizeof(T)>(std::addressof(t), sizeof(t));
}
template <class T>
[[gnu::always_inline]] inline std::enable_if_t<std::is_arithmetic_v<T>> CEREAL_LOAD_FUNCTION_NAME(
    SpanInputArchive& ar, T& t) {
  static_assert(!std::is_floating_point_v<T> || std::numeric_limits<T>::is_iec559);
  ar.template loadBinary<sizeof(T)>(std::addressof(t), sizeof(t));
}
template <class T>
void CEREAL_SAVE_FUNCTION_NAME(StringOutputArchive& ar, const cereal::BinaryData<T>& bd) {
  using Item = std::remove_pointer_t<T>;
  ar.template saveBinary<sizeof(Item)>(bd.data, static_cast<std::streamsize>(bd.size));
}
template <class T>
void CEREAL_LOAD_FUNCTION_NAME(SpanInputArchive& ar, cereal::BinaryData<T>& bd) {
  using Item = std::remove_pointer_t<T>;
  ar.template loadBinary<sizeof(Item)>(bd.data, static_cast<std::streamsize>(bd.size));
}

}  // namespace dtr::protocol

CEREAL_SETUP_ARCHIVE_TRAITS(dtr::protocol::SpanInputArchive, dtr::protocol::StringOutputArchive)
