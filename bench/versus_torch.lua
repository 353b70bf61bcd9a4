-- versus_torch.lua — lua-npu, its hand-written C twins and PyTorch (eager and TorchScript) side
-- by side in one run, on the same shapes and steps: MLP 784-256-256-10 forward at batch 1 and
-- 64, its SGD step at batch 64, the CNN of bench_cnn.c forward and training step at batch 32.
--
--   make build/bench/bench_mlp build/bench/bench_cnn
--   lua5.4 bench/versus_torch.lua [--bf16] [ROUNDS] [REPS] [THREADS...]     (5 9 1 2)
--
-- Each round and thread count starts our two bench binaries (session and twin interleaved rep
-- by rep, medians of REPS; BENCH_TSV) and bench/torch_twin.py (medians of REPS), alternating
-- which goes first; the table gives each case's median over the rounds and the ratios.  One
-- thread means one device thread (OpenBLAS at one inside the session, as the context sets
-- it), OpenBLAS at one for the twin, torch.set_num_threads(1) and OPENBLAS_NUM_THREADS=1 for
-- PyTorch (whose matrix products run on the same Debian OpenBLAS, its convolutions on oneDNN).
-- Clocks: at one thread every side is timed in CPU time (BENCH_CPU_TIME: the timing thread's,
-- see bench/bench.h; time.process_time), which leaves out the waits for a core on a shared
-- machine with more runnable threads than cores (the build machine: load 10 on 2 cores); at two threads in wall
-- time (CPU time would add the threads up), so that column is only meaningful on a quiet machine.
-- Data layout: ours NHWC; PyTorch both NCHW and channels_last (NHWC in memory), the faster
-- counted (torch_twin.py).  PyTorch is optional: without /usr/bin/python3 and its torch the
-- PyTorch columns say why they are empty.
--
-- --bf16 adds a second table per thread count: our sessions under precision_mode =
-- allow_mix_precision_bf16 (BENCH_PRECISION; the hand twins stay float32 and are not shown)
-- beside PyTorch eager under torch.autocast("cpu", dtype=torch.bfloat16) (torch_twin.py's bf16
-- mode, which times autocast and plain float32 eager alternately in one process), and both
-- sides' float32: ours from the float32 table's runs of the same round, PyTorch's the eager
-- float32 of the autocast process.  Column "no dpbf16" is ours under the same mode with
-- NPU_NO_AVX512BF16=1: kernels that would compute on bfloat16 with AVX512_BF16 dot products
-- (npuK_bf16dot) widen to float32 instead, so the two columns show what the native kernels
-- bring, in one run.  Each round then runs five processes (ours float32, ours bf16, ours bf16
-- without dpbf16, PyTorch, PyTorch bf16), in reverse order every other round.  Ratios: ours
-- bf16 / autocast (the median of the rounds' ratios, as above), and each side's bf16 / its
-- float32 (< 1: the mixed precision is faster than float32 on that side).
local here = arg and arg[0] and arg[0]:match("^(.*)/bench/[^/]*$") or "."
local median = dofile(here .. "/bench/util.lua").median

local args, bf16 = {}, false
for _, a in ipairs(arg or {}) do
  if a == "--bf16" then bf16 = true else args[#args + 1] = a end
end
-- an unknown option or a word where a count belongs is a mistake, not a default
for i, a in ipairs(args) do
  local n = tonumber(a)
  if not n or n < 1 or n ~= math.floor(n) then
    io.stderr:write(("versus_torch: argument '%s' is not --bf16 or a positive count "
      .. "(usage: [--bf16] [ROUNDS] [REPS] [THREADS...])\n"):format(a))
    os.exit(2)
  end
  args[i] = n
end
local rounds, reps = args[1] or 5, args[2] or 9
local thread_counts = {}
for i = 3, #args do thread_counts[#thread_counts + 1] = args[i] end
if #thread_counts == 0 then thread_counts = { 1, 2 } end

local PY = os.getenv("NPU_TORCH_PYTHON") or "/usr/bin/python3"

for _, bin in ipairs { "bench_mlp", "bench_cnn" } do
  local f = io.open(here .. "/build/bench/" .. bin, "rb")
  if not f then
    print(("versus_torch: build/bench/%s is missing: make build/bench/bench_mlp build/bench/bench_cnn"):format(bin))
    return
  end
  f:close()
end

-- Runs cmd; returns { [case] = { a, b, note } } from its "case" lines and its other output.
local function collect(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local got, other = {}, {}
  for line in p:lines() do
    local name, a, b, note = line:match("^case\t(.-)\t([%d.eE+-]+)\t([%d.eE+-]+)\t?(.*)$")
    if name then
      got[name] = { tonumber(a), tonumber(b), note }
    elseif line ~= "" then
      other[#other + 1] = line
    end
  end
  p:close()
  return got, table.concat(other, "; ")
end

local torch_skip -- the reason PyTorch is not measured, once known
do
  local p = io.popen(("'%s' -c 'import torch' 2>&1"):format(PY))
  local out = p:read("a")
  local ok = p:close()
  if not ok then
    torch_skip = out:match("([^\n]*Error[^\n]*)") or out:match("([^\n]+)") or "python3 failed"
  end
end

-- "cnn ..." rows: the default session (op_select_implmode's default, high_performance:
-- Winograd where its rule takes the layer); ", high_precision": the direct kernel
local order = { "mlp b1 forward", "mlp b64 forward", "mlp b64 sgd step", "cnn b32 forward",
  "cnn b32 forward, high_precision", "cnn b32 train step", "cnn b32 train step, high_precision" }
local torch_of = { ["cnn b32 forward, high_precision"] = "cnn b32 forward",
  ["cnn b32 train step, high_precision"] = "cnn b32 train step" }

local MIXED = "allow_mix_precision_bf16"

for _, threads in ipairs(thread_counts) do
  local ours, hand, eager, script, notes = {}, {}, {}, {}, {}
  local q_eager, q_script = {}, {} -- per round: ours / PyTorch of that round (adjacent in time)
  -- --bf16: ours under MIXED, PyTorch autocast and its float32 eager (same process), per case;
  -- per round ours bf16 / autocast
  local ours16, wide16, auto16, eager32, notes16, q_auto = {}, {}, {}, {}, {}, {}
  local function add(t, k, v)
    t[k] = t[k] or {}
    table.insert(t[k], v)
  end
  for r = 1, rounds do
    -- precision nil: float32, into ours and hand; else into sink
    local function run_ours(precision, env, sink)
      return function()
        for _, bin in ipairs { "bench_mlp", "bench_cnn" } do
          local got, other = collect(("BENCH_TSV=1 %s%s%s'%s/build/bench/%s' %d %d"):format(
            threads == 1 and "BENCH_CPU_TIME=1 " or "", env or "",
            precision and ("BENCH_PRECISION=%s "):format(precision) or "", here, bin, reps, threads))
          if not next(got) then error(bin .. " failed: " .. other) end
          for k, v in pairs(got) do
            if precision then add(sink, k, v[1]) else add(ours, k, v[1]); add(hand, k, v[2]) end
          end
        end
      end
    end
    local function run_torch(mode)
      return function()
        if torch_skip then return end
        local got, other = collect(("'%s' '%s/bench/torch_twin.py' %d %d %s %s"):format(PY, here, threads, reps,
          threads == 1 and "cpu" or "wall", mode or ""))
        if not next(got) then
          torch_skip = other:match("^skipped\t(.*)") or other
          return
        end
        for k, v in pairs(got) do
          if mode then
            add(auto16, k, v[1]); add(eager32, k, v[2]); notes16[k] = v[3]
          else
            add(eager, k, v[1]); add(script, k, v[2]); notes[k] = v[3]
          end
        end
      end
    end
    local steps = { run_ours(), run_torch() }
    if bf16 then
      steps[3], steps[4] = run_ours(MIXED, nil, ours16), run_torch("bf16")
      steps[5] = run_ours(MIXED, "NPU_NO_AVX512BF16=1 ", wide16)
    end
    for i = 1, #steps do steps[r % 2 == 1 and i or #steps + 1 - i]() end
    for case, o in pairs(ours) do
      local tc = torch_of[case] or case
      if eager[tc] and #eager[tc] == r and #o == r then
        add(q_eager, case, o[r] / eager[tc][r])
        add(q_script, case, o[r] / script[tc][r])
      end
    end
    for case, o in pairs(ours16) do
      local tc = torch_of[case] or case
      if auto16[tc] and #auto16[tc] == r and #o == r then add(q_auto, case, o[r] / auto16[tc][r]) end
    end
  end
  print(("%d thread(s), %s: median over %d rounds of each process's median of %d reps, ms; ratios ours / other"
    .. " (< 1: ours faster; against PyTorch the median of the rounds' ratios)")
    :format(threads, threads == 1 and "CPU time" or "wall time", rounds, reps))
  print(("%-26s %8s %8s %8s %8s   %7s %7s %7s"):format("case", "ours", "hand C", "eager", "script",
    "/hand", "/eager", "/script"))
  for _, case in ipairs(order) do
    if ours[case] then
      local o, h = median(ours[case]), median(hand[case])
      local tc = torch_of[case] or case
      local e = eager[tc] and median(eager[tc])
      local s = script[tc] and median(script[tc])
      local qe = q_eager[case] and median(q_eager[case])
      local qs = q_script[case] and median(q_script[case])
      local function f(x) return x and ("%8.3f"):format(x) or ("%8s"):format("-") end
      local function q(x) return x and ("%7.2f"):format(x) or ("%7s"):format("-") end
      print(("%-26s %s %s %s %s   %s %s %s"):format(case, f(o), f(h), f(e), f(s), q(o / h), q(qe), q(qs)))
    end
  end
  if torch_skip then
    print("PyTorch: skipped (" .. torch_skip .. ")")
  elseif notes["cnn b32 forward"] then
    print("PyTorch CNN layout, the faster of NCHW and channels_last: forward " .. notes["cnn b32 forward"] ..
      "; train step " .. (notes["cnn b32 train step"] or "?"))
  end
  print()
  if bf16 then
    print(("%d thread(s), %s: ours under %s (the table above's float32 runs beside it) vs PyTorch eager"
      .. " under autocast bfloat16 (its float32 eager timed alternately in the same process); ms,"
      .. " medians as above"):format(threads, threads == 1 and "CPU time" or "wall time", MIXED))
    print(("%-28s %9s %9s %8s %8s %9s   %9s %9s %9s"):format("case", "ours bf16", "no dpbf16", "autocast",
      "ours f32", "torch f32", "/autocast", "ours b/f", "torch b/f"))
    for _, case in ipairs(order) do
      if ours16[case] then
        local tc = torch_of[case] or case
        local o16, o32 = median(ours16[case]), ours[case] and median(ours[case])
        local w16 = wide16[case] and median(wide16[case])
        local a16 = auto16[tc] and median(auto16[tc])
        local e32 = eager32[tc] and median(eager32[tc])
        local qa = q_auto[case] and median(q_auto[case])
        local function f(x) return x and ("%8.3f"):format(x) or ("%8s"):format("-") end
        local function q(x) return x and ("%9.2f"):format(x) or ("%9s"):format("-") end
        print(("%-28s %9s %9s %8s %8s %9s   %s %s %s"):format(case, f(o16), f(w16), f(a16), f(o32), f(e32), q(qa),
          q(o32 and o16 / o32), q(e32 and a16 and a16 / e32)))
      end
    end
    if torch_skip then
      print("PyTorch: skipped (" .. torch_skip .. ")")
    elseif notes16["cnn b32 forward"] then
      print("PyTorch CNN layout, the faster of NCHW and channels_last: forward " .. notes16["cnn b32 forward"] ..
        "; train step " .. (notes16["cnn b32 train step"] or "?"))
    end
    print()
  end
end
