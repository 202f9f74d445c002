"""The reduce/broadcast tutorial ("synchronising a variable across processes") with
dtr.distributed: every rank averages a random tensor with all_reduce, then takes rank 0's
with broadcast. Run: python -m dtr.exec -n 4 reduce_broadcast.py"""

import dtr
import dtr.distributed as dist


def reduce_tensor(tensor):
    rt = tensor.clone()
    dist.all_reduce(rt, op=dist.ReduceOp.SUM)
    rt /= dist.get_world_size()
    return rt


def broadcast_tensor(tensor, rank):
    rt = tensor.clone()  # rank: whose data is broadcast
    dist.broadcast(rt, src=rank)
    return rt


def main():
    dist.init_process_group("zmq")
    rank = dist.get_rank()
    t = dtr.local.rand(10, generator=dtr.Generator(rank))  # differs per rank
    dist.barrier()
    reduced = reduce_tensor(t)
    broadcasted = broadcast_tensor(t, 0)
    mean = sum(dtr.local.rand(10, generator=dtr.Generator(r)) for r in range(dist.get_world_size()))
    mean = mean / dist.get_world_size()
    ok = (reduced - mean).abs().max().item() < 1e-6
    print(f"rank {rank}: reduce_t[0] = {reduced[0].item():.6f} (the mean: {ok}), "
          f"broadcasted_t[0] = {broadcasted[0].item():.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
