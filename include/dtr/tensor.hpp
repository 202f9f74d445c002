// The local tensor library: dtr::local::Tensor is a CPU tensor in this process, with
// every op of the op table (tensor_ops.hpp) executed by the CPU kernels. The master uses
// it for data it holds (`dtr::local::randn`, `to_local()`); workers use the same engine
// (`execute`) to run the commands they receive.
//
// Thread safety: a Tensor is a handle to shared storage. Distinct handles may be used from
// distinct threads; writing one storage from two threads at once is a data race, as with
// any array. cpu_memory_stats() is thread-safe.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dtr/error.hpp"
#include "dtr/generator.hpp"
#include "dtr/op_table.hpp"
#include "dtr/tensor_ops.hpp"

namespace dtr {

// A block of memory: host memory, 64-byte aligned and counted in cpu_memory_stats(), or
// the memory of a CUDA device (device() >= 0; its data() is a device address, counted by
// that device's caching allocator).
class Storage {
 public:
  // Throws OutOfMemory naming the bytes asked for.
  static std::shared_ptr<Storage> allocate(size_t nbytes);
  // Memory owned elsewhere (a received network buffer), kept alive by `owner` as long as
  // the storage lives; counted in cpu_memory_stats() like allocated memory.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, std::shared_ptr<void> owner);
  // Device memory of CUDA device `device` (>= 0), released by `owner` (the allocator's
  // block); not counted in cpu_memory_stats().
  static std::shared_ptr<Storage> wrap_device(int device, void* data, size_t nbytes,
                                              std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  int device() const { return device_; }  // -1: host memory; k: CUDA device k

 private:
  Storage(void* data, size_t nbytes, std::shared_ptr<void> owner, int device = -1)
      : data_(data), nbytes_(nbytes), owner_(std::move(owner)), device_(device) {}
  void* data_;
  size_t nbytes_;
  std::shared_ptr<void> owner_;  // null: data_ came from allocate()
  int device_;
};

struct MemoryStats {
  int64_t bytes_in_use = 0;
  int64_t peak_bytes = 0;
  int64_t live_storages = 0;
};
MemoryStats cpu_memory_stats();
// A cap on the bytes of all live storages of this process (0: none, the default). An
// allocation or wrap past it throws OutOfMemory naming the bytes asked, in use and the
// limit; nothing is allocated. Thread-safe; a worker sets it from --memory-limit.
void set_cpu_memory_limit(int64_t bytes);
int64_t cpu_memory_limit();

namespace local {

class Tensor : public TensorOps<Tensor> {
 public:
  Tensor() = default;  // an undefined tensor; most calls on it throw InvalidArgument
  // Throws InvalidArgument when meta reaches outside the storage.
  Tensor(std::shared_ptr<Storage> storage, const TensorMeta& meta);

  bool defined() const { return storage_ != nullptr; }
  const TensorMeta& meta() const { return meta_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // Where the bytes live: -1 the host, k CUDA device k (ops run there, on the calling
  // thread's current stream of that device).
  int device() const { return storage_ ? storage_->device() : -1; }
  // This tensor on `device` (-1: the host): itself when already there, else a contiguous
  // copy (host<->device through pinned staging). A copy to the host has finished when
  // this returns; one to a device is ordered on the device's current stream.
  Tensor to_device(int device) const;
  Tensor cpu() const { return to_device(-1); }
  Tensor cuda(int device = 0) const { return to_device(device); }

  // Address of element 0 (the offset applied); a device address for a CUDA tensor.
  void* raw_data() const {
    if (!storage_) [[unlikely]]
      undefined("data");
    return static_cast<char*>(storage_->data()) +
           meta_.offset * static_cast<int64_t>(element_size(meta_.dtype));
  }
  // Typed address of element 0; throws DTypeError when T does not match dtype().
  template <typename T>
  T* data() const {
    check_dtype(dtype_of_v<T>, "data");
    return static_cast<T*>(raw_data());
  }
  // The only element of a one-element tensor; throws ShapeError otherwise.
  Scalar item() const;
  template <typename T>
  T item() const {
    return item().to<T>();
  }
  // The elements in logical (row-major) order, converted to T.
  template <typename T>
  std::vector<T> to_vector() const;

  // A contiguous copy with its own storage (recorded by autograd when this tensor is
  // tracked, as torch's clone).
  Tensor clone() const;

  // Engine hooks used by TensorOps.
  Tensor apply(OpId op, const OpAttrs& attrs, const Tensor* other) const;
  void apply_inplace(OpId op, const OpAttrs& attrs, const Tensor* other);
  // `op` on any number of inputs (up to kMaxOpInputs): execute(op, inputs, attrs, false).
  static Tensor apply_inputs(OpId op, const OpAttrs& attrs, std::span<const Tensor> inputs);
  // A new tensor of `shape` filled with `value`, on this tensor's device.
  Tensor full_here(const Shape& shape, Scalar value, DType dtype) const;

  // torch-style text: the values (summarized past 1000 elements) and the dtype.
  std::string to_string() const;

 private:
  void check_dtype(DType expected, const char* what) const;
  // Throws InvalidArgument: `what` was called on an undefined tensor.
  [[noreturn]] static void undefined(const char* what);
  std::shared_ptr<Storage> storage_;
  TensorMeta meta_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Runs one op of the table on CPU tensors: checks it with the shape rule, allocates the
// result (or aliases input 0 for views and in-place calls) and runs the kernel.
// inputs.size() must be within the op's [min_inputs, max_inputs] (at most kMaxOpInputs).
// Inputs must all live on one device (else DeviceError naming the op and both); the
// result lives there too. `device` places the result of a creation op (no inputs).
Tensor execute(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs, bool inplace);
Tensor execute(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs, bool inplace,
               int device);
// execute() in place: the result is written into inputs[0].
void execute_inplace(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs);
// Runs the kernel of `op` into an already allocated `out` whose meta is what infer()
// gives; the worker uses this when it has allocated the result itself.
void run_kernel(OpId op, std::span<const Tensor> inputs, const OpAttrs& attrs, const Tensor& out);

// --- creation ---
Tensor empty(const Shape& shape, DType dtype = DType::Float32);
// On `device` (-1: the host; k: CUDA device k, from its caching allocator).
Tensor empty(const Shape& shape, DType dtype, int device);
Tensor zeros(const Shape& shape, DType dtype = DType::Float32);
Tensor ones(const Shape& shape, DType dtype = DType::Float32);
Tensor full(const Shape& shape, Scalar value, DType dtype = DType::Float32);
// dtype: int64 when start, end and step are all integers, else float32 (as torch).
Tensor arange(Scalar end);
Tensor arange(Scalar start, Scalar end, Scalar step = 1);
Tensor arange(Scalar start, Scalar end, Scalar step, DType dtype);
Tensor linspace(double start, double end, int64_t steps, DType dtype = DType::Float32);
Tensor rand(const Shape& shape, Generator& gen, DType dtype = DType::Float32);
Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::Float32);
// With the process-wide default generator (seeded by dtr::manual_seed).
Tensor rand(const Shape& shape, DType dtype = DType::Float32);
Tensor randn(const Shape& shape, DType dtype = DType::Float32);
// A tensor holding a copy of `values` with the given shape (numel must match).
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape);
template <typename T>
Tensor from_vector(const std::vector<T>& values) {
  return from_vector(values, Shape{static_cast<int64_t>(values.size())});
}

}  // namespace local
}  // namespace dtr
