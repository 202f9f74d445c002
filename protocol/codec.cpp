// Header-frame codec: a fixed prefix, then a Cereal body in the portable-binary layout
// (protocol/archive.hpp). Commands and replies are coded generically from their fields()
// (protocol/commands.hpp, protocol/replies.hpp); counts and strings are read by hand so that
// each is checked against its limit and the bytes left before anything is allocated.
#include "protocol/codec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cctype>
#include <cstring>
#include <optional>
#include <utility>

#include "dtr/error.hpp"
#include "protocol/archive.hpp"

namespace dtr::protocol {
namespace {
// Where a command sits in a message: its index in the batch, or in the program of a graph
// upload (`upload` is then the upload's index); errors name it so.
struct CommandAt {
  static constexpr size_t kTop = ~size_t{0};
  size_t index = 0;
  size_t upload = kTop;
};

// Where the fields being read are, named in errors (formatted only then). A command's:
// "command 3 (op)", with the payload frames of its message.
struct CommandWhere {
  static constexpr bool kNamedByOp = true;  // a RunOp's name is its op's
  CommandAt at;
  std::string_view name;
  size_t frames;
  std::vector<bool>* used;  // per payload frame: referenced already
};
// A reply's (or another value's): "trace reply event 3 tensor 0", the reply and the items
// a field is in.
struct ItemWhere {
  static constexpr bool kNamedByOp = false;
  static constexpr size_t kNoIndex = ~size_t{0};
  struct Item {
    const char* label;
    size_t index;
  };
  std::string_view name{};  // of the reply ("" for another value)
  std::string_view kind{};  // "reply"
  std::array<Item, 4> items{};
  size_t depth = 0;
  void enter(const char* label, size_t index = kNoIndex) {
    assert(depth < items.size());  // the reply structs nest two deep at most
    items[depth++] = Item{label, index};
  }
  void leave() { --depth; }
};
}  // namespace
}  // namespace dtr::protocol

template <>
struct fmt::formatter<dtr::protocol::CommandAt> : fmt::formatter<std::string_view> {
  template <typename Ctx>
  auto format(const dtr::protocol::CommandAt& at, Ctx& ctx) const {
    if (at.upload == dtr::protocol::CommandAt::kTop)
      return fmt::format_to(ctx.out(), "command {}", at.index);
    return fmt::format_to(ctx.out(), "command {} of the graph program in command {}", at.index,
                          at.upload);
  }
};

template <>
struct fmt::formatter<dtr::protocol::CommandWhere> : fmt::formatter<std::string_view> {
  template <typename Ctx>
  auto format(const dtr::protocol::CommandWhere& w, Ctx& ctx) const {
    return fmt::format_to(ctx.out(), "{} ({})", w.at, w.name);
  }
};

template <>
struct fmt::formatter<dtr::protocol::ItemWhere> : fmt::formatter<std::string_view> {
  template <typename Ctx>
  auto format(const dtr::protocol::ItemWhere& w, Ctx& ctx) const {
    auto out = ctx.out();
    bool first = w.name.empty();
    if (!first) out = fmt::format_to(out, "{} {}", w.name, w.kind);
    for (size_t i = 0; i < w.depth; ++i, first = false) {
      if (!first) *out++ = ' ';
      out = fmt::format_to(out, "{}", w.items[i].label);
      if (w.items[i].index != dtr::protocol::ItemWhere::kNoIndex)
        out = fmt::format_to(out, " {}", w.items[i].index);
    }
    return out;
  }
};

namespace dtr::protocol {

namespace {

std::string prefix(MsgType type) {
  std::string p(kPrefixBytes, '\0');
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((magic >> (8 * i)) & 0xff);
  p[4] = static_cast<char>(version & 0xff);
  p[5] = static_cast<char>(version >> 8);
  p[6] = static_cast<char>(type);
  return p;
}

// ---- writing ----

// A RunOp's flag byte.
enum : uint8_t { kInplace = 1, kKeepdim = 2, kScalarFirst = 4, kRandom = 8 };

bool has_random(const OpAttrs& a) {
  return a.seed != 0 || a.offset != 0;
}

// A struct whose fields() lists its fields (a command, a reply, a value a reply carries).
struct AnyField {
  template <typename... A>
  void operator()(const char*, A&&...) {}
};
template <class T>
concept HasFields = requires(T& t, AnyField& v) {
  T::fields(t, v);
};

template <class T>
inline constexpr bool is_optional_v = false;
template <class T>
inline constexpr bool is_optional_v<std::optional<T>> = true;
template <class T>
inline constexpr bool is_vector_v = false;
template <class T>
inline constexpr bool is_vector_v<std::vector<T>> = true;

// The encoding of values and fields, over a sink of bytes (`Derived::bytes(p, n, width)`,
// width: the size of the value, for byte order): the same layout whatever the sink.
template <class Derived>
class FieldEncoder {
 public:
  template <typename T>
  [[gnu::always_inline]] inline void put(T v) {
    static_assert(std::is_arithmetic_v<T>);
    static_cast<Derived*>(this)->template bytes<sizeof(T)>(&v, sizeof(T));
  }
  void str(const std::string& s) {
    auto n = static_cast<uint32_t>(std::min(s.size(), kMaxStringBytes));
    put(n);
    static_cast<Derived*>(this)->template bytes<1>(s.data(), n);
  }
  void meta(const TensorMeta& m) {
    put(static_cast<uint8_t>(m.dtype));
    put(static_cast<uint8_t>(m.shape.size()));
    for (int64_t s : m.shape) put(s);
  }
  void attrs(const OpAttrs& a) {
    put(static_cast<uint8_t>(a.ints.size()));
    for (int64_t v : a.ints) put(v);
    for (const Scalar& s : a.scalars) {
      put(static_cast<uint8_t>(s.kind()));
      if (s.is_floating())
        put(s.float_bits());
      else if (!s.is_none())
        put(s.int_bits());
    }
    put(static_cast<uint8_t>(a.dtype));
    if (has_random(a)) {
      put(a.seed);
      put(a.offset);
    }
  }
  void operator()(const char*, bool inplace, const OpAttrs& a, OpFlagsRule) {
    put(static_cast<uint8_t>((inplace ? kInplace : 0) | (a.keepdim ? kKeepdim : 0) |
                             (a.scalar_first ? kScalarFirst : 0) | (has_random(a) ? kRandom : 0)));
  }

  // One field of a command or a reply, by its type (the checks are the reader's).
  template <typename T, typename... Check>
  void operator()(const char* field, const T& v, Check...) {
    if constexpr (std::is_same_v<T, bool>)
      put(static_cast<uint8_t>(v));
    else if constexpr (std::is_enum_v<T>)
      put(static_cast<std::underlying_type_t<T>>(v));
    else if constexpr (std::is_arithmetic_v<T>)
      put(v);
    else if constexpr (std::is_same_v<T, TensorMeta>)
      meta(v);
    else if constexpr (std::is_same_v<T, OpAttrs>)
      attrs(v);
    else if constexpr (std::is_same_v<T, Inputs>)
      inputs(v);
    else if constexpr (std::is_same_v<T, std::string>)
      str(v);
    else if constexpr (is_optional_v<T>)
      optional(field, v);
    else if constexpr (HasFields<T>)
      T::fields(v, static_cast<Derived&>(*this));
    else
      static_assert(sizeof(T) == 0, "a field type the codec does not know");
  }
  // A list field: its count (at most the limit; the rest is not written) and its items.
  template <typename T>
  void operator()(const char*, const std::vector<T>& v, Limit limit) {
    const size_t n = std::min(v.size(), limit.max);
    put(static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) item(v[i]);
  }
  // A graph's program: its count, then each command as a batch holds it.
  void operator()(const char*, const GraphProgram& p, Limit limit) {
    const size_t n = p ? std::min(p->commands.size(), limit.max) : 0;
    put(static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i) std::visit([&](const auto& c) { fields_of(c); }, p->commands[i]);
  }
  // Metadata with its strides and offset (a graph input may be a view).
  void strided_meta(const TensorMeta& m) {
    meta(m);
    for (size_t i = 0; i < m.shape.size(); ++i) put(i < m.strides.size() ? m.strides[i] : 0);
    put(m.offset);
  }
  template <class C>
  void fields_of(const C& c) {
    put(static_cast<uint8_t>(C::kType));
    put(c.stream);
    C::fields(c, static_cast<Derived&>(*this));
  }

 private:
  void inputs(const Inputs& in) {
    const auto n = static_cast<uint8_t>(std::min<size_t>(in.n, Inputs::kMax));
    put(n);
    for (uint8_t i = 0; i < n && i < Inputs::kInline; ++i) put(in.ids[i]);
    for (size_t i = Inputs::kInline; i < n && i - Inputs::kInline < in.more.size(); ++i)
      put(in.more[i - Inputs::kInline]);
  }
  // An optional: a flag byte, then the value when there is one.
  template <typename T>
  void optional(const char* field, const std::optional<T>& v) {
    put(static_cast<uint8_t>(v.has_value()));
    if (v) (*this)(field, *v);
  }
  template <typename T>
  void item(const T& v) {
    if constexpr (std::is_same_v<T, GraphInput>) {
      put(v.id);
      strided_meta(v.meta);
    } else if constexpr (HasFields<T>) {
      T::fields(v, static_cast<Derived&>(*this));
    } else {
      put(v);
    }
  }
};

// Sums the most bytes each field of a command can take (max_encoded_bytes()).
struct EncodedBound {
  size_t bytes = 5;  // type and stream
  bool unbounded = false;
  void operator()(const char*, bool, const OpAttrs&, OpFlagsRule) { bytes += 1; }
  template <typename T, typename... Check>
  void operator()(const char*, const T&, Check...) {
    if constexpr (std::is_same_v<T, bool>)
      bytes += 1;
    else if constexpr (std::is_enum_v<T> || std::is_arithmetic_v<T>)
      bytes += sizeof(T);
    else if constexpr (std::is_same_v<T, TensorMeta>)
      bytes += 2 + 8 * kMaxDims;
    else if constexpr (std::is_same_v<T, OpAttrs>)
      bytes += 1 + 8 * kMaxDims + 9 * std::tuple_size_v<decltype(OpAttrs::scalars)> + 1 + 16;
    else if constexpr (std::is_same_v<T, Inputs>)
      bytes += 1 + 8 * Inputs::kInline;  // more inputs: Writer::command encodes directly
    else
      unbounded = true;  // a list, a graph program
  }
};

// The most bytes a command of type C encodes to; 0 when unbounded (it has a list). A
// RunOp's bound holds for its inline inputs (bounded_here() says whether one fits).
template <class C>
size_t max_encoded_bytes() {
  const C sample{};
  EncodedBound bound;
  C::fields(sample, bound);
  return bound.unbounded ? 0 : bound.bytes;
}

// A command of bounded size, encoded into a local buffer (plain stores the compiler keeps
// in registers, no bounds check per value) and then appended in one piece.
template <size_t N>
class LocalEncoder : public FieldEncoder<LocalEncoder<N>> {
 public:
  template <std::streamsize Width>
  [[gnu::always_inline]] inline void bytes(const void* data, size_t n) {
    assert(size_ + n <= N);  // max_encoded_bytes() bounds every command encoded here
    std::memcpy(buf_ + size_, data, n);
    if constexpr (!archive_detail::kHostLittle)
      archive_detail::swap_each(buf_ + size_, static_cast<std::streamsize>(n), Width);
    size_ += n;
  }
  const char* data() const { return buf_; }
  size_t size() const { return size_; }

 private:
  char buf_[N];
  size_t size_ = 0;
};

class Writer : public FieldEncoder<Writer> {
 public:
  // Appends to `out`, which holds the message's prefix already (and the archive's
  // endianness byte when `tag` is false).
  explicit Writer(std::string& out, bool tag = true) : ar_(out, tag) {}
  // Bytes written to the string (its prefix included).
  size_t size() const { return ar_.size(); }
  // The string holds exactly what was written (call before using it).
  void settle() { ar_.settle(); }
  // Starts over on a string the caller refilled.
  void restart() { ar_.restart(); }

  // Values go straight into the archive's buffer (the bytes Cereal's dispatch would
  // write, without it).
  template <std::streamsize Width>
  [[gnu::always_inline]] inline void bytes(const void* data, size_t n) {
    ar_.saveBinary<Width>(data, static_cast<std::streamsize>(n));
  }

  template <class C>
  void command(const C& c) {
    constexpr size_t kLocal = 256;
    static const size_t bound = max_encoded_bytes<C>();
    if (bound == 0 || bound > kLocal) return fields_of(c);
    if constexpr (std::is_same_v<C, cmd::RunOp>)
      if (c.inputs.n > Inputs::kInline) [[unlikely]]
        return fields_of(c);
    LocalEncoder<kLocal> local;
    local.fields_of(c);
    ar_.saveBinary<1>(local.data(), static_cast<std::streamsize>(local.size()));
  }

 private:
  StringOutputArchive ar_;
};

// ---- reading ----

class Reader {
 public:
  Reader(std::string_view frame, std::string_view what)
      : what_(what), ar_(frame.substr(kPrefixBytes)) {}

  // A fixed-width value straight from the archive's span (see Writer::put).
  template <typename T>
  [[gnu::always_inline]] inline T get() {
    static_assert(std::is_arithmetic_v<T>);
    T v;
    ar_.loadBinary<sizeof(T)>(&v, sizeof(T));
    return v;
  }
  // `n` bytes (the caller checked that they are there).
  void raw(char* data, size_t n) { ar_.loadBinary<1>(data, static_cast<std::streamsize>(n)); }
  size_t left() const { return ar_.left(); }
  // A count of items of at least `min_bytes` each, no more than `limit`.
  size_t count(const char* field, size_t limit, size_t min_bytes, uint64_t raw) {
    if (raw > limit) fail("{} count {} exceeds the limit {}", field, raw, limit);
    if (raw * min_bytes > left())
      fail("{} count {} needs at least {} bytes, {} left", field, raw, raw * min_bytes, left());
    return static_cast<size_t>(raw);
  }
  std::string str(const char* field) {
    size_t n = count(field, kMaxStringBytes, 1, get<uint32_t>());
    std::string s(n, '\0');
    raw(s.data(), n);
    return s;
  }
  // A dtype code; `label()` names the field in errors (made only then).
  template <typename Label>
  DType dtype_of(Label&& label) {
    auto raw = get<uint8_t>();
    if (!is_valid_dtype(raw)) fail("{} has unknown dtype code {}", label(), raw);
    return static_cast<DType>(raw);
  }
  DType dtype(const char* field) {
    return dtype_of([field] { return field; });
  }
  // A contiguous tensor's metadata; `label()` names it in errors (made only then).
  template <typename Label>
  TensorMeta meta(Label&& label) {
    TensorMeta m;
    m.dtype = dtype_of(label);
    auto nd = get<uint8_t>();
    if (nd > kMaxDims) fail("{} has {} dims, at most {} allowed", label(), nd, kMaxDims);
    for (size_t i = 0; i < nd; ++i) {
      auto s = get<int64_t>();
      if (s < 0) fail("{} has negative size {} in dim {}", label(), s, i);
      m.shape.push_back(s);
    }
    try {
      numel_of(m.shape);
    } catch (const Error& e) {
      fail("{}: {}", label(), e.what());
    }
    m.strides = contiguous_strides(m.shape);
    return m;
  }
  // A tensor's metadata with strides and offset: every size and stride >= 0, and the
  // elements it spans (offset + sum of (size - 1) * stride) countable in int64.
  template <typename Label>
  TensorMeta strided_meta(Label&& label) {
    TensorMeta m = meta(label);
    int64_t extent = 0;
    for (size_t i = 0; i < m.shape.size(); ++i) {
      auto st = get<int64_t>();
      if (st < 0) fail("{} has negative stride {} in dim {}", label(), st, i);
      m.strides[i] = st;
      int64_t span = 0;
      if (m.shape[i] > 0 && (__builtin_mul_overflow(m.shape[i] - 1, st, &span) ||
                             __builtin_add_overflow(extent, span, &extent)))
        fail("{} spans more elements than int64 can count", label());
    }
    m.offset = get<int64_t>();
    if (m.offset < 0) fail("{} has negative offset {}", label(), m.offset);
    if (__builtin_add_overflow(extent, m.offset, &extent))
      fail("{} spans more elements than int64 can count", label());
    return m;
  }
  void finish() {
    if (left() != 0) fail("{} bytes left over after the message", left());
  }
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
    throw ProtocolError(
        fmt::format("{}: {}", what_, fmt::format(format, std::forward<Args>(args)...)));
  }

 private:
  std::string what_;
  SpanInputArchive ar_;
};

struct BatchContext {
  size_t payload_frames = 0;
  std::vector<bool> used;
  size_t upload = CommandAt::kTop;  // inside the program of this upload command
};
void decode_one(Reader& r, std::vector<Command>& c, size_t index, BatchContext& ctx);

// The fewest bytes a value of a struct with fields() encodes to (for the count check of a
// list of them; a field written only when an earlier one says so is not counted).
struct MinBytes {
  size_t bytes = 0;
  template <typename T, typename... Check>
  void operator()(const char*, const T& v, Check...) {
    if constexpr (std::is_same_v<T, bool> || is_optional_v<T>)
      bytes += 1;
    else if constexpr (std::is_enum_v<T> || std::is_arithmetic_v<T>)
      bytes += sizeof(T);
    else if constexpr (std::is_same_v<T, TensorMeta>)
      bytes += 2;  // dtype, rank
    else if constexpr (std::is_same_v<T, std::string> || is_vector_v<T>)
      bytes += 4;  // the count
    else if constexpr (HasFields<T>)
      T::fields(v, *this);
    else
      static_assert(sizeof(T) == 0, "a field type the codec does not know");
  }
};
template <class T>
size_t min_bytes() {
  static const size_t bytes = [] {
    const T sample{};
    MinBytes b;
    T::fields(sample, b);
    return b.bytes;
  }();
  return bytes;
}

template <typename T>
using raw_of_t = typename std::conditional_t<std::is_enum_v<T>, std::underlying_type<T>,
                                             std::type_identity<T>>::type;

// Decodes the fields of a command (Where: CommandWhere) or of a reply or another value
// (ItemWhere), applying each field's check (commands.hpp and replies.hpp state them).
template <class Where>
class FieldReader {
 public:
  FieldReader(Reader& r, Where where) : r_(r), where_(where) {}

  // ---- fields of commands and replies ----
  void operator()(const char* field, bool& v) {
    auto raw = r_.get<uint8_t>();
    if (raw > 1) fail(field, raw, "0 or 1");
    v = raw != 0;
  }
  template <typename T>
  requires std::is_arithmetic_v<T>
  void operator()(const char*, T& v) { v = r_.get<T>(); }
  void operator()(const char*, OpId& v) {
    auto raw = r_.get<uint16_t>();
    if (!is_valid_op(raw))
      r_.fail("{} has unknown op code {} (no op has it; the largest code is {})", where_, raw,
              kMaxOpCode);
    v = static_cast<OpId>(raw);
    if constexpr (Where::kNamedByOp) where_.name = op_def(v).name;
  }
  template <typename T>
  void operator()(const char* field, T& v, Range range) {
    auto raw = r_.get<raw_of_t<T>>();
    if (static_cast<int64_t>(raw) < range.lo || static_cast<int64_t>(raw) > range.hi)
      fail(field, static_cast<int64_t>(raw), expected(range));
    v = static_cast<T>(raw);
  }
  template <typename T>
  void operator()(const char* field, T& v, RangeOrNone rule) {
    auto raw = r_.get<raw_of_t<T>>();
    const auto x = static_cast<int64_t>(raw);
    if (x != rule.none && (x < rule.range.lo || x > rule.range.hi))
      fail(field, x, fmt::format("{} or none", expected(rule.range)));
    v = static_cast<T>(raw);
  }
  template <typename T>
  void operator()(const char* field, T& v, CommandCode) {
    static_assert(sizeof(raw_of_t<T>) == 1);
    auto raw = r_.get<uint8_t>();
    if (command_type_name(raw).empty()) fail(field, raw, "a command type's code");
    v = static_cast<T>(raw);
  }
  template <typename T>
  void operator()(const char* field, T& v, NonZero) {
    v = r_.get<T>();
    if (v == 0) fail(field, 0, "not 0");
  }
  void operator()(const char* field, std::string& s) {
    s.resize(count(field, kMaxStringBytes, 1, r_.get<uint32_t>()));
    r_.raw(s.data(), s.size());
  }
  void operator()(const char* field, TensorMeta& m) {
    m = r_.meta([&] { return fmt::format("{} {}", where_, field); });
  }
  template <typename T>
  requires std::is_arithmetic_v<T>
  void operator()(const char* field, std::vector<T>& v, Limit limit) {
    size_t n = count(field, limit.max, sizeof(T), r_.get<uint32_t>());
    v.resize(n);
    for (size_t i = 0; i < n; ++i) v[i] = r_.get<T>();
  }
  // A struct: its fields, named as part of it ("failure"); a list of them, each named as
  // its item ("event 3").
  template <HasFields T>
  void operator()(const char* field, T& v) {
    where_.enter(field);
    T::fields(v, *this);
    where_.leave();
  }
  template <HasFields T>
  void operator()(const char* field, std::vector<T>& v, Limit limit) {
    size_t n = count(field, limit.max, min_bytes<T>(), r_.get<uint32_t>());
    v.resize(n);
    for (size_t i = 0; i < n; ++i) {
      where_.enter(limit.item ? limit.item : field, i);
      T::fields(v[i], *this);
      where_.leave();
    }
  }
  template <typename T>
  void operator()(const char* field, std::optional<T>& v) {
    auto flag = r_.get<uint8_t>();
    if (flag > 1) fail(fmt::format("{} flag", field), flag, "0 or 1");
    if (flag)
      (*this)(field, v.emplace());
    else
      v.reset();
  }

  // ---- fields only commands have ----
  void operator()(const char* field, std::vector<GraphInput>& v, Limit limit) {
    // An input is at least its id, dtype, rank and offset.
    size_t n = count(field, limit.max, 8 + 2 + 8, r_.get<uint32_t>());
    v.resize(n);
    for (size_t i = 0; i < n; ++i) {
      v[i].id = r_.get<uint64_t>();
      v[i].meta = r_.strided_meta(
          [&] { return fmt::format("{} {} {} (tensor %{})", where_, field, i, v[i].id); });
    }
  }
  void operator()(const char* field, GraphProgram& p, Limit limit);
  void operator()(const char* field, uint32_t& v, PayloadRule) {
    v = r_.get<uint32_t>();
    if (v < 1 || v > where_.frames)
      r_.fail("{} references {} {}, the message has frames 1 to {}", where_, field, v,
              where_.frames);
    if ((*where_.used)[v]) r_.fail("{} reuses {} {}", where_, field, v);
    (*where_.used)[v] = true;
  }
  void operator()(const char* field, Inputs& in) {
    in.n = r_.get<uint8_t>();
    if (in.n > Inputs::kMax) fail(field, in.n, fmt::format("at most {}", Inputs::kMax));
    const uint8_t inline_n = in.n < Inputs::kInline ? in.n : Inputs::kInline;
    for (uint8_t i = 0; i < inline_n; ++i) in.ids[i] = r_.get<uint64_t>();
    if (in.n <= Inputs::kInline) return;
    // The ids must be there before `more` allocates for them.
    const size_t rest = r_.count(field, Inputs::kMax, 8, in.n - Inputs::kInline);
    in.more.resize(rest);
    for (size_t i = 0; i < rest; ++i) in.more[i] = r_.get<uint64_t>();
  }
  void operator()(const char* field, bool& inplace, OpAttrs& a, OpFlagsRule);
  void operator()(const char* field, OpAttrs& a);

 private:
  static std::string expected(const Range& r) {
    std::string s =
        r.hi == kInt64Max ? fmt::format("at least {}", r.lo) : fmt::format("{} to {}", r.lo, r.hi);
    if (r.note) s += fmt::format(" ({})", r.note);
    return s;
  }
  // A count of items of at least `min_bytes` each, no more than `limit`.
  size_t count(std::string_view field, size_t limit, size_t min_bytes, uint64_t raw) {
    if (raw > limit) r_.fail("{} {} count {} exceeds the limit {}", where_, field, raw, limit);
    if (raw * min_bytes > r_.left())
      r_.fail("{} {} count {} needs at least {} bytes, {} left", where_, field, raw,
              raw * min_bytes, r_.left());
    return static_cast<size_t>(raw);
  }
  template <typename V>
  [[noreturn]] void fail(std::string_view field, V value, std::string_view expected) {
    r_.fail("{} has {} {}, expected {}", where_, field, value, expected);
  }

  Reader& r_;
  Where where_;
  bool random_ = false;  // the RunOp's flags say that seed and offset follow its attributes
};

template <class Where>
void FieldReader<Where>::operator()(const char* field, bool& inplace, OpAttrs& a, OpFlagsRule) {
  auto flags = r_.get<uint8_t>();
  if (flags & ~(kInplace | kKeepdim | kScalarFirst | kRandom))
    r_.fail("{} has unknown {} bits {:#x}", where_, field, flags);
  inplace = flags & kInplace;
  a.keepdim = flags & kKeepdim;
  a.scalar_first = flags & kScalarFirst;
  random_ = flags & kRandom;
}

template <class Where>
void FieldReader<Where>::operator()(const char*, OpAttrs& a) {
  size_t n_ints = r_.count("attribute ints", kMaxDims, 8, r_.get<uint8_t>());
  for (size_t i = 0; i < n_ints; ++i) a.ints.push_back(r_.get<int64_t>());
  for (Scalar& s : a.scalars) {
    auto kind = r_.get<uint8_t>();
    if (kind > static_cast<uint8_t>(Scalar::Kind::Float))
      r_.fail("{} has unknown scalar kind {}", where_, kind);
    auto k = static_cast<Scalar::Kind>(kind);
    if (k == Scalar::Kind::Float)
      s = Scalar::from_parts(k, 0, r_.get<double>());
    else if (k != Scalar::Kind::None)
      s = Scalar::from_parts(k, r_.get<int64_t>(), 0);
  }
  a.dtype = r_.dtype("attribute dtype");
  if (random_) {
    a.seed = r_.get<uint64_t>();
    a.offset = r_.get<uint64_t>();
  }
}

// ---- one decoder per command or reply type, found by its wire code ----

template <class Where>
void FieldReader<Where>::operator()(const char* field, GraphProgram& p, Limit limit) {
  if (where_.at.upload != CommandAt::kTop) r_.fail("{} holds a graph program", where_);
  // A command is at least its type and stream (5 bytes).
  size_t n = count(field, limit.max, 5, r_.get<uint32_t>());
  auto program = std::make_shared<Batch>();
  program->commands.reserve(std::min<size_t>(n, 16384));
  BatchContext inner{0, std::vector<bool>(1, false), where_.at.index};
  for (size_t i = 0; i < n; ++i) decode_one(r_, program->commands, i, inner);
  p = std::move(program);
}

// A table by wire code of `make(std::type_identity<X>{})` for each alternative X of the
// variant V (Command, Reply); codes no alternative has hold T{}.
template <class V, class T, class Make>
constexpr std::array<T, 256> by_code(Make make) {
  std::array<T, 256> table{};
  [&]<size_t... I>(std::index_sequence<I...>) {
    ((table[static_cast<uint8_t>(std::variant_alternative_t<I, V>::kType)] =
          make(std::type_identity<std::variant_alternative_t<I, V>>{})),
     ...);
  }
  (std::make_index_sequence<std::variant_size_v<V>>{});
  return table;
}

// Appends command `index` of a batch to `out`, made as its type from the start.
using DecodeFn = void (*)(Reader&, std::vector<Command>& out, size_t index, BatchContext&);

template <class C>
void decode_command(Reader& r, std::vector<Command>& out, size_t index, BatchContext& ctx) {
  C& c = *std::get_if<C>(&out.emplace_back(std::in_place_type<C>));
  c.stream = r.get<uint32_t>();
  FieldReader<CommandWhere> v(
      r, CommandWhere{CommandAt{index, ctx.upload}, C::kName, ctx.payload_frames, &ctx.used});
  C::fields(c, v);
}

constexpr auto kDecoders = by_code<Command, DecodeFn>(
    []<class C>(std::type_identity<C>) -> DecodeFn { return &decode_command<C>; });

// The name of each command type that may not be part of a graph's program (null: it may,
// or no command has the code).
constexpr auto kNotInGraph = by_code<Command, const char*>(
    []<class C>(std::type_identity<C>) { return in_graph_v<C> ? nullptr : C::kName.data(); });

static_assert(wire_codes_unique<Command>(), "two command structs share a wire code");

void decode_one(Reader& r, std::vector<Command>& c, size_t index, BatchContext& ctx) {
  auto type = r.get<uint8_t>();
  DecodeFn f = kDecoders[type];
  const CommandAt at{index, ctx.upload};
  if (!f) r.fail("{} has unknown type {}", at, type);
  if (ctx.upload != CommandAt::kTop && kNotInGraph[type])
    r.fail(
        "{} ({}) cannot be part of a graph (a graph holds ops, events, cross-node waits, "
        "copies and collectives)",
        at, kNotInGraph[type]);
  f(r, c, index, ctx);
}

// A reply of type R: its request, then its fields.
using ReplyDecodeFn = Reply (*)(Reader&);

template <class R>
Reply decode_reply_as(Reader& r) {
  Reply out(std::in_place_type<R>);
  R& m = *std::get_if<R>(&out);
  m.request = r.get<uint64_t>();
  FieldReader<ItemWhere> v(r, ItemWhere{R::kName, "reply"});
  R::fields(m, v);
  return out;
}

constexpr auto kReplyDecoders = by_code<Reply, ReplyDecodeFn>(
    []<class R>(std::type_identity<R>) -> ReplyDecodeFn { return &decode_reply_as<R>; });

// Runs a decoder, turning Cereal's truncation exceptions into ProtocolError.
template <typename F>
auto guarded(std::string_view what, F&& f) {
  try {
    return f();
  } catch (const cereal::Exception& e) {
    throw ProtocolError(fmt::format("{}: truncated or malformed header ({})", what, e.what()));
  }
}

void expect_type(std::string_view frame, MsgType want, std::string_view what) {
  MsgType got = peek_type(frame);
  if (got != want)
    throw ProtocolError(fmt::format("{}: expected message type {}, got {}", what,
                                    static_cast<int>(want), static_cast<int>(got)));
}

template <typename F>
std::string encode_with(MsgType type, F&& body) {
  std::string out = prefix(type);
  Writer w(out);
  body(w);
  w.settle();
  return out;
}

}  // namespace

// ---- public API ----

MsgType peek_type(std::string_view frame) {
  if (frame.size() < kPrefixBytes + 1)
    throw ProtocolError(fmt::format("message header of {} bytes is shorter than the {}-byte prefix",
                                    frame.size(), kPrefixBytes + 1));
  auto byte = [&](int i) { return static_cast<uint32_t>(static_cast<uint8_t>(frame[i])); };
  uint32_t magic = byte(0) | byte(1) << 8 | byte(2) << 16 | byte(3) << 24;
  if (magic != kMagic)
    throw ProtocolError(
        fmt::format("bad magic {:#010x} (expected {:#010x}): not a dtr message", magic, kMagic));
  uint16_t version = static_cast<uint16_t>(byte(4) | byte(5) << 8);
  uint8_t type = static_cast<uint8_t>(byte(6));
  if (type < static_cast<uint8_t>(MsgType::Hello) || type > static_cast<uint8_t>(MsgType::Peer))
    throw ProtocolError(fmt::format("unknown message type {}", type));
  if (version != kVersion && static_cast<MsgType>(type) != MsgType::Hello)
    throw ProtocolError(fmt::format("protocol version {} is not supported (this side speaks {})",
                                    version, kVersion));
  return static_cast<MsgType>(type);
}

std::string encode(const Hello& m) {
  return encode_with(MsgType::Hello, [&](Writer& w) {
    w.put(m.version);
    w.str(m.client);
  });
}

std::string encode(const HelloReply& m) {
  return encode_with(MsgType::HelloReply, [&](Writer& w) {
    w.put(m.version);
    w.put(static_cast<uint8_t>(m.accepted));
    w.str(m.reason);
    w.str(m.worker);
    w.put(m.threads);
    w.put(static_cast<uint16_t>(std::min(m.devices.size(), kMaxDevices)));
    for (size_t i = 0; i < m.devices.size() && i < kMaxDevices; ++i) {
      const DeviceInfo& d = m.devices[i];
      w.put(d.index);
      w.str(d.name);
      w.put(d.total_memory);
      w.put(d.free_memory);
      w.put(d.compute_major);
      w.put(d.compute_minor);
    }
    w.str(m.peer_endpoint);
    w.str(m.pg_endpoint);
    w.put(m.pid);
    w.put(m.challenge);
    w.put(m.max_message_bytes);
  });
}

std::string encode(const Setup& m) {
  return encode_with(MsgType::Setup, [&](Writer& w) {
    w.put(m.node);
    w.put(m.session);
    w.put(static_cast<uint32_t>(std::min(m.peers.size(), kMaxNodes)));
    for (size_t i = 0; i < m.peers.size() && i < kMaxNodes; ++i) w.str(m.peers[i]);
    w.put(static_cast<uint32_t>(std::min(m.pg_endpoints.size(), kMaxNodes)));
    for (size_t i = 0; i < m.pg_endpoints.size() && i < kMaxNodes; ++i) w.str(m.pg_endpoints[i]);
    w.put(m.heartbeat_ms);
    w.put(m.master_timeout_ms);
    w.str(m.backend);
  });
}

std::string encode(const PeerNotify& m) {
  return encode_with(MsgType::Peer, [&](Writer& w) {
    w.put(m.session);
    w.put(m.from_node);
    w.put(m.token);
    const uint8_t form = m.failed ? 1 : m.pid != 0 ? 2 : m.released ? 3 : 0;
    w.put(form);
    if (form == 1) w("failure", m.failure);
    if (form == 2) {
      w.put(m.pid);
      w.put(m.address);
      w.put(m.bytes);
    }
  });
}

std::string encode(const Batch& m) {
  BatchWriter w;
  for (const Command& c : m.commands) w.add(c);
  return w.finish();
}

std::string encode(const Reply& m) {
  return encode_with(MsgType::Reply, [&](Writer& w) {
    std::visit(
        [&]<class R>(const R& r) {
          w.put(static_cast<uint8_t>(R::kType));
          w.put(r.request);
          R::fields(r, w);
        },
        m);
  });
}

std::string encode(const Goodbye& m) {
  return encode_with(MsgType::Goodbye, [&](Writer& w) {
    if (!m.reason.empty()) w.str(m.reason);
  });
}

std::string encode_goodbye() {
  return encode(Goodbye{});
}

std::string encode_heartbeat() {
  return encode_with(MsgType::Heartbeat, [](Writer&) {});
}

Hello decode_hello(std::string_view frame) {
  expect_type(frame, MsgType::Hello, "hello");
  return guarded("hello", [&] {
    Reader r(frame, "hello");
    Hello m;
    m.version = r.get<uint16_t>();
    m.client = r.str("client");
    return m;
  });
}

HelloReply decode_hello_reply(std::string_view frame) {
  expect_type(frame, MsgType::HelloReply, "hello reply");
  return guarded("hello reply", [&] {
    Reader r(frame, "hello reply");
    HelloReply m;
    m.version = r.get<uint16_t>();
    m.accepted = r.get<uint8_t>() != 0;
    m.reason = r.str("reason");
    m.worker = r.str("worker");
    m.threads = r.get<uint32_t>();
    size_t n = r.count("devices", kMaxDevices, 4, r.get<uint16_t>());
    for (size_t i = 0; i < n; ++i) {
      DeviceInfo d;
      d.index = r.get<int32_t>();
      d.name = r.str("device name");
      d.total_memory = r.get<uint64_t>();
      d.free_memory = r.get<uint64_t>();
      d.compute_major = r.get<int32_t>();
      d.compute_minor = r.get<int32_t>();
      m.devices.push_back(std::move(d));
    }
    m.peer_endpoint = r.str("peer endpoint");
    m.pg_endpoint = r.str("process group endpoint");
    m.pid = r.get<uint32_t>();
    m.challenge = r.get<uint64_t>();
    m.max_message_bytes = r.get<int64_t>();
    if (m.accepted && m.max_message_bytes < kMinMessageBytes)
      r.fail(
          "an accepting worker's largest message is {} bytes, below the least a worker takes "
          "({})",
          m.max_message_bytes, kMinMessageBytes);
    r.finish();
    return m;
  });
}

Goodbye decode_goodbye(std::string_view frame) {
  expect_type(frame, MsgType::Goodbye, "goodbye");
  return guarded("goodbye", [&] {
    Reader r(frame, "goodbye");
    Goodbye m;
    if (r.left() > 0) {
      m.reason = r.str("reason");
      if (m.reason.empty()) r.fail("an empty reason is sent as no reason");
    }
    r.finish();
    return m;
  });
}

Setup decode_setup(std::string_view frame) {
  expect_type(frame, MsgType::Setup, "setup");
  return guarded("setup", [&] {
    Reader r(frame, "setup");
    Setup m;
    m.node = r.get<uint32_t>();
    m.session = r.get<uint64_t>();
    size_t n = r.count("peers", kMaxNodes, 4, r.get<uint32_t>());
    for (size_t i = 0; i < n; ++i) m.peers.push_back(r.str("peer endpoint"));
    if (m.node >= n) r.fail("node index {} is not below the node count {}", m.node, n);
    size_t g = r.count("process group endpoints", kMaxNodes, 4, r.get<uint32_t>());
    if (g != 0 && g != n) r.fail("{} process group endpoints for {} nodes", g, n);
    for (size_t i = 0; i < g; ++i) m.pg_endpoints.push_back(r.str("process group endpoint"));
    m.heartbeat_ms = r.get<uint32_t>();
    m.master_timeout_ms = r.get<uint32_t>();
    m.backend = r.str("backend");
    if (!m.backend.empty() && m.backend != "gloo" && m.backend != "mpi") {
      const bool printable = m.backend.size() <= 16 &&
                             std::all_of(m.backend.begin(), m.backend.end(), [](unsigned char ch) {
                               return std::isalnum(ch) || ch == '-';
                             });
      r.fail("backend {} is not one the workers of a session use (\"\", \"gloo\" or \"mpi\")",
             printable ? "'" + m.backend + "'" : fmt::format("of {} bytes", m.backend.size()));
    }
    r.finish();
    return m;
  });
}

PeerNotify decode_peer_notify(std::string_view frame) {
  expect_type(frame, MsgType::Peer, "peer message");
  return guarded("peer message", [&] {
    Reader r(frame, "peer message");
    PeerNotify m;
    m.session = r.get<uint64_t>();
    m.from_node = r.get<uint32_t>();
    m.token = r.get<uint64_t>();
    auto form = r.get<uint8_t>();
    if (form > 3) r.fail("form {}, expected 0 to 3", form);
    m.failed = form == 1;
    m.released = form == 3;
    if (m.failed) FieldReader<ItemWhere>(r, ItemWhere{})("failure", m.failure);
    if (form == 2) {
      m.pid = r.get<uint32_t>();
      m.address = r.get<uint64_t>();
      m.bytes = r.get<uint64_t>();
      if (m.pid == 0 || m.pid > kMaxPid) r.fail("pid {}, expected 1 to {}", m.pid, kMaxPid);
      if (m.address == 0) r.fail("bytes at address 0");
    }
    r.finish();
    return m;
  });
}

Batch decode_batch(std::string_view frame, size_t payload_frames) {
  expect_type(frame, MsgType::Batch, "batch");
  return guarded("batch", [&] {
    Reader r(frame, "batch");
    if (payload_frames > kMaxPayloadFrames)
      r.fail("{} payload frames exceed the limit {}", payload_frames, kMaxPayloadFrames);
    Batch b;
    // A command is at least its type and stream (5 bytes).
    size_t n = r.count("commands", kMaxCommandsPerBatch, 5, r.get<uint32_t>());
    // A decoded command is tens of times bigger than its bytes: reserve for a batch of up
    // to 16 Ki commands (4.5 MB at most, what a busy master sends) and let a bigger one
    // grow as its commands actually decode.
    b.commands.reserve(std::min<size_t>(n, 16384));
    BatchContext ctx{payload_frames, std::vector<bool>(payload_frames + 1, false)};
    for (size_t i = 0; i < n; ++i) decode_one(r, b.commands, i, ctx);
    r.finish();
    for (size_t i = 1; i <= payload_frames; ++i)
      if (!ctx.used[i]) r.fail("payload frame {} is not referenced by any command", i);
    return b;
  });
}

Reply decode_reply(std::string_view frame, size_t payload_frames) {
  expect_type(frame, MsgType::Reply, "reply");
  return guarded("reply", [&] {
    Reader r(frame, "reply");
    auto type = r.get<uint8_t>();
    ReplyDecodeFn decode = kReplyDecoders[type];
    if (!decode) r.fail("unknown reply type {}", type);
    Reply m = decode(r);
    r.finish();
    if (const size_t want = reply_payload_frames(m); payload_frames != want)
      r.fail("{} reply carries {} payload frames, expected {}", reply_name(m), payload_frames,
             want);
    return m;
  });
}

CmdType command_type(const Command& c) {
  return std::visit([](const auto& x) { return std::decay_t<decltype(x)>::kType; }, c);
}

uint32_t command_stream(const Command& c) {
  return std::visit([](const auto& x) { return x.stream; }, c);
}

std::string_view command_type_name(uint8_t code) {
  static constexpr auto kNames =
      by_code<Command, std::string_view>([]<class C>(std::type_identity<C>) { return C::kName; });
  return kNames[code];
}

std::string_view command_type_label(uint8_t code) {
  if (code == static_cast<uint8_t>(CmdType::WaitRemote)) return "wait_remote";
  return command_type_name(code);
}

std::string_view command_name(const Command& c) {
  if (const auto* op = std::get_if<cmd::RunOp>(&c)) return op_def(op->op).name;
  return std::visit([](const auto& x) { return std::decay_t<decltype(x)>::kName; }, c);
}

// ---- BatchWriter ----

struct BatchWriter::Impl {
  std::string out;
  Writer w{out, false};
};

BatchWriter::BatchWriter() : impl_(std::make_unique<Impl>()) {
  start();
}

BatchWriter::~BatchWriter() = default;

void BatchWriter::start() {
  std::string& out = impl_->out;
  out = prefix(MsgType::Batch);
  out.push_back(1);     // the archive's endianness byte
  out.append(4, '\0');  // the count, set by finish()
  // Room for a batch as big as the last one (bounded), so that it grows without copies.
  out.reserve(std::min(last_bytes_, kReserveMax));
  impl_->w.restart();
  count_ = 0;
}

void BatchWriter::add(const Command& c) {
  std::visit([&](const auto& x) { impl_->w.command(x); }, c);
  ++count_;
}

void BatchWriter::add(const cmd::RunOp& c) {
  impl_->w.command(c);
  ++count_;
}

size_t BatchWriter::bytes() const {
  return impl_->w.size();
}

std::string BatchWriter::finish() {
  std::string& out = impl_->out;
  impl_->w.settle();
  last_bytes_ = out.size();
  auto n = static_cast<uint32_t>(count_);
  for (size_t i = 0; i < 4; ++i)
    out[kPrefixBytes + 1 + i] = static_cast<char>((n >> (8 * i)) & 0xff);
  std::string done = std::move(out);
  start();
  return done;
}

}  // namespace dtr::protocol
