"""Tensors in this process (dtr::local)."""

from collections.abc import Sequence

import dtr._dtr


def empty(*shape, dtype: object = dtr._dtr.dtype.float32, requires_grad: bool = ...) -> dtr._dtr.LocalTensor: ...

def zeros(*shape, dtype: object = dtr._dtr.dtype.float32, requires_grad: bool = ...) -> dtr._dtr.LocalTensor: ...

def ones(*shape, dtype: object = dtr._dtr.dtype.float32, requires_grad: bool = ...) -> dtr._dtr.LocalTensor: ...

def full(size: object, fill_value: object, dtype: object = dtr._dtr.dtype.float32, requires_grad: bool = ...) -> dtr._dtr.LocalTensor: ...

def arange(start: object, end: object | None = ..., step: object = ..., dtype: object | None = ...) -> dtr._dtr.LocalTensor: ...

def linspace(start: float, end: float, steps: int, dtype: object = dtr._dtr.dtype.float32, requires_grad: bool = ...) -> dtr._dtr.LocalTensor: ...

def rand(*shape, generator: dtr._dtr.Generator | None = ..., dtype: object = dtr._dtr.dtype.float32, requires_grad: bool = ...) -> dtr._dtr.LocalTensor: ...

def randn(*shape, generator: dtr._dtr.Generator | None = ..., dtype: object = dtr._dtr.dtype.float32, requires_grad: bool = ...) -> dtr._dtr.LocalTensor: ...

def randperm(n: int, *, generator: dtr._dtr.Generator | None = ..., dtype: object | None = ...) -> dtr._dtr.LocalTensor:
    """
    A random permutation of 0 .. n-1 (int64): the order of n uniform draws.
    """

def eye(n: int, m: int | None = ..., *, dtype: object = dtr._dtr.dtype.float32, requires_grad: bool = ...) -> dtr._dtr.LocalTensor:
    """The n x m identity (m = n by default)."""

def randint(*args, size: Sequence[int] | None = None, generator: dtr._dtr.Generator | None = None, dtype: object | None = None) -> dtr._dtr.LocalTensor:
    """
    Integers uniform on [low, high): randint(high, size) or randint(low, high, size).
    """

def from_dlpack(array: object) -> dtr._dtr.LocalTensor:
    """
    A LocalTensor sharing the memory of any object with __dlpack__ or the buffer protocol (numpy, torch CPU tensors); no copy.
    """

def memory_stats() -> dict:
    """Host memory held by this process's local tensors."""

def cat(tensors: Sequence[dtr._dtr.LocalTensor], dim: int = 0) -> dtr._dtr.LocalTensor:
    """
    cat(tensors, dim=0): join tensors along an existing dim (dtypes promote)
    """

def stack(tensors: Sequence[dtr._dtr.LocalTensor], dim: int = 0) -> dtr._dtr.LocalTensor:
    """
    stack(tensors, dim=0): join same-shaped tensors along a new dim (dtypes promote)
    """

def where(condition: dtr._dtr.LocalTensor, a: dtr._dtr.LocalTensor, b: dtr._dtr.LocalTensor) -> dtr._dtr.LocalTensor:
    """
    where(condition, a, b): a where condition (bool) is true, else b; broadcasting
    """

def masked_fill(x: dtr._dtr.LocalTensor, mask: dtr._dtr.LocalTensor, value: float | int) -> dtr._dtr.LocalTensor:
    """
    masked_fill(x, mask, value): x with value where mask (bool, broadcast to x) is true
    """

def index_select(x: dtr._dtr.LocalTensor, dim: int, index: dtr._dtr.LocalTensor) -> dtr._dtr.LocalTensor:
    """
    index_select(x, dim, index): the entries of dim at the positions of a 1-D integer index
    """

def gather(x: dtr._dtr.LocalTensor, dim: int, index: dtr._dtr.LocalTensor) -> dtr._dtr.LocalTensor:
    """
    gather(x, dim, index): out[i][j] = x[index[i][j]][j] (dim 0); index as many dims as x
    """

def scatter_add(x: dtr._dtr.LocalTensor, dim: int, index: dtr._dtr.LocalTensor, src: dtr._dtr.LocalTensor) -> dtr._dtr.LocalTensor:
    """
    scatter_add(x, dim, index, src): x with src added at index along dim (out[index[i][j]][j] += src[i][j], dim 0)
    """

def cumsum(x: dtr._dtr.LocalTensor, dim: int) -> dtr._dtr.LocalTensor:
    """cumsum(x, dim): running sum along dim"""

def one_hot(x: dtr._dtr.LocalTensor, num_classes: int) -> dtr._dtr.LocalTensor:
    """
    one_hot(x, num_classes): int64 one-hot rows (a new last dim of num_classes) of an integer tensor
    """

def topk(x: dtr._dtr.LocalTensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> dtr._dtr.LocalTensor:
    """
    topk(x, k, dim=-1, largest=true, sorted=true): the k largest (smallest) values along dim, in order; ties: lower index first
    """

def topk_indices(x: dtr._dtr.LocalTensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> dtr._dtr.LocalTensor:
    """
    topk_indices(x, k, dim=-1, largest=true, sorted=true): the positions along dim of topk's values
    """

def tril(x: dtr._dtr.LocalTensor, diagonal: int = 0) -> dtr._dtr.LocalTensor:
    """
    tril(x, diagonal=0): the matrices of the last two dims with the entries above the diagonal zeroed
    """

def triu(x: dtr._dtr.LocalTensor, diagonal: int = 0) -> dtr._dtr.LocalTensor:
    """
    triu(x, diagonal=0): the matrices of the last two dims with the entries below the diagonal zeroed
    """

def flip(x: dtr._dtr.LocalTensor, dims: int) -> dtr._dtr.LocalTensor:
    """
    flip(x, dims): a copy with the elements in reverse order along each of dims
    """

def constant_pad_nd(x: dtr._dtr.LocalTensor, pad: int, value: float | int = 0) -> dtr._dtr.LocalTensor:
    """
    constant_pad_nd(x, pad, value=0): x with pad[2i] and pad[2i+1] elements of value before and after its i-th last dim (torch's pad; negative pads crop)
    """

def sort_indices(x: dtr._dtr.LocalTensor, dim: int = -1, descending: bool = False) -> dtr._dtr.LocalTensor:
    """
    sort_indices(x, dim=-1, descending=false): the positions along dim that sort x, stably (NaN last; first when descending)
    """

def scatter(x: dtr._dtr.LocalTensor, dim: int, index: dtr._dtr.LocalTensor, src: dtr._dtr.LocalTensor) -> dtr._dtr.LocalTensor:
    """
    scatter(x, dim, index, src): x with src written at index along dim (out[index[i][j]][j] = src[i][j], dim 0; of duplicate positions one write wins)
    """

def scatter_reduce(x: dtr._dtr.LocalTensor, dim: int, index: dtr._dtr.LocalTensor, src: dtr._dtr.LocalTensor, reduce: str | int, include_self: bool = True) -> dtr._dtr.LocalTensor:
    """
    scatter_reduce(x, dim, index, src, reduce, include_self=true): x with src combined at index along dim by reduce (0 sum, 1 prod, 2 mean, 3 amax, 4 amin); include_self: x's values take part (else the positions written start empty)
    """

def linear(x: dtr._dtr.LocalTensor, weight: dtr._dtr.LocalTensor, bias: dtr._dtr.LocalTensor | None = None) -> dtr._dtr.LocalTensor:
    """
    linear(x, weight, bias?): x @ weight.t() + bias; weight (out, in), x (..., in)
    """

def conv2d(x: dtr._dtr.LocalTensor, weight: dtr._dtr.LocalTensor, bias: dtr._dtr.LocalTensor | None = None, stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, groups: int = 1) -> dtr._dtr.LocalTensor:
    """
    conv2d(x, weight, bias?, stride=1, padding=0, dilation=1, groups=1): 2-D convolution (cross-correlation); weight (out, in/groups, kh, kw)
    """

def conv2d_input_grad(grad: dtr._dtr.LocalTensor, weight: dtr._dtr.LocalTensor, input_size: int | tuple[int, int], stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, groups: int = 1) -> dtr._dtr.LocalTensor:
    """
    conv2d_input_grad(grad, weight, input_size, stride=1, padding=0, dilation=1, groups=1): conv2d's gradient for its input of spatial size input_size
    """

def conv2d_weight_grad(grad: dtr._dtr.LocalTensor, x: dtr._dtr.LocalTensor, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, groups: int = 1) -> dtr._dtr.LocalTensor:
    """
    conv2d_weight_grad(grad, x, kernel_size, stride=1, padding=0, dilation=1, groups=1): conv2d's gradient for its weight (its bias's: grad.sum over dims 0, 2, 3)
    """

def max_pool2d(x: dtr._dtr.LocalTensor, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, ceil_mode: bool = False) -> dtr._dtr.LocalTensor:
    """
    max_pool2d(x, kernel_size, stride?, padding=0, dilation=1, ceil_mode=false): 2-D max pooling (NaN wins; stride: kernel_size when left out)
    """

def max_pool2d_indices(x: dtr._dtr.LocalTensor, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0, dilation: int | tuple[int, int] = 1, ceil_mode: bool = False) -> dtr._dtr.LocalTensor:
    """
    max_pool2d_indices(x, kernel_size, stride?, padding=0, dilation=1, ceil_mode=false): positions h * W + w in x's plane of max_pool2d's values
    """

def max_pool2d_backward(grad: dtr._dtr.LocalTensor, indices: dtr._dtr.LocalTensor, input_size: int | tuple[int, int]) -> dtr._dtr.LocalTensor:
    """
    max_pool2d_backward(grad, indices, input_size): max_pool2d's input gradient: grad summed at max_pool2d_indices
    """

def avg_pool2d(x: dtr._dtr.LocalTensor, kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0, ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: float | int | None = None) -> dtr._dtr.LocalTensor:
    """
    avg_pool2d(x, kernel_size, stride?, padding=0, ceil_mode=false, count_include_pad=true, divisor_override?): 2-D average pooling
    """

def avg_pool2d_backward(grad: dtr._dtr.LocalTensor, input_size: int | tuple[int, int], kernel_size: int | tuple[int, int], stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0, ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: float | int | None = None) -> dtr._dtr.LocalTensor:
    """
    avg_pool2d_backward(grad, input_size, kernel_size, stride?, padding=0, ceil_mode=false, count_include_pad=true, divisor_override?): avg_pool2d's input gradient
    """

def softmax(x: dtr._dtr.LocalTensor, dim: int) -> dtr._dtr.LocalTensor:
    """softmax(x, dim): exp(x) / sum(exp(x)) along dim"""

def log_softmax(x: dtr._dtr.LocalTensor, dim: int) -> dtr._dtr.LocalTensor:
    """log_softmax(x, dim): log(softmax(x)) along dim"""

def softmax_backward(grad: dtr._dtr.LocalTensor, output: dtr._dtr.LocalTensor, dim: int) -> dtr._dtr.LocalTensor:
    """
    softmax_backward(grad, output, dim): softmax's input gradient from its output: output * (grad - sum(grad * output))
    """

def log_softmax_backward(grad: dtr._dtr.LocalTensor, output: dtr._dtr.LocalTensor, dim: int) -> dtr._dtr.LocalTensor:
    """
    log_softmax_backward(grad, output, dim): log_softmax's input gradient from its output: grad - exp(output) * sum(grad)
    """

def nll_loss(x: dtr._dtr.LocalTensor, target: dtr._dtr.LocalTensor, weight: dtr._dtr.LocalTensor | None = None, reduction: str = 'mean', ignore_index: int = -100) -> dtr._dtr.LocalTensor:
    """
    nll_loss(x, target, weight?, reduction=mean, ignore_index=-100): negative log likelihood of log-probabilities x (N, C) or (C) at int64 targets
    """

def nll_loss_backward(grad: dtr._dtr.LocalTensor, x: dtr._dtr.LocalTensor, target: dtr._dtr.LocalTensor, weight: dtr._dtr.LocalTensor | None = None, reduction: str = 'mean', ignore_index: int = -100) -> dtr._dtr.LocalTensor:
    """
    nll_loss_backward(grad, x, target, weight?, reduction=mean, ignore_index=-100): nll_loss's gradient for x
    """

def dropout(x: dtr._dtr.LocalTensor, p: float | int = 0.5, training: bool = True, generator: dtr._dtr.Generator | None = None) -> dtr._dtr.LocalTensor:
    """
    dropout(x, p=0.5, training=true, generator): zero each element with probability p, scale the rest by 1/(1-p)
    """

def dropout2d(x: dtr._dtr.LocalTensor, p: float | int = 0.5, training: bool = True, generator: dtr._dtr.Generator | None = None) -> dtr._dtr.LocalTensor:
    """
    dropout2d(x, p=0.5, training=true, generator): zero each channel (all but the last two dims) with probability p, scale by 1/(1-p)
    """

def threshold_backward(grad: dtr._dtr.LocalTensor, x: dtr._dtr.LocalTensor, threshold: float | int = 0) -> dtr._dtr.LocalTensor:
    """
    threshold_backward(grad, x, threshold=0): grad where x > threshold, else 0 (relu's gradient at threshold 0)
    """

def layer_norm(x: dtr._dtr.LocalTensor, weight: dtr._dtr.LocalTensor, bias: dtr._dtr.LocalTensor, eps: float | int = 1e-05) -> dtr._dtr.LocalTensor:
    """
    layer_norm(x, weight, bias, eps=1e-05): (x - mean) / sqrt(var + eps) * weight + bias over x's last weight.dim() dims
    """

def layer_norm_backward(grad: dtr._dtr.LocalTensor, x: dtr._dtr.LocalTensor, weight: dtr._dtr.LocalTensor, eps: float | int = 1e-05) -> dtr._dtr.LocalTensor:
    """
    layer_norm_backward(grad, x, weight, eps=1e-05): layer_norm's input gradient (the statistics recomputed from x)
    """

def layer_norm_weight_grad(grad: dtr._dtr.LocalTensor, x: dtr._dtr.LocalTensor, weight: dtr._dtr.LocalTensor, eps: float | int = 1e-05) -> dtr._dtr.LocalTensor:
    """
    layer_norm_weight_grad(grad, x, weight, eps=1e-05): layer_norm's weight gradient: grad * (x - mean) / sqrt(var + eps) summed over the rows
    """

def embedding(input: dtr._dtr.LocalTensor, weight: dtr._dtr.LocalTensor, padding_idx: int | None = None) -> dtr._dtr.LocalTensor:
    """
    the rows of weight at the integer indices input (torch.nn.functional.embedding)
    """

def embedding_dense_backward(grad_output: dtr._dtr.LocalTensor, indices: dtr._dtr.LocalTensor, num_weights: int, padding_idx: int | None = None, scale_grad_by_freq: bool = False) -> dtr._dtr.LocalTensor:
    """the gradient of embedding's weight: grad rows added up per index"""

def slice_scatter(input: dtr._dtr.LocalTensor, src: dtr._dtr.LocalTensor, dim: int = 0, start: int | None = None, end: int | None = None, step: int = 1) -> dtr._dtr.LocalTensor:
    """
    input with src written at the slice start:end:step of dim (a new tensor)
    """

def select_scatter(input: dtr._dtr.LocalTensor, src: dtr._dtr.LocalTensor, dim: int, index: int) -> dtr._dtr.LocalTensor:
    """input with src written at index of dim (a new tensor)"""

def addmm(input: dtr._dtr.LocalTensor, mat1: dtr._dtr.LocalTensor, mat2: dtr._dtr.LocalTensor, *, beta: float | int = 1, alpha: float | int = 1) -> dtr._dtr.LocalTensor:
    """beta * input + alpha * (mat1 @ mat2)"""

def masked_select(input: dtr._dtr.LocalTensor, mask: dtr._dtr.LocalTensor) -> dtr._dtr.LocalTensor:
    """sync point: the elements of input where mask (bool) is true, 1-D"""

def logsumexp(input: dtr._dtr.LocalTensor, dim: int | Sequence[int], keepdim: bool = False) -> dtr._dtr.LocalTensor:
    """log(sum(exp(input))) over dim, stably"""

def var_mean(input: dtr._dtr.LocalTensor, dim: int | Sequence[int] | None = None, *, correction: int = 1, keepdim: bool = False) -> tuple[dtr._dtr.LocalTensor, dtr._dtr.LocalTensor]:
    """(variance, mean) over dim (None: every dim)"""

def amax(input: dtr._dtr.LocalTensor, dim: int | Sequence[int] = (), keepdim: bool = False) -> dtr._dtr.LocalTensor:
    """the largest value over dim"""

def amin(input: dtr._dtr.LocalTensor, dim: int | Sequence[int] = (), keepdim: bool = False) -> dtr._dtr.LocalTensor:
    """the smallest value over dim"""

def index_add(input: dtr._dtr.LocalTensor, dim: int, index: dtr._dtr.LocalTensor, source: dtr._dtr.LocalTensor, *, alpha: float | int = 1) -> dtr._dtr.LocalTensor:
    """input with alpha * source added at the positions index of dim"""

def bernoulli(input: dtr._dtr.LocalTensor, *, generator: dtr._dtr.Generator | None = None) -> dtr._dtr.LocalTensor:
    """1 with probability input (per element), else 0"""

def scaled_dot_product_attention(query: dtr._dtr.LocalTensor, key: dtr._dtr.LocalTensor, value: dtr._dtr.LocalTensor, attn_mask: dtr._dtr.LocalTensor | None = None, dropout_p: float = 0.0, is_causal: bool = False, *, scale: float | None = None, generator: dtr._dtr.Generator | None = None) -> dtr._dtr.LocalTensor:
    """softmax(q k^T * scale + mask) v, the math form (is_causal: j <= i)"""

def nll_loss_nd(input: dtr._dtr.LocalTensor, target: dtr._dtr.LocalTensor, weight: dtr._dtr.LocalTensor | None = None, ignore_index: int = -100, reduction: str = 'mean') -> dtr._dtr.LocalTensor:
    """nll_loss of (N, C), (C) or (N, C, d1, ...) log-probabilities"""

def cross_entropy(input: dtr._dtr.LocalTensor, target: dtr._dtr.LocalTensor, weight: dtr._dtr.LocalTensor | None = None, ignore_index: int = -100, reduction: str = 'mean', label_smoothing: float = 0.0) -> dtr._dtr.LocalTensor:
    """
    log_softmax over the class dim, then the loss against class indices or probabilities
    """

def pad(input: dtr._dtr.LocalTensor, pad: Sequence[int], mode: str = 'constant', value: float | int = 0) -> dtr._dtr.LocalTensor:
    """
    input padded by (before, after) pairs for the last dims, the last dim's first; mode 'constant', 'reflect', 'replicate' or 'circular'
    """

def adaptive_avg_pool(input: dtr._dtr.LocalTensor, output_size: Sequence[int]) -> dtr._dtr.LocalTensor:
    """adaptive average pooling of the last len(output_size) (1 to 3) dims"""

def adaptive_avg_pool_backward(grad_output: dtr._dtr.LocalTensor, input: dtr._dtr.LocalTensor) -> dtr._dtr.LocalTensor:
    """
    the gradient of adaptive_avg_pool: each bin's gradient spread over its inputs
    """

def interpolate(input: dtr._dtr.LocalTensor, size: Sequence[int], mode: str, align_corners: bool = False, scales: Sequence[float] = []) -> dtr._dtr.LocalTensor:
    """
    input resized over its last len(size) dims (mode nearest, nearest-exact, linear, area)
    """

def group_norm(input: dtr._dtr.LocalTensor, num_groups: int, weight: dtr._dtr.LocalTensor | None = None, bias: dtr._dtr.LocalTensor | None = None, eps: float = 1e-05) -> dtr._dtr.LocalTensor:
    """
    each group of channels of each sample normalized, then * weight + bias per channel
    """

def group_norm_backward(grad_output: dtr._dtr.LocalTensor, input: dtr._dtr.LocalTensor, num_groups: int, weight: dtr._dtr.LocalTensor | None = None, eps: float = 1e-05) -> tuple[dtr._dtr.LocalTensor, dtr._dtr.LocalTensor, dtr._dtr.LocalTensor]:
    """
    (grad_input, grad_weight, grad_bias) of group_norm, the statistics recomputed
    """

def batch_norm(input: dtr._dtr.LocalTensor, running_mean: dtr._dtr.LocalTensor | None, running_var: dtr._dtr.LocalTensor | None, weight: dtr._dtr.LocalTensor | None = None, bias: dtr._dtr.LocalTensor | None = None, training: bool = False, momentum: float = 0.1, eps: float = 1e-05) -> dtr._dtr.LocalTensor:
    """
    per-channel normalization by the batch's statistics (training; the running ones updated in place) or by the running ones
    """
