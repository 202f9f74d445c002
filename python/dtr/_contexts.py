"""The ``with`` blocks: node, device and stream scopes (per thread, as torch.cuda's)."""

from . import _dtr


class node:
    """``with dtr.node(k):`` tensors made inside live on node k; restores the previous
    current node after."""

    def __init__(self, index):
        self.index = index
        self._previous = []

    def __enter__(self):
        self._previous.append(_dtr.current_node())
        _dtr.set_node(self.index)
        return self

    def __exit__(self, *exc):
        _dtr.set_node(self._previous.pop())
        return False


class device:
    """``with dtr.device(d):`` tensors made inside live on CUDA device d of their node
    (-1: the node's CPU)."""

    def __init__(self, index):
        self.index = index
        self._previous = []

    def __enter__(self):
        self._previous.append(_dtr.current_device())
        _dtr.set_device(self.index)
        return self

    def __exit__(self, *exc):
        _dtr.set_device(self._previous.pop())
        return False


class stream:
    """``with dtr.stream(s):`` commands of s's node go to s, and s's node and device are
    the current ones; all three are restored after (as dtr::stream_guard)."""

    def __init__(self, s):
        self.stream = s
        self._previous = []

    def __enter__(self):
        s = self.stream
        self._previous.append(
            (_dtr.current_stream(s.node), _dtr.current_node(), _dtr.current_device()))
        _dtr.set_stream(s)
        _dtr.set_node(s.node)
        _dtr.set_device(s.device)
        return s

    def __exit__(self, *exc):
        previous_stream, previous_node, previous_device = self._previous.pop()
        _dtr.set_stream(previous_stream)
        _dtr.set_node(previous_node)
        _dtr.set_device(previous_device)
        return False
