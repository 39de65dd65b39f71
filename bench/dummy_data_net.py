#!/usr/bin/env python3
"""Writes a training net for speed runs: NET.prototxt with every Data layer replaced by one
DummyData layer of constant data and labels (made once, never refilled, so no host work and
no copy per iteration: the peer's data also sits on the GPU before timing).

    dummy_data_net.py NET.prototxt N,C,H,W > OUT.prototxt

The layer's tops are "data" and "label" (label 1 for every image)."""
import re
import sys


def layers(text):
    """Top-level 'layer { ... }' blocks as (start, end) spans, by brace matching."""
    spans, i = [], 0
    for m in re.finditer(r'(?m)^\s*layer\s*\{', text):
        if m.start() < i:
            continue
        depth, j = 0, m.end() - 1
        while j < len(text):
            if text[j] == '{':
                depth += 1
            elif text[j] == '}':
                depth -= 1
                if depth == 0:
                    break
            j += 1
        spans.append((m.start(), j + 1))
        i = j + 1
    return spans


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    text = open(sys.argv[1]).read()
    dims = [int(d) for d in sys.argv[2].split(',')]
    out, last = [], 0
    for a, b in layers(text):
        block = text[a:b]
        if re.search(r'\btype\s*:\s*"Data"', block):
            out.append(text[last:a])
            last = b
    out.append(text[last:])
    shape = ' '.join('dim: %d' % d for d in dims)
    dummy = ('layer { name: "data" type: "DummyData" top: "data" top: "label"\n'
             '  dummy_data_param { shape { %s } shape { dim: %d }\n'
             '    data_filler { type: "constant" value: 0.5 } data_filler { type: "constant" value: 1 } } }\n'
             % (shape, dims[0]))
    body = ''.join(out)
    # After the net's name line, if any.
    m = re.match(r'\s*name\s*:\s*"[^"]*"\s*\n', body)
    at = m.end() if m else 0
    sys.stdout.write(body[:at] + dummy + body[at:])


if __name__ == '__main__':
    main()
