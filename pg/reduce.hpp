// Elementwise reduction kernels of the collectives: dst[i] = lo[i] (op) hi[i] for every
// dtype and ReduceOp. The operand order is fixed (lo first) so that ranks computing the
// same element compute it identically. Bool: Sum/Max are OR, Product/Min are AND.
// Integer Sum/Product wrap (two's complement). Min/Max propagate NaN.
//
// Thread safety: pure functions on caller-owned memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dtr/dtype.hpp"
#include "dtr/process_group.hpp"

namespace dtr::pg {

// dst may alias lo or hi. n is the element count. Avg reduces like Sum (divide_by finishes).
void reduce_into(void* dst, const void* lo, const void* hi, int64_t n, DType dtype, ReduceOp op);
// data[i] /= divisor for floating dtypes (the last step of Avg).
void divide_by(void* data, int64_t n, DType dtype, int64_t divisor);
// Copies n received elements; bool bytes are normalized to 0 or 1 (a peer could send any
// byte, and a bool holding another value is undefined behaviour when read).
void copy_elements(void* dst, const void* src, int64_t n, DType dtype);
// Throws DTypeError when the op cannot reduce this dtype (Avg on integers or bool).
void check_reducible(DType dtype, ReduceOp op, const char* what);

}  // namespace dtr::pg
