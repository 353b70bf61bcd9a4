# bf16_emulate.py — blazeface (../shared/models/blazeface, a TensorFlow.js graph model) run
# outside our kernels, in float64 with PyTorch, rounding to bfloat16 or float16 at the points
# our plans round (every op's output, the input, the weights, the biases: each switchable), so
# that the accuracy a mode costs can be told from a wrong rounding in the library: the output
# error against the model's output_<j>.npy, largest |y - ref| over the peak |ref|, as
# bench/half.lua computes it.  Needs Debian's python3-torch (/usr/bin/python3):
#   /usr/bin/python3 bench/bf16_emulate.py [MODEL_DIR]
# Ops: _FusedConv2D (BiasAdd, Relu), DepthwiseConv2dNative, AddV2, Relu, MaxPool 2x2, Pad,
# Reshape, Identity — blazeface's; another graph stops at its first other op.
import base64
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

D = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '../../shared/models/blazeface')
NAME = os.path.basename(os.path.normpath(D))
model = json.load(open(os.path.join(D, NAME + '.json')))
nodes = model['modelTopology']['node']
W = {}
for group in model['weightsManifest']:
    buf = b''.join(open(os.path.join(D, p), 'rb').read() for p in group['paths'])
    off = 0
    for w in group['weights']:
        if 'quantization' in w:
            sys.exit('%s is quantized (%s): not read here' % (w['name'], w['quantization']['dtype']))
        n = int(np.prod(w['shape'])) if w['shape'] else 1
        dt = np.float32 if w['dtype'] == 'float32' else np.int32
        W[w['name']] = np.frombuffer(buf, dt, n, off).reshape(w['shape'])
        off += 4 * n
x0 = np.load(os.path.join(D, 'input_0.npy'))
meta = json.load(open(os.path.join(D, 'meta.json')))
outs = [o['name'].split(':')[0] for o in meta['outputs']]
refs = [np.load(os.path.join(D, o['file'])) for o in meta['outputs']]


def rnd(t, dt):
    """float64 values rounded to float32, then to dt (nearest even), as the library narrows."""
    return t if dt is None else t.to(torch.float32).to(dt).to(torch.float64)


def same_pad(size, k, s):
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def run(act=None, wdt=None, bdt=None):
    """The outputs with activations (and the input) rounded to act, weights to wdt, biases to
    bdt (None: kept float64)."""
    V = {}
    for n in nodes:
        op, name, a = n['op'], n['name'], n.get('attr', {})
        ins = [i.split(':')[0] for i in n.get('input', [])]
        if op == 'Const':
            w = W[name]
            V[name] = torch.from_numpy(w.astype(np.float64)) if w.dtype == np.float32 else w
        elif op == 'Placeholder':
            V[name] = rnd(torch.from_numpy(x0.astype(np.float64)), act)
        elif op in ('_FusedConv2D', 'DepthwiseConv2dNative'):
            x, w = V[ins[0]].permute(0, 3, 1, 2), rnd(V[ins[1]], wdt)
            kh, kw, s = w.shape[0], w.shape[1], int(a['strides']['list']['i'][1])
            if base64.b64decode(a['padding']['s']) == b'SAME':
                (pt, pb), (pl, pr) = same_pad(x.shape[2], kh, s), same_pad(x.shape[3], kw, s)
                x = F.pad(x, (pl, pr, pt, pb))
            if op == '_FusedConv2D':
                y = F.conv2d(x, w.permute(3, 2, 0, 1), stride=s).permute(0, 2, 3, 1)
                fused = [base64.b64decode(q) for q in a['fused_ops']['list']['s']]
                y = y + rnd(V[ins[2]], bdt)  # the bias is added to the unrounded sums
                if b'Relu' in fused:
                    y = torch.relu(y)
            else:
                c = w.shape[2]
                wt = w.permute(2, 3, 0, 1).reshape(c * w.shape[3], 1, kh, kw)
                y = F.conv2d(x, wt, stride=s, groups=c).permute(0, 2, 3, 1)
            V[name] = rnd(y, act)
        elif op == 'AddV2':
            V[name] = rnd(V[ins[0]] + V[ins[1]], act)
        elif op == 'Relu':  # exact on rounded values
            V[name] = torch.relu(V[ins[0]])
        elif op == 'MaxPool':  # 2x2, stride 2 in blazeface: picks a rounded value
            V[name] = F.max_pool2d(V[ins[0]].permute(0, 3, 1, 2), 2, 2).permute(0, 2, 3, 1)
        elif op == 'Pad':
            p = V[ins[1]]
            V[name] = F.pad(V[ins[0]], tuple(int(v) for d in (3, 2, 1) for v in p[d]))
        elif op == 'Reshape':
            V[name] = V[ins[0]].reshape([int(q) for q in V[ins[1]]])
        elif op == 'Identity':
            V[name] = V[ins[0]]
        else:
            sys.exit('op %s (%s) is not emulated here' % (op, name))
    return [V[o].numpy() for o in outs]


def err(ys):
    return max(np.abs(y - r).max() for y, r in zip(ys, refs)) / max(np.abs(r).max() for r in refs)


consts = [w for w in W.values() if w.dtype == np.float32]
total = sum(w.size for w in consts)
for dt, label in ((np.float16, 'float16'), (torch.bfloat16, 'bfloat16')):
    exact = sum(int((torch.from_numpy(w.copy()).to(dt).float().numpy() == w).sum()) if dt is torch.bfloat16
                else int((w.astype(dt).astype(np.float32) == w).sum()) for w in consts)
    print('%s: %d of %d float constants (%.1f %%) are %s values' % (NAME, exact, total, 100 * exact / total, label))
bf, hf = torch.bfloat16, torch.float16
print('float64, nothing rounded         %.3e' % err(run()))
for label, kw in (('bfloat16: outputs, weights, biases', dict(act=bf, wdt=bf, bdt=bf)),
                  ('bfloat16: outputs, weights       ', dict(act=bf, wdt=bf)),
                  ('bfloat16: outputs only           ', dict(act=bf)),
                  ('bfloat16: weights only           ', dict(wdt=bf)),
                  ('bfloat16: biases only            ', dict(bdt=bf)),
                  ('float16: outputs, weights, biases', dict(act=hf, wdt=hf, bdt=hf)),
                  ('float16: outputs only            ', dict(act=hf))):
    print('%s %.3e' % (label, err(run(**kw))))
