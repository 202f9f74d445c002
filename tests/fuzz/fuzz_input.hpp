// Shared by the fuzz targets that read their input as a stream of fields (fuzz_store.cpp,
// fuzz_pg_frames.cpp): a reader that yields zeros past the end, and the report of a finding.
//
// Thread safety: an InputReader belongs to one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace dtr::fuzz {

// Prints "<target>: FINDING: what detail" and aborts, which libFuzzer reports as a crash.
[[noreturn]] inline void report_finding(const char* target, const char* what,
                                        const std::string& detail) {
  std::fprintf(stderr, "%s: FINDING: %s %s\n", target, what, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

class InputReader {
 public:
  InputReader(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  bool empty() const { return i_ >= n_; }
  uint8_t byte() { return i_ < n_ ? d_[i_++] : 0; }
  uint16_t u16() {  // little-endian; the two reads in order
    const uint8_t lo = byte();
    return static_cast<uint16_t>(lo | (byte() << 8));
  }
  // Up to `len` bytes (fewer at the end of the input).
  std::string bytes(size_t len) {
    len = std::min(len, n_ - std::min(i_, n_));
    std::string s(reinterpret_cast<const char*>(d_ + i_), len);
    i_ += len;
    return s;
  }
  // Exactly `len` bytes into `out`, zeros past the end of the input.
  void fill(void* out, size_t len) {
    auto* o = static_cast<uint8_t*>(out);
    for (size_t k = 0; k < len; ++k) o[k] = byte();
  }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t i_ = 0;
};

}  // namespace dtr::fuzz
