"""Process groups for SPMD programs, with torch.distributed's names.

    import dtr, dtr.distributed as dist
    dist.init_process_group("zmq")               # env:// (dtr-exec sets RANK, WORLD_SIZE, ...)
    t = dtr.local.zeros(1)
    if dist.get_rank() == 0:
        t += 1
        dist.send(t, dst=3)
    elif dist.get_rank() == 3:
        dist.recv(t, src=0)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)

Tensors are dtr.LocalTensor or any host array with DLPack or the buffer protocol (numpy),
used in place without copies. Backends: "zmq" (dtr's own, over ZeroMQ; "tcp" is its torch
name), "gloo" and "mpi" where dtr was built with them, and "nccl" in a CUDA build. Ranks in
arguments are ranks of `group` (default: the world). Blocking calls release the GIL and can be
interrupted with Ctrl-C (KeyboardInterrupt; the operation itself runs on to its deadline).
"""

import datetime as _datetime

from . import _dtr

_pg = _dtr.pg

ReduceOp = _dtr.ReduceOp
reduce_op = ReduceOp  # the old torch name, as in the tutorials
ProcessGroup = _pg.ProcessGroup
Work = _pg.Work


class _World:
    """The default group (torch.distributed.group.WORLD)."""

    WORLD = None


group = _World

_backend = None


def is_available():
    return True


def is_backend_available(backend):
    """Whether `backend` ("zmq", "tcp", "gloo", "mpi", "nccl") is built into this dtr."""
    return _pg.backend_available(str(backend))


def is_gloo_available():
    return is_backend_available("gloo")


def is_mpi_available():
    return is_backend_available("mpi")


def is_nccl_available():
    return is_backend_available("nccl")


def is_initialized():
    return _pg.is_initialized()


def _seconds(timeout):
    if timeout is None:
        return 300.0
    if isinstance(timeout, _datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout)


def init_process_group(backend="zmq", init_method=None, timeout=None, world_size=-1, rank=-1,
                       store=None, group_name=""):
    """Joins the world group. init_method: "env://" (default: MASTER_ADDR, MASTER_PORT,
    RANK, WORLD_SIZE, or Slurm's / Open MPI's variables), "tcp://host:port" or
    "file:///path". timeout: seconds or a timedelta bounding every wait (default 300 s)."""
    global _backend
    if store is not None:
        raise _dtr.InvalidArgument("init_process_group: store= is not supported; use "
                                   "init_method (env://, tcp://host:port or file:///path)")
    name = str(backend).lower()
    _pg.init_process_group(name, init_method or "env://", world_size, rank, group_name,
                           _seconds(timeout))
    _backend = name


def destroy_process_group(group=None):
    global _backend
    if group is not None and group is not _World.WORLD:
        raise _dtr.InvalidArgument("destroy_process_group: only the world group can be destroyed")
    _pg.destroy_process_group()
    _backend = None


def _group(g):
    # None, group.WORLD and the old tutorials' group=0 mean the world.
    if g is None or g is _World.WORLD:
        return None
    if isinstance(g, int) and not isinstance(g, bool) and g == 0:
        return None
    if not isinstance(g, ProcessGroup):
        raise TypeError(f"group must be a ProcessGroup from new_group(), got {type(g).__name__}")
    return g


def get_rank(group=None):
    g = _group(group)
    return _pg.get_rank() if g is None else g.rank()


def get_world_size(group=None):
    g = _group(group)
    return _pg.get_world_size() if g is None else g.size()


def get_backend(group=None):
    g = _group(group)
    return g.backend if g is not None else _pg.world_group().backend


def new_group(ranks=None, timeout=None, backend=None):
    """A subgroup of world ranks; every process must call it, in the same order."""
    if ranks is None:
        ranks = list(range(get_world_size()))
    return _pg.new_group(sorted(int(r) for r in ranks))


def send(tensor, dst, group=None, tag=0):
    """Sends `tensor` to rank `dst`; returns when it may be written again."""
    isend(tensor, dst, group, tag).wait()


def recv(tensor, src=None, group=None, tag=0):
    """Receives into `tensor` from `src` (None: any rank); returns the sender's rank."""
    work = irecv(tensor, src, group, tag)
    work.wait()
    return work.source_rank()


def isend(tensor, dst, group=None, tag=0):
    return _pg.isend(tensor, dst, tag, _group(group))


def irecv(tensor, src=None, group=None, tag=0):
    return _pg.irecv(tensor, -1 if src is None else src, tag, _group(group))


def broadcast(tensor, src, group=None, async_op=False):
    return _pg.broadcast(tensor, src, _group(group), async_op)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    return _pg.all_reduce(tensor, op, _group(group), async_op)


def reduce(tensor, dst, op=ReduceOp.SUM, group=None, async_op=False):
    return _pg.reduce(tensor, dst, op, _group(group), async_op)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    return _pg.all_gather(tensor_list, tensor, _group(group), async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    return _pg.all_gather_into_tensor(output_tensor, input_tensor, _group(group), async_op)


def gather(tensor, gather_list=None, dst=0, group=None, async_op=False):
    return _pg.gather(tensor, gather_list, dst, _group(group), async_op)


def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False):
    return _pg.scatter(tensor, scatter_list, src, _group(group), async_op)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    return _pg.reduce_scatter(output, input_list, op, _group(group), async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    return _pg.reduce_scatter_tensor(output, input, op, _group(group), async_op)


def barrier(group=None, async_op=False):
    return _pg.barrier(_group(group), async_op)
