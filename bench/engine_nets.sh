#!/usr/bin/env bash
# Engine speed on nets the engine was not tuned on (issue 14): forward+backward time per batch
# at one thread, hogstream (`hogstream time`) beside a PyTorch twin of the same prototxt
# (bench/torch_nets.py, Debian's python3-torch), interleaved net by net in every round (torch,
# then hogstream). Prints every round, then per net the medians, images/s, the ratio torch /
# hogstream against the goal (>= 2x on lenet and cifar, >= 1.5x on the rest), the twin's whole
# training step (with Caffe's SGD update), each process's peak RSS (/usr/bin/time -f %M), and
# where hogstream's time goes (by layer type, and the top layers) on the nets it was not tuned on.
#
#   bench/engine_nets.sh [ROUNDS=3]               (needs a build in build/ or $BUILD_DIR)
#   NETS="resnet_c googlenet" bench/engine_nets.sh 1      only these nets
#
# Nets (batch, input): lenet (64, 28x28x1), cifar = cifar10_quick (100, 32x32x3), resnet_f /
# resnet_c = configs/resnet at 28x28x1 / 32x32x3 (64), inception_f / inception_c =
# configs/inception (64), googlenet = Caffe's bvlc_googlenet train_val.prototxt from
# ../shared/compat (16, 224x224x3). Random input on both sides. Before timing, the twin checks
# every layer's top shape and parameter count against `hogstream describe` and stops on a
# difference. Without python3-torch the torch side is skipped (hogstream only). One run of 3
# rounds takes about 10 minutes on the 2-core project machine.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
BIN=${BUILD_DIR:-build}/hogstream
TWIN=bench/torch_nets.py
GOOGLENET=../shared/compat/caffe/models/bvlc_googlenet
NETS=${NETS:-lenet cifar resnet_f resnet_c inception_f inception_c googlenet}
[[ -x $BIN ]] || { echo "build first: scripts/test.sh" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
have_torch=0
if /usr/bin/python3 -c "import torch" 2>/dev/null; then have_torch=1; else
  echo "python3-torch is not installed (apt-get install -y python3-torch): the torch side is" \
       "skipped, hogstream only" >&2; fi

declare -A MODEL=(
  [lenet]=configs/lenet/lenet_train_test.prototxt
  [cifar]=configs/cifar10/quick_train_test.prototxt
  [resnet_f]=configs/resnet/resnet20_fmnist_train_test.prototxt
  [resnet_c]=configs/resnet/resnet20_cifar_train_test.prototxt
  [inception_f]=configs/inception/inception_fmnist_train_test.prototxt
  [inception_c]=configs/inception/inception_cifar_train_test.prototxt
  [googlenet]=$GOOGLENET/train_val.prototxt)
declare -A SOLVER=(
  [lenet]=configs/lenet/solver.prototxt
  [cifar]=configs/cifar10/quick_solver.prototxt
  [resnet_f]=configs/resnet/resnet20_fmnist_solver.prototxt
  [resnet_c]=configs/resnet/resnet20_cifar_solver.prototxt
  [inception_f]=configs/inception/inception_fmnist_solver.prototxt
  [inception_c]=configs/inception/inception_cifar_solver.prototxt
  [googlenet]=$GOOGLENET/solver.prototxt)
declare -A INPUT=([lenet]=data:64,1,28,28 [cifar]=data:100,3,32,32
  [resnet_f]=data:64,1,28,28 [resnet_c]=data:64,3,32,32
  [inception_f]=data:64,1,28,28 [inception_c]=data:64,3,32,32 [googlenet]=data:16,3,224,224)
declare -A GOAL=([lenet]=2 [cifar]=2 [resnet_f]=1.5 [resnet_c]=1.5 [inception_f]=1.5
  [inception_c]=1.5 [googlenet]=1.5)
# Iterations: hogstream's `time` count (after its one warm-up pass); the twin's warm-up and
# window length (3 windows, for forward+backward and again for the training step). About
# 3-15 s of computing per net and side.
declare -A HS_ITERS=([lenet]=200 [cifar]=40 [resnet_f]=12 [resnet_c]=12 [inception_f]=10
  [inception_c]=10 [googlenet]=5)
declare -A TW_WARMUP=([lenet]=5 [cifar]=3 [resnet_f]=2 [resnet_c]=2 [inception_f]=2
  [inception_c]=2 [googlenet]=1)
declare -A TW_ITERS=([lenet]=30 [cifar]=10 [resnet_f]=4 [resnet_c]=4 [inception_f]=4
  [inception_c]=3 [googlenet]=2)
for net in $NETS; do
  [[ -n ${MODEL[$net]:-} ]] || { echo "unknown net '$net' (${!MODEL[*]})" >&2; exit 1; }
  [[ -f ${MODEL[$net]} ]] || { echo "missing ${MODEL[$net]}" >&2; exit 1; }
done

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
results=$WORK/results  # lines: net side ms peak_rss_kib [training_step_ms]
for net in $NETS; do
  "$BIN" describe --model="${MODEL[$net]}" --input="${INPUT[$net]}" >"$WORK/$net.describe"
done

for ((r = 1; r <= ROUNDS; ++r)); do
  for net in $NETS; do
    if ((have_torch)); then
      /usr/bin/time -f %M -o "$WORK/rss" /usr/bin/python3 "$TWIN" --model "${MODEL[$net]}" \
        --input "${INPUT[$net]}" --solver "${SOLVER[$net]}" --describe "$WORK/$net.describe" \
        --threads 1 --warmup "${TW_WARMUP[$net]}" --window-iters "${TW_ITERS[$net]}" \
        --windows 3 >"$WORK/twin.out"
      read -r ms step < <(sed -n 's/^RESULT //p' "$WORK/twin.out" |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["fwd_bwd_ms"], d["train_step_ms"])')
      echo "round $r $net torch $ms ms (training step $step ms)"
      echo "$net torch $ms $(tail -1 "$WORK/rss") $step" >>"$results"
    fi
    OMP_NUM_THREADS=1 /usr/bin/time -f %M -o "$WORK/rss" "$BIN" time --model="${MODEL[$net]}" \
      --input="${INPUT[$net]}" --iterations="${HS_ITERS[$net]}" --threads=1 >"$WORK/$net.time"
    ms=$(sed -n 's/^Median Forward-Backward: \([0-9.]*\).*/\1/p' "$WORK/$net.time")
    echo "round $r $net hogstream $ms ms"
    echo "$net hogstream $ms $(tail -1 "$WORK/rss")" >>"$results"
  done
done

echo
goals=$(for net in $NETS; do printf '%s=%s ' "$net" "${GOAL[$net]}"; done)
python3 - "$results" "$WORK" "$goals" <<'PY'
import collections, re, statistics, sys
results, work = sys.argv[1], sys.argv[2]
goals = {k: float(v) for k, v in (kv.split("=") for kv in sys.argv[3].split())}
nets = list(goals)
rows = collections.defaultdict(list)
for line in open(results):
    f = line.split()
    rows[f[0], f[1]].append([float(x) for x in f[2:]])

def med(net, side, col):
    v = [r[col] for r in rows[net, side] if len(r) > col]
    return statistics.median(v) if v else float("nan")

def batch(net):
    m = re.search(r"Median Forward-Backward: .*batch (\d+)", open(f"{work}/{net}.time").read())
    return int(m.group(1))

print("forward+backward per batch, 1 thread, medians over rounds; ratio = torch / hogstream; "
      "RSS = peak resident MiB")
head = ("net", "batch", "hog ms", "torch ms", "hog img/s", "torch img/s", "ratio", "goal", "",
        "torch step ms", "hog RSS", "torch RSS")
fmt = "{:<12}{:>6}{:>10}{:>10}{:>11}{:>12}{:>8}{:>7} {:<7}{:>14}{:>9}{:>10}"
print(fmt.format(*head))
for net in nets:
    b, h, t = batch(net), med(net, "hogstream", 0), med(net, "torch", 0)
    goal, ratio = goals[net], t / h
    verdict = "-" if ratio != ratio else ("MET" if ratio >= goal else "MISSED")
    show = lambda x, spec=".1f", suffix="": "-" if x != x else f"{x:{spec}}{suffix}"  # nan: no torch
    print(fmt.format(net, b, show(h), show(t), show(b * 1e3 / h), show(b * 1e3 / t),
                     show(ratio, ".2f", "x"), f">={goal:g}x", verdict,
                     show(med(net, "torch", 2)), show(med(net, "hogstream", 1) / 1024, ".0f"),
                     show(med(net, "torch", 1) / 1024, ".0f")))

# Where hogstream's time goes (its last round's per-layer report), on the untuned nets.
for net in nets:
    if net in ("lenet", "cifar"):
        continue
    types = {}
    for line in open(f"{work}/{net}.describe"):
        f = line.split()
        if len(f) >= 2 and f[0] != "layer":
            types[f[0]] = f[1]
    layers = []
    for line in open(f"{work}/{net}.time"):
        m = re.match(r"^(\S+)\s+([\d.]+)\s+([\d.]+)$", line.strip())
        if m:
            layers.append((m.group(1), float(m.group(2)), float(m.group(3))))
    total = sum(f + b for _, f, b in layers)
    by_type = collections.defaultdict(lambda: [0.0, 0.0])
    for name, f, b in layers:
        by_type[types.get(name, "?")][0] += f
        by_type[types.get(name, "?")][1] += b
    print(f"\n{net}: hogstream's {total:.1f} ms by layer type (forward + backward ms, share)")
    for kind, (f, b) in sorted(by_type.items(), key=lambda kv: -sum(kv[1]))[:6]:
        print(f"  {kind:<16}{f:9.1f} +{b:9.1f} ms  {100 * (f + b) / total:5.1f}%")
    print("  top layers: " + ", ".join(
        f"{name} ({types.get(name, '?')}) {f:.1f}+{b:.1f}"
        for name, f, b in sorted(layers, key=lambda l: -(l[1] + l[2]))[:5]))
PY
