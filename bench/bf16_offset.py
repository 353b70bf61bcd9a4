# bf16_offset.py — why a shared model's bfloat16 error moves when its biases stay float32: the
# float64 emulation of bench/bf16_emulate.py (PyTorch, rounding at our plans' points) on N
# inputs (input_0 and N-1 uniform draws in [0, 1), numpy seed 1), each output's error measured
# as bench/half.lua and bench/bf16_paired.lua do (largest |p - p64| over the peak |p64|, p64 the
# unrounded float64 outputs), averaged over the inputs.  Written for emotion (seven class
# probabilities, a softmax of seven logits that are means over 8x8 positions):
#   /usr/bin/python3 bench/bf16_offset.py [N] [DRAWS] [MODEL_DIR]   (default 200 40 emotion)
# Prints, per rounding recipe (activations, weights, which biases rounded to bfloat16):
#   mean err            the mean error over the N inputs
#   sys err             the same with every logit's mean error over the inputs removed first:
#                       what is left once the fixed (input-independent) offset is gone
#   offset              each logit's mean error (the fixed part), in units of 1e-3
#   sd                  the rms over logits of each logit's standard deviation over the inputs
# Then DRAWS recipes whose biases are rounded stochastically (to the bfloat16 value below or
# above, with the probabilities that make the rounding unbiased: other roundings as likely as
# nearest's, and of the same size), activations and weights as the plan rounds them: where
# nearest-rounded biases and float32 biases fall in that distribution of mean errors.
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bf16_emulate import MODELS, Model, rnd  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
DRAWS = int(sys.argv[2]) if len(sys.argv) > 2 else 40
m = Model(sys.argv[3] if len(sys.argv) > 3 else os.path.join(MODELS, 'emotion'))
bf = torch.bfloat16
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
    print('%-38s mean err %.3e  sys err %.3e  offset %s  sd %.1f' % (
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

if DRAWS:
    rng = np.random.default_rng(3)
    means = []
    for _ in range(DRAWS):
        consts = {}
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
            consts[b] = np.where(up, c, a)
        p, _ = forward(act=bf, wdt=bf, consts=consts)
        means.append(errs(p).mean())
    means = np.sort(np.array(means))
    print('%d stochastic roundings of the biases: mean err min %.3e, quartiles %.3e %.3e %.3e, max %.3e;'
          ' nearest rounding (%.3e) below %d of them, float32 biases (%.3e) below %d' % (
              DRAWS, means[0], *np.percentile(means, [25, 50, 75]), means[-1], E['before'].mean(),
              (means > E['before'].mean()).sum(), E['after'].mean(), (means > E['after'].mean()).sum()))
