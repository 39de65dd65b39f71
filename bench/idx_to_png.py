#!/usr/bin/python3
"""Writes an IDX image file (MNIST / Fashion-MNIST, gzipped or not) out as gray PNG files and a
"PATH LABEL" list, for bench/images.sh: real image files for `hogstream convert imageset` and
the ImageData layer. PNGs are written with the standard library only (zlib, a CRC per chunk).

  idx_to_png.py IMAGES LABELS OUT_DIR [--limit N]   -> OUT_DIR/NNNNN.png, OUT_DIR/list.txt
"""
import argparse
import gzip
import os
import struct
import zlib


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    magic, n = struct.unpack(">II", raw[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", raw[8:16])
        size = rows * cols
        return [(raw[16 + i * size:16 + (i + 1) * size], rows, cols) for i in range(n)]
    if magic == 2049:
        return list(raw[8:8 + n])
    raise SystemExit(f"{path}: not an IDX image or label file (magic {magic})")


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_gray(pixels, rows, cols):
    scan = b"".join(b"\x00" + pixels[r * cols:(r + 1) * cols] for r in range(rows))  # filter 0 per row
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", cols, rows, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(scan, 6)) + chunk(b"IEND", b""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("images")
    ap.add_argument("labels")
    ap.add_argument("out")
    ap.add_argument("--limit", type=int, default=0)
    a = ap.parse_args()
    images, labels = read_idx(a.images), read_idx(a.labels)
    if len(images) != len(labels):
        raise SystemExit(f"{len(images)} images but {len(labels)} labels")
    n = min(len(images), a.limit) if a.limit else len(images)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "list.txt"), "w") as lst:
        for i in range(n):
            pixels, rows, cols = images[i]
            name = f"{i:05d}.png"
            with open(os.path.join(a.out, name), "wb") as f:
                f.write(png_gray(pixels, rows, cols))
            lst.write(f"{name} {labels[i]}\n")
    print(f"wrote {n} PNG files and list.txt to {a.out}")


if __name__ == "__main__":
    main()
