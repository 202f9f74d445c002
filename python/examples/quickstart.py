"""The master-worker example of the proposal, in Python: tensors on two workers, driven
from here. Run: python3 quickstart.py (two local workers), or with DTR_WORKERS set, or
python -m dtr.exec --workers 2 quickstart.py."""

import numpy as np

import dtr

dtr.init_master_worker()
x = dtr.FloatTensor(20, 20).fill_(4)
y = dtr.dist_send(np.ones((20, 20), dtype=np.float32) / 2)  # master -> node 0
z = x + y  # returns at once
print("z.get_node(), z.get_device() ==", z.get_node(), z.get_device())
with dtr.node(1):
    a = dtr.FloatTensor(10).fill_(1)
print("a.get_node() ==", a.get_node())
print("z.sum() =", z.sum().item())  # sync point: 400 * 4.5
b = z[0, :10].to(1) + a  # copied worker to worker, added on node 1
print("b =", b.tolist())
arr = z.to_local().numpy()
print("arr:", arr.shape, arr.dtype, float(arr.mean()))
dtr.shutdown_master_worker()
