"""dtr's C++ API (include/dtr/) for Python; import dtr, not this module."""

from collections.abc import Callable, Sequence
import enum

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
from dtr._dtr import local as local, pg as pg


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

    def div(self, other: object) -> LocalTensor:
        """a / b (true division), broadcasting"""

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

    def sum(self, dim: int | None = ..., keepdim: bool = ...) -> LocalTensor:
        """sum (bool/int give int64)"""

    def prod(self, dim: int | None = ..., keepdim: bool = ...) -> LocalTensor:
        """product"""

    def mean(self, dim: int | None = ..., keepdim: bool = ...) -> LocalTensor:
        """arithmetic mean"""

    def max(self, dim: int | None = ..., keepdim: bool = ...) -> LocalTensor:
        """largest value (NaN wins)"""

    def min(self, dim: int | None = ..., keepdim: bool = ...) -> LocalTensor:
        """smallest value (NaN wins)"""

    def argmax(self, dim: int | None = ..., keepdim: bool = ...) -> LocalTensor:
        """index of the first max"""

    def argmin(self, dim: int | None = ..., keepdim: bool = ...) -> LocalTensor:
        """index of the first min"""

    def norm(self, p: float = ..., dim: int | None = ..., keepdim: bool = ...) -> LocalTensor:
        """p-norm (p may be inf)"""

    def var(self, dim: int | None = ..., keepdim: bool = ..., correction: int = ...) -> LocalTensor:
        """variance"""

    def std(self, dim: int | None = ..., keepdim: bool = ..., correction: int = ...) -> LocalTensor:
        """standard deviation"""

    def clamp(self, min: object | None = ..., max: object | None = ...) -> LocalTensor:
        """limit values to [min, max]"""

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

    def flatten(self) -> LocalTensor: ...

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

    def __iadd__(self, other: object | None) -> object: ...

    def __isub__(self, other: object | None) -> object: ...

    def __imul__(self, other: object | None) -> object: ...

    def __itruediv__(self, other: object | None) -> object: ...

    def __ipow__(self, other: object | None) -> object: ...

    def __neg__(self) -> LocalTensor: ...

    def __abs__(self) -> LocalTensor: ...

    def __pos__(self) -> object: ...

    def __hash__(self) -> int: ...

    @property
    def device(self) -> int: ...

    def item(self) -> object: ...

    def to(self, dtype: object) -> LocalTensor: ...

    def to_device(self, device: int) -> LocalTensor: ...

    def cpu(self) -> LocalTensor: ...

    def cuda(self, device: int = ...) -> LocalTensor: ...

    def clone(self) -> LocalTensor: ...

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

    def div(self, other: object) -> Tensor:
        """a / b (true division), broadcasting"""

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

    def sum(self, dim: int | None = ..., keepdim: bool = ...) -> Tensor:
        """sum (bool/int give int64)"""

    def prod(self, dim: int | None = ..., keepdim: bool = ...) -> Tensor:
        """product"""

    def mean(self, dim: int | None = ..., keepdim: bool = ...) -> Tensor:
        """arithmetic mean"""

    def max(self, dim: int | None = ..., keepdim: bool = ...) -> Tensor:
        """largest value (NaN wins)"""

    def min(self, dim: int | None = ..., keepdim: bool = ...) -> Tensor:
        """smallest value (NaN wins)"""

    def argmax(self, dim: int | None = ..., keepdim: bool = ...) -> Tensor:
        """index of the first max"""

    def argmin(self, dim: int | None = ..., keepdim: bool = ...) -> Tensor:
        """index of the first min"""

    def norm(self, p: float = ..., dim: int | None = ..., keepdim: bool = ...) -> Tensor:
        """p-norm (p may be inf)"""

    def var(self, dim: int | None = ..., keepdim: bool = ..., correction: int = ...) -> Tensor:
        """variance"""

    def std(self, dim: int | None = ..., keepdim: bool = ..., correction: int = ...) -> Tensor:
        """standard deviation"""

    def clamp(self, min: object | None = ..., max: object | None = ...) -> Tensor:
        """limit values to [min, max]"""

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

    def flatten(self) -> Tensor: ...

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

    def __iadd__(self, other: object | None) -> object: ...

    def __isub__(self, other: object | None) -> object: ...

    def __imul__(self, other: object | None) -> object: ...

    def __itruediv__(self, other: object | None) -> object: ...

    def __ipow__(self, other: object | None) -> object: ...

    def __neg__(self) -> Tensor: ...

    def __abs__(self) -> Tensor: ...

    def __pos__(self) -> object: ...

    def __hash__(self) -> int: ...

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

def empty(*shape, dtype: object = dtype.float32, node: int | None = ..., device: int | None = ...) -> Tensor:
    """
    An uninitialized tensor on the current node and device (or node=, device=).
    """

def zeros(*shape, dtype: object = dtype.float32, node: int | None = ..., device: int | None = ...) -> Tensor:
    """A tensor of zeros on the current node and device (or node=, device=)."""

def ones(*shape, dtype: object = dtype.float32, node: int | None = ..., device: int | None = ...) -> Tensor:
    """A tensor of ones on the current node and device (or node=, device=)."""

def full(size: object, fill_value: object, dtype: object = dtype.float32, node: int | None = ..., device: int | None = ...) -> Tensor: ...

def arange(start: object, end: object | None = ..., step: object = ..., dtype: object | None = ..., node: int | None = ..., device: int | None = ...) -> Tensor: ...

def linspace(start: float, end: float, steps: int, dtype: object = dtype.float32, node: int | None = ..., device: int | None = ...) -> Tensor: ...

def rand(*shape, generator: Generator | None = ..., dtype: object = dtype.float32, node: int | None = ..., device: int | None = ...) -> Tensor:
    """
    Uniform draws on [0, 1) (the same seed gives the same values on any node).
    """

def randn(*shape, generator: Generator | None = ..., dtype: object = dtype.float32, node: int | None = ..., device: int | None = ...) -> Tensor:
    """
    Standard normal draws (the same seed gives the same values on any node).
    """

def dist_send(data: object, node: int | None = ..., device: int | None = ...) -> Tensor:
    """
    Sync point: copies a LocalTensor, numpy array or any DLPack/buffer object to a node (default: the current one) and returns its handle.
    """

def _init_master_worker(workers: Sequence[str] | None = ..., listen: str | None = ..., num_workers: int = ..., connect_timeout: float | None = ..., sync_timeout: float | None = ..., heartbeat_timeout: float | None = ..., key_file: str = ..., insecure: bool = ...) -> None: ...

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

def memory_stats(node: int, device: int = ...) -> dict:
    """Sync point: memory in use on a node's CPU or device."""

def node_info(node: int) -> dict: ...

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
