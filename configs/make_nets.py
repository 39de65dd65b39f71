#!/usr/bin/env python3
"""Writes the prototxts of configs/resnet/ and configs/inception/ (run from anywhere:
`python3 configs/make_nets.py`). The files it writes are plain Caffe prototxts and are
committed; edit this script and run it again rather than editing them by hand.

Two nets, each for two inputs that differ only in their Data layers:
  fmnist  28x28x1 Fashion-MNIST LMDBs (scripts/demo.sh makes them), pixels * 1/256
  cifar   32x32x3 CIFAR-10 LMDBs (`hogstream convert cifar10`, `convert mean`), mean-subtracted
          and * 1/256
The bodies are the same for both inputs: every spatial size after the first convolution
follows from the input, and both nets end in global average pooling.

  resnet/resnet20_*      ResNet-20 for small images: conv3x3 16, three stages of three basic
                         blocks (16, 32, 64 channels; the first block of stages 2 and 3 halves
                         the size with stride 2 and a 1x1 stride-2 projection shortcut), global
                         average pooling, InnerProduct 10. Convolutions without bias (each is
                         followed by BatchNorm + Scale), msra fillers. 0.27 M parameters.
  inception/inception_*  conv3x3 32, max pool, LRN, a 1x1 reduction and a grouped 3x3
                         convolution (group 2), two inception modules, max pool, a third
                         module, global average pooling, Dropout 0.4, InnerProduct 10;
                         xavier fillers, biases 0.2 as in Caffe's GoogLeNet.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))

INPUTS = {
    "fmnist": {
        "what": "28x28 grey Fashion-MNIST images (scripts/demo.sh writes the LMDBs)",
        "transform": ["scale: 0.00390625"],
        "train": "data/fashion-mnist/train_lmdb",
        "test": "data/fashion-mnist/test_lmdb",
    },
    "cifar": {
        "what": "32x32 colour CIFAR-10 images (hogstream convert cifar10 / convert mean)",
        "transform": ['mean_file: "data/cifar10/mean.binaryproto"', "scale: 0.00390625"],
        "train": "data/cifar10/train_lmdb",
        "test": "data/cifar10/test_lmdb",
    },
}


class Net:
    """Collects layers as prototxt text, in order."""

    def __init__(self, name, header):
        self.parts = ["".join(f"# {line}\n" if line else "#\n" for line in header)
                      + f'name: "{name}"\n']

    def layer(self, name, type_, bottoms, tops, body=(), params=(), include=None):
        out = ["layer {", f'  name: "{name}"', f'  type: "{type_}"']
        out += [f'  bottom: "{b}"' for b in bottoms]
        out += [f'  top: "{t}"' for t in tops]
        if include:
            out.append(f"  include {{ phase: {include} }}")
        for lr, decay in params:
            out.append(f"  param {{ lr_mult: {lr:g} decay_mult: {decay:g} }}")
        out += ["  " + line for line in body]
        out.append("}")
        self.parts.append("\n".join(out) + "\n")
        return tops[0] if tops else None

    def data(self, inp, batch):
        spec = INPUTS[inp]
        for phase, source, n in (("TRAIN", spec["train"], batch), ("TEST", spec["test"], 100)):
            self.layer("data", "Data", [], ["data", "label"], include=phase, body=[
                "transform_param {", *("  " + t for t in spec["transform"]), "}",
                "data_param {", f'  source: "{source}"', f"  batch_size: {n}",
                "  backend: LMDB", "}"])
        return "data"

    def conv(self, name, bottom, n, k, stride=1, pad=None, group=1, bias=True,
             filler='type: "msra"', bias_value=0.0):
        pad = (k - 1) // 2 if pad is None else pad
        body = [f"num_output: {n}"]
        if pad:
            body.append(f"pad: {pad}")
        body.append(f"kernel_size: {k}")
        if stride != 1:
            body.append(f"stride: {stride}")
        if group != 1:
            body.append(f"group: {group}")
        if not bias:
            body.append("bias_term: false")
        body.append(f"weight_filler {{ {filler} }}")
        if bias:
            body.append(f'bias_filler {{ type: "constant" value: {bias_value:g} }}'
                        if bias_value else 'bias_filler { type: "constant" }')
        params = [(1, 1), (2, 0)] if bias else [(1, 1)]
        return self.layer(name, "Convolution", [bottom], [name], params=params,
                          body=["convolution_param {", *("  " + b for b in body), "}"])

    def bn_scale(self, name, blob):
        # BatchNorm's three blobs are statistics, never learned (lr_mult 0, which older Caffe
        # needs spelt out); Scale adds the learned per-channel factor and bias, not decayed.
        self.layer(f"{name}_bn", "BatchNorm", [blob], [blob], params=[(0, 0)] * 3)
        self.layer(f"{name}_scale", "Scale", [blob], [blob], params=[(1, 0), (1, 0)],
                   body=["scale_param { bias_term: true }"])
        return blob

    def relu(self, name, blob):
        return self.layer(name, "ReLU", [blob], [blob])

    def pool(self, name, bottom, pool, k=None, stride=1, pad=0):
        body = [f"pool: {pool}"]
        if k is None:
            body.append("global_pooling: true")
        else:
            body.append(f"kernel_size: {k}")
            if stride != 1:
                body.append(f"stride: {stride}")
            if pad:
                body.append(f"pad: {pad}")
        return self.layer(name, "Pooling", [bottom], [name],
                          body=["pooling_param { " + " ".join(body) + " }"])

    def classifier(self, bottom, filler):
        ip = self.layer("fc10", "InnerProduct", [bottom], ["fc10"], params=[(1, 1), (2, 0)], body=[
            "inner_product_param {", "  num_output: 10", f"  weight_filler {{ {filler} }}",
            '  bias_filler { type: "constant" }', "}"])
        self.layer("accuracy", "Accuracy", [ip, "label"], ["accuracy"], include="TEST")
        self.layer("loss", "SoftmaxWithLoss", [ip, "label"], ["loss"])

    def text(self):
        return "\n".join(self.parts)


def resnet20(inp):
    net = Net("ResNet20", [
        f"ResNet-20 for {INPUTS[inp]['what']}.",
        "Written by configs/make_nets.py (edit that, not this file). The body is the same for",
        "28x28x1 and 32x32x3 inputs; only the Data layers differ.",
        "conv3x3 16 -> 3 stages x 3 basic blocks (16, 32, 64 channels; stride 2 and a 1x1",
        "projection shortcut at the start of stages 2 and 3) -> global average pool -> fc 10."])
    x = net.data(inp, 64)
    x = net.conv("conv1", x, 16, 3, bias=False)
    net.bn_scale("conv1", x)
    net.relu("conv1_relu", x)
    for stage, channels in enumerate((16, 32, 64), start=1):
        for block in range(1, 4):
            p = f"s{stage}b{block}"
            down = stage > 1 and block == 1
            stride = 2 if down else 1
            a = net.conv(f"{p}_conv_a", x, channels, 3, stride=stride, bias=False)
            net.bn_scale(f"{p}_conv_a", a)
            net.relu(f"{p}_relu_a", a)
            b = net.conv(f"{p}_conv_b", a, channels, 3, bias=False)
            net.bn_scale(f"{p}_conv_b", b)
            shortcut = x
            if down:
                shortcut = net.conv(f"{p}_proj", x, channels, 1, stride=2, bias=False)
                net.bn_scale(f"{p}_proj", shortcut)
            x = net.layer(f"{p}_sum", "Eltwise", [b, shortcut], [f"{p}_sum"],
                          body=["eltwise_param { operation: SUM }"])
            net.relu(f"{p}_relu", x)
    x = net.pool("pool", x, "AVE")
    net.classifier(x, 'type: "msra"')
    return net.text()


def inception(inp):
    net = Net("InceptionSmall", [
        f"A small Inception-style net for {INPUTS[inp]['what']}.",
        "Written by configs/make_nets.py (edit that, not this file). The body is the same for",
        "28x28x1 and 32x32x3 inputs (14x14 / 16x16 after pool1, 7x7 / 8x8 after pool3); only",
        "the Data layers differ. Each module: 1x1 | 1x1 -> 3x3 | 1x1 -> 5x5 | maxpool 3x3 ->",
        "1x1, joined by Concat (GoogLeNet's layout at a smaller width)."])
    xavier = 'type: "xavier"'

    def conv_relu(name, bottom, n, k, **kw):
        top = net.conv(name, bottom, n, k, filler=xavier, bias_value=0.2, **kw)
        net.relu(f"{name}_relu", top)
        return top

    def module(name, bottom, n1, n3r, n3, n5r, n5, npool):
        b1 = conv_relu(f"{name}/1x1", bottom, n1, 1)
        b3 = conv_relu(f"{name}/3x3", conv_relu(f"{name}/3x3_reduce", bottom, n3r, 1), n3, 3)
        b5 = conv_relu(f"{name}/5x5", conv_relu(f"{name}/5x5_reduce", bottom, n5r, 1), n5, 5)
        bp = conv_relu(f"{name}/pool_proj", net.pool(f"{name}/pool", bottom, "MAX", 3, 1, 1),
                       npool, 1)
        return net.layer(f"{name}/output", "Concat", [b1, b3, b5, bp], [f"{name}/output"])

    x = net.data(inp, 64)
    x = conv_relu("conv1", x, 32, 3)
    x = net.pool("pool1", x, "MAX", 3, 2)
    x = net.layer("norm1", "LRN", [x], ["norm1"],
                  body=["lrn_param { local_size: 5 alpha: 0.0001 beta: 0.75 }"])
    x = conv_relu("conv2_reduce", x, 64, 1)
    x = conv_relu("conv2", x, 96, 3, group=2)
    x = module("inception_a", x, 32, 48, 64, 16, 16, 16)    # 96 -> 128 channels
    x = module("inception_b", x, 64, 64, 96, 16, 48, 32)    # 128 -> 240
    x = net.pool("pool3", x, "MAX", 3, 2)
    x = module("inception_c", x, 96, 48, 104, 16, 24, 32)   # 240 -> 256
    x = net.pool("pool4", x, "AVE")
    net.layer("drop", "Dropout", [x], [x], body=["dropout_param { dropout_ratio: 0.4 }"])
    net.classifier(x, xavier)
    return net.text()


def main():
    for folder, stem, make in (("resnet", "resnet20", resnet20),
                               ("inception", "inception", inception)):
        os.makedirs(os.path.join(HERE, folder), exist_ok=True)
        for inp in INPUTS:
            path = os.path.join(HERE, folder, f"{stem}_{inp}_train_test.prototxt")
            with open(path, "w") as f:
                f.write(make(inp))
            print("wrote", os.path.relpath(path))


if __name__ == "__main__":
    main()
