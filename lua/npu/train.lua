--- npu.train — gradients, optimizers, the global step, learning-rate schedules and loss
-- scaling, with TensorFlow 1.15's names and update rules.  Every update is ops on the device
-- (arithmetic and assign): `opt:minimize(loss)` returns one operation grouping them, which
-- sess:run (or npu.util.set_iteration_per_loop) runs.
--
--   local opt = npu.train.AdamOptimizer(1e-3)
--   local train_op = opt:minimize(loss, { global_step = npu.train.get_or_create_global_step(g) })
--   sess:run(g:global_variables_initializer())      -- also initialises the optimizer's slots
--   for step = 1, 100 do sess:run(train_op, feeds) end
--
-- Order inside one run: nodes run in creation order, and an assign writes the variable in
-- place, so an update reads the values the forward pass and the gradients used (they were
-- created before it), and the last updates (Adam's beta powers, the global step) come after
-- every variable's update, as TensorFlow's control dependencies order them.
-- @module npu.train
local errors = require("npu.errors")
local error = errors.error -- npu errors are values (lua/npu/errors.lua)
local train = {}

local npu_module
local function N()
  npu_module = npu_module or require("npu")
  return npu_module
end

-- Variables the training code creates (slots, global steps, moving statistics, loss scales)
-- are not trainable, so never in a default var_list: the C graph keeps the flag
-- (npu_graph_set_variable_trainable), float variables being trainable by default.

--- Marks a variable as not trainable: it is left out of default var_lists.
-- @tparam Output v a variable
-- @treturn Output v
function train.mark_non_trainable(v)
  v:graph():set_trainable(v, false)
  return v
end

--- The trainable variables of a graph (`tf.trainable_variables`): its float variables
-- (Graph:global_variables) except the optimizers' slots, global steps, moving statistics and
-- those marked with mark_non_trainable.
-- @tparam Graph g
-- @treturn {Output,...}
function train.trainable_variables(g) return g:variables(true) end

--- Symbolic gradients (`tf.gradients`): entry i is d(sum of ys)/d(xs[i]), built as nodes
-- named "gradients/...".
-- @tparam Output|{Output,...} ys
-- @tparam Output|{Output,...} xs
-- @tparam[opt] Output|{Output,...} grad_ys initial gradients, one per ys (default ones)
-- @treturn table a list (`n` = #xs) of Outputs, nil where xs[i] does not affect ys (or is an
--   integer)
-- @raise NPU_ERR_ARG for an op without a gradient, naming it
-- @usage local dw, db = table.unpack(npu.gradients(loss, {w, b}))
function train.gradients(ys, xs, grad_ys)
  local npu = N()
  if npu.is_output(ys) then ys = { ys } end
  if npu.is_output(xs) then xs = { xs } end
  if grad_ys ~= nil and npu.is_output(grad_ys) then grad_ys = { grad_ys } end
  return npu.core.gradients(ys, xs, grad_ys)
end

local function const_like(x, value)
  return x:graph():const(N().tensor(value, x:dtype()))
end

-- A number or an Output as an Output of g of dtype dtype.
local function as_output(g, v, dtype)
  local npu = N()
  if npu.is_output(v) then
    if v:dtype() ~= dtype then v = npu.cast(v, dtype) end
    return v
  end
  return g:const(npu.tensor(v, dtype))
end

-- Slot and non-slot variables ------------------------------------------------------------

local function var_name(v) return (v:name():gsub(":%d+$", "")) end

local function make_variable(g, initial, name)
  local v = g:variable(initial, name)
  return train.mark_non_trainable(v)
end

--- The graph's global step (`tf.train.get_or_create_global_step`): the int64 scalar variable
-- "global_step", made if missing.
-- @tparam[opt] Graph g the default graph when nil
-- @treturn Output
function train.get_or_create_global_step(g)
  local npu = N()
  g = g or npu.get_default_graph()
  local ok, v = pcall(g.get_tensor_by_name, g, "global_step:0")
  if ok and v:op():type() == "variable" then return v end
  return make_variable(g, npu.tensor(0, "int64"), "global_step")
end
train.create_global_step = train.get_or_create_global_step
--- The graph's global step (`tf.train.get_global_step`), or nil when it has none.
-- @tparam Graph g
-- @treturn ?Output
function train.get_global_step(g)
  local ok, v = pcall(g.get_tensor_by_name, g, "global_step:0")
  return ok and v or nil
end

-- Optimizers -------------------------------------------------------------------------------

local Optimizer = {}
Optimizer.__index = Optimizer
train.Optimizer = Optimizer

local function new_optimizer(class, name, fields)
  local o = setmetatable(fields, class)
  o._name = name
  o._slots = {} -- [slot name][graph][var id] = slot variable
  return o
end

--- The slot variable an optimizer made for var (`tf.train.Optimizer.get_slot`), e.g. Adam's
-- "m" and "v", Momentum's "momentum".
-- @tparam Output var
-- @tparam string name
-- @treturn ?Output nil when there is none
function Optimizer:get_slot(var, name)
  local by_graph = self._slots[name]
  local by_var = by_graph and by_graph[var:graph()]
  return by_var and by_var[var:id()]
end

--- The names of the optimizer's slots, sorted (`tf.train.Optimizer.get_slot_names`).
-- @treturn {string,...}
function Optimizer:get_slot_names()
  local names = {}
  for k in pairs(self._slots) do names[#names + 1] = k end
  table.sort(names)
  return names
end

-- The slot `name` of var, created (initial value `fill`, var's shape and dtype) on first use.
function Optimizer:_slot(var, name, fill)
  local npu = N()
  local g = var:graph()
  self._slots[name] = self._slots[name] or setmetatable({}, { __mode = "k" })
  local by_var = self._slots[name][g] or {}
  self._slots[name][g] = by_var
  local s = by_var[var:id()]
  if not s then
    -- TensorFlow's names: "<var>/<Optimizer>", then "<var>/<Optimizer>_1", ... in creation order
    s = make_variable(g, npu.fill(var:shape(), fill, var:dtype()), var_name(var) .. "/" .. self._name)
    by_var[var:id()] = s
  end
  return s
end

-- where(gate, a, b) for a bool scalar gate, without control flow and exact: floats through
-- relu_grad, which selects (a NaN or inf in the branch not taken never leaks), ints as
-- b + (a - b) * gate.
local function where(gate, a, b)
  local npu = N()
  local dt = a:dtype()
  if dt == "float32" or dt == "float64" then
    local m = npu.cast(gate, dt)
    local shape = a:shape()
    if not shape or #shape > 0 then m = npu.broadcast_like(m, a, { axes = {} }) end
    return npu.relu_grad(a, m) + npu.relu_grad(b, const_like(m, 1) - m)
  end
  return b + (a - b) * npu.cast(gate, dt)
end
train._where = where

-- assign(var, value); while a gate is set (LossScaleOptimizer), the value is kept only where
-- the gate (a bool scalar) is true: the step is skipped without control flow.
function Optimizer:_assign(var, value)
  local npu = N()
  if self._gate then value = where(self._gate, value, var) end
  return npu.assign(var, value)
end

--- The gradients of loss for a list of variables (`tf.train.Optimizer.compute_gradients`).
-- @tparam Output loss
-- @tparam[opt] {Output,...} var_list default: trainable_variables of the loss's graph
-- @tparam[opt] table opts `{grad_loss = Output}`
-- @treturn table a list of `{grad, var}` pairs (grad nil where loss does not depend on var)
function Optimizer:compute_gradients(loss, var_list, opts)
  errors.check_keys("npu.train.Optimizer:compute_gradients", opts, { "grad_loss" })
  local g = loss:graph()
  var_list = var_list or train.trainable_variables(g)
  local grads = train.gradients(loss, var_list, opts and opts.grad_loss)
  local pairs_ = {}
  for i, v in ipairs(var_list) do pairs_[i] = { grads[i], v } end
  return pairs_
end

--- One operation applying gradients (`tf.train.Optimizer.apply_gradients`): every variable's
-- update (pairs with a nil gradient skipped), the optimizer's own state updates, then
-- global_step + 1.  Nodes are named as TensorFlow names them ("GradientDescent/update_w/...").
-- @tparam table grads_and_vars `{grad, var}` pairs, as compute_gradients gives
-- @tparam[opt] table opts `{global_step = var, name = s}`
-- @treturn Operation
-- @raise NPU_ERR_ARG when there are no variables, or no gradient at all
function Optimizer:apply_gradients(grads_and_vars, opts)
  opts = opts or {}
  errors.check_keys("npu.train.Optimizer:apply_gradients", opts, { "global_step", "name" })
  local g
  local updates = {}
  for _, gv in ipairs(grads_and_vars) do
    local grad, var = gv[1], gv[2]
    g = g or var:graph()
    if grad ~= nil then
      self:_prepare(var)
    end
  end
  if not g then error("apply_gradients: no variables", 2) end
  local any = false
  for _, gv in ipairs(grads_and_vars) do
    local grad, var = gv[1], gv[2]
    if grad ~= nil then
      any = true
      -- TensorFlow's names: "GradientDescent/update_fc/kernel/..."
      local scope = N().get_name_scope(g) .. (opts.name or self._name) .. "/update_" .. var_name(var) .. "/"
      updates[#updates + 1] = N().name_scope(scope, function() return self:_apply_dense(grad, var) end)
    end
  end
  if not any then error("apply_gradients: no gradients provided for any variable", 2) end
  for _, u in ipairs(self:_finish(g) or {}) do updates[#updates + 1] = u end
  if opts.global_step then
    local gs = opts.global_step
    updates[#updates + 1] = self:_assign(gs, gs + const_like(gs, 1))
  end
  return g:group(updates, opts.name or self._name)
end

--- compute_gradients then apply_gradients (`tf.train.Optimizer.minimize`).
-- @tparam Output loss
-- @tparam[opt] table opts `{global_step =, var_list =, name =}`
-- @treturn Operation
-- @usage local train_op = npu.train.GradientDescentOptimizer(0.2):minimize(loss)
function Optimizer:minimize(loss, opts)
  opts = opts or {}
  errors.check_keys("npu.train.Optimizer:minimize", opts, { "global_step", "var_list", "name", "grad_loss" })
  local gv = self:compute_gradients(loss, opts.var_list, { grad_loss = opts.grad_loss })
  return self:apply_gradients(gv, { global_step = opts.global_step, name = opts.name })
end

function Optimizer:_prepare() end
function Optimizer:_finish() end

-- The learning rate (a number or an Output, e.g. a schedule) as an Output of var's dtype.
function Optimizer:_lr(var) return as_output(var:graph(), self._learning_rate, var:dtype()) end

local GradientDescent = setmetatable({}, { __index = Optimizer })
GradientDescent.__index = GradientDescent
--- Plain gradient descent, var -= lr * grad (`tf.train.GradientDescentOptimizer`).
-- @tparam number|Output learning_rate a number or a schedule's Output
-- @tparam[opt] table opts `{name = "GradientDescent"}`
-- @treturn Optimizer
function train.GradientDescentOptimizer(learning_rate, opts)
  opts = opts or {}
  return new_optimizer(GradientDescent, opts.name or "GradientDescent", { _learning_rate = learning_rate })
end
function GradientDescent:_apply_dense(grad, var)
  return self:_assign(var, var - self:_lr(var) * grad)
end

local Momentum = setmetatable({}, { __index = Optimizer })
Momentum.__index = Momentum
--- Momentum (`tf.train.MomentumOptimizer`, TensorFlow's ApplyMomentum): accum = accum *
-- momentum + grad; var -= lr * accum, or with Nesterov var -= grad * lr + accum * momentum *
-- lr.  Slot "momentum".
-- @tparam number|Output learning_rate
-- @tparam number momentum
-- @tparam[opt] table opts `{use_nesterov = false, name = "Momentum"}`
-- @treturn Optimizer
function train.MomentumOptimizer(learning_rate, momentum, opts)
  opts = opts or {}
  return new_optimizer(Momentum, opts.name or "Momentum", {
    _learning_rate = learning_rate, _momentum = momentum, _nesterov = opts.use_nesterov == true })
end
function Momentum:_prepare(var) self:_slot(var, "momentum", 0) end
function Momentum:_apply_dense(grad, var)
  local g = var:graph()
  local lr = self:_lr(var)
  local mom = as_output(g, self._momentum, var:dtype())
  local accum = self:_slot(var, "momentum", 0)
  local accum_t = accum * mom + grad
  local a = self:_assign(accum, accum_t)
  local v
  if self._nesterov then
    v = self:_assign(var, var - (grad * lr + accum_t * mom * lr))
  else
    v = self:_assign(var, var - lr * accum_t)
  end
  return g:group({ a, v })
end

local Adam = setmetatable({}, { __index = Optimizer })
Adam.__index = Adam
--- Adam (`tf.train.AdamOptimizer`, TensorFlow's ApplyAdam): lr_t = lr * sqrt(1 - beta2^t) /
-- (1 - beta1^t); m += (grad - m) * (1 - beta1); v += (grad^2 - v) * (1 - beta2);
-- var -= m * lr_t / (sqrt(v) + epsilon).  Slots "m" and "v"; beta1^t and beta2^t are the
-- variables "beta1_power" and "beta2_power".
-- @tparam[opt=0.001] number|Output learning_rate
-- @tparam[opt] table opts `{beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8, name = "Adam"}`
-- @treturn Optimizer
function train.AdamOptimizer(learning_rate, opts)
  opts = opts or {}
  return new_optimizer(Adam, opts.name or "Adam", {
    _learning_rate = learning_rate == nil and 0.001 or learning_rate,
    _beta1 = opts.beta1 or 0.9, _beta2 = opts.beta2 or 0.999, _epsilon = opts.epsilon or 1e-8,
    _powers = setmetatable({}, { __mode = "k" }) })
end
function Adam:_prepare(var)
  local g = var:graph()
  if not self._powers[g] then -- TensorFlow's non-slot variables, created before the slots
    local npu = N()
    local dt = var:dtype()
    self._powers[g] = {
      make_variable(g, npu.tensor(self._beta1, dt), "beta1_power"),
      make_variable(g, npu.tensor(self._beta2, dt), "beta2_power") }
  end
  self:_slot(var, "m", 0)
  self:_slot(var, "v", 0)
end
function Adam:_apply_dense(grad, var)
  local g, dt = var:graph(), var:dtype()
  local npu = N()
  local b1p, b2p = self._powers[g][1], self._powers[g][2]
  if b1p:dtype() ~= dt then b1p, b2p = npu.cast(b1p, dt), npu.cast(b2p, dt) end
  local one = as_output(g, 1, dt)
  local lr_t = self:_lr(var) * npu.sqrt(one - b2p) / (one - b1p)
  local m, v = self:_slot(var, "m", 0), self:_slot(var, "v", 0)
  local m_t = m + (grad - m) * as_output(g, 1 - self._beta1, dt)
  local v_t = v + (npu.square(grad) - v) * as_output(g, 1 - self._beta2, dt)
  local am, av = self:_assign(m, m_t), self:_assign(v, v_t)
  local upd = self:_assign(var, var - m_t * lr_t / (npu.sqrt(v_t) + as_output(g, self._epsilon, dt)))
  return g:group({ am, av, upd })
end
function Adam:_finish(g)
  local b1p, b2p = self._powers[g][1], self._powers[g][2]
  return { self:_assign(b1p, b1p * const_like(b1p, self._beta1)),
    self:_assign(b2p, b2p * const_like(b2p, self._beta2)) }
end

local RMSProp = setmetatable({}, { __index = Optimizer })
RMSProp.__index = RMSProp
--- RMSProp (`tf.train.RMSPropOptimizer`, ApplyRMSProp / ApplyCenteredRMSProp):
-- ms += (grad^2 - ms) * (1 - decay); mom = mom * momentum + lr * grad / sqrt(ms + epsilon)
-- (centered: mg += (grad - mg) * (1 - decay), sqrt(ms - mg^2 + epsilon)); var -= mom.  As
-- in TensorFlow 1 the "rms" slot starts at ones, "momentum" and "mg" at zeros.
-- @tparam number|Output learning_rate
-- @tparam[opt] table opts `{decay = 0.9, momentum = 0, epsilon = 1e-10, centered = false,
--   name = "RMSProp"}`
-- @treturn Optimizer
function train.RMSPropOptimizer(learning_rate, opts)
  opts = opts or {}
  return new_optimizer(RMSProp, opts.name or "RMSProp", {
    _learning_rate = learning_rate, _decay = opts.decay or 0.9, _momentum = opts.momentum or 0.0,
    _epsilon = opts.epsilon or 1e-10, _centered = opts.centered == true })
end
function RMSProp:_prepare(var) -- TensorFlow's order: rms, mg (centered), momentum
  self:_slot(var, "rms", 1)
  if self._centered then self:_slot(var, "mg", 0) end
  self:_slot(var, "momentum", 0)
end
function RMSProp:_apply_dense(grad, var)
  local npu = N()
  local g, dt = var:graph(), var:dtype()
  local ms, mom = self:_slot(var, "rms", 1), self:_slot(var, "momentum", 0)
  local rho1 = as_output(g, 1 - self._decay, dt)
  local ms_t = ms + (npu.square(grad) - ms) * rho1
  local denom = ms_t
  local ups = { self:_assign(ms, ms_t) }
  if self._centered then
    local mg = self:_slot(var, "mg", 0)
    local mg_t = mg + (grad - mg) * rho1
    ups[#ups + 1] = self:_assign(mg, mg_t)
    denom = ms_t - npu.square(mg_t)
  end
  local mom_t = mom * as_output(g, self._momentum, dt)
      + grad * self:_lr(var) / npu.sqrt(denom + as_output(g, self._epsilon, dt))
  ups[#ups + 1] = self:_assign(mom, mom_t)
  ups[#ups + 1] = self:_assign(var, var - mom_t)
  return g:group(ups)
end

-- Learning-rate schedules (graph ops on the global step) ----------------------------------

local function step_float(global_step, dtype)
  local npu = N()
  return global_step:dtype() == dtype and global_step or npu.cast(global_step, dtype)
end

--- A decaying learning rate, lr * decay_rate ^ (global_step / decay_steps), the exponent
-- floored with staircase (`tf.train.exponential_decay`); float32.
-- @tparam number|Output learning_rate
-- @tparam Output global_step
-- @tparam number decay_steps
-- @tparam number decay_rate
-- @tparam[opt] table opts `{staircase = false}`
-- @treturn Output
-- @usage local lr = npu.train.exponential_decay(0.1, npu.train.get_or_create_global_step(g), 100, 0.96)
function train.exponential_decay(learning_rate, global_step, decay_steps, decay_rate, opts)
  local npu = N()
  opts = opts or {}
  local g = global_step:graph()
  local p
  if opts.staircase then
    local gs = global_step:dtype() == "int64" and global_step or npu.cast(global_step, "int64")
    -- integer division truncates; steps are >= 0, so it is the floor
    p = npu.cast(gs / g:const(npu.tensor(math.floor(decay_steps), "int64")), "float32")
  else
    p = step_float(global_step, "float32") / g:const(npu.tensor(decay_steps, "float32"))
  end
  local lr = as_output(g, learning_rate, "float32")
  if npu.ops.pow then
    return lr * npu.pow(g:const(npu.tensor(decay_rate, "float32")), p)
  end
  return lr * npu.exp(p * g:const(npu.tensor(math.log(decay_rate), "float32")))
end

--- A piecewise constant learning rate (`tf.train.piecewise_constant`): values[1] while
-- step <= boundaries[1], values[i + 1] while boundaries[i] < step <= boundaries[i + 1], the
-- last value after the last boundary; exactly one of the values (built without control flow).
-- @tparam Output global_step
-- @tparam {integer,...} boundaries
-- @tparam {number,...} values one more than boundaries
-- @tparam[opt] table opts `{dtype = "float32"}`
-- @treturn Output
-- @raise NPU_ERR_ARG when #values is not #boundaries + 1
function train.piecewise_constant(global_step, boundaries, values, opts)
  local npu = N()
  if #values ~= #boundaries + 1 then
    error("piecewise_constant: need one more value than boundaries", 2)
  end
  local g = global_step:graph()
  local dtype = (opts and opts.dtype) or "float32"
  local gs = global_step:dtype() == "int64" and global_step or npu.cast(global_step, "int64")
  local zero, one = g:const(npu.tensor(0, "int64")), g:const(npu.tensor(1, "int64"))
  local ind = { } -- ind[i] = [step > boundaries[i]]
  for i, b in ipairs(boundaries) do
    ind[i] = npu.minimum(npu.maximum(gs - g:const(npu.tensor(b, "int64")), zero), one)
  end
  local result
  for i, v in ipairs(values) do
    local upper = i == 1 and one or ind[i - 1]
    local w = i <= #boundaries and (upper - ind[i]) or upper
    local term = npu.cast(w, dtype) * g:const(npu.tensor(v, dtype))
    result = result and result + term or term
  end
  return result
end

-- Loss scaling ---------------------------------------------------------------------------

local FixedLSM = {}
FixedLSM.__index = FixedLSM
--- A constant loss scale (`tf.contrib.mixed_precision.FixedLossScaleManager`), for
-- LossScaleOptimizer.
-- @tparam number loss_scale >= 1
-- @treturn table the manager
-- @raise NPU_ERR_ARG when loss_scale is not a number >= 1
function train.FixedLossScaleManager(loss_scale)
  if type(loss_scale) ~= "number" or loss_scale < 1 then
    error("FixedLossScaleManager: loss_scale must be a number >= 1", 2)
  end
  return setmetatable({ _scale = loss_scale }, FixedLSM)
end
--- The scale as a float32 scalar Output of g.
-- @function FixedLossScaleManager:get_loss_scale
-- @tparam Graph g
-- @treturn Output
function FixedLSM:get_loss_scale(g) return g:const(N().tensor(self._scale, "float32")) end
--- Nothing to update: a fixed scale.
-- @function FixedLossScaleManager:update_loss_scale
-- @treturn nil
function FixedLSM:update_loss_scale() return nil end

local ExpLSM = {}
ExpLSM.__index = ExpLSM
--- A loss scale that grows after finite steps and shrinks after overflows
-- (`tf.contrib.mixed_precision.ExponentialUpdateLossScaleManager`), in the variables
-- loss_scale (float32), good_steps and bad_steps (int32).  After incr_every_n_steps finite
-- steps the scale is multiplied by incr_ratio (if the product is finite); after
-- decr_every_n_nan_or_inf non-finite ones it becomes max(1, scale * decr_ratio); both
-- counters then reset.
-- @tparam number init_loss_scale
-- @tparam integer incr_every_n_steps
-- @tparam[opt=2] integer decr_every_n_nan_or_inf
-- @tparam[opt] table opts `{incr_ratio = 2, decr_ratio = 0.8}`
-- @treturn table the manager
function train.ExponentialUpdateLossScaleManager(init_loss_scale, incr_every_n_steps,
                                                 decr_every_n_nan_or_inf, opts)
  opts = opts or {}
  return setmetatable({ _init = init_loss_scale, _incr_every = incr_every_n_steps,
    _decr_every = decr_every_n_nan_or_inf or 2, _incr_ratio = opts.incr_ratio or 2,
    _decr_ratio = opts.decr_ratio or 0.8, _vars = setmetatable({}, { __mode = "k" }) }, ExpLSM)
end
function ExpLSM:_variables(g)
  local v = self._vars[g]
  if not v then
    local npu = N()
    v = { scale = make_variable(g, npu.tensor(self._init, "float32"), "loss_scale"),
      good = make_variable(g, npu.tensor(0, "int32"), "good_steps"),
      bad = make_variable(g, npu.tensor(0, "int32"), "bad_steps") }
    self._vars[g] = v
  end
  return v
end
--- The scale variable of graph g (made on first use).
-- @function ExponentialUpdateLossScaleManager:get_loss_scale
-- @tparam Graph g
-- @treturn Output
function ExpLSM:get_loss_scale(g) return self:_variables(g).scale end
--- An operation updating the scale and the counters from whether the step was finite.
-- @function ExponentialUpdateLossScaleManager:update_loss_scale
-- @tparam Output finite a bool scalar (all_finite of the gradients)
-- @treturn Operation
function ExpLSM:update_loss_scale(finite)
  local npu = N()
  local g = finite:graph()
  local v = self:_variables(g)
  local i32 = function(x) return g:const(npu.tensor(x, "int32")) end
  local f32 = function(x) return g:const(npu.tensor(x, "float32")) end
  local zero, one = i32(0), i32(1)
  local at_least = function(a, n) -- [a >= n] as int32 0/1
    return npu.minimum(npu.maximum(a - i32(n - 1), zero), one)
  end
  local good1, bad1 = v.good + one, v.bad + one
  local incr = npu.cast(at_least(good1, self._incr_every), "bool")
  local decr = npu.cast(at_least(bad1, self._decr_every), "bool")
  local up = v.scale * f32(self._incr_ratio)
  local scale_f = where(incr, where(npu.is_finite(up), up, v.scale), v.scale)
  local scale_nf = where(decr, npu.maximum(f32(1), v.scale * f32(self._decr_ratio)), v.scale)
  local good_f = where(incr, zero, good1)
  local bad_f = where(incr, zero, v.bad)
  local bad_nf = where(decr, zero, bad1)
  return g:group({
    npu.assign(v.scale, where(finite, scale_f, scale_nf)),
    npu.assign(v.good, where(finite, good_f, zero)),
    npu.assign(v.bad, where(finite, bad_f, bad_nf)) }, "update_loss_scale")
end

--- Whether every element of every gradient is finite, as a bool scalar Output.
-- @tparam {Output,...} grads
-- @treturn Output
function train.all_finite(grads)
  local npu = N()
  local parts = {}
  for _, gr in ipairs(grads) do
    parts[#parts + 1] = npu.reshape(npu.reduce_all(npu.is_finite(gr)), { 1 })
  end
  if #parts == 1 then return npu.reshape(parts[1], {}) end
  return npu.reduce_all(npu.concat(parts, 0))
end

local LSO = {}
LSO.__index = LSO
--- Loss scaling for reduced-precision training (`tf.contrib.mixed_precision.LossScaleOptimizer`):
-- compute_gradients differentiates loss * scale and multiplies the gradients by 1 / scale;
-- apply_gradients applies them through opt only when every gradient is finite (otherwise no
-- variable changes, not the slots, not global_step) and updates the manager's scale.
-- @tparam Optimizer opt
-- @tparam table manager FixedLossScaleManager or ExponentialUpdateLossScaleManager
-- @treturn Optimizer
function train.LossScaleOptimizer(opt, manager)
  return setmetatable({ _opt = opt, _manager = manager }, LSO)
end
--- The manager's scale in graph g.
-- @function LossScaleOptimizer:get_loss_scale
-- @tparam Graph g
-- @treturn Output
function LSO:get_loss_scale(g) return self._manager:get_loss_scale(g) end
--- Gradients of loss * scale, unscaled (Optimizer:compute_gradients's arguments and result).
-- @function LossScaleOptimizer:compute_gradients
-- @tparam Output loss
-- @tparam[opt] {Output,...} var_list
-- @tparam[opt] table opts
-- @treturn table `{grad, var}` pairs
function LSO:compute_gradients(loss, var_list, opts)
  local npu = N()
  local g = loss:graph()
  local scale = self._manager:get_loss_scale(g)
  local scaled = loss * (loss:dtype() == "float32" and scale or npu.cast(scale, loss:dtype()))
  local gv = self._opt:compute_gradients(scaled, var_list, opts)
  local inv = const_like(scale, 1) / scale
  for _, p in ipairs(gv) do
    if p[1] ~= nil then
      p[1] = p[1] * (p[1]:dtype() == "float32" and inv or npu.cast(inv, p[1]:dtype()))
    end
  end
  return gv
end
--- Applies the gradients when all are finite, and updates the scale.
-- @function LossScaleOptimizer:apply_gradients
-- @tparam table grads_and_vars
-- @tparam[opt] table opts `{global_step =, name =}`
-- @treturn Operation
function LSO:apply_gradients(grads_and_vars, opts)
  local grads = {}
  for _, p in ipairs(grads_and_vars) do
    if p[1] ~= nil then grads[#grads + 1] = p[1] end
  end
  local finite = train.all_finite(grads)
  self._opt._gate = finite
  local ok, apply = pcall(self._opt.apply_gradients, self._opt, grads_and_vars, opts)
  self._opt._gate = nil
  if not ok then errors.rethrow(apply) end
  local update = self._manager:update_loss_scale(finite)
  if not update then return apply end
  return apply:graph():group({ apply, update }, opts and opts.name or "LossScaleOptimizer")
end
--- compute_gradients then apply_gradients, with loss scaling.
-- @function LossScaleOptimizer:minimize
-- @tparam Output loss
-- @tparam[opt] table opts `{global_step =, var_list =, name =}`
-- @treturn Operation
LSO.minimize = Optimizer.minimize -- its compute_gradients (scaled), then apply_gradients (gated)

local DistOpt = {}
DistOpt.__index = function(self, k)
  local m = rawget(DistOpt, k)
  if m ~= nil then return m end
  local v = self._opt[k]
  if type(v) == "function" then return function(s, ...) if s == self then s = self._opt end return v(s, ...) end end
  return v
end
--- Data-parallel training (TF Adapter's `npu_distributed_optimizer_wrapper`, also
-- `NPUDistributedOptimizer`): an optimizer whose compute_gradients averages every gradient
-- over the ranks (npu.hccl allreduce "sum" of buckets of gradients, times 1 / rank_size)
-- before opt applies them; with one rank it is opt.  Buckets (at most bucket_bytes, 4 MiB by
-- default) are allreduced while the backward pass goes on when the session's hcom_parallel
-- is true (the default).
-- @tparam Optimizer opt
-- @tparam[opt] table opts `{bucket_bytes = n}`
-- @treturn Optimizer
-- @raise NPU_ERR_ARG when opt is not an optimizer or bucket_bytes not an integer >= 1
function train.npu_distributed_optimizer_wrapper(opt, opts)
  local where = "npu.train.npu_distributed_optimizer_wrapper"
  if type(opt) ~= "table" or type(opt.apply_gradients) ~= "function"
      or type(opt.compute_gradients) ~= "function" then
    errors.raise(where, "NPU_ERR_ARG", "argument 1 must be an optimizer (npu.train.*Optimizer), got "
      .. errors.typename(opt))
  end
  if opts ~= nil and type(opts) ~= "table" then
    errors.raise(where, "NPU_ERR_ARG", "argument 2 must be an options table {bucket_bytes = n}, got "
      .. errors.typename(opts))
  end
  errors.check_keys(where, opts, { "bucket_bytes" })
  local b = opts and opts.bucket_bytes
  if b ~= nil and (math.type(b) ~= "integer" or b < 1) then
    errors.raise(where, "NPU_ERR_ARG", "bucket_bytes must be an integer >= 1, got " .. tostring(b))
  end
  return setmetatable({ _opt = opt, _dist_opts = opts or {} }, DistOpt)
end
train.NPUDistributedOptimizer = train.npu_distributed_optimizer_wrapper
--- opt's gradients averaged over the ranks.
-- @function NPUDistributedOptimizer:compute_gradients
-- @tparam Output loss
-- @tparam[opt] {Output,...} var_list
-- @tparam[opt] table opts
-- @treturn table `{grad, var}` pairs
function DistOpt:compute_gradients(loss, var_list, opts)
  local gv = self._opt:compute_gradients(loss, var_list, opts)
  local grads = { n = #gv }
  for i, p in ipairs(gv) do grads[i] = p[1] end
  local avg = require("npu.hccl")._average_gradients(grads, self._dist_opts)
  for i, p in ipairs(gv) do p[1] = avg[i] end
  return gv
end
--- opt's apply_gradients.
-- @function NPUDistributedOptimizer:apply_gradients
-- @tparam table grads_and_vars
-- @tparam[opt] table opts
-- @treturn Operation
function DistOpt:apply_gradients(grads_and_vars, opts)
  return self._opt:apply_gradients(grads_and_vars, opts)
end
--- compute_gradients (averaged) then apply_gradients.
-- @function NPUDistributedOptimizer:minimize
-- @tparam Output loss
-- @tparam[opt] table opts `{global_step =, var_list =, name =}`
-- @treturn Operation
DistOpt.minimize = Optimizer.minimize -- its compute_gradients (averaged), then apply_gradients
--- Every variable of g set to root_rank's value (npu.hccl.broadcast_global_variables).
-- @tparam Graph g
-- @tparam[opt=0] integer root_rank
-- @treturn Operation
function train.broadcast_global_variables(g, root_rank)
  return require("npu.hccl").broadcast_global_variables(g, root_rank)
end

return train
