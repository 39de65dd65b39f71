#!/usr/bin/python3
"""CIFAR-10 sprites (PNG) to CIFAR-10 binary batches, for scripts/cifar10.sh.

The sprite format: one PNG per batch, 8-bit RGB, 1 024 pixels wide and one row per image (10 000
in each of CIFAR-10's batches); row i is image i, its 32 x 32 pixels in row-major order
(y * 32 + x). The labels are a JSON array of class numbers (0-9), every row's of the batches
given, in order (train: 50 000, test: 10 000).

The binary format (the one `hogstream convert cifar10` reads): per image, 1 label byte and then
3 x 1 024 bytes, the red plane, the green plane and the blue plane, each row-major.

    cifar10_png.py LABELS.json OUT_DIR SPRITE.png:NAME.bin...
"""
import json
import sys

import numpy as np
from PIL import Image


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    labels_path, out_dir, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
    try:
        with open(labels_path) as f:
            labels = np.asarray(json.load(f), dtype=np.int64)
    except (OSError, ValueError, TypeError) as e:
        sys.exit(f"cifar10_png.py: {labels_path}: {e}")
    if labels.ndim != 1 or (len(labels) and (labels.min() < 0 or labels.max() > 9)):
        sys.exit(f"cifar10_png.py: {labels_path} is not a list of labels 0-9")
    sprites = []
    for pair in pairs:
        sprite, name = pair.rsplit(":", 1)
        try:
            image = Image.open(sprite)
            image.load()
        except OSError as e:
            sys.exit(f"cifar10_png.py: {sprite}: {e}")
        if image.mode != "RGB" or image.size[0] != 1024:
            sys.exit(f"cifar10_png.py: {sprite} is {image.mode} {image.size[0]} pixels wide, not RGB 1024")
        sprites.append((sprite, name, image))
    rows = sum(image.size[1] for _, _, image in sprites)
    if len(labels) != rows:
        sys.exit(f"cifar10_png.py: {labels_path} has {len(labels)} labels for {rows} images")
    at = 0
    for sprite, name, image in sprites:
        pixels = np.asarray(image)                  # n x 1 024 x 3 (per row: y, x, R G B)
        n = pixels.shape[0]
        records = np.empty((n, 1 + 3 * 1024), dtype=np.uint8)
        records[:, 0] = labels[at:at + n]
        records[:, 1:] = pixels.transpose(0, 2, 1).reshape(n, 3 * 1024)  # per row: R, G, B planes
        records.tofile(f"{out_dir}/{name}")
        at += n
        print(f"{sprite} -> {out_dir}/{name}: {n} images", flush=True)


if __name__ == "__main__":
    main()
