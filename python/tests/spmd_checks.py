"""Run as N ranks (python -m dtr.exec -n 4 spmd_checks.py): every dtr.distributed call,
checked on every rank; prints "rank R ok" at the end."""

import numpy as np

import dtr
import dtr.distributed as dist
from dtr import local

dist.init_process_group("tcp")  # torch's name of dtr's own backend
rank, size = dist.get_rank(), dist.get_world_size()
assert dist.is_initialized() and dist.get_backend() == "tcp" and size == 4


def check(cond, what):
    if not cond:
        raise SystemExit(f"rank {rank}: {what}")


# point to point, blocking and not, with LocalTensors and numpy arrays
t = local.zeros(3)
if rank == 0:
    t += 1
    dist.send(t, dst=3)
    a = np.arange(3, dtype=np.float32)
    req = dist.isend(a, dst=1)
    req.wait()
    check(req.is_completed() and req.is_success(), "isend completed")
elif rank == 3:
    src = dist.recv(t, src=0)
    check(src == 0 and t.tolist() == [1, 1, 1], f"recv: {src} {t.tolist()}")
elif rank == 1:
    a = np.zeros(3, dtype=np.float32)
    req = dist.irecv(a)  # any source
    req.wait(timeout=30)
    check(a.tolist() == [0, 1, 2] and req.source_rank() == 0, f"irecv into numpy: {a}")

# collectives
t = local.full((2,), float(rank + 1))
dist.all_reduce(t, op=dist.ReduceOp.SUM)
check(t.tolist() == [10, 10], f"all_reduce sum {t.tolist()}")
t = local.full((2,), float(rank + 1))
dist.all_reduce(t, op=dist.reduce_op.MAX, group=0)  # the old tutorial's spelling
check(t.tolist() == [4, 4], "all_reduce max")
t = local.full((1,), float(rank))
dist.broadcast(t, src=2)
check(t.item() == 2, "broadcast")
t = local.full((1,), float(rank + 1))
dist.reduce(t, dst=1, op=dist.ReduceOp.PRODUCT)
check(t.item() == (24 if rank == 1 else rank + 1), "reduce")
outs = [local.zeros(2) for _ in range(size)]
dist.all_gather(outs, local.full((2,), float(rank)))
check([o[0].item() for o in outs] == [0, 1, 2, 3], "all_gather")
big = local.zeros(size * 2)
dist.all_gather_into_tensor(big, local.full((2,), float(rank)))
check(big.tolist() == [0, 0, 1, 1, 2, 2, 3, 3], "all_gather_into_tensor")
g = [local.zeros(1) for _ in range(size)] if rank == 0 else None
dist.gather(local.full((1,), float(rank * 10)), gather_list=g, dst=0)
if rank == 0:
    check([x.item() for x in g] == [0, 10, 20, 30], "gather")
out = local.zeros(1)
dist.scatter(out, scatter_list=[local.full((1,), float(i + 5)) for i in range(size)]
             if rank == 3 else None, src=3)
check(out.item() == rank + 5, "scatter")
out = local.zeros(1)
dist.reduce_scatter(out, [local.full((1,), float(i)) for i in range(size)])
check(out.item() == rank * size, "reduce_scatter")
out = local.zeros(1)
dist.reduce_scatter_tensor(out, local.arange(size).float())
check(out.item() == rank * size, "reduce_scatter_tensor")
work = dist.all_reduce(local.ones(1), async_op=True)
work.wait()
dist.barrier()

# a subgroup: ranks 1 and 3
sub = dist.new_group([1, 3])
t = local.full((1,), float(rank))
if rank in (1, 3):
    check(dist.get_world_size(sub) == 2 and dist.get_rank(sub) == (rank - 1) // 2, "subgroup")
    check(sub.host_path() == "", f"path before the first collective: {sub.host_path()!r}")
    dist.all_reduce(t, group=sub)
    check(t.item() == 4, "subgroup all_reduce")
    # every rank here is on this host: the same-host path (DTR_SAME_HOST=0 would say why not)
    check(sub.host_path() == "shared memory", f"subgroup path: {sub.host_path()!r}")

# a mismatch fails on every rank with a message naming it
try:
    dist.all_reduce(local.zeros(rank + 1))
    check(False, "mismatched all_reduce did not fail")
except dtr.Error as e:
    check("all_reduce" in str(e), f"mismatch message: {e}")

dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} ok", flush=True)
