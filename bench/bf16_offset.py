# bf16_offset.py — why a shared model's bfloat16 error moves when its biases stay float32: the
# float64 emulation of bench/bf16_emulate.py (PyTorch, rounding at our plans' points) on N
# inputs (input_0 and N-1 uniform draws in [0, 1), numpy seed 1), each output's error measured
# as bench/half.lua and bench/bf16_paired.lua do (largest |p - p64| over the peak |p64|, p64 the
# unrounded float64 outputs), averaged over the inputs.  Written for emotion (seven class
# probabilities, a softmax of seven logits that are means over 8x8 positions):
#   /usr/bin/python3 bench/bf16_offset.py [--stochastic] [N] [DRAWS] [MODEL_DIR]
#                                                          (default 200 40 emotion)
#   /usr/bin/python3 bench/bf16_offset.py --layers DIR [MODEL_DIR]
#     instead checks our plans op by op: DIR as `lua5.4 bench/bf16_paired.lua --dump DIR` writes
#     it (each step's output under both bfloat16 plans, float32 and bfloat16 biases); each op is
#     recomputed here from our values of its inputs, in float64 with the plan's roundings, and
#     compared with ours: per op, elements that differ / elements (largest difference over the
#     op's peak |value|), and how many differ by more than one bfloat16 ulp plus the float32
#     sum's bound (k 2^-23 sum|x w|, k the taps: docs/numerics.md).  A misread bias shows in
#     many elements (held to the other plan's recipe, emotion's dumps differ in 1-34 % of each
#     fused convolution's); the sums' float32 order against float64 flips a rounding now and
#     then (values near a tie, or cancelling to near zero).
# Prints, per rounding recipe (activations, weights, which biases rounded to bfloat16):
#   mean err            the mean error over the N inputs
#   less offset         the same with every logit's mean error over the inputs removed first:
#                       what is left once the fixed (input-independent) offset is gone
#   offset              each logit's mean error (the fixed part), in units of 1e-3
#   sd                  the rms over logits of each logit's standard deviation over the inputs
# Then DRAWS recipes with activations and weights rounded as the plan rounds them and each
# bias moved by the distance nearest rounding moves it, up or down at random (the sizes of
# nearest rounding's offsets, their directions drawn; --stochastic: each bias rounded to the
# bfloat16 value below or above it, unbiased, the nearer the likelier): where nearest-rounded
# and float32 biases fall among those mean errors.  Each draw is one forward run of the N
# inputs: the default run (15 recipes, then 40 draws, of 200 inputs) took 18-22 minutes on
# the shared 2-core machine of docs/compiler.md's figures.
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bf16_emulate import MODELS, Model, rnd  # noqa: E402

bf = torch.bfloat16


def layers(D, m):
    """The op-by-op check of the dumps in D (see the header)."""
    names = [line.split()[1].split(':')[0] for line in open(os.path.join(D, 'names.txt'))]
    at = {n: i + 1 for i, n in enumerate(names)}
    k = 1
    while os.path.exists(os.path.join(D, 'x_%d.npy' % k)):
        for plan, bdt in (('after', None), ('before', bf)):
            def ours(name):
                return torch.from_numpy(np.load(os.path.join(D, '%s_%d_%d.npy' % (plan, k, at[name]))).astype(np.float64))
            V, cells, beyond = {}, [], [0]
            for n in m.nodes:
                name = n['name']
                if n['op'] == 'Const':
                    w = m.W[name]
                    V[name] = torch.from_numpy(w.astype(np.float64)) if w.dtype != np.int32 else w
                elif n['op'] == 'Placeholder':  # the plan's first step casts the feed to bfloat16
                    V[name] = rnd(torch.from_numpy(np.load(os.path.join(D, 'x_%d.npy' % k)).astype(np.float64)), bf)
                elif name in at:
                    xs = [V[i.split(':')[0]] for i in n['input']]
                    act = None if n['op'] in ('Mean', 'Softmax', 'Identity') else bf
                    want, got = m.layer(n, xs, act=act, wdt=bf, bdt=bdt).numpy(), ours(name)
                    d = np.abs(want - got.numpy())
                    # unrounded (float32) outputs: count what float32 itself cannot explain
                    cut = 0 if act is not None else 1e-6 * np.abs(want).max()
                    cells.append('%d/%d(%.1g)' % ((d > cut).sum(), d.size, d.max() / max(np.abs(want).max(), 1e-30)))
                    if act is not None:  # beyond one bfloat16 ulp plus the float32 sum's bound?
                        big = np.maximum(np.abs(want), np.abs(got.numpy()))
                        ulp = np.ldexp(1.0, np.floor(np.log2(np.where(big > 0, big, 1))).astype(int) - 7)
                        bound = ulp
                        if n['op'] in ('_FusedConv2D', 'DepthwiseConv2dNative'):
                            w = xs[1].shape
                            taps = w[0] * w[1] * (w[2] if n['op'] == '_FusedConv2D' else 1)
                            mags = m.layer(n, [torch.abs(t) for t in xs], wdt=bf, bdt=bdt).numpy()
                            bound = ulp + taps * 2.0 ** -23 * mags
                        beyond[0] += int((d > bound).sum())
                    V[name] = got  # the next op reads ours
            print('input %d, %s (%d elements beyond 1 bfloat16 ulp + k 2^-23 sum|x w|):' % (k, plan, beyond[0]),
                  ' '.join(cells))
        k += 1


if len(sys.argv) > 2 and sys.argv[1] == '--layers':
    layers(sys.argv[2], Model(sys.argv[3] if len(sys.argv) > 3 else os.path.join(MODELS, 'emotion')))
    sys.exit(0)
STOCHASTIC = '--stochastic' in sys.argv
argv = [a for a in sys.argv if a != '--stochastic']
N = int(argv[1]) if len(argv) > 1 else 200
DRAWS = int(argv[2]) if len(argv) > 2 else 40
m = Model(argv[3] if len(argv) > 3 else os.path.join(MODELS, 'emotion'))
# the logits: the input of the output's softmax
soft = next(n for n in m.nodes if n['op'] == 'Softmax')
LOGITS = soft['input'][0].split(':')[0]
xs = np.concatenate([m.x0, np.random.default_rng(1).random((N - 1,) + m.x0.shape[1:], dtype=np.float32)])


def forward(**kw):
    ys, V = m.run(xs, taps=True, **kw)
    return ys[0], V[LOGITS].numpy()


P64, L64 = forward()
peak = np.abs(P64).max(axis=1)


def errs(p):
    return np.abs(p - P64).max(axis=1) / peak


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def report(label, p, logits):
    d = logits - L64
    off = d.mean(axis=0)
    e = errs(p)
    print('%-38s mean err %.3e  less offset %.3e  offset %s  sd %.1f' % (
        label, e.mean(), errs(softmax(logits - off)).mean(),
        ' '.join('%+5.1f' % (1e3 * o) for o in off), 1e3 * np.sqrt((d.std(axis=0) ** 2).mean())))
    return e


def biases_rounded(names):
    """Constants with the biases in names rounded to bfloat16 (as float64 values)."""
    return {b: rnd(torch.from_numpy(m.W[b].astype(np.float64)), bf).numpy() for b in names}


print('%s: %d inputs; errors against the float64 emulation with nothing rounded; offset and sd'
      ' in 1e-3 of a logit' % (m.name, N))
print('mean probability per class (float64): %s' % ' '.join('%.3f' % q for q in P64.mean(axis=0)))
E = {}
E['after'] = report('activations, weights (float32 biases)', *forward(act=bf, wdt=bf))
E['before'] = report('activations, weights, biases', *forward(act=bf, wdt=bf, bdt=bf))
report('activations only', *forward(act=bf))
report('weights only', *forward(wdt=bf))
report('biases only', *forward(bdt=bf))
for i, b in enumerate(m.biases):
    report('act, weights, bias %d of %d (%d ch)' % (i + 1, len(m.biases), m.W[b].size),
           *forward(act=bf, wdt=bf, consts=biases_rounded([b])))

# paired: per input, before against after
r = E['after'] / np.maximum(E['before'], 1e-30)
rng = np.random.default_rng(2)
boot = [E['after'][i].mean() / E['before'][i].mean() for i in (rng.integers(0, N, N) for _ in range(2000))]
print('paired over %d inputs: after / before mean err %.3f (bootstrap 95 %% %.3f-%.3f); after worse on'
      ' %d inputs, median per-input ratio %.2f' % (N, E['after'].mean() / E['before'].mean(),
                                                    *np.percentile(boot, [2.5, 97.5]), (r > 1).sum(), np.median(r)))



def flipped(rng):
    """The biases moved by nearest rounding's distances |round(b) - b|, each in a random direction:
    an offset of the same sizes as nearest rounding's, its signs drawn."""
    out = {}
    for b in m.biases:
        v = m.W[b].astype(np.float64)
        d = np.abs(rnd(torch.from_numpy(v.copy()), bf).numpy() - v)
        out[b] = v + np.where(rng.random(v.shape) < 0.5, -d, d)
    return out


def stochastic(rng):
    """The biases rounded to the bfloat16 value below or above, unbiased (the nearer one the more
    likely): other roundings, larger on average than nearest's."""
    out = {}
    for b in m.biases:
        v = m.W[b].astype(np.float32)
        lo = torch.from_numpy(v.copy()).to(bf)  # nearest; find the neighbours around v
        lo64 = lo.to(torch.float64).numpy()
        # the bfloat16 neighbour on the other side of v (nextafter in bfloat16's 8 bits)
        bits = lo.view(torch.int16).numpy().astype(np.int32)
        step = np.where((lo64 < v) == (lo64 >= 0), 1, -1)
        other = torch.from_numpy((bits + step).astype(np.int16)).view(bf).to(torch.float64).numpy()
        other = np.where(lo64 == v, lo64, other)
        a, c = np.minimum(lo64, other), np.maximum(lo64, other)
        up = rng.random(v.shape) < np.where(c > a, (v - a) / np.where(c > a, c - a, 1), 0)
        out[b] = np.where(up, c, a)
    return out


if DRAWS:
    rng = np.random.default_rng(3)
    draw, label = (stochastic, 'stochastic roundings of the biases') if STOCHASTIC else \
        (flipped, 'bias offsets of nearest rounding\'s sizes in random directions')
    means = np.sort(np.array([errs(forward(act=bf, wdt=bf, consts=draw(rng))[0]).mean() for _ in range(DRAWS)]))
    print('%d %s: mean err min %.3e, quartiles %.3e %.3e %.3e, max %.3e;'
          ' nearest rounding (%.3e) below %d of them, float32 biases (%.3e) below %d' % (
              DRAWS, label, means[0], *np.percentile(means, [25, 50, 75]), means[-1], E['before'].mean(),
              (means > E['before'].mean()).sum(), E['after'].mean(), (means > E['after'].mean()).sum()))
