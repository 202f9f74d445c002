// ReduceOp: how a reducing collective (all_reduce, reduce, reduce_scatter) combines the
// ranks' values, as torch.distributed's ReduceOp. Its own small header so that code which
// only names the operation (the wire command of a master-issued collective,
// protocol/commands.hpp) does not pull in the whole process-group API
// (dtr/process_group.hpp, which includes this).
//
// The numeric values travel in dtr's wire formats (the master's Collective command, the
// process groups' message headers): never renumber them.
//
// Thread safety: a plain enum; reduce_op_name() is a pure function (defined by dtr::pg).
#pragma once

#include <cstdint>
#include <string_view>

namespace dtr {

enum class ReduceOp : uint8_t { Sum = 0, Product = 1, Min = 2, Max = 3, Avg = 4 };
// "SUM", "PRODUCT", "MIN", "MAX", "AVG" (in error messages); "invalid" for another value.
std::string_view reduce_op_name(ReduceOp op);

}  // namespace dtr
