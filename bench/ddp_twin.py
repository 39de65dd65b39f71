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
multiplied by WORLD_SIZE (the linear scaling rule), ramped up from base_lr over --warmup global
iterations. The global iteration counts images / batch, as hogstream's does (steps x
WORLD_SIZE), so the schedule, the test interval (every 500) and --iterations mean the same in
both.

Rank 0 tests on the whole 10 000-image test set and prints Caffe-format lines with glog
timestamps, which bench/log_times.sh reads ("Test net output #0: accuracy = ...").
"""
import argparse
import datetime
import gzip
import os
import struct
import sys

import numpy as np
import torch
import torch.distributed as dist
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


def test(model, test_x, test_y, it):
    """The whole test set on rank 0, logged as Caffe does; returns the accuracy."""
    model.eval()
    with torch.no_grad():
        correct = sum((model.module(test_x[i:i + 500]).argmax(1) == test_y[i:i + 500]).sum().item()
                      for i in range(0, len(test_x), 500))
    model.train()
    log(f"Iteration {it}, Testing net (#0)")
    log(f"    Test net output #0: accuracy = {correct / len(test_x):.4f}")
    return correct / len(test_x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--net", default="lenet", choices=("lenet", "cifar"))
    ap.add_argument("--iterations", type=int, default=10000, help="global iterations (images / batch)")
    ap.add_argument("--warmup", type=int, default=500, help="global iterations of the rate ramp")
    ap.add_argument("--test-interval", type=int, default=500)
    ap.add_argument("--stop-at", type=float, default=0,
                    help="end after the first test at this accuracy or above (0: run every iteration)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1701)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    net, train_x, train_y, test_x, test_y, batch, base_lr, decay, schedule = load(a.net, rank == 0)
    lo, hi = len(train_x) * rank // world, len(train_x) * (rank + 1) // world
    part_x = torch.from_numpy(np.ascontiguousarray(train_x[lo:hi]))
    part_y = torch.from_numpy(train_y[lo:hi])
    if rank == 0:
        test_x, test_y = torch.from_numpy(np.ascontiguousarray(test_x)), torch.from_numpy(test_y)
    model = nn.parallel.DistributedDataParallel(net)
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    opt = torch.optim.SGD([{"params": weights, "mult": 1.0}, {"params": biases, "mult": 2.0}],
                          lr=base_lr, momentum=0.9, weight_decay=decay)
    steps = (a.iterations + world - 1) // world
    log(f"Solving {a.net}: DDP, {world} machines, rank {rank}, {steps} steps of {batch} per machine")
    at = 0
    for step in range(steps):
        it = step * world  # global iteration
        testing = it % a.test_interval < world and step > 0  # every rank knows the test steps
        accuracy = test(model, test_x, test_y, it) if rank == 0 and testing else 0
        if a.stop_at and testing:  # rank 0 tells the others whether the target is met
            stop = torch.tensor([1 if accuracy >= a.stop_at else 0])
            dist.broadcast(stop, 0)
            if stop.item():
                log(f"Reached {a.stop_at} at iteration {it}: stopping (--stop-at)")
                break
        ramp = min(1.0, it / a.warmup) if a.warmup else 1.0
        lr = base_lr * (1 + (world - 1) * ramp) * schedule(it)
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
        if rank == 0 and it % 100 < world:
            log(f"Iteration {it}, loss = {loss.item():.4f}")
        if not torch.isfinite(loss):
            log(f"loss is {loss.item()} at iteration {it}: diverged")
            sys.exit(1)
    else:
        if rank == 0:
            test(model, test_x, test_y, steps * world)
    log("Optimization Done.")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
