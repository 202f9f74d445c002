// Internal: the attributes of the convolution and pooling ops as named fields, read and
// checked from OpAttrs::ints (laid out in signature order, include/dtr/op_table.hpp), and
// the output-size rules. The shape rules (tensor/op_rules.cpp), the CPU kernels and the
// CUDA kernels all read the attributes through these, so they agree on what they mean.
//
// Terms: a call works on `planes` (N * C (H, W) images; an unbatched (C, H, W) input is
// one sample), `k` is the kernel size, `s` the stride, `p` the zero padding on each side,
// `d` the dilation (the gap between kernel taps); the output has (oh, ow) positions, and
// output position o reads input rows o * s - p + i * d for kernel taps i in [0, k).
//
// The per-element window arithmetic (the taps of one pooling window, avg_pool2d's divisor)
// is host and device code, so the CPU and CUDA kernels compute it alike.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cmath>
#include <cstdint>

#include "dtr/half.hpp"  // DTR_HOST_DEVICE
#include "dtr/op_table.hpp"

namespace dtr::detail {

// The largest kernel size, stride, padding or dilation a window op takes: (k - 1) * d + 1
// and in + 2 * p then stay far inside int64 whatever a message asks for.
inline constexpr int64_t kMaxWindowAttr = (int64_t{1} << 31) - 1;

// One spatial axis of a window op: kernel, stride, padding, dilation.
struct Axis {
  int64_t k = 1, s = 1, p = 0, d = 1;
  // The span of the kernel's taps: (k - 1) * d + 1.
  DTR_HOST_DEVICE int64_t extent() const { return (k - 1) * d + 1; }
};

// conv2d and its gradients: stride, padding, dilation and groups; the kernel size comes
// from the weight (conv2d, conv2d_input_grad) or from kernel_size (conv2d_weight_grad).
struct Conv2dArgs {
  Axis h, w;
  int64_t groups = 1;
};

// max_pool2d / avg_pool2d and their backward ops.
struct Pool2dArgs {
  Axis h, w;
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool2d
  bool has_divisor = false;       // avg_pool2d's divisor_override
  double divisor = 0;
};

// conv2d's attributes: ints[at..at+7) = stride (2), padding (2), dilation (2), groups.
// Throws InvalidArgument naming the op for a non-positive stride, dilation or groups or a
// negative padding.
Conv2dArgs conv2d_args(const OpDef& d, const OpAttrs& a, size_t at);
// max_pool2d's: ints[at..at+9) = kernel_size (2), stride (2; 0, 0: the kernel size),
// padding (2), dilation (2), ceil_mode.
Pool2dArgs max_pool2d_args(const OpDef& d, const OpAttrs& a, size_t at);
// avg_pool2d's: ints[at..at+8) = kernel_size (2), stride (2), padding (2), ceil_mode,
// count_include_pad; scalars[0] = divisor_override (None: none).
Pool2dArgs avg_pool2d_args(const OpDef& d, const OpAttrs& a, size_t at);

// Output positions of a convolution along one axis of `in` inputs (may be <= 0 when the
// input is smaller than the kernel's extent).
DTR_HOST_DEVICE inline int64_t conv_out_size(int64_t in, const Axis& x) {
  const int64_t span = in + 2 * x.p - x.extent();
  return span < 0 ? 0 : span / x.s + 1;
}
// Output positions of a pooling along one axis, as torch counts them: with ceil_mode the
// last window may hang over the end, but must start inside the input or its left padding.
DTR_HOST_DEVICE inline int64_t pool_out_size(int64_t in, const Axis& x, bool ceil_mode) {
  const int64_t span = in + 2 * x.p - x.extent();
  if (span < 0) return 0;
  int64_t out = (span + (ceil_mode ? x.s - 1 : 0)) / x.s + 1;
  if (ceil_mode && (out - 1) * x.s >= in + x.p) --out;
  return out;
}

// Floor division for a positive divisor.
DTR_HOST_DEVICE inline int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// The output positions [lo, hi) of `out` whose tap at input offset `off` (position
// o * s + off) lands inside [0, size).
DTR_HOST_DEVICE inline void taps_inside(int64_t off, int64_t s, int64_t size, int64_t out,
                                        int64_t& lo, int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + s - 1) / s;
  if (lo > out) lo = out;  // every tap in the left padding (a padding wider than the output)
  hi = size - 1 - off < 0 ? 0 : floor_div(size - 1 - off, s) + 1;
  if (hi > out) hi = out;
  if (hi < lo) hi = lo;
}

// The input rows [lo, hi) (stepping by d) that output position o of a max pooling reads,
// clipped to the input: torch's window (the first tap at or after row 0).
DTR_HOST_DEVICE inline void max_window(int64_t o, int64_t in, const Axis& x, int64_t& lo,
                                       int64_t& hi) {
  lo = o * x.s - x.p;
  hi = lo + x.extent();
  if (hi > in) hi = in;
  while (lo < 0) lo += x.d;
}

// The max of output position (oh, ow) of a (h, w) plane and its position y * w + x; NaN
// wins (the last NaN), as in torch. An empty window gives -inf at the window's first tap.
template <typename T, typename Acc>
DTR_HOST_DEVICE void max_pool_at(const T* plane, int64_t h, int64_t w, const Pool2dArgs& p,
                                 int64_t oh, int64_t ow, Acc& best, int64_t& where) {
  int64_t y0, y1, x0, x1;
  max_window(oh, h, p.h, y0, y1);
  max_window(ow, w, p.w, x0, x1);
  best = -static_cast<Acc>(INFINITY);
  where = y0 * w + x0;
  // Without branches on the data (random data mispredicts them half the time).
  for (int64_t y = y0; y < y1; y += p.h.d)
    for (int64_t x = x0; x < x1; x += p.w.d) {
      const Acc v = static_cast<Acc>(plane[y * w + x]);
      const bool take = (v > best) | (v != v);
      best = take ? v : best;
      where = take ? y * w + x : where;
    }
}

// avg_pool2d's window of output position o along one axis: the rows [lo, hi) it sums,
// and `span`, its extent counting the padding (torch's pool_size factor).
DTR_HOST_DEVICE inline void avg_window(int64_t o, int64_t in, const Axis& x, int64_t& lo,
                                       int64_t& hi, int64_t& span) {
  lo = o * x.s - x.p;
  hi = lo + x.k < in + x.p ? lo + x.k : in + x.p;
  span = hi - lo;
  if (lo < 0) lo = 0;
  if (hi > in) hi = in;
}

// What avg_pool2d divides the window sum of output (oh, ow) by; 0 for an empty window.
DTR_HOST_DEVICE inline double avg_divisor(const Pool2dArgs& p, int64_t y0, int64_t y1, int64_t sy,
                                          int64_t x0, int64_t x1, int64_t sx) {
  if (y0 >= y1 || x0 >= x1) return 0;
  if (p.has_divisor) return p.divisor;
  return static_cast<double>(p.count_include_pad ? sy * sx : (y1 - y0) * (x1 - x0));
}

// avg_pool2d's input gradient at (y, x) of an (h, w) plane from the output gradient
// `grad` (an (oh, ow) plane): the sum of grad / divisor over the outputs whose windows
// hold (y, x).
template <typename T>
DTR_HOST_DEVICE double avg_pool_grad_at(const T* grad, int64_t h, int64_t w, int64_t oh, int64_t ow,
                                        const Pool2dArgs& p, int64_t y, int64_t x) {
  // Output o's window starts at o * s - p and spans k rows.
  int64_t oy0 = floor_div(y + p.h.p - p.h.k, p.h.s) + 1, oy1 = floor_div(y + p.h.p, p.h.s);
  int64_t ox0 = floor_div(x + p.w.p - p.w.k, p.w.s) + 1, ox1 = floor_div(x + p.w.p, p.w.s);
  if (oy0 < 0) oy0 = 0;
  if (ox0 < 0) ox0 = 0;
  if (oy1 > oh - 1) oy1 = oh - 1;
  if (ox1 > ow - 1) ox1 = ow - 1;
  double acc = 0;
  for (int64_t oy = oy0; oy <= oy1; ++oy) {
    int64_t y0, y1, sy;
    avg_window(oy, h, p.h, y0, y1, sy);
    if (y < y0 || y >= y1) continue;
    for (int64_t ox = ox0; ox <= ox1; ++ox) {
      int64_t x0, x1, sx;
      avg_window(ox, w, p.w, x0, x1, sx);
      if (x < x0 || x >= x1) continue;
      acc += static_cast<double>(grad[oy * ow + ox]) / avg_divisor(p, y0, y1, sy, x0, x1, sx);
    }
  }
  return acc;
}

}  // namespace dtr::detail
