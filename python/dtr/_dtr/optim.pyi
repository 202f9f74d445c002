"""Optimizers (dtr::optim)."""



class SGD:
    """
    Stochastic gradient descent with momentum (torch.optim.SGD) over dtr.Tensor or dtr.LocalTensor parameters.
    """

    def __init__(self, params: object, lr: float = ..., momentum: float = ..., dampening: float = ..., weight_decay: float = ..., nesterov: bool = ...) -> None: ...

    def step(self) -> None:
        """Updates every parameter that has a gradient, in place."""

    def zero_grad(self, set_to_none: bool = ...) -> None:
        """
        Clears the parameters' gradients (set_to_none), or zeroes them in place.
        """

    @property
    def params(self) -> list:
        """The parameters, in the order given."""

class Adam:
    """Adam (torch.optim.Adam, without amsgrad)."""

    def __init__(self, params: object, lr: float = ..., betas: tuple[float, float] = ..., eps: float = ..., weight_decay: float = ...) -> None: ...

    def step(self) -> None:
        """Updates every parameter that has a gradient, in place."""

    def zero_grad(self, set_to_none: bool = ...) -> None:
        """
        Clears the parameters' gradients (set_to_none), or zeroes them in place.
        """

    @property
    def params(self) -> list:
        """The parameters, in the order given."""
