"""dtr's C++ API (include/dtr/) for Python; import dtr, not this module."""

from collections.abc import Callable, Sequence
import enum
from typing import overload

from dtr import (
    AuthenticationError as AuthenticationError,
    DTypeError as DTypeError,
    DeviceError as DeviceError,
    Error as Error,
    IndexError as IndexError,
    InvalidArgument as InvalidArgument,
    OutOfMemory as OutOfMemory,
    ProtocolError as ProtocolError,
    RemoteError as RemoteError,
    ShapeError as ShapeError,
    TimeoutError as TimeoutError,
    TransportError as TransportError,
    WorkerLost as WorkerLost,
    _tolist as tolist
)
from dtr._dtr import (
    autograd as autograd,
    data as data,
    local as local,
    nn as nn,
    optim as optim,
    pg as pg
)


class dtype(enum.Enum):
    """Element type of a tensor."""

    def __str__(self) -> str: ...

    float32 = 0

    float64 = 1

    int32 = 2

    int64 = 3

    bool = 4

    float16 = 5

    bfloat16 = 6

    @property
    def itemsize(self) -> int: ...

    @property
    def is_floating_point(self) -> bool: ...

def promote_types(a: dtype, b: dtype) -> dtype:
    """
    The dtype two tensors of dtypes a and b promote to (torch.result_type's rule).
    """

class Generator:
    """
    A seeded counter-based random stream (Philox): the same seed gives the same values on every node.
    """

    def __init__(self, seed: int = ...) -> None: ...

    def manual_seed(self, seed: int) -> Generator: ...

    def initial_seed(self) -> int: ...

    @property
    def offset(self) -> int: ...

def manual_seed(seed: int) -> None:
    """
    Seeds the default generator (rand, randn, uniform_, normal_ without generator=).
    """

def _op_table() -> list:
    """The op table: (name, kind, has an in-place form, help) per op."""

class ReduceOp(enum.Enum):
    """Reduction of a collective."""

    SUM = 0

    PRODUCT = 1

    MIN = 2

    MAX = 3

    AVG = 4

class LocalTensor:
    """
    A tensor in this process (CPU, or a CUDA device of this process): the master's data (to_local()) and the tensors of SPMD programs (dtr.distributed). Every op of dtr.Tensor runs here on the CPU kernels. Shares memory with numpy and DLPack consumers.
    """

    def __init__(self) -> None: ...

    @property
    def dtype(self) -> dtype: ...

    @property
    def shape(self) -> tuple: ...

    @property
    def ndim(self) -> int: ...

    def dim(self) -> int: ...

    def numel(self) -> int: ...

    def size(self, dim: int | None = ...) -> object: ...

    def stride(self, dim: int | None = ...) -> object: ...

    def is_contiguous(self) -> bool: ...

    def __len__(self) -> int: ...

    def neg(self) -> LocalTensor:
        """-x elementwise"""

    def neg_(self) -> LocalTensor:
        """in place: -x elementwise"""

    def abs(self) -> LocalTensor:
        """|x| elementwise"""

    def abs_(self) -> LocalTensor:
        """in place: |x| elementwise"""

    def exp(self) -> LocalTensor:
        """e^x elementwise"""

    def exp_(self) -> LocalTensor:
        """in place: e^x elementwise"""

    def log(self) -> LocalTensor:
        """natural logarithm elementwise"""

    def log_(self) -> LocalTensor:
        """in place: natural logarithm elementwise"""

    def sqrt(self) -> LocalTensor:
        """square root elementwise"""

    def sqrt_(self) -> LocalTensor:
        """in place: square root elementwise"""

    def rsqrt(self) -> LocalTensor:
        """1/sqrt(x) elementwise"""

    def rsqrt_(self) -> LocalTensor:
        """in place: 1/sqrt(x) elementwise"""

    def sin(self) -> LocalTensor:
        """sine elementwise"""

    def sin_(self) -> LocalTensor:
        """in place: sine elementwise"""

    def cos(self) -> LocalTensor:
        """cosine elementwise"""

    def cos_(self) -> LocalTensor:
        """in place: cosine elementwise"""

    def tanh(self) -> LocalTensor:
        """hyperbolic tangent elementwise"""

    def tanh_(self) -> LocalTensor:
        """in place: hyperbolic tangent elementwise"""

    def sigmoid(self) -> LocalTensor:
        """1/(1+e^-x) elementwise"""

    def sigmoid_(self) -> LocalTensor:
        """in place: 1/(1+e^-x) elementwise"""

    def relu(self) -> LocalTensor:
        """max(x, 0) elementwise"""

    def relu_(self) -> LocalTensor:
        """in place: max(x, 0) elementwise"""

    def floor(self) -> LocalTensor:
        """largest integer <= x elementwise"""

    def floor_(self) -> LocalTensor:
        """in place: largest integer <= x elementwise"""

    def ceil(self) -> LocalTensor:
        """smallest integer >= x elementwise"""

    def ceil_(self) -> LocalTensor:
        """in place: smallest integer >= x elementwise"""

    def round(self) -> LocalTensor:
        """nearest integer (ties to even) elementwise"""

    def round_(self) -> LocalTensor:
        """in place: nearest integer (ties to even) elementwise"""

    def sign(self) -> LocalTensor:
        """-1, 0 or 1 by the sign of x elementwise (NaN gives 0)"""

    def sign_(self) -> LocalTensor:
        """in place: -1, 0 or 1 by the sign of x elementwise (NaN gives 0)"""

    def trunc(self) -> LocalTensor:
        """integer part (rounded toward zero) elementwise"""

    def trunc_(self) -> LocalTensor:
        """in place: integer part (rounded toward zero) elementwise"""

    def reciprocal(self) -> LocalTensor:
        """1/x elementwise"""

    def reciprocal_(self) -> LocalTensor:
        """in place: 1/x elementwise"""

    def tan(self) -> LocalTensor:
        """tangent elementwise"""

    def tan_(self) -> LocalTensor:
        """in place: tangent elementwise"""

    def asin(self) -> LocalTensor:
        """arcsine elementwise"""

    def asin_(self) -> LocalTensor:
        """in place: arcsine elementwise"""

    def acos(self) -> LocalTensor:
        """arccosine elementwise"""

    def acos_(self) -> LocalTensor:
        """in place: arccosine elementwise"""

    def atan(self) -> LocalTensor:
        """arctangent elementwise"""

    def atan_(self) -> LocalTensor:
        """in place: arctangent elementwise"""

    def sinh(self) -> LocalTensor:
        """hyperbolic sine elementwise"""

    def sinh_(self) -> LocalTensor:
        """in place: hyperbolic sine elementwise"""

    def cosh(self) -> LocalTensor:
        """hyperbolic cosine elementwise"""

    def cosh_(self) -> LocalTensor:
        """in place: hyperbolic cosine elementwise"""

    def asinh(self) -> LocalTensor:
        """inverse hyperbolic sine elementwise"""

    def asinh_(self) -> LocalTensor:
        """in place: inverse hyperbolic sine elementwise"""

    def acosh(self) -> LocalTensor:
        """inverse hyperbolic cosine elementwise"""

    def acosh_(self) -> LocalTensor:
        """in place: inverse hyperbolic cosine elementwise"""

    def atanh(self) -> LocalTensor:
        """inverse hyperbolic tangent elementwise"""

    def atanh_(self) -> LocalTensor:
        """in place: inverse hyperbolic tangent elementwise"""

    def erf(self) -> LocalTensor:
        """error function elementwise"""

    def erf_(self) -> LocalTensor:
        """in place: error function elementwise"""

    def expm1(self) -> LocalTensor:
        """e^x - 1 elementwise, exact near 0"""

    def expm1_(self) -> LocalTensor:
        """in place: e^x - 1 elementwise, exact near 0"""

    def log1p(self) -> LocalTensor:
        """log(1 + x) elementwise, exact near 0"""

    def log1p_(self) -> LocalTensor:
        """in place: log(1 + x) elementwise, exact near 0"""

    def log2(self) -> LocalTensor:
        """base-2 logarithm elementwise"""

    def log2_(self) -> LocalTensor:
        """in place: base-2 logarithm elementwise"""

    def log10(self) -> LocalTensor:
        """base-10 logarithm elementwise"""

    def log10_(self) -> LocalTensor:
        """in place: base-10 logarithm elementwise"""

    def silu(self) -> LocalTensor:
        """x * sigmoid(x) elementwise (swish)"""

    def silu_(self) -> LocalTensor:
        """in place: x * sigmoid(x) elementwise (swish)"""

    def gelu(self) -> LocalTensor:
        """x * Phi(x) elementwise (torch's gelu, approximate='none')"""

    def gelu_(self) -> LocalTensor:
        """in place: x * Phi(x) elementwise (torch's gelu, approximate='none')"""

    def gelu_tanh(self) -> LocalTensor:
        """gelu's tanh approximation (torch's gelu, approximate='tanh')"""

    def gelu_tanh_(self) -> LocalTensor:
        """in place: gelu's tanh approximation (torch's gelu, approximate='tanh')"""

    def isnan(self) -> LocalTensor:
        """x is NaN, as bool"""

    def isnan_(self) -> LocalTensor:
        """in place: x is NaN, as bool"""

    def isinf(self) -> LocalTensor:
        """x is infinite, as bool"""

    def isinf_(self) -> LocalTensor:
        """in place: x is infinite, as bool"""

    def isfinite(self) -> LocalTensor:
        """x is neither infinite nor NaN, as bool"""

    def isfinite_(self) -> LocalTensor:
        """in place: x is neither infinite nor NaN, as bool"""

    def logical_not(self) -> LocalTensor:
        """x == 0, as bool (NaN is true, so gives false)"""

    def logical_not_(self) -> LocalTensor:
        """in place: x == 0, as bool (NaN is true, so gives false)"""

    def bitwise_not(self) -> LocalTensor:
        """~x elementwise (integers; not x for bool)"""

    def bitwise_not_(self) -> LocalTensor:
        """in place: ~x elementwise (integers; not x for bool)"""

    def add(self, other: object) -> LocalTensor:
        """a + b, broadcasting"""

    def add_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a + b, broadcasting"""

    def sub(self, other: object) -> LocalTensor:
        """a - b, broadcasting"""

    def sub_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a - b, broadcasting"""

    def mul(self, other: object) -> LocalTensor:
        """a * b, broadcasting"""

    def mul_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a * b, broadcasting"""

    @overload
    def div(self, other: object) -> LocalTensor:
        """a / b (true division), broadcasting"""

    @overload
    def div(self, other: object, *, rounding_mode: str | None) -> LocalTensor:
        """
        a / b; rounding_mode 'floor' or 'trunc' rounds the quotient (torch's div)
        """

    def div_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a / b (true division), broadcasting"""

    def pow(self, other: object) -> LocalTensor:
        """a ^ b, broadcasting"""

    def pow_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a ^ b, broadcasting"""

    def maximum(self, other: object) -> LocalTensor:
        """larger of a and b, broadcasting"""

    def maximum_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: larger of a and b, broadcasting"""

    def minimum(self, other: object) -> LocalTensor:
        """smaller of a and b, broadcasting"""

    def minimum_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: smaller of a and b, broadcasting"""

    def eq(self, other: object) -> LocalTensor:
        """a == b as bool, broadcasting"""

    def eq_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a == b as bool, broadcasting"""

    def ne(self, other: object) -> LocalTensor:
        """a != b as bool, broadcasting"""

    def ne_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a != b as bool, broadcasting"""

    def lt(self, other: object) -> LocalTensor:
        """a < b as bool, broadcasting"""

    def lt_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a < b as bool, broadcasting"""

    def le(self, other: object) -> LocalTensor:
        """a <= b as bool, broadcasting"""

    def le_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a <= b as bool, broadcasting"""

    def gt(self, other: object) -> LocalTensor:
        """a > b as bool, broadcasting"""

    def gt_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a > b as bool, broadcasting"""

    def ge(self, other: object) -> LocalTensor:
        """a >= b as bool, broadcasting"""

    def ge_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a >= b as bool, broadcasting"""

    def remainder(self, other: object) -> LocalTensor:
        """a - floor(a / b) * b (Python's %: the sign of b), broadcasting"""

    def remainder_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """
        in place: a - floor(a / b) * b (Python's %: the sign of b), broadcasting
        """

    def fmod(self, other: object) -> LocalTensor:
        """a - trunc(a / b) * b (C's fmod: the sign of a), broadcasting"""

    def fmod_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a - trunc(a / b) * b (C's fmod: the sign of a), broadcasting"""

    def atan2(self, other: object) -> LocalTensor:
        """the angle of the point (b, a), broadcasting"""

    def atan2_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: the angle of the point (b, a), broadcasting"""

    def bitwise_and(self, other: object) -> LocalTensor:
        """a & b (integers and bool), broadcasting"""

    def bitwise_and_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a & b (integers and bool), broadcasting"""

    def bitwise_or(self, other: object) -> LocalTensor:
        """a | b (integers and bool), broadcasting"""

    def bitwise_or_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a | b (integers and bool), broadcasting"""

    def bitwise_xor(self, other: object) -> LocalTensor:
        """a ^ b (integers and bool), broadcasting"""

    def bitwise_xor_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a ^ b (integers and bool), broadcasting"""

    def logical_and(self, other: object) -> LocalTensor:
        """a != 0 and b != 0, as bool, broadcasting"""

    def logical_and_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a != 0 and b != 0, as bool, broadcasting"""

    def logical_or(self, other: object) -> LocalTensor:
        """a != 0 or b != 0, as bool, broadcasting"""

    def logical_or_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: a != 0 or b != 0, as bool, broadcasting"""

    def logical_xor(self, other: object) -> LocalTensor:
        """exactly one of a and b nonzero, as bool, broadcasting"""

    def logical_xor_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """in place: exactly one of a and b nonzero, as bool, broadcasting"""

    def floor_divide(self, other: object) -> LocalTensor:
        """
        floor(a / b) (torch's div with rounding_mode='floor'; Python's //), broadcasting
        """

    def floor_divide_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """
        in place: floor(a / b) (torch's div with rounding_mode='floor'; Python's //), broadcasting
        """

    def trunc_divide(self, other: object) -> LocalTensor:
        """trunc(a / b) (torch's div with rounding_mode='trunc'), broadcasting"""

    def trunc_divide_(self, other: LocalTensor | float | int | bool) -> LocalTensor:
        """
        in place: trunc(a / b) (torch's div with rounding_mode='trunc'), broadcasting
        """

    def sum(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> LocalTensor:
        """sum (bool/int give int64) (over every dim, one, or several)"""

    def prod(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> LocalTensor:
        """product (over every dim, one, or several)"""

    def mean(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> LocalTensor:
        """arithmetic mean (over every dim, one, or several)"""

    def argmax(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> LocalTensor:
        """index of the first max (over every dim, one, or several)"""

    def argmin(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> LocalTensor:
        """index of the first min (over every dim, one, or several)"""

    def max(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> LocalTensor | tuple[LocalTensor, LocalTensor]:
        """
        the largest value: over every dim; over one dim (values, indices), as torch; over several dims the values (torch's amax)
        """

    def min(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> LocalTensor | tuple[LocalTensor, LocalTensor]:
        """
        the smallest value: over every dim; over one dim (values, indices), as torch; over several dims the values (torch's amin)
        """

    def norm(self, p: float = ..., dim: int | None = ..., keepdim: bool = ...) -> LocalTensor:
        """p-norm (p may be inf)"""

    def var(self, dim: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> LocalTensor:
        """variance (over every dim, one, or several)"""

    def std(self, dim: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> LocalTensor:
        """standard deviation (over every dim, one, or several)"""

    def clamp(self, min: LocalTensor | float | int | None = None, max: LocalTensor | float | int | None = None) -> LocalTensor:
        """limit values to [min, max] (numbers or tensors, broadcasting)"""

    def clamp_min(self, min: LocalTensor) -> LocalTensor:
        """maximum with a tensor bound (torch's clamp_min)"""

    def clamp_max(self, max: LocalTensor) -> LocalTensor:
        """minimum with a tensor bound (torch's clamp_max)"""

    def addcmul(self, tensor1: LocalTensor, tensor2: LocalTensor, value: object = ...) -> LocalTensor:
        """x + value * tensor1 * tensor2"""

    def addcdiv(self, tensor1: LocalTensor, tensor2: LocalTensor, value: object = ...) -> LocalTensor:
        """x + value * tensor1 / tensor2"""

    def lerp(self, end: LocalTensor, weight: object) -> LocalTensor:
        """x + weight * (end - x) (weight a number or a tensor)"""

    def split(self, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple[LocalTensor, ...]:
        """
        views of pieces of split_size along dim (the last shorter), or of the given sizes
        """

    def split_with_sizes(self, split_sizes: Sequence[int], dim: int = 0) -> tuple[LocalTensor, ...]:
        """
        views of pieces of the given sizes along dim (they must add up to its size)
        """

    def chunk(self, chunks: int, dim: int = 0) -> tuple[LocalTensor, ...]:
        """at most `chunks` views of ceil(size / chunks) along dim"""

    def repeat(self, *sizes: int | Sequence[int]) -> LocalTensor:
        """the tensor tiled sizes[i] times along dim i (one copy)"""

    @overload
    def scatter(self, dim: int, index: LocalTensor, src: LocalTensor | float | int) -> LocalTensor:
        """x with src (a tensor, or a number) written at index along dim"""

    @overload
    def scatter(self, dim: int, index: LocalTensor, src: LocalTensor) -> LocalTensor:
        """
        scatter(x, dim, index, src): x with src written at index along dim (out[index[i][j]][j] = src[i][j], dim 0; of duplicate positions one write wins)
        """

    def clamp_(self, min: float | int | None = None, max: float | int | None = None) -> LocalTensor:
        """in place: limit values to [min, max]"""

    def matmul(self, other: LocalTensor) -> LocalTensor: ...

    def dot(self, other: LocalTensor) -> LocalTensor: ...

    def mv(self, vec: LocalTensor) -> LocalTensor: ...

    def __matmul__(self, arg: LocalTensor, /) -> LocalTensor: ...

    def view(self, *args) -> LocalTensor: ...

    def reshape(self, *args) -> LocalTensor: ...

    def expand(self, *args) -> LocalTensor: ...

    def permute(self, *args) -> LocalTensor: ...

    def flatten(self, start_dim: int = ..., end_dim: int = ...) -> LocalTensor:
        """
        merge dims start_dim..end_dim into one (a view when the strides allow, else a copy)
        """

    def transpose(self, dim0: int, dim1: int) -> LocalTensor: ...

    def t(self) -> LocalTensor: ...

    @property
    def T(self) -> LocalTensor: ...

    def narrow(self, dim: int, start: int, length: int) -> LocalTensor: ...

    def slice(self, dim: int, start: int = ..., end: int | None = ..., step: int = ...) -> LocalTensor:
        """python-style slice of one dim"""

    def select(self, dim: int, index: int) -> LocalTensor: ...

    def squeeze(self, dim: int | None = ...) -> LocalTensor: ...

    def unsqueeze(self, dim: int) -> LocalTensor: ...

    def __getitem__(self, index: object | None) -> LocalTensor: ...

    def __setitem__(self, index: object | None, value: object | None) -> None: ...

    def contiguous(self) -> LocalTensor: ...

    def clone(self) -> LocalTensor:
        """a packed copy in new storage"""

    def copy_(self, src: LocalTensor) -> LocalTensor: ...

    def fill_(self, value: float | int | bool) -> LocalTensor: ...

    def zero_(self) -> LocalTensor: ...

    def uniform_(self, from_: float = 0.0, to: float = 1.0, generator: Generator | None = None) -> LocalTensor: ...

    def normal_(self, mean: float = 0.0, std: float = 1.0, generator: Generator | None = None) -> LocalTensor: ...

    def float(self) -> LocalTensor: ...

    def double(self) -> LocalTensor: ...

    def int(self) -> LocalTensor: ...

    def long(self) -> LocalTensor: ...

    def bool(self) -> LocalTensor: ...

    def half(self) -> LocalTensor: ...

    def bfloat16(self) -> LocalTensor: ...

    def __add__(self, other: object | None) -> object: ...

    def __radd__(self, other: object | None) -> object: ...

    def __sub__(self, other: object | None) -> object: ...

    def __rsub__(self, other: object | None) -> object: ...

    def __mul__(self, other: object | None) -> object: ...

    def __rmul__(self, other: object | None) -> object: ...

    def __truediv__(self, other: object | None) -> object: ...

    def __rtruediv__(self, other: object | None) -> object: ...

    def __pow__(self, other: object | None) -> object: ...

    def __rpow__(self, other: object | None) -> object: ...

    def __eq__(self, other: object | None) -> object: ...

    def __ne__(self, other: object | None) -> object: ...

    def __lt__(self, other: object | None) -> object: ...

    def __le__(self, other: object | None) -> object: ...

    def __gt__(self, other: object | None) -> object: ...

    def __ge__(self, other: object | None) -> object: ...

    def __mod__(self, other: object | None) -> object: ...

    def __rmod__(self, other: object | None) -> object: ...

    def __and__(self, other: object | None) -> object: ...

    def __rand__(self, other: object | None) -> object: ...

    def __or__(self, other: object | None) -> object: ...

    def __ror__(self, other: object | None) -> object: ...

    def __xor__(self, other: object | None) -> object: ...

    def __rxor__(self, other: object | None) -> object: ...

    def __floordiv__(self, other: object | None) -> object: ...

    def __rfloordiv__(self, other: object | None) -> object: ...

    def __iadd__(self, other: object | None) -> object: ...

    def __isub__(self, other: object | None) -> object: ...

    def __imul__(self, other: object | None) -> object: ...

    def __itruediv__(self, other: object | None) -> object: ...

    def __ipow__(self, other: object | None) -> object: ...

    def __imod__(self, other: object | None) -> object: ...

    def __iand__(self, other: object | None) -> object: ...

    def __ior__(self, other: object | None) -> object: ...

    def __ixor__(self, other: object | None) -> object: ...

    def __ifloordiv__(self, other: object | None) -> object: ...

    def __neg__(self) -> LocalTensor: ...

    def __abs__(self) -> LocalTensor: ...

    def __invert__(self) -> LocalTensor: ...

    def __pos__(self) -> object: ...

    def __hash__(self) -> int: ...

    def where(self, a: LocalTensor, b: LocalTensor) -> LocalTensor:
        """
        where(condition, a, b): a where condition (bool) is true, else b; broadcasting
        """

    def masked_fill(self, mask: LocalTensor, value: float | int) -> LocalTensor:
        """
        masked_fill(x, mask, value): x with value where mask (bool, broadcast to x) is true
        """

    def index_select(self, dim: int, index: LocalTensor) -> LocalTensor:
        """
        index_select(x, dim, index): the entries of dim at the positions of a 1-D integer index
        """

    def gather(self, dim: int, index: LocalTensor) -> LocalTensor:
        """
        gather(x, dim, index): out[i][j] = x[index[i][j]][j] (dim 0); index as many dims as x
        """

    def scatter_add(self, dim: int, index: LocalTensor, src: LocalTensor) -> LocalTensor:
        """
        scatter_add(x, dim, index, src): x with src added at index along dim (out[index[i][j]][j] += src[i][j], dim 0)
        """

    def cumsum(self, dim: int) -> LocalTensor:
        """cumsum(x, dim): running sum along dim"""

    def one_hot(self, num_classes: int) -> LocalTensor:
        """
        one_hot(x, num_classes): int64 one-hot rows (a new last dim of num_classes) of an integer tensor
        """

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[LocalTensor, LocalTensor]:
        """
        topk(x, k, dim=-1, largest=true, sorted=true): the k largest (smallest) values along dim, in order; ties: lower index first
        """

    def topk_indices(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> LocalTensor:
        """
        topk_indices(x, k, dim=-1, largest=true, sorted=true): the positions along dim of topk's values
        """

    def tril(self, diagonal: int = 0) -> LocalTensor:
        """
        tril(x, diagonal=0): the matrices of the last two dims with the entries above the diagonal zeroed
        """

    def triu(self, diagonal: int = 0) -> LocalTensor:
        """
        triu(x, diagonal=0): the matrices of the last two dims with the entries below the diagonal zeroed
        """

    def flip(self, dims: int) -> LocalTensor:
        """
        flip(x, dims): a copy with the elements in reverse order along each of dims
        """

    def constant_pad_nd(self, pad: int, value: float | int = 0) -> LocalTensor:
        """
        constant_pad_nd(x, pad, value=0): x with pad[2i] and pad[2i+1] elements of value before and after its i-th last dim (torch's pad; negative pads crop)
        """

    def sort_indices(self, dim: int = -1, descending: bool = False) -> LocalTensor:
        """
        sort_indices(x, dim=-1, descending=false): the positions along dim that sort x, stably (NaN last; first when descending)
        """

    def scatter_reduce(self, dim: int, index: LocalTensor, src: LocalTensor, reduce: str | int, include_self: bool = True) -> LocalTensor:
        """
        scatter_reduce(x, dim, index, src, reduce, include_self=true): x with src combined at index along dim by reduce (0 sum, 1 prod, 2 mean, 3 amax, 4 amin); include_self: x's values take part (else the positions written start empty)
        """

    def linear(self, weight: LocalTensor, bias: LocalTensor | None = None) -> LocalTensor:
        """
        linear(x, weight, bias?): x @ weight.t() + bias; weight (out, in), x (..., in)
        """

    def conv2d(self, weight: LocalTensor, bias: LocalTensor | None = None, stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, groups: int = 1) -> LocalTensor:
        """
        conv2d(x, weight, bias?, stride=1, padding=0, dilation=1, groups=1): 2-D convolution (cross-correlation); weight (out, in/groups, kh, kw)
        """

    def conv2d_input_grad(self, weight: LocalTensor, input_size: int | tuple[int, int], stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, groups: int = 1) -> LocalTensor:
        """
        conv2d_input_grad(grad, weight, input_size, stride=1, padding=0, dilation=1, groups=1): conv2d's gradient for its input of spatial size input_size
        """

    def conv2d_weight_grad(self, x: LocalTensor, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, groups: int = 1) -> LocalTensor:
        """
        conv2d_weight_grad(grad, x, kernel_size, stride=1, padding=0, dilation=1, groups=1): conv2d's gradient for its weight (its bias's: grad.sum over dims 0, 2, 3)
        """

    def max_pool2d(self, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, ceil_mode: bool = False) -> LocalTensor:
        """
        max_pool2d(x, kernel_size, stride?, padding=0, dilation=1, ceil_mode=false): 2-D max pooling (NaN wins; stride: kernel_size when left out)
        """

    def max_pool2d_indices(self, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, ceil_mode: bool = False) -> LocalTensor:
        """
        max_pool2d_indices(x, kernel_size, stride?, padding=0, dilation=1, ceil_mode=false): positions h * W + w in x's plane of max_pool2d's values
        """

    def max_pool2d_backward(self, indices: LocalTensor, input_size: int | tuple[int, int]) -> LocalTensor:
        """
        max_pool2d_backward(grad, indices, input_size): max_pool2d's input gradient: grad summed at max_pool2d_indices
        """

    def avg_pool2d(self, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0, ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: float | int | None = None) -> LocalTensor:
        """
        avg_pool2d(x, kernel_size, stride?, padding=0, ceil_mode=false, count_include_pad=true, divisor_override?): 2-D average pooling
        """

    def avg_pool2d_backward(self, input_size: int | tuple[int, int], kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0, ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: float | int | None = None) -> LocalTensor:
        """
        avg_pool2d_backward(grad, input_size, kernel_size, stride?, padding=0, ceil_mode=false, count_include_pad=true, divisor_override?): avg_pool2d's input gradient
        """

    def softmax(self, dim: int) -> LocalTensor:
        """softmax(x, dim): exp(x) / sum(exp(x)) along dim"""

    def log_softmax(self, dim: int) -> LocalTensor:
        """log_softmax(x, dim): log(softmax(x)) along dim"""

    def softmax_backward(self, output: LocalTensor, dim: int) -> LocalTensor:
        """
        softmax_backward(grad, output, dim): softmax's input gradient from its output: output * (grad - sum(grad * output))
        """

    def log_softmax_backward(self, output: LocalTensor, dim: int) -> LocalTensor:
        """
        log_softmax_backward(grad, output, dim): log_softmax's input gradient from its output: grad - exp(output) * sum(grad)
        """

    def nll_loss(self, target: LocalTensor, weight: LocalTensor | None = None, reduction: str = 'mean', ignore_index: int = -100) -> LocalTensor:
        """
        nll_loss(x, target, weight?, reduction=mean, ignore_index=-100): negative log likelihood of log-probabilities x (N, C) or (C) at int64 targets
        """

    def nll_loss_backward(self, x: LocalTensor, target: LocalTensor, weight: LocalTensor | None = None, reduction: str = 'mean', ignore_index: int = -100) -> LocalTensor:
        """
        nll_loss_backward(grad, x, target, weight?, reduction=mean, ignore_index=-100): nll_loss's gradient for x
        """

    def dropout(self, p: float | int = 0.5, training: bool = True, generator: Generator | None = None) -> LocalTensor:
        """
        dropout(x, p=0.5, training=true, generator): zero each element with probability p, scale the rest by 1/(1-p)
        """

    def dropout2d(self, p: float | int = 0.5, training: bool = True, generator: Generator | None = None) -> LocalTensor:
        """
        dropout2d(x, p=0.5, training=true, generator): zero each channel (all but the last two dims) with probability p, scale by 1/(1-p)
        """

    def threshold_backward(self, x: LocalTensor, threshold: float | int = 0) -> LocalTensor:
        """
        threshold_backward(grad, x, threshold=0): grad where x > threshold, else 0 (relu's gradient at threshold 0)
        """

    def layer_norm(self, weight: LocalTensor, bias: LocalTensor, eps: float | int = 1e-05) -> LocalTensor:
        """
        layer_norm(x, weight, bias, eps=1e-05): (x - mean) / sqrt(var + eps) * weight + bias over x's last weight.dim() dims
        """

    def layer_norm_backward(self, x: LocalTensor, weight: LocalTensor, eps: float | int = 1e-05) -> LocalTensor:
        """
        layer_norm_backward(grad, x, weight, eps=1e-05): layer_norm's input gradient (the statistics recomputed from x)
        """

    def layer_norm_weight_grad(self, x: LocalTensor, weight: LocalTensor, eps: float | int = 1e-05) -> LocalTensor:
        """
        layer_norm_weight_grad(grad, x, weight, eps=1e-05): layer_norm's weight gradient: grad * (x - mean) / sqrt(var + eps) summed over the rows
        """

    def any(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> LocalTensor:
        """
        whether some element is nonzero (over everything, a dim or several), as bool
        """

    def all(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> LocalTensor:
        """
        whether every element is nonzero (over everything, a dim or several), as bool
        """

    def addmm(self, mat1: LocalTensor, mat2: LocalTensor, *, beta: object = ..., alpha: object = ...) -> LocalTensor:
        """beta * self + alpha * (mat1 @ mat2)"""

    def new_full(self, size: object, fill_value: object, *, dtype: object | None = ...) -> LocalTensor:
        """
        a tensor of size filled with fill_value where this one lives (its dtype unless given)
        """

    def new_zeros(self, size: object, *, dtype: object | None = ...) -> LocalTensor:
        """a tensor of zeros where this one lives (its dtype unless given)"""

    def new_ones(self, size: object, *, dtype: object | None = ...) -> LocalTensor:
        """a tensor of ones where this one lives (its dtype unless given)"""

    def storage_offset(self) -> int:
        """the offset of element 0 in the storage, in elements"""

    def leaky_relu(self, negative_slope: float = ...) -> LocalTensor:
        """x > 0 ? x : negative_slope * x"""

    def hardtanh(self, min_val: float = ..., max_val: float = ...) -> LocalTensor:
        """x clamped to [min_val, max_val]"""

    def elu(self, alpha: float = ..., scale: float = ..., input_scale: float = ...) -> LocalTensor:
        """x > 0 ? scale * x : scale * alpha * (exp(input_scale * x) - 1)"""

    def sort(self, dim: int = -1, descending: bool = False, *, stable: bool = False) -> tuple[LocalTensor, LocalTensor]:
        """
        (values, indices) along dim in order; stable; NaN last (first when descending)
        """

    def argsort(self, dim: int = ..., descending: bool = ..., *, stable: bool = ...) -> LocalTensor:
        """the positions along dim that sort the tensor (stable)"""

    def index(self, indices: Sequence[LocalTensor | None]) -> LocalTensor:
        """
        advanced indexing (torch's index.Tensor): integer tensors per dim, None: the whole dim
        """

    def index_put(self, indices: Sequence[LocalTensor | None], values: LocalTensor, accumulate: bool = False) -> LocalTensor:
        """
        a copy with values written (or added: accumulate) at the advanced index
        """

    def diagonal(self, offset: int = ..., dim1: int = ..., dim2: int = ...) -> LocalTensor:
        """the diagonal of dims dim1 and dim2 as a new last dim (a view)"""

    def masked_scatter(self, mask: LocalTensor, source: LocalTensor) -> LocalTensor:
        """x with source's elements, in order, where mask is true"""

    def nonzero(self, *, as_tuple: bool = ...) -> object:
        """
        sync point: the positions of the nonzero elements, (count, dim) int64 (as_tuple: one 1-D tensor per dim)
        """

    def unique(self, sorted: bool = ..., return_inverse: bool = ..., return_counts: bool = ..., dim: object | None = ...) -> object:
        """
        sync point: the distinct values in ascending order (and, asked, each element's position among them and their counts)
        """

    def masked_select(self, mask: LocalTensor) -> LocalTensor:
        """sync point: the elements where mask (bool) is true, 1-D"""

    def logsumexp(self, dim: object, keepdim: bool = ...) -> LocalTensor:
        """log(sum(exp(x))) over dim (an int or several), stably"""

    def amax(self, dim: object = ..., keepdim: bool = ...) -> LocalTensor:
        """the largest value over dim (an int or several; () or None: every dim)"""

    def amin(self, dim: object = ..., keepdim: bool = ...) -> LocalTensor:
        """the smallest value over dim (an int or several; () or None: every dim)"""

    def index_add(self, dim: int, index: LocalTensor, source: LocalTensor, *, alpha: object = ...) -> LocalTensor:
        """a copy with alpha * source added at the positions index (1-D) of dim"""

    def bernoulli(self, *, generator: Generator | None = ...) -> LocalTensor:
        """1 with probability x (per element), else 0, drawn where x lives"""

    @property
    def requires_grad(self) -> bool:
        """
        Whether gradients flow to this tensor (a leaf marked so, or made by a recorded op from one). Assigning marks or unmarks a leaf.
        """

    @requires_grad.setter
    def requires_grad(self, arg: bool, /) -> None: ...

    def requires_grad_(self, requires_grad: bool = True) -> LocalTensor:
        """
        Marks this leaf as needing its gradient (floating tensors only), or not; returns it.
        """

    @property
    def is_leaf(self) -> bool:
        """
        True for tensors no recorded op made (every tensor that does not require grad).
        """

    @property
    def grad(self) -> LocalTensor | None:
        """
        The gradient backward() accumulated into this leaf (None when there is none); assign None to clear it, or a tensor of the same shape and dtype.
        """

    @grad.setter
    def grad(self, value: LocalTensor | None) -> None: ...

    @property
    def grad_fn(self) -> str | None:
        """
        The name of the recorded op that made this tensor (e.g. 'MulBackward'); None for leaves.
        """

    def backward(self, gradient: LocalTensor | None = ..., retain_graph: bool = ...) -> None:
        """
        Accumulates d(this)/d(leaf) into every leaf's grad (gradient: d(something)/d(this), needed unless this has one element). The graph is freed unless retain_graph.
        """

    def detach(self) -> LocalTensor:
        """
        The same tensor (shared storage) outside the graph: no grad, not recorded.
        """

    @property
    def data(self) -> LocalTensor:
        """
        torch's .data: detach(), the same storage outside the graph (param.grad.data /= n); assigning makes this object another tensor's storage, keeping its autograd state.
        """

    @data.setter
    def data(self, arg: LocalTensor, /) -> None: ...

    @property
    def device(self) -> int: ...

    def item(self) -> object: ...

    def to(self, dtype: object) -> LocalTensor: ...

    def to_device(self, device: int) -> LocalTensor: ...

    def cpu(self) -> LocalTensor: ...

    def cuda(self, device: int = ...) -> LocalTensor: ...

    def numpy(self) -> object:
        """A numpy array sharing this tensor's memory (no copy)."""

    def __array__(self, dtype: object | None = ..., copy: object | None = ...) -> object: ...

    def __dlpack__(self, **kwargs) -> object:
        """
        DLPack capsule sharing this tensor's memory (torch.from_dlpack, numpy.from_dlpack).
        """

    def __dlpack_device__(self) -> tuple: ...

    def __repr__(self) -> str: ...

    def __bool__(self) -> bool: ...

    def __float__(self) -> float: ...

    def __int__(self) -> int: ...

class Tensor:
    """
    A tensor on a worker: ops are checked here and run on its node, returning at once; to_local(), item() and printing are sync points.
    """

    def __init__(self, *shape, dtype: object = dtype.float32, node: int | None = ..., device: int | None = ...) -> None: ...

    __array_ufunc__: None = ...

    @property
    def dtype(self) -> dtype: ...

    @property
    def shape(self) -> tuple: ...

    @property
    def ndim(self) -> int: ...

    def dim(self) -> int: ...

    def numel(self) -> int: ...

    def size(self, dim: int | None = ...) -> object: ...

    def stride(self, dim: int | None = ...) -> object: ...

    def is_contiguous(self) -> bool: ...

    def __len__(self) -> int: ...

    def neg(self) -> Tensor:
        """-x elementwise"""

    def neg_(self) -> Tensor:
        """in place: -x elementwise"""

    def abs(self) -> Tensor:
        """|x| elementwise"""

    def abs_(self) -> Tensor:
        """in place: |x| elementwise"""

    def exp(self) -> Tensor:
        """e^x elementwise"""

    def exp_(self) -> Tensor:
        """in place: e^x elementwise"""

    def log(self) -> Tensor:
        """natural logarithm elementwise"""

    def log_(self) -> Tensor:
        """in place: natural logarithm elementwise"""

    def sqrt(self) -> Tensor:
        """square root elementwise"""

    def sqrt_(self) -> Tensor:
        """in place: square root elementwise"""

    def rsqrt(self) -> Tensor:
        """1/sqrt(x) elementwise"""

    def rsqrt_(self) -> Tensor:
        """in place: 1/sqrt(x) elementwise"""

    def sin(self) -> Tensor:
        """sine elementwise"""

    def sin_(self) -> Tensor:
        """in place: sine elementwise"""

    def cos(self) -> Tensor:
        """cosine elementwise"""

    def cos_(self) -> Tensor:
        """in place: cosine elementwise"""

    def tanh(self) -> Tensor:
        """hyperbolic tangent elementwise"""

    def tanh_(self) -> Tensor:
        """in place: hyperbolic tangent elementwise"""

    def sigmoid(self) -> Tensor:
        """1/(1+e^-x) elementwise"""

    def sigmoid_(self) -> Tensor:
        """in place: 1/(1+e^-x) elementwise"""

    def relu(self) -> Tensor:
        """max(x, 0) elementwise"""

    def relu_(self) -> Tensor:
        """in place: max(x, 0) elementwise"""

    def floor(self) -> Tensor:
        """largest integer <= x elementwise"""

    def floor_(self) -> Tensor:
        """in place: largest integer <= x elementwise"""

    def ceil(self) -> Tensor:
        """smallest integer >= x elementwise"""

    def ceil_(self) -> Tensor:
        """in place: smallest integer >= x elementwise"""

    def round(self) -> Tensor:
        """nearest integer (ties to even) elementwise"""

    def round_(self) -> Tensor:
        """in place: nearest integer (ties to even) elementwise"""

    def sign(self) -> Tensor:
        """-1, 0 or 1 by the sign of x elementwise (NaN gives 0)"""

    def sign_(self) -> Tensor:
        """in place: -1, 0 or 1 by the sign of x elementwise (NaN gives 0)"""

    def trunc(self) -> Tensor:
        """integer part (rounded toward zero) elementwise"""

    def trunc_(self) -> Tensor:
        """in place: integer part (rounded toward zero) elementwise"""

    def reciprocal(self) -> Tensor:
        """1/x elementwise"""

    def reciprocal_(self) -> Tensor:
        """in place: 1/x elementwise"""

    def tan(self) -> Tensor:
        """tangent elementwise"""

    def tan_(self) -> Tensor:
        """in place: tangent elementwise"""

    def asin(self) -> Tensor:
        """arcsine elementwise"""

    def asin_(self) -> Tensor:
        """in place: arcsine elementwise"""

    def acos(self) -> Tensor:
        """arccosine elementwise"""

    def acos_(self) -> Tensor:
        """in place: arccosine elementwise"""

    def atan(self) -> Tensor:
        """arctangent elementwise"""

    def atan_(self) -> Tensor:
        """in place: arctangent elementwise"""

    def sinh(self) -> Tensor:
        """hyperbolic sine elementwise"""

    def sinh_(self) -> Tensor:
        """in place: hyperbolic sine elementwise"""

    def cosh(self) -> Tensor:
        """hyperbolic cosine elementwise"""

    def cosh_(self) -> Tensor:
        """in place: hyperbolic cosine elementwise"""

    def asinh(self) -> Tensor:
        """inverse hyperbolic sine elementwise"""

    def asinh_(self) -> Tensor:
        """in place: inverse hyperbolic sine elementwise"""

    def acosh(self) -> Tensor:
        """inverse hyperbolic cosine elementwise"""

    def acosh_(self) -> Tensor:
        """in place: inverse hyperbolic cosine elementwise"""

    def atanh(self) -> Tensor:
        """inverse hyperbolic tangent elementwise"""

    def atanh_(self) -> Tensor:
        """in place: inverse hyperbolic tangent elementwise"""

    def erf(self) -> Tensor:
        """error function elementwise"""

    def erf_(self) -> Tensor:
        """in place: error function elementwise"""

    def expm1(self) -> Tensor:
        """e^x - 1 elementwise, exact near 0"""

    def expm1_(self) -> Tensor:
        """in place: e^x - 1 elementwise, exact near 0"""

    def log1p(self) -> Tensor:
        """log(1 + x) elementwise, exact near 0"""

    def log1p_(self) -> Tensor:
        """in place: log(1 + x) elementwise, exact near 0"""

    def log2(self) -> Tensor:
        """base-2 logarithm elementwise"""

    def log2_(self) -> Tensor:
        """in place: base-2 logarithm elementwise"""

    def log10(self) -> Tensor:
        """base-10 logarithm elementwise"""

    def log10_(self) -> Tensor:
        """in place: base-10 logarithm elementwise"""

    def silu(self) -> Tensor:
        """x * sigmoid(x) elementwise (swish)"""

    def silu_(self) -> Tensor:
        """in place: x * sigmoid(x) elementwise (swish)"""

    def gelu(self) -> Tensor:
        """x * Phi(x) elementwise (torch's gelu, approximate='none')"""

    def gelu_(self) -> Tensor:
        """in place: x * Phi(x) elementwise (torch's gelu, approximate='none')"""

    def gelu_tanh(self) -> Tensor:
        """gelu's tanh approximation (torch's gelu, approximate='tanh')"""

    def gelu_tanh_(self) -> Tensor:
        """in place: gelu's tanh approximation (torch's gelu, approximate='tanh')"""

    def isnan(self) -> Tensor:
        """x is NaN, as bool"""

    def isnan_(self) -> Tensor:
        """in place: x is NaN, as bool"""

    def isinf(self) -> Tensor:
        """x is infinite, as bool"""

    def isinf_(self) -> Tensor:
        """in place: x is infinite, as bool"""

    def isfinite(self) -> Tensor:
        """x is neither infinite nor NaN, as bool"""

    def isfinite_(self) -> Tensor:
        """in place: x is neither infinite nor NaN, as bool"""

    def logical_not(self) -> Tensor:
        """x == 0, as bool (NaN is true, so gives false)"""

    def logical_not_(self) -> Tensor:
        """in place: x == 0, as bool (NaN is true, so gives false)"""

    def bitwise_not(self) -> Tensor:
        """~x elementwise (integers; not x for bool)"""

    def bitwise_not_(self) -> Tensor:
        """in place: ~x elementwise (integers; not x for bool)"""

    def add(self, other: object) -> Tensor:
        """a + b, broadcasting"""

    def add_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a + b, broadcasting"""

    def sub(self, other: object) -> Tensor:
        """a - b, broadcasting"""

    def sub_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a - b, broadcasting"""

    def mul(self, other: object) -> Tensor:
        """a * b, broadcasting"""

    def mul_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a * b, broadcasting"""

    @overload
    def div(self, other: object) -> Tensor:
        """a / b (true division), broadcasting"""

    @overload
    def div(self, other: object, *, rounding_mode: str | None) -> Tensor:
        """
        a / b; rounding_mode 'floor' or 'trunc' rounds the quotient (torch's div)
        """

    def div_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a / b (true division), broadcasting"""

    def pow(self, other: object) -> Tensor:
        """a ^ b, broadcasting"""

    def pow_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a ^ b, broadcasting"""

    def maximum(self, other: object) -> Tensor:
        """larger of a and b, broadcasting"""

    def maximum_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: larger of a and b, broadcasting"""

    def minimum(self, other: object) -> Tensor:
        """smaller of a and b, broadcasting"""

    def minimum_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: smaller of a and b, broadcasting"""

    def eq(self, other: object) -> Tensor:
        """a == b as bool, broadcasting"""

    def eq_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a == b as bool, broadcasting"""

    def ne(self, other: object) -> Tensor:
        """a != b as bool, broadcasting"""

    def ne_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a != b as bool, broadcasting"""

    def lt(self, other: object) -> Tensor:
        """a < b as bool, broadcasting"""

    def lt_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a < b as bool, broadcasting"""

    def le(self, other: object) -> Tensor:
        """a <= b as bool, broadcasting"""

    def le_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a <= b as bool, broadcasting"""

    def gt(self, other: object) -> Tensor:
        """a > b as bool, broadcasting"""

    def gt_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a > b as bool, broadcasting"""

    def ge(self, other: object) -> Tensor:
        """a >= b as bool, broadcasting"""

    def ge_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a >= b as bool, broadcasting"""

    def remainder(self, other: object) -> Tensor:
        """a - floor(a / b) * b (Python's %: the sign of b), broadcasting"""

    def remainder_(self, other: Tensor | float | int | bool) -> Tensor:
        """
        in place: a - floor(a / b) * b (Python's %: the sign of b), broadcasting
        """

    def fmod(self, other: object) -> Tensor:
        """a - trunc(a / b) * b (C's fmod: the sign of a), broadcasting"""

    def fmod_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a - trunc(a / b) * b (C's fmod: the sign of a), broadcasting"""

    def atan2(self, other: object) -> Tensor:
        """the angle of the point (b, a), broadcasting"""

    def atan2_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: the angle of the point (b, a), broadcasting"""

    def bitwise_and(self, other: object) -> Tensor:
        """a & b (integers and bool), broadcasting"""

    def bitwise_and_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a & b (integers and bool), broadcasting"""

    def bitwise_or(self, other: object) -> Tensor:
        """a | b (integers and bool), broadcasting"""

    def bitwise_or_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a | b (integers and bool), broadcasting"""

    def bitwise_xor(self, other: object) -> Tensor:
        """a ^ b (integers and bool), broadcasting"""

    def bitwise_xor_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a ^ b (integers and bool), broadcasting"""

    def logical_and(self, other: object) -> Tensor:
        """a != 0 and b != 0, as bool, broadcasting"""

    def logical_and_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a != 0 and b != 0, as bool, broadcasting"""

    def logical_or(self, other: object) -> Tensor:
        """a != 0 or b != 0, as bool, broadcasting"""

    def logical_or_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: a != 0 or b != 0, as bool, broadcasting"""

    def logical_xor(self, other: object) -> Tensor:
        """exactly one of a and b nonzero, as bool, broadcasting"""

    def logical_xor_(self, other: Tensor | float | int | bool) -> Tensor:
        """in place: exactly one of a and b nonzero, as bool, broadcasting"""

    def floor_divide(self, other: object) -> Tensor:
        """
        floor(a / b) (torch's div with rounding_mode='floor'; Python's //), broadcasting
        """

    def floor_divide_(self, other: Tensor | float | int | bool) -> Tensor:
        """
        in place: floor(a / b) (torch's div with rounding_mode='floor'; Python's //), broadcasting
        """

    def trunc_divide(self, other: object) -> Tensor:
        """trunc(a / b) (torch's div with rounding_mode='trunc'), broadcasting"""

    def trunc_divide_(self, other: Tensor | float | int | bool) -> Tensor:
        """
        in place: trunc(a / b) (torch's div with rounding_mode='trunc'), broadcasting
        """

    def sum(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """sum (bool/int give int64) (over every dim, one, or several)"""

    def prod(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """product (over every dim, one, or several)"""

    def mean(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """arithmetic mean (over every dim, one, or several)"""

    def argmax(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """index of the first max (over every dim, one, or several)"""

    def argmin(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """index of the first min (over every dim, one, or several)"""

    def max(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """
        the largest value: over every dim; over one dim (values, indices), as torch; over several dims the values (torch's amax)
        """

    def min(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """
        the smallest value: over every dim; over one dim (values, indices), as torch; over several dims the values (torch's amin)
        """

    def norm(self, p: float = ..., dim: int | None = ..., keepdim: bool = ...) -> Tensor:
        """p-norm (p may be inf)"""

    def var(self, dim: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        """variance (over every dim, one, or several)"""

    def std(self, dim: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        """standard deviation (over every dim, one, or several)"""

    def clamp(self, min: Tensor | float | int | None = None, max: Tensor | float | int | None = None) -> Tensor:
        """limit values to [min, max] (numbers or tensors, broadcasting)"""

    def clamp_min(self, min: Tensor) -> Tensor:
        """maximum with a tensor bound (torch's clamp_min)"""

    def clamp_max(self, max: Tensor) -> Tensor:
        """minimum with a tensor bound (torch's clamp_max)"""

    def addcmul(self, tensor1: Tensor, tensor2: Tensor, value: object = ...) -> Tensor:
        """x + value * tensor1 * tensor2"""

    def addcdiv(self, tensor1: Tensor, tensor2: Tensor, value: object = ...) -> Tensor:
        """x + value * tensor1 / tensor2"""

    def lerp(self, end: Tensor, weight: object) -> Tensor:
        """x + weight * (end - x) (weight a number or a tensor)"""

    def split(self, split_size_or_sections: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """
        views of pieces of split_size along dim (the last shorter), or of the given sizes
        """

    def split_with_sizes(self, split_sizes: Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """
        views of pieces of the given sizes along dim (they must add up to its size)
        """

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """at most `chunks` views of ceil(size / chunks) along dim"""

    def repeat(self, *sizes: int | Sequence[int]) -> Tensor:
        """the tensor tiled sizes[i] times along dim i (one copy)"""

    @overload
    def scatter(self, dim: int, index: Tensor, src: Tensor | float | int) -> Tensor:
        """x with src (a tensor, or a number) written at index along dim"""

    @overload
    def scatter(self, dim: int, index: Tensor, src: Tensor) -> Tensor:
        """
        scatter(x, dim, index, src): x with src written at index along dim (out[index[i][j]][j] = src[i][j], dim 0; of duplicate positions one write wins)
        """

    def clamp_(self, min: float | int | None = None, max: float | int | None = None) -> Tensor:
        """in place: limit values to [min, max]"""

    def matmul(self, other: Tensor) -> Tensor: ...

    def dot(self, other: Tensor) -> Tensor: ...

    def mv(self, vec: Tensor) -> Tensor: ...

    def __matmul__(self, arg: Tensor, /) -> Tensor: ...

    def view(self, *args) -> Tensor: ...

    def reshape(self, *args) -> Tensor: ...

    def expand(self, *args) -> Tensor: ...

    def permute(self, *args) -> Tensor: ...

    def flatten(self, start_dim: int = ..., end_dim: int = ...) -> Tensor:
        """
        merge dims start_dim..end_dim into one (a view when the strides allow, else a copy)
        """

    def transpose(self, dim0: int, dim1: int) -> Tensor: ...

    def t(self) -> Tensor: ...

    @property
    def T(self) -> Tensor: ...

    def narrow(self, dim: int, start: int, length: int) -> Tensor: ...

    def slice(self, dim: int, start: int = ..., end: int | None = ..., step: int = ...) -> Tensor:
        """python-style slice of one dim"""

    def select(self, dim: int, index: int) -> Tensor: ...

    def squeeze(self, dim: int | None = ...) -> Tensor: ...

    def unsqueeze(self, dim: int) -> Tensor: ...

    def __getitem__(self, index: object | None) -> Tensor: ...

    def __setitem__(self, index: object | None, value: object | None) -> None: ...

    def contiguous(self) -> Tensor: ...

    def clone(self) -> Tensor:
        """a packed copy in new storage"""

    def copy_(self, src: Tensor) -> Tensor: ...

    def fill_(self, value: float | int | bool) -> Tensor: ...

    def zero_(self) -> Tensor: ...

    def uniform_(self, from_: float = 0.0, to: float = 1.0, generator: Generator | None = None) -> Tensor: ...

    def normal_(self, mean: float = 0.0, std: float = 1.0, generator: Generator | None = None) -> Tensor: ...

    def float(self) -> Tensor: ...

    def double(self) -> Tensor: ...

    def int(self) -> Tensor: ...

    def long(self) -> Tensor: ...

    def bool(self) -> Tensor: ...

    def half(self) -> Tensor: ...

    def bfloat16(self) -> Tensor: ...

    def __add__(self, other: object | None) -> object: ...

    def __radd__(self, other: object | None) -> object: ...

    def __sub__(self, other: object | None) -> object: ...

    def __rsub__(self, other: object | None) -> object: ...

    def __mul__(self, other: object | None) -> object: ...

    def __rmul__(self, other: object | None) -> object: ...

    def __truediv__(self, other: object | None) -> object: ...

    def __rtruediv__(self, other: object | None) -> object: ...

    def __pow__(self, other: object | None) -> object: ...

    def __rpow__(self, other: object | None) -> object: ...

    def __eq__(self, other: object | None) -> object: ...

    def __ne__(self, other: object | None) -> object: ...

    def __lt__(self, other: object | None) -> object: ...

    def __le__(self, other: object | None) -> object: ...

    def __gt__(self, other: object | None) -> object: ...

    def __ge__(self, other: object | None) -> object: ...

    def __mod__(self, other: object | None) -> object: ...

    def __rmod__(self, other: object | None) -> object: ...

    def __and__(self, other: object | None) -> object: ...

    def __rand__(self, other: object | None) -> object: ...

    def __or__(self, other: object | None) -> object: ...

    def __ror__(self, other: object | None) -> object: ...

    def __xor__(self, other: object | None) -> object: ...

    def __rxor__(self, other: object | None) -> object: ...

    def __floordiv__(self, other: object | None) -> object: ...

    def __rfloordiv__(self, other: object | None) -> object: ...

    def __iadd__(self, other: object | None) -> object: ...

    def __isub__(self, other: object | None) -> object: ...

    def __imul__(self, other: object | None) -> object: ...

    def __itruediv__(self, other: object | None) -> object: ...

    def __ipow__(self, other: object | None) -> object: ...

    def __imod__(self, other: object | None) -> object: ...

    def __iand__(self, other: object | None) -> object: ...

    def __ior__(self, other: object | None) -> object: ...

    def __ixor__(self, other: object | None) -> object: ...

    def __ifloordiv__(self, other: object | None) -> object: ...

    def __neg__(self) -> Tensor: ...

    def __abs__(self) -> Tensor: ...

    def __invert__(self) -> Tensor: ...

    def __pos__(self) -> object: ...

    def __hash__(self) -> int: ...

    def where(self, a: Tensor, b: Tensor) -> Tensor:
        """
        where(condition, a, b): a where condition (bool) is true, else b; broadcasting
        """

    def masked_fill(self, mask: Tensor, value: float | int) -> Tensor:
        """
        masked_fill(x, mask, value): x with value where mask (bool, broadcast to x) is true
        """

    def index_select(self, dim: int, index: Tensor) -> Tensor:
        """
        index_select(x, dim, index): the entries of dim at the positions of a 1-D integer index
        """

    def gather(self, dim: int, index: Tensor) -> Tensor:
        """
        gather(x, dim, index): out[i][j] = x[index[i][j]][j] (dim 0); index as many dims as x
        """

    def scatter_add(self, dim: int, index: Tensor, src: Tensor) -> Tensor:
        """
        scatter_add(x, dim, index, src): x with src added at index along dim (out[index[i][j]][j] += src[i][j], dim 0)
        """

    def cumsum(self, dim: int) -> Tensor:
        """cumsum(x, dim): running sum along dim"""

    def one_hot(self, num_classes: int) -> Tensor:
        """
        one_hot(x, num_classes): int64 one-hot rows (a new last dim of num_classes) of an integer tensor
        """

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Tensor, Tensor]:
        """
        topk(x, k, dim=-1, largest=true, sorted=true): the k largest (smallest) values along dim, in order; ties: lower index first
        """

    def topk_indices(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Tensor:
        """
        topk_indices(x, k, dim=-1, largest=true, sorted=true): the positions along dim of topk's values
        """

    def tril(self, diagonal: int = 0) -> Tensor:
        """
        tril(x, diagonal=0): the matrices of the last two dims with the entries above the diagonal zeroed
        """

    def triu(self, diagonal: int = 0) -> Tensor:
        """
        triu(x, diagonal=0): the matrices of the last two dims with the entries below the diagonal zeroed
        """

    def flip(self, dims: int) -> Tensor:
        """
        flip(x, dims): a copy with the elements in reverse order along each of dims
        """

    def constant_pad_nd(self, pad: int, value: float | int = 0) -> Tensor:
        """
        constant_pad_nd(x, pad, value=0): x with pad[2i] and pad[2i+1] elements of value before and after its i-th last dim (torch's pad; negative pads crop)
        """

    def sort_indices(self, dim: int = -1, descending: bool = False) -> Tensor:
        """
        sort_indices(x, dim=-1, descending=false): the positions along dim that sort x, stably (NaN last; first when descending)
        """

    def scatter_reduce(self, dim: int, index: Tensor, src: Tensor, reduce: str | int, include_self: bool = True) -> Tensor:
        """
        scatter_reduce(x, dim, index, src, reduce, include_self=true): x with src combined at index along dim by reduce (0 sum, 1 prod, 2 mean, 3 amax, 4 amin); include_self: x's values take part (else the positions written start empty)
        """

    def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        """
        linear(x, weight, bias?): x @ weight.t() + bias; weight (out, in), x (..., in)
        """

    def conv2d(self, weight: Tensor, bias: Tensor | None = None, stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, groups: int = 1) -> Tensor:
        """
        conv2d(x, weight, bias?, stride=1, padding=0, dilation=1, groups=1): 2-D convolution (cross-correlation); weight (out, in/groups, kh, kw)
        """

    def conv2d_input_grad(self, weight: Tensor, input_size: int | tuple[int, int], stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, groups: int = 1) -> Tensor:
        """
        conv2d_input_grad(grad, weight, input_size, stride=1, padding=0, dilation=1, groups=1): conv2d's gradient for its input of spatial size input_size
        """

    def conv2d_weight_grad(self, x: Tensor, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, groups: int = 1) -> Tensor:
        """
        conv2d_weight_grad(grad, x, kernel_size, stride=1, padding=0, dilation=1, groups=1): conv2d's gradient for its weight (its bias's: grad.sum over dims 0, 2, 3)
        """

    def max_pool2d(self, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, ceil_mode: bool = False) -> Tensor:
        """
        max_pool2d(x, kernel_size, stride?, padding=0, dilation=1, ceil_mode=false): 2-D max pooling (NaN wins; stride: kernel_size when left out)
        """

    def max_pool2d_indices(self, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, ceil_mode: bool = False) -> Tensor:
        """
        max_pool2d_indices(x, kernel_size, stride?, padding=0, dilation=1, ceil_mode=false): positions h * W + w in x's plane of max_pool2d's values
        """

    def max_pool2d_backward(self, indices: Tensor, input_size: int | tuple[int, int]) -> Tensor:
        """
        max_pool2d_backward(grad, indices, input_size): max_pool2d's input gradient: grad summed at max_pool2d_indices
        """

    def avg_pool2d(self, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0, ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: float | int | None = None) -> Tensor:
        """
        avg_pool2d(x, kernel_size, stride?, padding=0, ceil_mode=false, count_include_pad=true, divisor_override?): 2-D average pooling
        """

    def avg_pool2d_backward(self, input_size: int | tuple[int, int], kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0, ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: float | int | None = None) -> Tensor:
        """
        avg_pool2d_backward(grad, input_size, kernel_size, stride?, padding=0, ceil_mode=false, count_include_pad=true, divisor_override?): avg_pool2d's input gradient
        """

    def softmax(self, dim: int) -> Tensor:
        """softmax(x, dim): exp(x) / sum(exp(x)) along dim"""

    def log_softmax(self, dim: int) -> Tensor:
        """log_softmax(x, dim): log(softmax(x)) along dim"""

    def softmax_backward(self, output: Tensor, dim: int) -> Tensor:
        """
        softmax_backward(grad, output, dim): softmax's input gradient from its output: output * (grad - sum(grad * output))
        """

    def log_softmax_backward(self, output: Tensor, dim: int) -> Tensor:
        """
        log_softmax_backward(grad, output, dim): log_softmax's input gradient from its output: grad - exp(output) * sum(grad)
        """

    def nll_loss(self, target: Tensor, weight: Tensor | None = None, reduction: str = 'mean', ignore_index: int = -100) -> Tensor:
        """
        nll_loss(x, target, weight?, reduction=mean, ignore_index=-100): negative log likelihood of log-probabilities x (N, C) or (C) at int64 targets
        """

    def nll_loss_backward(self, x: Tensor, target: Tensor, weight: Tensor | None = None, reduction: str = 'mean', ignore_index: int = -100) -> Tensor:
        """
        nll_loss_backward(grad, x, target, weight?, reduction=mean, ignore_index=-100): nll_loss's gradient for x
        """

    def dropout(self, p: float | int = 0.5, training: bool = True, generator: Generator | None = None) -> Tensor:
        """
        dropout(x, p=0.5, training=true, generator): zero each element with probability p, scale the rest by 1/(1-p)
        """

    def dropout2d(self, p: float | int = 0.5, training: bool = True, generator: Generator | None = None) -> Tensor:
        """
        dropout2d(x, p=0.5, training=true, generator): zero each channel (all but the last two dims) with probability p, scale by 1/(1-p)
        """

    def threshold_backward(self, x: Tensor, threshold: float | int = 0) -> Tensor:
        """
        threshold_backward(grad, x, threshold=0): grad where x > threshold, else 0 (relu's gradient at threshold 0)
        """

    def layer_norm(self, weight: Tensor, bias: Tensor, eps: float | int = 1e-05) -> Tensor:
        """
        layer_norm(x, weight, bias, eps=1e-05): (x - mean) / sqrt(var + eps) * weight + bias over x's last weight.dim() dims
        """

    def layer_norm_backward(self, x: Tensor, weight: Tensor, eps: float | int = 1e-05) -> Tensor:
        """
        layer_norm_backward(grad, x, weight, eps=1e-05): layer_norm's input gradient (the statistics recomputed from x)
        """

    def layer_norm_weight_grad(self, x: Tensor, weight: Tensor, eps: float | int = 1e-05) -> Tensor:
        """
        layer_norm_weight_grad(grad, x, weight, eps=1e-05): layer_norm's weight gradient: grad * (x - mean) / sqrt(var + eps) summed over the rows
        """

    def any(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """
        whether some element is nonzero (over everything, a dim or several), as bool
        """

    def all(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """
        whether every element is nonzero (over everything, a dim or several), as bool
        """

    def addmm(self, mat1: Tensor, mat2: Tensor, *, beta: object = ..., alpha: object = ...) -> Tensor:
        """beta * self + alpha * (mat1 @ mat2)"""

    def new_full(self, size: object, fill_value: object, *, dtype: object | None = ...) -> Tensor:
        """
        a tensor of size filled with fill_value where this one lives (its dtype unless given)
        """

    def new_zeros(self, size: object, *, dtype: object | None = ...) -> Tensor:
        """a tensor of zeros where this one lives (its dtype unless given)"""

    def new_ones(self, size: object, *, dtype: object | None = ...) -> Tensor:
        """a tensor of ones where this one lives (its dtype unless given)"""

    def storage_offset(self) -> int:
        """the offset of element 0 in the storage, in elements"""

    def leaky_relu(self, negative_slope: float = ...) -> Tensor:
        """x > 0 ? x : negative_slope * x"""

    def hardtanh(self, min_val: float = ..., max_val: float = ...) -> Tensor:
        """x clamped to [min_val, max_val]"""

    def elu(self, alpha: float = ..., scale: float = ..., input_scale: float = ...) -> Tensor:
        """x > 0 ? scale * x : scale * alpha * (exp(input_scale * x) - 1)"""

    def sort(self, dim: int = -1, descending: bool = False, *, stable: bool = False) -> tuple[Tensor, Tensor]:
        """
        (values, indices) along dim in order; stable; NaN last (first when descending)
        """

    def argsort(self, dim: int = ..., descending: bool = ..., *, stable: bool = ...) -> Tensor:
        """the positions along dim that sort the tensor (stable)"""

    def index(self, indices: Sequence[Tensor | None]) -> Tensor:
        """
        advanced indexing (torch's index.Tensor): integer tensors per dim, None: the whole dim
        """

    def index_put(self, indices: Sequence[Tensor | None], values: Tensor, accumulate: bool = False) -> Tensor:
        """
        a copy with values written (or added: accumulate) at the advanced index
        """

    def diagonal(self, offset: int = ..., dim1: int = ..., dim2: int = ...) -> Tensor:
        """the diagonal of dims dim1 and dim2 as a new last dim (a view)"""

    def masked_scatter(self, mask: Tensor, source: Tensor) -> Tensor:
        """x with source's elements, in order, where mask is true"""

    def nonzero(self, *, as_tuple: bool = ...) -> object:
        """
        sync point: the positions of the nonzero elements, (count, dim) int64 (as_tuple: one 1-D tensor per dim)
        """

    def unique(self, sorted: bool = ..., return_inverse: bool = ..., return_counts: bool = ..., dim: object | None = ...) -> object:
        """
        sync point: the distinct values in ascending order (and, asked, each element's position among them and their counts)
        """

    def masked_select(self, mask: Tensor) -> Tensor:
        """sync point: the elements where mask (bool) is true, 1-D"""

    def logsumexp(self, dim: object, keepdim: bool = ...) -> Tensor:
        """log(sum(exp(x))) over dim (an int or several), stably"""

    def amax(self, dim: object = ..., keepdim: bool = ...) -> Tensor:
        """the largest value over dim (an int or several; () or None: every dim)"""

    def amin(self, dim: object = ..., keepdim: bool = ...) -> Tensor:
        """the smallest value over dim (an int or several; () or None: every dim)"""

    def index_add(self, dim: int, index: Tensor, source: Tensor, *, alpha: object = ...) -> Tensor:
        """a copy with alpha * source added at the positions index (1-D) of dim"""

    def bernoulli(self, *, generator: Generator | None = ...) -> Tensor:
        """1 with probability x (per element), else 0, drawn where x lives"""

    def get_node(self) -> int: ...

    def get_device(self) -> int:
        """-1 for the node's CPU"""

    @property
    def node(self) -> int: ...

    @property
    def device(self) -> int: ...

    @property
    def id(self) -> int: ...

    @property
    def is_defined(self) -> bool: ...

    def to_local(self) -> LocalTensor:
        """Sync point: the values, copied to this process."""

    def item(self) -> object:
        """Sync point: the only element of a one-element tensor."""

    def numpy(self) -> object:
        """Sync point: to_local().numpy()."""

    def __array__(self, dtype: object | None = ..., copy: object | None = ...) -> object: ...

    def to(self, target: object | None = ..., node: int | None = ..., device: int | None = ...) -> Tensor:
        """
        to(dtype) converts; to(k) or to(node=k) copies to node k worker to worker; to(device=d) moves to CUDA device d of the node (-1: its CPU). Never blocks.
        """

    def to_device(self, device: int) -> Tensor: ...

    def cpu(self) -> Tensor: ...

    def cuda(self, device: int = ...) -> Tensor: ...

    def __repr__(self) -> str:
        """Sync point: the values with node and device."""

    def __bool__(self) -> bool: ...

    def __float__(self) -> float: ...

    def __int__(self) -> int: ...

    @property
    def requires_grad(self) -> bool:
        """
        Whether gradients flow to this tensor (a leaf marked so, or made by a recorded op from one). Assigning marks or unmarks a leaf.
        """

    @requires_grad.setter
    def requires_grad(self, arg: bool, /) -> None: ...

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """
        Marks this leaf as needing its gradient (floating tensors only), or not; returns it.
        """

    @property
    def is_leaf(self) -> bool:
        """
        True for tensors no recorded op made (every tensor that does not require grad).
        """

    @property
    def grad(self) -> Tensor | None:
        """
        The gradient backward() accumulated into this leaf (None when there is none); assign None to clear it, or a tensor of the same shape and dtype.
        """

    @grad.setter
    def grad(self, value: Tensor | None) -> None: ...

    @property
    def grad_fn(self) -> str | None:
        """
        The name of the recorded op that made this tensor (e.g. 'MulBackward'); None for leaves.
        """

    def backward(self, gradient: Tensor | None = ..., retain_graph: bool = ...) -> None:
        """
        Accumulates d(this)/d(leaf) into every leaf's grad (gradient: d(something)/d(this), needed unless this has one element). The graph is freed unless retain_graph.
        """

    def detach(self) -> Tensor:
        """
        The same tensor (shared storage) outside the graph: no grad, not recorded.
        """

    @property
    def data(self) -> Tensor:
        """
        torch's .data: detach(), the same storage outside the graph (param.grad.data /= n); assigning makes this object another tensor's storage, keeping its autograd state.
        """

    @data.setter
    def data(self, arg: Tensor, /) -> None: ...

def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """
    cat(tensors, dim=0): join tensors along an existing dim (dtypes promote)
    """

def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """
    stack(tensors, dim=0): join same-shaped tensors along a new dim (dtypes promote)
    """

def where(condition: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """
    where(condition, a, b): a where condition (bool) is true, else b; broadcasting
    """

def masked_fill(x: Tensor, mask: Tensor, value: float | int) -> Tensor:
    """
    masked_fill(x, mask, value): x with value where mask (bool, broadcast to x) is true
    """

def index_select(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """
    index_select(x, dim, index): the entries of dim at the positions of a 1-D integer index
    """

def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """
    gather(x, dim, index): out[i][j] = x[index[i][j]][j] (dim 0); index as many dims as x
    """

def scatter_add(x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """
    scatter_add(x, dim, index, src): x with src added at index along dim (out[index[i][j]][j] += src[i][j], dim 0)
    """

def cumsum(x: Tensor, dim: int) -> Tensor:
    """cumsum(x, dim): running sum along dim"""

def one_hot(x: Tensor, num_classes: int) -> Tensor:
    """
    one_hot(x, num_classes): int64 one-hot rows (a new last dim of num_classes) of an integer tensor
    """

def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Tensor:
    """
    topk(x, k, dim=-1, largest=true, sorted=true): the k largest (smallest) values along dim, in order; ties: lower index first
    """

def topk_indices(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Tensor:
    """
    topk_indices(x, k, dim=-1, largest=true, sorted=true): the positions along dim of topk's values
    """

def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    """
    tril(x, diagonal=0): the matrices of the last two dims with the entries above the diagonal zeroed
    """

def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    """
    triu(x, diagonal=0): the matrices of the last two dims with the entries below the diagonal zeroed
    """

def flip(x: Tensor, dims: int) -> Tensor:
    """
    flip(x, dims): a copy with the elements in reverse order along each of dims
    """

def constant_pad_nd(x: Tensor, pad: int, value: float | int = 0) -> Tensor:
    """
    constant_pad_nd(x, pad, value=0): x with pad[2i] and pad[2i+1] elements of value before and after its i-th last dim (torch's pad; negative pads crop)
    """

def sort_indices(x: Tensor, dim: int = -1, descending: bool = False) -> Tensor:
    """
    sort_indices(x, dim=-1, descending=false): the positions along dim that sort x, stably (NaN last; first when descending)
    """

def scatter(x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """
    scatter(x, dim, index, src): x with src written at index along dim (out[index[i][j]][j] = src[i][j], dim 0; of duplicate positions one write wins)
    """

def scatter_reduce(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str | int, include_self: bool = True) -> Tensor:
    """
    scatter_reduce(x, dim, index, src, reduce, include_self=true): x with src combined at index along dim by reduce (0 sum, 1 prod, 2 mean, 3 amax, 4 amin); include_self: x's values take part (else the positions written start empty)
    """

def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """
    linear(x, weight, bias?): x @ weight.t() + bias; weight (out, in), x (..., in)
    """

def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, groups: int = 1) -> Tensor:
    """
    conv2d(x, weight, bias?, stride=1, padding=0, dilation=1, groups=1): 2-D convolution (cross-correlation); weight (out, in/groups, kh, kw)
    """

def conv2d_input_grad(grad: Tensor, weight: Tensor, input_size: int | tuple[int, int], stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, groups: int = 1) -> Tensor:
    """
    conv2d_input_grad(grad, weight, input_size, stride=1, padding=0, dilation=1, groups=1): conv2d's gradient for its input of spatial size input_size
    """

def conv2d_weight_grad(grad: Tensor, x: Tensor, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, groups: int = 1) -> Tensor:
    """
    conv2d_weight_grad(grad, x, kernel_size, stride=1, padding=0, dilation=1, groups=1): conv2d's gradient for its weight (its bias's: grad.sum over dims 0, 2, 3)
    """

def max_pool2d(x: Tensor, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, ceil_mode: bool = False) -> Tensor:
    """
    max_pool2d(x, kernel_size, stride?, padding=0, dilation=1, ceil_mode=false): 2-D max pooling (NaN wins; stride: kernel_size when left out)
    """

def max_pool2d_indices(x: Tensor, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, ceil_mode: bool = False) -> Tensor:
    """
    max_pool2d_indices(x, kernel_size, stride?, padding=0, dilation=1, ceil_mode=false): positions h * W + w in x's plane of max_pool2d's values
    """

def max_pool2d_backward(grad: Tensor, indices: Tensor, input_size: int | tuple[int, int]) -> Tensor:
    """
    max_pool2d_backward(grad, indices, input_size): max_pool2d's input gradient: grad summed at max_pool2d_indices
    """

def avg_pool2d(x: Tensor, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0, ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: float | int | None = None) -> Tensor:
    """
    avg_pool2d(x, kernel_size, stride?, padding=0, ceil_mode=false, count_include_pad=true, divisor_override?): 2-D average pooling
    """

def avg_pool2d_backward(grad: Tensor, input_size: int | tuple[int, int], kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0, ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: float | int | None = None) -> Tensor:
    """
    avg_pool2d_backward(grad, input_size, kernel_size, stride?, padding=0, ceil_mode=false, count_include_pad=true, divisor_override?): avg_pool2d's input gradient
    """

def softmax(x: Tensor, dim: int) -> Tensor:
    """softmax(x, dim): exp(x) / sum(exp(x)) along dim"""

def log_softmax(x: Tensor, dim: int) -> Tensor:
    """log_softmax(x, dim): log(softmax(x)) along dim"""

def softmax_backward(grad: Tensor, output: Tensor, dim: int) -> Tensor:
    """
    softmax_backward(grad, output, dim): softmax's input gradient from its output: output * (grad - sum(grad * output))
    """

def log_softmax_backward(grad: Tensor, output: Tensor, dim: int) -> Tensor:
    """
    log_softmax_backward(grad, output, dim): log_softmax's input gradient from its output: grad - exp(output) * sum(grad)
    """

def nll_loss(x: Tensor, target: Tensor, weight: Tensor | None = None, reduction: str = 'mean', ignore_index: int = -100) -> Tensor:
    """
    nll_loss(x, target, weight?, reduction=mean, ignore_index=-100): negative log likelihood of log-probabilities x (N, C) or (C) at int64 targets
    """

def nll_loss_backward(grad: Tensor, x: Tensor, target: Tensor, weight: Tensor | None = None, reduction: str = 'mean', ignore_index: int = -100) -> Tensor:
    """
    nll_loss_backward(grad, x, target, weight?, reduction=mean, ignore_index=-100): nll_loss's gradient for x
    """

def dropout(x: Tensor, p: float | int = 0.5, training: bool = True, generator: Generator | None = None) -> Tensor:
    """
    dropout(x, p=0.5, training=true, generator): zero each element with probability p, scale the rest by 1/(1-p)
    """

def dropout2d(x: Tensor, p: float | int = 0.5, training: bool = True, generator: Generator | None = None) -> Tensor:
    """
    dropout2d(x, p=0.5, training=true, generator): zero each channel (all but the last two dims) with probability p, scale by 1/(1-p)
    """

def threshold_backward(grad: Tensor, x: Tensor, threshold: float | int = 0) -> Tensor:
    """
    threshold_backward(grad, x, threshold=0): grad where x > threshold, else 0 (relu's gradient at threshold 0)
    """

def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float | int = 1e-05) -> Tensor:
    """
    layer_norm(x, weight, bias, eps=1e-05): (x - mean) / sqrt(var + eps) * weight + bias over x's last weight.dim() dims
    """

def layer_norm_backward(grad: Tensor, x: Tensor, weight: Tensor, eps: float | int = 1e-05) -> Tensor:
    """
    layer_norm_backward(grad, x, weight, eps=1e-05): layer_norm's input gradient (the statistics recomputed from x)
    """

def layer_norm_weight_grad(grad: Tensor, x: Tensor, weight: Tensor, eps: float | int = 1e-05) -> Tensor:
    """
    layer_norm_weight_grad(grad, x, weight, eps=1e-05): layer_norm's weight gradient: grad * (x - mean) / sqrt(var + eps) summed over the rows
    """

def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """
    the rows of weight at the integer indices input (torch.nn.functional.embedding)
    """

def embedding_dense_backward(grad_output: Tensor, indices: Tensor, num_weights: int, padding_idx: int | None = None, scale_grad_by_freq: bool = False) -> Tensor:
    """the gradient of embedding's weight: grad rows added up per index"""

def slice_scatter(input: Tensor, src: Tensor, dim: int = 0, start: int | None = None, end: int | None = None, step: int = 1) -> Tensor:
    """
    input with src written at the slice start:end:step of dim (a new tensor)
    """

def select_scatter(input: Tensor, src: Tensor, dim: int, index: int) -> Tensor:
    """input with src written at index of dim (a new tensor)"""

def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: float | int = 1, alpha: float | int = 1) -> Tensor:
    """beta * input + alpha * (mat1 @ mat2)"""

def masked_select(input: Tensor, mask: Tensor) -> Tensor:
    """sync point: the elements of input where mask (bool) is true, 1-D"""

def logsumexp(input: Tensor, dim: int | Sequence[int], keepdim: bool = False) -> Tensor:
    """log(sum(exp(input))) over dim, stably"""

def var_mean(input: Tensor, dim: int | Sequence[int] | None = None, *, correction: int = 1, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """(variance, mean) over dim (None: every dim)"""

def amax(input: Tensor, dim: int | Sequence[int] = (), keepdim: bool = False) -> Tensor:
    """the largest value over dim"""

def amin(input: Tensor, dim: int | Sequence[int] = (), keepdim: bool = False) -> Tensor:
    """the smallest value over dim"""

def index_add(input: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: float | int = 1) -> Tensor:
    """input with alpha * source added at the positions index of dim"""

def bernoulli(input: Tensor, *, generator: Generator | None = None) -> Tensor:
    """1 with probability input (per element), else 0"""

def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False, *, scale: float | None = None, generator: Generator | None = None) -> Tensor:
    """softmax(q k^T * scale + mask) v, the math form (is_causal: j <= i)"""

def nll_loss_nd(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = 'mean') -> Tensor:
    """nll_loss of (N, C), (C) or (N, C, d1, ...) log-probabilities"""

def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = 'mean', label_smoothing: float = 0.0) -> Tensor:
    """
    log_softmax over the class dim, then the loss against class indices or probabilities
    """

def pad(input: Tensor, pad: Sequence[int], mode: str = 'constant', value: float | int = 0) -> Tensor:
    """
    input padded by (before, after) pairs for the last dims, the last dim's first; mode 'constant', 'reflect', 'replicate' or 'circular'
    """

def adaptive_avg_pool(input: Tensor, output_size: Sequence[int]) -> Tensor:
    """adaptive average pooling of the last len(output_size) (1 to 3) dims"""

def adaptive_avg_pool_backward(grad_output: Tensor, input: Tensor) -> Tensor:
    """
    the gradient of adaptive_avg_pool: each bin's gradient spread over its inputs
    """

def interpolate(input: Tensor, size: Sequence[int], mode: str, align_corners: bool = False, scales: Sequence[float] = []) -> Tensor:
    """
    input resized over its last len(size) dims (mode nearest, nearest-exact, linear, area)
    """

def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-05) -> Tensor:
    """
    each group of channels of each sample normalized, then * weight + bias per channel
    """

def group_norm_backward(grad_output: Tensor, input: Tensor, num_groups: int, weight: Tensor | None = None, eps: float = 1e-05) -> tuple[Tensor, Tensor, Tensor]:
    """
    (grad_input, grad_weight, grad_bias) of group_norm, the statistics recomputed
    """

def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False, momentum: float = 0.1, eps: float = 1e-05) -> Tensor:
    """
    per-channel normalization by the batch's statistics (training; the running ones updated in place) or by the running ones
    """

def empty(*shape, dtype: object = dtype.float32, node: int | None = ..., device: int | None = ..., requires_grad: bool = ...) -> Tensor:
    """
    An uninitialized tensor on the current node and device (or node=, device=).
    """

def zeros(*shape, dtype: object = dtype.float32, node: int | None = ..., device: int | None = ..., requires_grad: bool = ...) -> Tensor:
    """A tensor of zeros on the current node and device (or node=, device=)."""

def ones(*shape, dtype: object = dtype.float32, node: int | None = ..., device: int | None = ..., requires_grad: bool = ...) -> Tensor:
    """A tensor of ones on the current node and device (or node=, device=)."""

def full(size: object, fill_value: object, dtype: object = dtype.float32, node: int | None = ..., device: int | None = ..., requires_grad: bool = ...) -> Tensor: ...

def arange(start: object, end: object | None = ..., step: object = ..., dtype: object | None = ..., node: int | None = ..., device: int | None = ...) -> Tensor: ...

def linspace(start: float, end: float, steps: int, dtype: object = dtype.float32, node: int | None = ..., device: int | None = ..., requires_grad: bool = ...) -> Tensor: ...

def rand(*shape, generator: Generator | None = ..., dtype: object = dtype.float32, node: int | None = ..., device: int | None = ..., requires_grad: bool = ...) -> Tensor:
    """
    Uniform draws on [0, 1) (the same seed gives the same values on any node).
    """

def randn(*shape, generator: Generator | None = ..., dtype: object = dtype.float32, node: int | None = ..., device: int | None = ..., requires_grad: bool = ...) -> Tensor:
    """
    Standard normal draws (the same seed gives the same values on any node).
    """

def randperm(n: int, *, generator: Generator | None = ..., dtype: object | None = ..., node: int | None = ..., device: int | None = ...) -> Tensor:
    """
    A random permutation of 0 .. n-1 (int64), made on the node: the order of n uniform draws (the same seed gives the same permutation on any node).
    """

def eye(n: int, m: int | None = ..., *, dtype: object = dtype.float32, node: int | None = ..., device: int | None = ..., requires_grad: bool = ...) -> Tensor:
    """The n x m identity (m = n by default), made on the node."""

def randint(*args, size: Sequence[int] | None = None, generator: Generator | None = None, dtype: object | None = None, node: int | None = None, device: int | None = None) -> Tensor:
    """
    Integers uniform on [low, high): randint(high, size) or randint(low, high, size), made on the node (int64 unless dtype is given).
    """

def dist_send(data: object, node: int | None = ..., device: int | None = ...) -> Tensor:
    """
    Sync point: copies a LocalTensor, numpy array or any DLPack/buffer object to a node (default: the current one) and returns its handle.
    """

def _init_master_worker(workers: Sequence[str] | None = ..., listen: str | None = ..., num_workers: int = ..., connect_timeout: float | None = ..., sync_timeout: float | None = ..., heartbeat_timeout: float | None = ..., key_file: str = ..., insecure: bool = ..., backend: str = ...) -> None: ...

def shutdown_master_worker() -> None:
    """
    Flushes, says goodbye to every worker (they free the session's tensors), closes.
    """

def is_master_worker_initialized() -> bool: ...

def node_count() -> int: ...

def current_node() -> int: ...

def set_node(node: int) -> None: ...

def device_count(node: int) -> int:
    """CUDA devices on a node (0: CPU only)."""

def current_device() -> int:
    """-1: the CPU"""

def set_device(device: int) -> None: ...

def cuda_device_count() -> int:
    """CUDA devices of this process."""

def cuda_unavailable_reason() -> str: ...

def synchronize(node: int = ...) -> None:
    """
    Waits until every command sent to node (all: -1) has run; raises RemoteError for the first failure not reported before.
    """

def cancel(node: int = ...) -> None:
    """
    Cancels the work queued on node (all: -1): ops not yet started do not run, their outputs raise RemoteError naming the cancel when read, and synchronize() reports it once. Ctrl-C at a sync point does this for every node.
    """

def memory_stats(node: int, device: int = ...) -> dict:
    """Sync point: memory in use on a node's CPU or device."""

def node_info(node: int) -> dict: ...

def start_trace() -> None:
    """
    Starts recording the session's timeline (the master's calls and sync points, every node's streams); see docs/observability.md.
    """

def stop_trace(path: str) -> dict:
    """
    Sync point: stops recording and writes the trace (Chrome's trace event format: Perfetto, chrome://tracing) to path; a dict of what was written.
    """

def is_tracing() -> bool: ...

def flight_recorder(node: int, finished: int = ...) -> str:
    """
    A node's last commands in words: those not finished (and what they wait on), then the last `finished` done or failed ones.
    """

def node_metrics(node: int) -> dict:
    """
    A node's live figures (what dtr-worker --metrics-port serves), as a dict.
    """

class Event:
    """A point in a stream; waits across nodes go worker to worker."""

    def __init__(self, enable_timing: bool = ...) -> None: ...

    def record(self, stream: Stream | None = ...) -> None: ...

    @property
    def recorded(self) -> bool: ...

    @property
    def node(self) -> int: ...

    def query(self) -> bool:
        """Sync point: whether the latest record has run."""

    def synchronize(self) -> None:
        """Sync point: waits for the latest record; raises its stream's failure."""

    def elapsed_time(self, end: Event) -> float:
        """Sync point: milliseconds from this event's record to end's."""

class Stream:
    """A stream of commands on one node (CUDA-style)."""

    @staticmethod
    def create(node: int = ...) -> Stream:
        """A new stream on node (-1: the current one) and the current device."""

    @property
    def node(self) -> int: ...

    @property
    def device(self) -> int: ...

    @property
    def id(self) -> int: ...

    @property
    def is_default(self) -> bool: ...

    def wait_event(self, event: Event) -> None:
        """Later commands wait for the event."""

    def wait(self, event: Event) -> None: ...

    def record_event(self, enable_timing: bool = ...) -> Event: ...

    def query(self) -> bool: ...

    def synchronize(self) -> None: ...

    def __eq__(self, arg: object, /) -> bool: ...

    def __hash__(self) -> int: ...

    def __repr__(self) -> str: ...

def current_stream(node: int = ...) -> Stream: ...

def default_stream(node: int = ...) -> Stream: ...

def set_stream(stream: Stream) -> None: ...

def all_reduce(tensors: Sequence[Tensor], op: ReduceOp = ReduceOp.SUM) -> None:
    """
    In place: every tensor (one per node) becomes the reduction of all of them.
    """

def broadcast(tensors: Sequence[Tensor], root: int) -> None:
    """In place: every tensor becomes a copy of tensors[root]."""

def all_gather(tensors: Sequence[Tensor]) -> list[Tensor]:
    """Result i, on tensors[i]'s node, stacks all of them."""

def reduce_scatter(tensors: Sequence[Tensor], op: ReduceOp = ReduceOp.SUM) -> list[Tensor]:
    """
    Result i (on tensors[i]'s node) reduces rows [i*m, (i+1)*m) of every input.
    """

class Graph:
    """
    A captured graph (dtr.capture): replay() runs its commands again, one command per node.
    """

    @property
    def defined(self) -> bool: ...

    @property
    def id(self) -> int: ...

    @property
    def replays(self) -> int:
        """How many times replay() was called."""

    @property
    def nodes(self) -> list[int]:
        """The nodes with a part of the graph."""

    def commands(self, node: int) -> int:
        """The commands recorded for a node."""

    def replay(self) -> None:
        """Runs the graph again (returns at once)."""

    def reset(self) -> None:
        """Frees the graph on its workers; later replays raise."""

    def __repr__(self) -> str: ...

def capture(fn: Callable) -> Graph:
    """
    Records the commands fn() issues (on any node) into a graph instead of running them; sync points inside raise InvalidArgument.
    """

def is_capturing() -> bool:
    """Whether this thread is inside capture()."""

class LocalWorkers:
    """
    dtr-worker daemons on loopback, stopped by stop() or when garbage collected.
    """

    def __init__(self, count: int, worker_binary: str, log_level: str = ..., timeout: float = ...) -> None: ...

    @property
    def endpoints(self) -> list[str]: ...

    @property
    def pids(self) -> list[int]: ...

    def stop(self, timeout: float = ...) -> None: ...

built_with_cuda: bool = ...
