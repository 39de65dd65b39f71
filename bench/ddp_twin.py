#!/usr/bin/python3
"""The PyTorch DistributedDataParallel twin of one hogstream machine, for bench/scaleout.sh.

One process per machine (gloo over TCP; MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK from the
environment, as torchrun sets them), one thread, one of our recipes (configs/):

--net=lenet: Caffe's LeNet on Fashion-MNIST: conv 20x5x5, max pool 2, conv 50x5x5, max pool 2,
  ip 500, ReLU, ip 10, softmax loss; pixels x 1/256; Caffe's xavier weights
  (U(+-sqrt(3/fan_in))), zero biases; SGD momentum 0.9, weight decay 5e-4, "inv" schedule
  (gamma 1e-4, power 0.75) from base_lr 0.01, batch 64 per machine.
--net=cifar: cifar10_quick on CIFAR-10 (data/cifar10/bin/, from scripts/cifar10.sh): conv
  32x5x5 pad 2, max pool 3/2, ReLU, conv 32x5x5 pad 2, ReLU, ave pool 3/2, conv 64x5x5 pad 2,
  ReLU, ave pool 3/2, ip 64, ip 10 (pools round up, as Caffe's do); the training set's
  per-pixel mean subtracted; Gaussian weights (std 1e-4, 0.01, 0.01, 0.1, 0.1), zero biases;
  SGD momentum 0.9, weight decay 0.004, base_lr 0.001 and a tenth of it from global iteration
  4 000 (configs/cifar10/quick_5k_solver.prototxt), batch 100 per machine.

Biases learn at twice the rate in both. Each rank reads its own contiguous partition of the
training set in file order.

Scaling, as a DDP user does it: gradients are averaged over the machines and the base rate is
multiplied by WORLD_SIZE (the linear scaling rule; --lr-mult half, sqrt or one: by
max(1, WORLD_SIZE/2), sqrt(WORLD_SIZE) or 1), ramped up linearly from base_lr over --warmup
global iterations. The global iteration counts images / batch, as hogstream's does (steps x
WORLD_SIZE), so the schedule, the test interval (every 500) and --iterations mean the same in
both. --seed picks the initial weights (torch.manual_seed; the same on every rank).

--post-local H: PyTorch's post-local SGD instead (the loosely synchronous peer): plain DDP
through the warm-up (ceil(--warmup / WORLD_SIZE) steps, at least one), then each machine steps
on its own gradients (DDP's post_localSGD_hook, no gradient all-reduce) and a
PeriodicModelAverager averages the parameters over the machines after the first local step and
every H local steps from there; momentum buffers stay local. Rank 0 tests and snapshots its own
model.

Rank 0 tests on the whole 10 000-image test set every --test-interval global iterations (0:
only at the end) and prints Caffe-format lines with glog timestamps, which bench/log_times.sh
reads ("Test net output #0: accuracy = ..."). --snapshot-every K --snapshot-dir D: rank 0 also
saves the net's state_dict as D/iter_<global iteration>.pt at the same kind of steps every K
global iterations and at the end, without testing; --score D (no process group, no
environment) then scores every D/iter_*.pt on the whole test set, one "<global iteration>
<accuracy>" line each on stdout ("nan" where the weights are not finite), outside the job.
"""
import argparse
import datetime
import glob
import gzip
import os
import struct
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook as post_local
import torch.distributed.algorithms.model_averaging.averagers as averagers
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def log(msg):
    now = datetime.datetime.now()
    print(f"I{now:%m%d %H:%M:%S.%f} {os.getpid()} ddp_twin.py] {msg}", flush=True)


def cifar(path):
    """A CIFAR-10 binary batch: (N x 3 x 32 x 32 uint8, N labels)."""
    raw = np.fromfile(path, np.uint8).reshape(-1, 1 + 3 * 32 * 32)
    return raw[:, 1:].reshape(-1, 3, 32, 32), raw[:, 0].astype(np.int64)


def idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, n = struct.unpack(">II", raw[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", raw[8:16])
        return np.frombuffer(raw, np.uint8, offset=16).reshape(n, 1, rows, cols)
    return np.frombuffer(raw, np.uint8, offset=8).astype(np.int64)


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5)
        self.conv2 = nn.Conv2d(20, 50, 5)
        self.ip1 = nn.Linear(800, 500)
        self.ip2 = nn.Linear(500, 10)
        for m in (self.conv1, self.conv2, self.ip1, self.ip2):
            fan_in = m.weight[0].numel()
            bound = (3.0 / fan_in) ** 0.5
            nn.init.uniform_(m.weight, -bound, bound)
            nn.init.zeros_(m.bias)

    def forward(self, x):
        x = F.max_pool2d(self.conv1(x), 2)
        x = F.max_pool2d(self.conv2(x), 2)
        x = F.relu(self.ip1(x.flatten(1)))
        return self.ip2(x)


class CifarQuick(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 32, 5, padding=2)
        self.conv3 = nn.Conv2d(32, 64, 5, padding=2)
        self.ip1 = nn.Linear(64 * 4 * 4, 64)
        self.ip2 = nn.Linear(64, 10)
        for m, std in ((self.conv1, 1e-4), (self.conv2, 0.01), (self.conv3, 0.01), (self.ip1, 0.1),
                       (self.ip2, 0.1)):
            nn.init.normal_(m.weight, 0.0, std)
            nn.init.zeros_(m.bias)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 3, 2, ceil_mode=True))
        x = F.avg_pool2d(F.relu(self.conv2(x)), 3, 2, ceil_mode=True)
        x = F.avg_pool2d(F.relu(self.conv3(x)), 3, 2, ceil_mode=True)
        return self.ip2(self.ip1(x.flatten(1)))


def load(net, with_test):
    """(model, train x, train y, test x, test y, batch, base_lr, weight decay, lr(it)); the test
    set only `with_test` (rank 0 tests), else None."""
    if net == "lenet":
        train_x = idx(f"{DATA}/train-images-idx3-ubyte.gz").astype(np.float32) / 256.0
        train_y = idx(f"{DATA}/train-labels-idx1-ubyte.gz")
        test_x = idx(f"{DATA}/t10k-images-idx3-ubyte.gz").astype(np.float32) / 256.0 if with_test else None
        test_y = idx(f"{DATA}/t10k-labels-idx1-ubyte.gz") if with_test else None
        return LeNet(), train_x, train_y, test_x, test_y, 64, 0.01, 5e-4, lambda it: (1 + 1e-4 * it) ** -0.75
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "cifar10", "bin")
    if not os.path.exists(f"{root}/test_batch.bin"):
        sys.exit(f"ddp_twin.py: no CIFAR-10 batches in {root}: run scripts/cifar10.sh")
    parts = [cifar(f"{root}/data_batch_{i}.bin") for i in range(1, 6)]
    train_x = np.concatenate([p[0] for p in parts]).astype(np.float32)
    train_y = np.concatenate([p[1] for p in parts])
    mean = train_x.mean(axis=0)
    test_x, test_y = cifar(f"{root}/test_batch.bin") if with_test else (None, None)
    if with_test:
        test_x = test_x.astype(np.float32) - mean
    return (CifarQuick(), train_x - mean, train_y, test_x, test_y, 100, 0.001, 0.004,
            lambda it: 1.0 if it < 4000 else 0.1)


def accuracy(net, test_x, test_y):
    """The whole test set, in batches of 500."""
    net.eval()
    with torch.no_grad():
        correct = sum((net(test_x[i:i + 500]).argmax(1) == test_y[i:i + 500]).sum().item()
                      for i in range(0, len(test_x), 500))
    net.train()
    return correct / len(test_x)


def test(model, test_x, test_y, it):
    """The whole test set on rank 0, logged as Caffe does; returns the accuracy."""
    acc = accuracy(model.module, test_x, test_y)
    log(f"Iteration {it}, Testing net (#0)")
    log(f"    Test net output #0: accuracy = {acc:.4f}")
    return acc


def snapshot(model, snap_dir, it):
    """Rank 0's net as snap_dir/iter_<it>.pt (no test: scored afterwards by --score)."""
    torch.save(model.module.state_dict(), os.path.join(snap_dir, f"iter_{it}.pt"))


def score(net_name, snap_dir):
    """--score: every snap_dir/iter_*.pt in global-iteration order, one "<it> <accuracy>" line
    each on stdout ("nan" where the weights are not finite)."""
    torch.set_num_threads(os.cpu_count() or 1)  # outside the job: every core
    paths = {int(os.path.basename(p)[5:-3]): p for p in glob.glob(os.path.join(snap_dir, "iter_*.pt"))
             if os.path.basename(p)[5:-3].isdigit()}
    if not paths:
        print(f"ddp_twin.py: no iter_*.pt in {snap_dir}", file=sys.stderr)
        return 1
    net, _, _, test_x, test_y = load(net_name, True)[:5]
    test_x, test_y = torch.from_numpy(np.ascontiguousarray(test_x)), torch.from_numpy(test_y)
    for it in sorted(paths):
        state = torch.load(paths[it], map_location="cpu")
        net.load_state_dict(state)
        finite = all(torch.isfinite(t).all() for t in state.values())
        print(f"{it} {accuracy(net, test_x, test_y):.4f}" if finite else f"{it} nan", flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--net", default="lenet", choices=("lenet", "cifar"))
    ap.add_argument("--iterations", type=int, default=10000, help="global iterations (images / batch)")
    ap.add_argument("--warmup", type=int, default=500, help="global iterations of the rate ramp")
    ap.add_argument("--lr-mult", default="n", choices=("n", "half", "sqrt", "one"),
                    help="base rate multiplier after the warm-up: N, max(1, N/2), sqrt N or 1")
    ap.add_argument("--seed", type=int, default=1701, help="torch.manual_seed of the initial weights")
    ap.add_argument("--post-local", type=int, default=0, metavar="H",
                    help="post-local SGD: DDP through the warm-up, then parameters averaged every H "
                         "local steps (0: plain DDP)")
    ap.add_argument("--test-interval", type=int, default=500, help="global iterations (0: only at the end)")
    ap.add_argument("--stop-at", type=float, default=0,
                    help="end after the first test at this accuracy or above (0: run every iteration)")
    ap.add_argument("--snapshot-every", type=int, default=0, metavar="K",
                    help="rank 0 saves the net every K global iterations and at the end (0: never)")
    ap.add_argument("--snapshot-dir", metavar="D")
    ap.add_argument("--score", metavar="D", help="score D/iter_*.pt on the test set, no training")
    a = ap.parse_args()
    if a.score:
        sys.exit(score(a.net, a.score))
    if a.stop_at and a.test_interval <= 0:
        print("ddp_twin.py: --stop-at needs tests: not with --test-interval 0", file=sys.stderr)
        sys.exit(2)
    if a.snapshot_every > 0 and not a.snapshot_dir:
        print("ddp_twin.py: --snapshot-every needs --snapshot-dir", file=sys.stderr)
        sys.exit(2)
    if a.post_local < 0 or a.snapshot_every < 0 or a.test_interval < 0:
        print("ddp_twin.py: --post-local, --snapshot-every and --test-interval are >= 0", file=sys.stderr)
        sys.exit(2)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(a.seed)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    net, train_x, train_y, test_x, test_y, batch, base_lr, decay, schedule = load(a.net, rank == 0)
    lo, hi = len(train_x) * rank // world, len(train_x) * (rank + 1) // world
    part_x = torch.from_numpy(np.ascontiguousarray(train_x[lo:hi]))
    part_y = torch.from_numpy(train_y[lo:hi])
    if rank == 0:
        test_x, test_y = torch.from_numpy(np.ascontiguousarray(test_x)), torch.from_numpy(test_y)
        if a.snapshot_every:
            os.makedirs(a.snapshot_dir, exist_ok=True)
    model = nn.parallel.DistributedDataParallel(net)
    averager = None
    if a.post_local:
        # DDP's gradient all-reduce for the warm-up steps, then none (each machine steps alone);
        # the averager starts at the same step, as PyTorch's recipe has it.
        local_from = max(1, (a.warmup + world - 1) // world)
        model.register_comm_hook(post_local.PostLocalSGDState(None, None, local_from, False),
                                 post_local.post_localSGD_hook)
        averager = averagers.PeriodicModelAverager(period=a.post_local, warmup_steps=local_from)
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    opt = torch.optim.SGD([{"params": weights, "mult": 1.0}, {"params": biases, "mult": 2.0}],
                          lr=base_lr, momentum=0.9, weight_decay=decay)
    mult = {"n": world, "half": max(1.0, world / 2), "sqrt": world ** 0.5, "one": 1.0}[a.lr_mult]
    steps = (a.iterations + world - 1) // world
    log(f"Solving {a.net}: DDP, {world} machines, rank {rank}, {steps} steps of {batch} per machine, "
        f"base rate x{mult:g} after the warm-up (--lr-mult {a.lr_mult}), seed {a.seed}")
    if averager:
        log(f"Post-local SGD: gradients all-reduced for the first {local_from} steps, then local steps "
            f"and the parameters averaged every {a.post_local} (momentum local)")
    else:
        log("Plain DDP: gradients all-reduced every step")
    at = 0
    saved = -1  # the last global iteration snapshotted
    for step in range(steps):
        it = step * world  # global iteration
        # every rank knows the test steps; the snapshot steps follow the same rule
        testing = a.test_interval > 0 and it % a.test_interval < world and step > 0
        if rank == 0 and a.snapshot_every and it % a.snapshot_every < world and step > 0:
            snapshot(model, a.snapshot_dir, it)
            saved = it
        acc = test(model, test_x, test_y, it) if rank == 0 and testing else 0
        if a.stop_at and testing:  # rank 0 tells the others whether the target is met
            stop = torch.tensor([1 if acc >= a.stop_at else 0])
            dist.broadcast(stop, 0)
            if stop.item():
                log(f"Reached {a.stop_at} at iteration {it}: stopping (--stop-at)")
                break
        ramp = min(1.0, it / a.warmup) if a.warmup else 1.0
        lr = base_lr * (1 + (mult - 1) * ramp) * schedule(it)
        for g in opt.param_groups:
            g["lr"] = lr * g["mult"]
        if at + batch > len(part_x):
            at = 0
        x, y = part_x[at:at + batch], part_y[at:at + batch]
        at += batch
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        local = averager is not None and step >= local_from
        averaged = averager is not None and averager.step >= local_from and \
            (averager.step - local_from) % a.post_local == 0
        if averager:
            averager.average_parameters(model.parameters())
        if rank == 0 and it % 100 < world:
            log(f"Iteration {it}, loss = {loss.item():.4f}")
        # A local step's NaN reaches the other machines at the next average: every rank stops
        # there together (the weights are the same everywhere then).
        if averaged and not all(torch.isfinite(p).all() for p in model.parameters()):
            log(f"weights not finite after the average at iteration {it}: diverged")
            sys.exit(1)
        if not local and not torch.isfinite(loss):
            log(f"loss is {loss.item()} at iteration {it}: diverged")
            sys.exit(1)
    else:
        it = steps * world
        if rank == 0:
            test(model, test_x, test_y, it)
    if rank == 0 and a.snapshot_every and saved != it:
        snapshot(model, a.snapshot_dir, it)
    log("Optimization Done.")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
