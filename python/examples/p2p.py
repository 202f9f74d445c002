"""The point-to-point tutorial (torch.distributed's "Writing distributed applications"),
with dtr.distributed in place of torch.distributed: rank 0 sends a tensor to rank 3,
blocking, then without blocking (isend/irecv and wait()).
Run: python -m dtr.exec -n 4 p2p.py"""

import dtr
import dtr.distributed as dist


def run_blocking(rank, size):
    """Blocking point-to-point communication."""
    tensor = dtr.local.zeros(1)
    if rank == 0:
        tensor += 1
        dist.send(tensor=tensor, dst=3)  # send the tensor to process 3
    elif rank == 3:
        dist.recv(tensor=tensor, src=0)  # receive it from process 0
    print("Rank ", rank, " has data ", tensor[0].item())


def run_nonblocking(rank, size):
    """Non-blocking point-to-point communication."""
    tensor = dtr.local.zeros(1)
    req = None
    if rank == 0:
        tensor += 2
        req = dist.isend(tensor=tensor, dst=3)
        print("Rank 0 started sending")
    elif rank == 3:
        req = dist.irecv(tensor=tensor, src=0)
        print("Rank 3 started receiving")
    if req is not None:
        req.wait()
    print("Rank ", rank, " has data ", tensor[0].item())


if __name__ == "__main__":
    dist.init_process_group("gloo")  # env:// from dtr-exec
    run_blocking(dist.get_rank(), dist.get_world_size())
    dist.barrier()
    run_nonblocking(dist.get_rank(), dist.get_world_size())
    dist.destroy_process_group()
