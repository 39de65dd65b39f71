#!/usr/bin/python3
"""PyTorch twins of Caffe train_test prototxts, built from the prototxt itself, timed per batch.

    /usr/bin/python3 bench/torch_nets.py --model NET.prototxt --input data:N,C,H,W
        [--solver SOLVER.prototxt] [--describe FILE] [--threads 1] [--warmup 3]
        [--window-iters 5] [--windows 3] [--profile N] [--seed 1701] [--tag TEXT]

Needs Debian's python3-torch (apt-get install -y python3-torch); use /usr/bin/python3.

The TRAIN phase of NET is turned into a torch module layer by layer, in the prototxt's order,
so the twin has the shapes the prototxt gives: each layer is made from the tensors its bottoms
hold (one real forward pass at the full batch while building), and every Data or Input layer
becomes a pool of 4 random batches of the --input shape (labels uniform over the classes of
the layer that feeds the first loss). Layer types covered: Data, Input, Convolution (group,
pad, stride, dilation), Pooling (MAX, AVE, global, Caffe's CEIL rounding), LRN (both regions),
ReLU (negative_slope), BatchNorm (+ a Scale on its top right after it becomes one
nn.BatchNorm2d with affine terms, as a torch user writes it), Scale, Eltwise (SUM with coeff,
PROD, MAX), Concat, Dropout, InnerProduct, SoftmaxWithLoss (loss_weight), Accuracy; anything
else stops with its name. Weights are filled as Caffe fills them (constant, uniform, gaussian,
xavier and msra with variance_norm, over Caffe's fan-in = count / num_output), so the filler
statistics are the prototxt's.

The update is Caffe's SGD: diff += weight_decay * decay_mult * w; v = momentum * v + lr *
lr_mult * diff; w -= v, with lr_mult and decay_mult from the layers' param blocks, and base_lr,
momentum, weight_decay and the lr policy (fixed, step, multistep, inv, exp, poly) from
--solver (default: lr 0.01, momentum 0.9, weight decay 5e-4, fixed).

Two figures, each the median over --windows windows of --window-iters batches after --warmup
batches: forward + backward (parameter gradients dropped before each batch, as torch's
zero_grad(set_to_none=True) does), and the whole training step (forward, backward, update).
--describe FILE compares each layer's first top shape and parameter count (BatchNorm's three
statistics blobs counted as Caffe counts them) with `hogstream describe` output for the same
net and input, and stops on the first difference. The last line is `RESULT {json}`.
"""
import argparse
import os
import re
import sys


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="Caffe net prototxt (its TRAIN phase is built)")
    p.add_argument("--input", action="append", required=True,
                   help="TOP:N,C,H,W for a Data or Input layer's first top (repeatable)")
    p.add_argument("--solver", help="Caffe solver prototxt for the update's settings")
    p.add_argument("--describe", help="`hogstream describe` output to check shapes against")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--window-iters", type=int, default=5)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--profile", type=int, default=0,
                   help="then profile this many training steps and print the top ops")
    p.add_argument("--seed", type=int, default=1701)
    p.add_argument("--tag", default="")
    return p.parse_args(argv)


ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None:  # before torch starts its thread pools
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


# ----------------------------------------------------------------------------- prototxt
def parse_prototxt(text):
    """Protobuf text format as nested dicts: each field name maps to the list of its values
    (a str for scalars and enums, a dict for messages)."""
    tokens = re.findall(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|#[^\n]*|[{}:]|[^\s{}:#"\']+', text)
    tokens = [t for t in tokens if not t.startswith("#")]
    pos = 0

    def message(closing):
        nonlocal pos
        msg = {}
        while pos < len(tokens) and tokens[pos] != "}":
            key = tokens[pos]
            pos += 1
            if tokens[pos] == ":":
                pos += 1
            if tokens[pos] == "{":
                pos += 1
                value = message(True)
            else:
                value = tokens[pos].strip("\"'")
                pos += 1
            msg.setdefault(key, []).append(value)
        if closing:
            if pos >= len(tokens):
                raise ValueError("prototxt: missing '}'")
            pos += 1
        elif pos < len(tokens):
            raise ValueError("prototxt: unexpected '}'")
        return msg

    return message(False)


def one(msg, key, default=None, kind=str):
    """The last value of a field (protobuf text's rule for repeated singular fields)."""
    values = (msg or {}).get(key)
    if not values:
        return default
    v = values[-1]
    if kind is bool:
        return v == "true"
    return kind(v) if kind is not str else v


def many(msg, key, kind=str):
    return [kind(v) for v in (msg or {}).get(key, [])]


def in_train(layer):
    """Caffe's NetState rule for phase TRAIN (stages and levels are not used here)."""
    if one(layer, "phase") is not None:
        return one(layer, "phase") == "TRAIN"
    includes, excludes = many(layer, "include", dict), many(layer, "exclude", dict)
    if any(one(r, "phase") == "TRAIN" for r in excludes):
        return False
    return not includes or any(one(r, "phase", "TRAIN") == "TRAIN" for r in includes)


def spatial(p, name, default):
    """A (h, w) pair from Caffe's NAME / NAME_h + NAME_w convolution and pooling fields."""
    if one(p, name + "_h") is not None:
        return int(one(p, name + "_h")), int(one(p, name + "_w"))
    values = many(p, name, int)
    if not values:
        return default, default
    return (values[0], values[-1])


# ----------------------------------------------------------------------------- fillers
def fill(t, filler):
    """Caffe's fillers on a tensor shaped as Caffe's blob (torch's conv and linear weights are)."""
    kind = one(filler, "type", "constant")
    count = t.numel()
    fan_in = count / t.shape[0]
    fan_out = count / t.shape[1] if t.dim() > 1 else count
    n = {"FAN_OUT": fan_out, "AVERAGE": (fan_in + fan_out) / 2}.get(
        one(filler, "variance_norm", "FAN_IN"), fan_in)
    with torch.no_grad():
        if kind == "constant":
            t.fill_(one(filler, "value", 0.0, float))
        elif kind == "uniform":
            t.uniform_(one(filler, "min", 0.0, float), one(filler, "max", 1.0, float))
        elif kind == "gaussian" and one(filler, "sparse", -1, int) < 0:
            t.normal_(one(filler, "mean", 0.0, float), one(filler, "std", 1.0, float))
        elif kind == "xavier":
            bound = (3.0 / n) ** 0.5
            t.uniform_(-bound, bound)
        elif kind == "msra":
            t.normal_(0.0, (2.0 / n) ** 0.5)
        else:
            sys.exit(f"torch_nets.py: filler '{kind}' (or a sparse gaussian) is not covered")


# ----------------------------------------------------------------------------- layers
class Step(nn.Module):
    """One Caffe layer (or a BatchNorm + Scale pair): a function of its bottoms' tensors; fn
    is a module, or a function of the modules and parameters held in `modules`."""

    def __init__(self, fn, modules=()):
        super().__init__()
        self.fn = fn
        self.parts = nn.ModuleList(modules)

    def forward(self, *xs):
        return self.fn(*xs)


def mults(layer, n):
    """(lr_mult, decay_mult) for a layer's first n parameter blobs, Caffe's defaults 1 and 1."""
    specs = many(layer, "param", dict)
    out = []
    for i in range(n):
        s = specs[i] if i < len(specs) else {}
        out.append((one(s, "lr_mult", 1.0, float), one(s, "decay_mult", 1.0, float)))
    return out


def conv_step(layer, x):
    p = one(layer, "convolution_param", {})
    kh, kw = spatial(p, "kernel_size", 1)
    ph, pw = spatial(p, "pad", 0)
    sh, sw = spatial(p, "stride", 1)
    dh, dw = spatial(p, "dilation", 1)
    bias = one(p, "bias_term", True, bool)
    conv = nn.Conv2d(x.shape[1], one(p, "num_output", kind=int), (kh, kw), (sh, sw), (ph, pw),
                     (dh, dw), one(p, "group", 1, int), bias)
    fill(conv.weight, one(p, "weight_filler", {}))
    if bias:
        fill(conv.bias, one(p, "bias_filler", {}))
    return Step(conv), [conv.weight] + ([conv.bias] if bias else [])


def pool_step(layer, x):
    p = one(layer, "pooling_param", {})
    pool = one(p, "pool", "MAX")
    if one(p, "global_pooling", False, bool):
        (kh, kw), (sh, sw), (ph, pw) = tuple(x.shape[2:]), (1, 1), (0, 0)
    else:
        (kh, kw), (sh, sw), (ph, pw) = (spatial(p, "kernel_size", 1), spatial(p, "stride", 1),
                                        spatial(p, "pad", 0))
    ceil = one(p, "round_mode", "CEIL") == "CEIL"
    # torch's ceil_mode drops a last window that would start in the right padding, as Caffe
    # does; count_include_pad divides by the window clipped to the padded input, as Caffe's AVE.
    if pool == "MAX":
        return Step(lambda t: F.max_pool2d(t, (kh, kw), (sh, sw), (ph, pw), ceil_mode=ceil)), []
    if pool == "AVE":
        return Step(lambda t: F.avg_pool2d(t, (kh, kw), (sh, sw), (ph, pw), ceil_mode=ceil,
                                           count_include_pad=True)), []
    sys.exit(f"torch_nets.py: pooling '{pool}' is not covered")


def lrn_step(layer, x):
    p = one(layer, "lrn_param", {})
    n, alpha = one(p, "local_size", 5, int), one(p, "alpha", 1.0, float)
    beta, k = one(p, "beta", 0.75, float), one(p, "k", 1.0, float)
    if one(p, "norm_region", "ACROSS_CHANNELS") == "ACROSS_CHANNELS":
        lrn = nn.LocalResponseNorm(n, alpha, beta, k)  # x / (k + alpha / n * sum x^2)^beta
        return Step(lrn), []
    pad = (n - 1) // 2  # WITHIN_CHANNEL: x * (1 + alpha * mean of x^2 over the n x n window)^-beta
    return Step(lambda t: t * (1 + alpha * F.avg_pool2d(t * t, n, 1, pad, count_include_pad=True))
                .pow(-beta)), []


def batch_norm_step(layer, x, scale_layer):
    p = one(layer, "batch_norm_param", {})
    global_stats = one(p, "use_global_stats", False, bool)
    affine = scale_layer is not None
    bn = nn.BatchNorm2d(x.shape[1], eps=one(p, "eps", 1e-5, float),
                        momentum=1.0 - one(p, "moving_average_fraction", 0.999, float),
                        affine=affine)
    params = []
    if affine:
        sp = one(scale_layer, "scale_param", {})
        fill(bn.weight, one(sp, "filler", {"type": ["constant"], "value": ["1"]}))
        params.append(bn.weight)
        if one(sp, "bias_term", False, bool):
            fill(bn.bias, one(sp, "bias_filler", {}))
            params.append(bn.bias)
        else:
            bn.bias.requires_grad_(False)
            bn.bias.zero_()
    if global_stats:  # the stored statistics in training too
        return Step(lambda t: F.batch_norm(t, bn.running_mean, bn.running_var, bn.weight,
                                           bn.bias, False, 0.0, bn.eps), [bn]), params
    return Step(bn), params


def scale_step(layer, x):
    p = one(layer, "scale_param", {})
    if one(p, "axis", 1, int) != 1 or one(p, "num_axes", 1, int) != 1 or len(layer["bottom"]) > 1:
        sys.exit(f"torch_nets.py: Scale '{one(layer, 'name')}': only a learned per-channel "
                 "scale is covered")
    shape = (1, x.shape[1]) + (1,) * (x.dim() - 2)
    s = nn.Parameter(torch.empty(shape))
    fill(s.view(-1), one(p, "filler", {"type": ["constant"], "value": ["1"]}))
    holder = nn.ParameterList([s])
    if one(p, "bias_term", False, bool):
        b = nn.Parameter(torch.empty(shape))
        fill(b.view(-1), one(p, "bias_filler", {}))
        holder.append(b)
        return Step(lambda t: torch.addcmul(b, t, s), [holder]), [s, b]
    return Step(lambda t: t * s, [holder]), [s]


def eltwise_step(layer, xs):
    p = one(layer, "eltwise_param", {})
    op = one(p, "operation", "SUM")
    if op == "SUM":
        coeffs = many(p, "coeff", float) or [1.0] * len(xs)

        def total(*ts):
            out = ts[0] * coeffs[0] if coeffs[0] != 1 else ts[0]
            for c, t in zip(coeffs[1:], ts[1:]):
                out = out.add(t, alpha=c)
            return out
        return Step(total), []
    if op == "PROD":
        return Step(lambda *ts: torch.stack(ts).prod(0)), []
    return Step(lambda *ts: torch.stack(ts).amax(0)), []


def inner_product_step(layer, x):
    p = one(layer, "inner_product_param", {})
    axis = one(p, "axis", 1, int)
    if one(p, "transpose", False, bool):
        sys.exit("torch_nets.py: InnerProduct transpose is not covered")
    bias = one(p, "bias_term", True, bool)
    fc = nn.Linear(x.shape[axis:].numel(), one(p, "num_output", kind=int), bias)
    fill(fc.weight, one(p, "weight_filler", {}))
    if bias:
        fill(fc.bias, one(p, "bias_filler", {}))
    return Step(lambda t: fc(t.flatten(axis)), [fc]), [fc.weight] + ([fc.bias] if bias else [])


# ----------------------------------------------------------------------------- the net
class CaffeTwin(nn.Module):
    """A prototxt's TRAIN phase as torch modules, run in the prototxt's order over a dict of
    named tensors (blobs); forward returns the weighted sum of the losses."""

    def __init__(self, net_param, inputs):
        super().__init__()
        self.steps = nn.ModuleList()
        self.plan = []          # (step index, bottoms, tops, in_place, is_loss, loss_weight)
        self.params = []        # (tensor, lr_mult, decay_mult) in Caffe's order
        self.caffe_counts = {}  # layer name -> parameter count as Caffe reports it
        self.shapes = {}        # layer name -> first top's shape
        self.inputs = {}        # data top -> shape
        layers = [l for l in many(net_param, "layer", dict) if in_train(l)]
        blobs = {}
        classes = self._classes(layers)
        i = 0
        while i < len(layers):
            layer = layers[i]
            name, kind = one(layer, "name"), one(layer, "type")
            bottoms, tops = many(layer, "bottom"), many(layer, "top")
            if kind in ("Data", "Input"):
                if tops[0] not in inputs:
                    sys.exit(f"torch_nets.py: give --input {tops[0]}:N,C,H,W for layer '{name}'")
                shape = inputs[tops[0]]
                self.inputs[tops[0]] = shape
                blobs[tops[0]] = torch.randn(shape)
                for t in tops[1:]:
                    self.inputs[t] = ("labels", shape[0], classes)
                    blobs[t] = torch.randint(0, classes, (shape[0],))
                self.shapes[name] = list(shape)
                i += 1
                continue
            xs = [blobs[b] for b in bottoms]
            scale = None
            if kind == "BatchNorm" and i + 1 < len(layers):
                nxt = layers[i + 1]
                if (one(nxt, "type") == "Scale" and many(nxt, "bottom") == tops
                        and one(one(nxt, "scale_param", {}), "axis", 1, int) == 1
                        and one(one(nxt, "scale_param", {}), "num_axes", 1, int) == 1):
                    scale = nxt
            is_loss, weight = False, 1.0
            if kind == "Convolution":
                step, params = conv_step(layer, xs[0])
            elif kind == "Pooling":
                step, params = pool_step(layer, xs[0])
            elif kind == "LRN":
                step, params = lrn_step(layer, xs[0])
            elif kind == "ReLU":
                slope = one(one(layer, "relu_param", {}), "negative_slope", 0.0, float)
                inplace = tops == bottoms
                step = Step(nn.LeakyReLU(slope, inplace) if slope else nn.ReLU(inplace))
                params = []
            elif kind == "BatchNorm":
                step, params = batch_norm_step(layer, xs[0], scale)
            elif kind == "Scale":
                step, params = scale_step(layer, xs[0])
            elif kind == "Eltwise":
                step, params = eltwise_step(layer, xs)
            elif kind == "Concat":
                p = one(layer, "concat_param", {})
                axis = one(p, "axis", one(p, "concat_dim", 1, int), int)
                step, params = Step(lambda *ts, a=axis: torch.cat(ts, a)), []
            elif kind == "Dropout":
                ratio = one(one(layer, "dropout_param", {}), "dropout_ratio", 0.5, float)
                step, params = Step(nn.Dropout(ratio)), []
            elif kind == "InnerProduct":
                step, params = inner_product_step(layer, xs[0])
            elif kind == "SoftmaxWithLoss":
                ignore = one(one(layer, "loss_param", {}), "ignore_label", -100, int)
                step = Step(lambda s, y, ig=ignore: F.cross_entropy(s, y, ignore_index=ig))
                params, is_loss = [], True
                weight = one(layer, "loss_weight", 1.0, float)
            elif kind == "Accuracy":
                i += 1  # a metric: nothing to train or time
                continue
            else:
                sys.exit(f"torch_nets.py: layer '{name}' of type {kind} is not covered")
            # Parameter multipliers: the Scale's for the BatchNorm + Scale pair (BatchNorm's
            # own three blobs are statistics, buffers here, never updated by the solver).
            owner = scale if kind == "BatchNorm" else layer
            for t, (lr, decay) in zip(params, mults(owner, len(params)) if owner else []):
                self.params.append((t, lr, decay))
            self.caffe_counts[name] = sum(t.numel() for t in params)
            if kind == "BatchNorm":
                self.caffe_counts[name] = 2 * xs[0].shape[1] + 1
                if scale is not None:
                    self.caffe_counts[one(scale, "name")] = sum(t.numel() for t in params)
            self.steps.append(step)
            self.plan.append((len(self.steps) - 1, bottoms, tops, is_loss, weight))
            with torch.no_grad():
                out = step(*xs)
            for t in tops:
                blobs[t] = out
            self.shapes[name] = list(out.shape)
            if scale is not None:
                self.shapes[one(scale, "name")] = list(out.shape)
                i += 1
            i += 1
        for m in self.modules():  # the build pass moved the running statistics
            if isinstance(m, nn.BatchNorm2d):
                m.reset_running_stats()

    @staticmethod
    def _classes(layers):
        """Labels range over the num_output of the layer that feeds the first loss."""
        producer = {}
        for l in layers:
            for t in many(l, "top"):
                producer[t] = l
        for l in layers:
            if one(l, "type") == "SoftmaxWithLoss":
                src = producer.get(many(l, "bottom")[0], {})
                n = one(one(src, "inner_product_param", {}) or one(src, "convolution_param", {}),
                        "num_output", kind=int)
                if n:
                    return n
        return 10

    def forward(self, blobs):
        blobs = dict(blobs)
        loss = 0.0
        for idx, bottoms, tops, is_loss, weight in self.plan:
            out = self.steps[idx](*[blobs[b] for b in bottoms])
            if is_loss:
                loss = loss + weight * out
            for t in tops:
                blobs[t] = out
        return loss


class CaffeSGD:
    """Caffe's SGDSolver update with per-parameter lr_mult and decay_mult."""

    def __init__(self, params, solver):
        self.params = [(t, lr, decay, torch.zeros_like(t)) for t, lr, decay in params if lr != 0]
        self.s = solver
        self.base_lr = one(solver, "base_lr", 0.01, float)
        self.momentum = one(solver, "momentum", 0.9, float)
        self.weight_decay = one(solver, "weight_decay", 5e-4, float)

    def lr(self, it):
        s, base = self.s, self.base_lr
        policy = one(s, "lr_policy", "fixed")
        gamma, power = one(s, "gamma", 0.0, float), one(s, "power", 0.0, float)
        if policy == "fixed":
            return base
        if policy == "step":
            return base * gamma ** (it // one(s, "stepsize", kind=int))
        if policy == "multistep":
            return base * gamma ** sum(it >= v for v in many(s, "stepvalue", int))
        if policy == "inv":
            return base * (1 + gamma * it) ** -power
        if policy == "exp":
            return base * gamma ** it
        if policy == "poly":
            return base * max(0.0, 1 - it / one(s, "max_iter", kind=int)) ** power
        sys.exit(f"torch_nets.py: lr_policy '{policy}' is not covered")

    @torch.no_grad()
    def step(self, it):
        rate = self.lr(it)
        for w, lr_mult, decay_mult, v in self.params:
            g = w.grad
            if g is None:
                continue
            if self.weight_decay * decay_mult:
                g.add_(w, alpha=self.weight_decay * decay_mult)
            v.mul_(self.momentum).add_(g, alpha=rate * lr_mult)
            w.sub_(v)


def check_describe(twin, path):
    """Each layer's first top shape and parameter count against `hogstream describe`."""
    checked = 0
    for line in open(path):
        m = re.match(r"^(\S+)\s+(\S+)\s+(.*?)\s+([\d,]+)$", line.rstrip())
        if not m or m.group(1) == "layer" or m.group(2) in ("Split", "Input", "Data"):
            continue
        name, shape, count = m.group(1), m.group(3).split(",")[0], int(m.group(4).replace(",", ""))
        if name not in twin.shapes:
            continue  # Accuracy and other layers the twin leaves out
        ours = "x".join(map(str, twin.shapes[name])) or "scalar"
        if ours != shape or twin.caffe_counts.get(name, 0) != count:
            sys.exit(f"torch_nets.py: layer '{name}': torch {ours}, {twin.caffe_counts.get(name, 0)} "
                     f"params; hogstream {shape}, {count} params")
        checked += 1
    return checked


def timed(fn, warmup, windows, iters):
    """Median ms per call over the windows, and each window's figure."""
    for _ in range(warmup):
        fn()
    per_window = []
    for _ in range(windows):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        per_window.append((time.perf_counter() - t0) * 1e3 / iters)
    return statistics.median(per_window), per_window


def main(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    inputs = {}
    for spec in args.input:
        top, _, dims = spec.partition(":")
        inputs[top] = tuple(int(d) for d in dims.split(","))
    net_param = parse_prototxt(open(args.model).read())
    solver_param = parse_prototxt(open(args.solver).read()) if args.solver else {}
    twin = CaffeTwin(net_param, inputs)
    checked = check_describe(twin, args.describe) if args.describe else None
    batch = next(iter(inputs.values()))[0]

    # A pool of 4 random batches of images, used in turn, and fresh random labels for every
    # batch: a net that could learn a fixed pool's labels would drive its gradients towards
    # zero, into denormal floats that slow the CPU down (a training step then measured 10%
    # slower than forward + backward on LeNet, on the mm kernels alone).
    images = [{t: torch.randn(s) for t, s in twin.inputs.items() if s[0] != "labels"}
              for _ in range(4)]
    labels = {t: s for t, s in twin.inputs.items() if s[0] == "labels"}

    def next_batch():
        batch = dict(images[state["it"] % len(images)])
        batch.update({t: torch.randint(0, s[2], (s[1],)) for t, s in labels.items()})
        return batch
    solver = CaffeSGD(twin.params, solver_param)
    state = {"it": 0, "loss": None}
    twin.train()

    def forward_backward():
        for w, *_ in solver.params:
            w.grad = None
        loss = twin(next_batch())
        loss.backward()
        state["it"] += 1
        state["loss"] = loss.item()

    def train_step():
        forward_backward()
        solver.step(state["it"])

    fb_ms, fb_windows = timed(forward_backward, args.warmup, args.windows, args.window_iters)
    step_ms, step_windows = timed(train_step, args.warmup, args.windows, args.window_iters)
    learnable = sum(t.numel() for t, *_ in twin.params)
    name = one(net_param, "name", os.path.basename(args.model))
    print(f"[{name}] batch {batch}, {args.threads} thread(s), torch {torch.__version__}: "
          f"forward+backward {fb_ms:.2f} ms, training step {step_ms:.2f} ms per batch "
          f"({batch * 1e3 / fb_ms:.1f} / {batch * 1e3 / step_ms:.1f} img/s); {learnable:,} learned "
          f"parameters" + (f"; shapes of {checked} layers match hogstream's" if checked else ""),
          flush=True)
    result = {
        "net": name, "model": args.model, "tag": args.tag, "input": args.input, "batch": batch,
        "threads": args.threads, "torch": torch.__version__,
        "warmup": args.warmup, "window_iters": args.window_iters, "windows": args.windows,
        "fwd_bwd_ms": round(fb_ms, 3), "fwd_bwd_windows_ms": [round(w, 3) for w in fb_windows],
        "train_step_ms": round(step_ms, 3),
        "train_step_windows_ms": [round(w, 3) for w in step_windows],
        "fwd_bwd_images_per_s": round(batch * 1e3 / fb_ms, 1),
        "train_images_per_s": round(batch * 1e3 / step_ms, 1),
        "learned_params": learnable, "caffe_params": sum(twin.caffe_counts.values()),
        "layers_checked": checked, "last_loss": round(state["loss"], 4),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print("RESULT " + json.dumps(result), flush=True)
    if args.profile > 0:
        with torch.autograd.profiler.profile() as prof:
            for _ in range(args.profile):
                train_step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15), flush=True)


if __name__ == "__main__":
    main(ARGS)
