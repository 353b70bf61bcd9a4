# bf16_emulate.py — a shared TensorFlow.js graph model (../shared/models/NAME) run outside our
# kernels, in float64 with PyTorch, rounding to bfloat16 or float16 at the points our plans
# round (every op's output, the input, the weights, the biases: each switchable), so that the
# accuracy a mode costs can be told from a wrong rounding in the library: the output error
# against the model's output_<j>.npy, largest |y - ref| over the peak |ref|, as bench/half.lua
# computes it.  Needs Debian's python3-torch (/usr/bin/python3):
#   /usr/bin/python3 bench/bf16_emulate.py [MODEL_DIR]        (default: blazeface)
# Ops: _FusedConv2D (BiasAdd, Relu), DepthwiseConv2dNative, AddV2, Relu, MaxPool, Pad, Reshape,
# Mean, Softmax, Identity — blazeface's and emotion's; another graph stops at its first other op.
# Also a module (bench/bf16_offset.py imports it): Model(dir).run(x, ...) and Model.layer(...).
import base64
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.environ.get('NPU_MODELS_DIR') or os.path.join(HERE, '../../shared/models')


def rnd(t, dt):
    """float64 values rounded to float32, then to dt (nearest even), as the library narrows."""
    return t if dt is None else t.to(torch.float32).to(dt).to(torch.float64)


def same_pad(size, k, s):
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def attr_ints(a, key):
    return [int(i) for i in a[key]['list']['i']]


class Model:
    """The graph, weights, input_0, output names and reference outputs of the model in dir D."""

    def __init__(self, D):
        self.dir, self.name = D, os.path.basename(os.path.normpath(D))
        model = json.load(open(os.path.join(D, self.name + '.json')))
        self.nodes = model['modelTopology']['node']
        self.W = {}
        for group in model['weightsManifest']:
            buf = b''.join(open(os.path.join(D, p), 'rb').read() for p in group['paths'])
            off = 0
            for w in group['weights']:
                if 'quantization' in w:
                    sys.exit('%s is quantized (%s): not read here' % (w['name'], w['quantization']['dtype']))
                n = int(np.prod(w['shape'])) if w['shape'] else 1
                dt = np.float32 if w['dtype'] == 'float32' else np.int32
                self.W[w['name']] = np.frombuffer(buf, dt, n, off).reshape(w['shape'])
                off += 4 * n
        self.x0 = np.load(os.path.join(D, 'input_0.npy'))
        meta = json.load(open(os.path.join(D, 'meta.json')))
        self.outs = [o['name'].split(':')[0] for o in meta['outputs']]
        self.refs = [np.load(os.path.join(D, o['file'])) for o in meta['outputs']]
        # the biases: third input of each _FusedConv2D
        self.biases = [n['input'][2].split(':')[0] for n in self.nodes if n['op'] == '_FusedConv2D']

    def layer(self, n, xs, act=None, wdt=None, bdt=None, consts=None):
        """Node n's output from its inputs' values xs (float64 tensors, constants included),
        rounded to act; weights rounded to wdt, biases to bdt (None: kept float64)."""
        op, a = n['op'], n.get('attr', {})
        if op in ('_FusedConv2D', 'DepthwiseConv2dNative'):
            x, w = xs[0].permute(0, 3, 1, 2), rnd(xs[1], wdt)
            kh, kw, s = w.shape[0], w.shape[1], attr_ints(a, 'strides')[1]
            if base64.b64decode(a['padding']['s']) == b'SAME':
                (pt, pb), (pl, pr) = same_pad(x.shape[2], kh, s), same_pad(x.shape[3], kw, s)
                x = F.pad(x, (pl, pr, pt, pb))
            if op == '_FusedConv2D':
                y = F.conv2d(x, w.permute(3, 2, 0, 1), stride=s).permute(0, 2, 3, 1)
                fused = [base64.b64decode(q) for q in a['fused_ops']['list']['s']]
                y = y + rnd(xs[2], bdt)  # the bias is added to the unrounded sums
                if b'Relu' in fused:
                    y = torch.relu(y)
            else:
                c = w.shape[2]
                wt = w.permute(2, 3, 0, 1).reshape(c * w.shape[3], 1, kh, kw)
                y = F.conv2d(x, wt, stride=s, groups=c).permute(0, 2, 3, 1)
            return rnd(y, act)
        if op == 'AddV2':
            return rnd(xs[0] + xs[1], act)
        if op == 'Relu':  # exact on rounded values
            return torch.relu(xs[0])
        if op == 'MaxPool':  # picks a rounded value
            (kh, kw), (sh, sw) = attr_ints(a, 'ksize')[1:3], attr_ints(a, 'strides')[1:3]
            x = xs[0].permute(0, 3, 1, 2)
            if base64.b64decode(a['padding']['s']) == b'SAME':
                (pt, pb), (pl, pr) = same_pad(x.shape[2], kh, sh), same_pad(x.shape[3], kw, sw)
                x = F.pad(x, (pl, pr, pt, pb), value=-float('inf'))
            return F.max_pool2d(x, (kh, kw), (sh, sw)).permute(0, 2, 3, 1)
        if op == 'Pad':
            p = xs[1]
            return F.pad(xs[0], tuple(int(v) for d in (3, 2, 1) for v in p[d]))
        if op == 'Reshape':
            return xs[0].reshape([int(q) for q in xs[1]])
        if op == 'Mean':  # a block-list op: float32, not rounded
            keep = a.get('keep_dims', {}).get('b', False)
            return xs[0].mean(dim=[int(d) for d in xs[1]], keepdim=keep)
        if op == 'Softmax':  # float32, not rounded
            return torch.softmax(xs[0], dim=-1)
        if op == 'Identity':
            return xs[0]
        sys.exit('op %s (%s) is not emulated here' % (op, n['name']))

    def run(self, x=None, act=None, wdt=None, bdt=None, consts=None, taps=False):
        """The outputs (a list of arrays; with taps, also every node's value by name) for input
        x (default input_0) with activations (and the input) rounded to act, weights to wdt,
        biases to bdt; consts: {name: array} replacing constants."""
        V = {}
        for n in self.nodes:
            op, name = n['op'], n['name']
            if op == 'Const':
                w = consts[name] if consts and name in consts else self.W[name]
                V[name] = torch.from_numpy(np.asarray(w, np.float64)) if w.dtype != np.int32 else w
            elif op == 'Placeholder':
                V[name] = rnd(torch.from_numpy(np.asarray(self.x0 if x is None else x, np.float64)), act)
            else:
                V[name] = self.layer(n, [V[i.split(':')[0]] for i in n.get('input', [])], act, wdt, bdt)
        ys = [V[o].numpy() for o in self.outs]
        return (ys, V) if taps else ys

    def err(self, ys, refs=None):
        refs = self.refs if refs is None else refs
        return max(np.abs(y - r).max() for y, r in zip(ys, refs)) / max(np.abs(r).max() for r in refs)


def main():
    m = Model(sys.argv[1] if len(sys.argv) > 1 else os.path.join(MODELS, 'blazeface'))
    consts = [w for w in m.W.values() if w.dtype == np.float32]
    total = sum(w.size for w in consts)
    for dt, label in ((np.float16, 'float16'), (torch.bfloat16, 'bfloat16')):
        exact = sum(int((torch.from_numpy(w.copy()).to(dt).float().numpy() == w).sum()) if dt is torch.bfloat16
                    else int((w.astype(dt).astype(np.float32) == w).sum()) for w in consts)
        print('%s: %d of %d float constants (%.1f %%) are %s values' % (m.name, exact, total, 100 * exact / total, label))
    bf, hf = torch.bfloat16, torch.float16
    print('float64, nothing rounded         %.3e' % m.err(m.run()))
    for label, kw in (('bfloat16: outputs, weights, biases', dict(act=bf, wdt=bf, bdt=bf)),
                      ('bfloat16: outputs, weights       ', dict(act=bf, wdt=bf)),
                      ('bfloat16: outputs only           ', dict(act=bf)),
                      ('bfloat16: weights only           ', dict(wdt=bf)),
                      ('bfloat16: biases only            ', dict(bdt=bf)),
                      ('float16: outputs, weights, biases', dict(act=hf, wdt=hf, bdt=hf)),
                      ('float16: outputs only            ', dict(act=hf))):
        print('%s %.3e' % (label, m.err(m.run(**kw))))


if __name__ == '__main__':
    main()
