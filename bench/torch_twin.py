#!/usr/bin/python3
"""torch_twin.py — PyTorch's side of bench/versus_torch.lua: the same models, shapes and steps
as bench/bench_mlp.c and bench/bench_cnn.c, timed in PyTorch eager and TorchScript.

  /usr/bin/python3 bench/torch_twin.py THREADS REPS [cpu|wall [bf16]]

prints one line per case, "case<TAB>name<TAB>eager ms<TAB>torchscript ms<TAB>note", each the
median of REPS timings (each timing a loop of a few runs, after warm-ups), in wall time, or with
"cpu" in the process's CPU time (time.process_time; BENCH_CPU_TIME times our benches at one
thread in the timing thread's, which there does all of their work: see bench/bench.h).  On an
import failure it prints "skipped<TAB>reason" and exits 0, so the driver can say why.

With "bf16" the same cases run in eager mode twice, alternating rep by rep: under
torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch's mixed precision: matrix products and
convolutions in bfloat16 through oneDNN, the parameters kept in float32 — the training step's
SGD updates float32 master weights, as autocast training does) and in plain float32; the line
is "case<TAB>name<TAB>autocast bf16 ms<TAB>float32 eager ms<TAB>note".  TorchScript is left
out there (its autocast support is partial in 1.13).

Cases (float32):
  mlp b1 forward, mlp b64 forward: 784-256-256-10, dense + relu, dense + relu, dense, softmax;
  mlp b64 sgd step: the forward, softmax cross-entropy (mean over the batch), backward, SGD
    (lr 0.01) — set_to_none gradients, as a training loop does;
  cnn b32 forward: 28x28x1 -> conv3x3x32 SAME + relu -> max_pool 2 -> conv3x3x64 + relu ->
    max_pool 2 -> flatten -> dense 10;
  cnn b32 train step: the forward, backward from a given logits gradient (as bench_cnn.c feeds
    one), SGD on the six parameters.
The CNN runs in both PyTorch layouts, NCHW (its native one) and channels_last (NHWC in memory,
our layout); each column reports the faster, the note says which.  TorchScript inference is
torch.jit.freeze(torch.jit.script(model)) + optimize_for_inference (oneDNN convolutions, PyTorch's
fastest CPU inference path); TorchScript training is the scripted (unfrozen) module under
autograd.
"""
import os
import sys
import time


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    clock = time.process_time if len(sys.argv) > 3 and sys.argv[3] == "cpu" else time.perf_counter
    bf16 = len(sys.argv) > 4 and sys.argv[4] == "bf16"
    # PyTorch's matrix products run on the system BLAS (Debian's: the same OpenBLAS as ours),
    # which takes its thread count from the environment, not from torch.set_num_threads
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    # OpenMP's workers spin while they wait by default: on a shared machine with more runnable
    # threads than cores (the build machine) that costs PyTorch 10-50x at two threads; our
    # thread pool and OpenBLAS sleep, so let PyTorch's sleep too (set the variable to override)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 — any import failure means "no PyTorch here"
        print("skipped\t%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
        return
    torch.set_num_threads(threads)
    torch.manual_seed(1)

    def timeit(fn, iters, warm=3):
        # TorchScript's profiling executor optimizes a graph after its first runs: warm it more
        for _ in range(warm):
            fn()
        times = []
        for _ in range(reps):
            t0 = clock()
            for _ in range(iters):
                fn()
            times.append((clock() - t0) / iters)
        times.sort()
        return times[(len(times) - 1) // 2] * 1e3

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2, self.l3 = nn.Linear(784, 256), nn.Linear(256, 256), nn.Linear(256, 10)

        def forward(self, x):
            return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(1, 32, 3, padding=1)
            self.c2 = nn.Conv2d(32, 64, 3, padding=1)
            self.d = nn.Linear(7 * 7 * 64, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.c1(x)), 2)
            x = F.max_pool2d(F.relu(self.c2(x)), 2)
            return self.d(torch.flatten(x, 1))

    def frozen(model, example):
        with torch.no_grad():
            s = torch.jit.freeze(torch.jit.script(model.eval()))
            s = torch.jit.optimize_for_inference(s)
            s(example)
        return s

    def infer(model, x, softmax):
        def run():
            with torch.no_grad():
                y = model(x)
                return torch.softmax(y, 1) if softmax else y
        return run

    def train(model, step_of):
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def run():
            opt.zero_grad(set_to_none=True)
            step_of(model)
            opt.step()
        return run

    if bf16:
        mixed_cases(torch, nn, F, MLP, CNN, reps, clock)
        return

    out = []
    # ---- MLP ----
    for batch, iters in ((1, 200), (64, 20)):
        m = MLP()
        x = torch.rand(batch, 784)
        eager = timeit(infer(m, x, True), iters)
        script = timeit(infer(frozen(MLP(), x), x, True), iters, 6)
        out.append(("mlp b%d forward" % batch, eager, script, ""))
    x = torch.rand(64, 784)
    labels = torch.tensor([(r * 7) % 10 for r in range(64)])

    def mlp_step(model):
        F.cross_entropy(model(x), labels).backward()
    eager = timeit(train(MLP().train(), mlp_step), 10)
    script = timeit(train(torch.jit.script(MLP().train()), mlp_step), 10, 12)
    out.append(("mlp b64 sgd step", eager, script, ""))

    # ---- CNN, in both layouts ----
    best = {}
    for layout, fmt in (("NCHW", torch.contiguous_format), ("channels_last", torch.channels_last)):
        xc = torch.rand(32, 1, 28, 28).contiguous(memory_format=fmt)
        dl = (torch.rand(32, 10) * 2 - 1) / 32
        cnn = CNN().to(memory_format=fmt)
        res = {"forward": (timeit(infer(cnn, xc, False), 5),
                           timeit(infer(frozen(CNN().to(memory_format=fmt), xc), xc, False), 5, 6))}

        def cnn_step(model, xc=xc, dl=dl):
            model(xc).backward(dl)
        res["train step"] = (timeit(train(CNN().to(memory_format=fmt).train(), cnn_step), 3),
                             timeit(train(torch.jit.script(CNN().to(memory_format=fmt).train()), cnn_step), 3, 12))
        keep_fastest(best, layout, res)
    print_cases(out, best, "eager", "script")


def keep_fastest(best, layout, res):
    """best[case] = [column 1's fastest ms, column 2's, the layout of each]: res (case -> the
    two columns' ms in this layout) folded in."""
    for what, (t1, t2) in res.items():
        b = best.setdefault(what, [None, None, "", ""])
        if b[0] is None or t1 < b[0]:
            b[0], b[2] = t1, layout
        if b[1] is None or t2 < b[1]:
            b[1], b[3] = t2, layout


def print_cases(out, best, name1, name2):
    """Prints the cases of out, then the CNN's at the faster layout of each column (the note
    names the columns name1 and name2 and their layouts)."""
    for what in ("forward", "train step"):
        t1, t2, l1, l2 = best[what]
        out.append(("cnn b32 " + what, t1, t2, "%s %s, %s %s" % (name1, l1, name2, l2)))
    for name, t1, t2, note in out:
        print("case\t%s\t%.6f\t%.6f\t%s" % (name, t1, t2, note))


def mixed_cases(torch, nn, F, MLP, CNN, reps, clock):
    """The cases under autocast bfloat16 beside float32 eager, the two alternating rep by rep."""
    def timeit2(a, b, iters, warm=3):
        for _ in range(warm):
            a()
            b()
        ta, tb = [], []
        for _ in range(reps):
            for fn, ts in ((a, ta), (b, tb)):
                t0 = clock()
                for _ in range(iters):
                    fn()
                ts.append((clock() - t0) / iters)
        ta.sort()
        tb.sort()
        return ta[(reps - 1) // 2] * 1e3, tb[(reps - 1) // 2] * 1e3

    def autocast(enabled):
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled)

    def infer(model, x, softmax, mixed):
        def run():
            with torch.no_grad(), autocast(mixed):
                y = model(x)
                return torch.softmax(y, 1) if softmax else y
        return run

    def train(model, step_of, mixed):
        # the parameters stay float32 (autocast casts them per op): the SGD step updates them
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def run():
            opt.zero_grad(set_to_none=True)
            with autocast(mixed):
                out = step_of(model)
            # backward outside the autocast region, as PyTorch's recipe has it; a (y, dy) pair
            # feeds dy (in y's dtype: bfloat16 under autocast) as the upstream gradient
            if isinstance(out, tuple):
                out[0].backward(out[1].to(out[0].dtype))
            else:
                out.backward()
            opt.step()
        return run

    out = []
    for batch, iters in ((1, 200), (64, 20)):
        m = MLP()
        x = torch.rand(batch, 784)
        out.append(("mlp b%d forward" % batch,) + timeit2(infer(m, x, True, True), infer(m, x, True, False), iters) + ("",))
    x = torch.rand(64, 784)
    labels = torch.tensor([(r * 7) % 10 for r in range(64)])

    def mlp_step(model):
        return F.cross_entropy(model(x), labels)
    out.append(("mlp b64 sgd step",) + timeit2(train(MLP().train(), mlp_step, True),
                                               train(MLP().train(), mlp_step, False), 10) + ("",))
    best = {}
    for layout, fmt in (("NCHW", torch.contiguous_format), ("channels_last", torch.channels_last)):
        xc = torch.rand(32, 1, 28, 28).contiguous(memory_format=fmt)
        dl = (torch.rand(32, 10) * 2 - 1) / 32
        cnn = CNN().to(memory_format=fmt)

        def cnn_step(model, xc=xc, dl=dl):
            return model(xc), dl  # backward from a given logits gradient, as bench_cnn.c feeds
        res = {"forward": timeit2(infer(cnn, xc, False, True), infer(cnn, xc, False, False), 5),
               "train step": timeit2(train(CNN().to(memory_format=fmt).train(), cnn_step, True),
                                     train(CNN().to(memory_format=fmt).train(), cnn_step, False), 3)}
        keep_fastest(best, layout, res)
    print_cases(out, best, "autocast", "float32")


if __name__ == "__main__":
    main()
