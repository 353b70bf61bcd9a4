--- npu.nn_extra — losses, initializers and layers for training, with TensorFlow 1.15's names.
-- Installed into the module by `require("npu.nn_extra").install(npu)`:
--   npu.nn.softmax_cross_entropy_with_logits, npu.nn.sparse_softmax_cross_entropy_with_logits,
--   npu.nn.sigmoid_cross_entropy_with_logits, npu.nn.l2_loss, npu.nn.dropout,
--   npu.losses.mean_squared_error / softmax_cross_entropy / sparse_softmax_cross_entropy,
--   npu.initializers.glorot_uniform / he_normal / zeros / ones / constant,
--   npu.layers.dense / conv2d / batch_normalization / dropout, npu.get_collection.
-- Everything is built from ops of the op table, so gradients come from the ops' own.
-- @module npu.nn_extra
local errors = require("npu.errors")
local operands = require("npu.operands")
local error = errors.error -- npu errors are values (lua/npu/errors.lua)
local M = {}

local npu -- set by install

-- Named or positional arguments: f{labels=, logits=} or f(labels, logits).
local function named(args, first, second, ...)
  if type(first) == "table" and getmetatable(first) == nil then
    local t = first
    local out = {}
    for i, k in ipairs(args) do out[i] = t[k] end
    return table.unpack(out, 1, #args)
  end
  return first, second, ...
end

local function graph_of(...) return operands.graph_of(npu, ...) end

local function as_output(g, v, dtype)
  if npu.is_output(v) then return v end
  return g:const(npu.is_tensor(v) and v or npu.tensor(v, dtype or "float32"))
end

local function scalar(g, v, dtype) return g:const(npu.tensor(v, dtype)) end

-- Collections (tf.get_collection): per graph, by key ("update_ops", ...). ------------------
local collections = setmetatable({}, { __mode = "k" })
local function add_to_collection(g, key, v)
  collections[g] = collections[g] or {}
  local c = collections[g][key] or {}
  collections[g][key] = c
  c[#c + 1] = v
end
--- The values collected under a key in a graph (`tf.get_collection`): e.g. "update_ops"
-- (npu.GraphKeys.UPDATE_OPS), where batch normalization puts its moving-average updates.
-- @tparam string key
-- @tparam[opt] Graph g the default graph when nil
-- @treturn table a new list (empty for an unknown key)
function M.get_collection(key, g)
  g = g or npu.get_default_graph()
  local c = collections[g] and collections[g][key] or {}
  local copy = {}
  for i, v in ipairs(c) do copy[i] = v end
  return copy
end

-- Losses --------------------------------------------------------------------------------

--- Softmax cross-entropy per example, -sum(labels * log_softmax(logits)) over the last axis
-- (`tf.nn.softmax_cross_entropy_with_logits`, also `_v2`).  Takes `(labels, logits)` or
-- `{labels =, logits =}`.
-- @function npu.nn.softmax_cross_entropy_with_logits
-- @tparam Output|table labels probabilities of logits' shape (or the table of arguments)
-- @tparam Output logits
-- @treturn Output one loss per example
function M.softmax_cross_entropy_with_logits(...)
  local labels, logits = named({ "labels", "logits" }, ...)
  local g = graph_of(labels, logits)
  labels = as_output(g, labels, logits:dtype())
  return npu.neg(npu.reduce_sum(labels * npu.nn.log_softmax(logits), -1))
end

--- Softmax cross-entropy per example with labels as class indices
-- (`tf.nn.sparse_softmax_cross_entropy_with_logits`): the dense loss of
-- one_hot(labels, classes).  Takes `(labels, logits)` or `{labels =, logits =}`.
-- @function npu.nn.sparse_softmax_cross_entropy_with_logits
-- @tparam Output|table labels int32/int64 class indices, one per example
-- @tparam Output logits (batch, classes), classes known
-- @treturn Output one loss per example
-- @raise NPU_ERR_ARG when the number of classes is unknown
-- @usage local loss = npu.reduce_mean(npu.nn.sparse_softmax_cross_entropy_with_logits{
--   labels = y, logits = logits})
function M.sparse_softmax_cross_entropy_with_logits(...)
  local labels, logits = named({ "labels", "logits" }, ...)
  local g = graph_of(labels, logits)
  labels = as_output(g, labels, "int64")
  local shape = logits:shape()
  local depth = shape and shape[#shape]
  if not depth or depth < 0 then
    error("sparse_softmax_cross_entropy_with_logits: the number of classes (logits' last dim) must be known", 2)
  end
  local onehot = npu.one_hot(labels, depth, { dtype = logits:dtype() })
  return npu.neg(npu.reduce_sum(onehot * npu.nn.log_softmax(logits), -1))
end

--- Sigmoid cross-entropy, elementwise max(x, 0) - x * z + log(1 + exp(-|x|)), TensorFlow's
-- overflow-free form (`tf.nn.sigmoid_cross_entropy_with_logits`).  Takes `(labels, logits)`
-- or `{labels =, logits =}`.
-- @function npu.nn.sigmoid_cross_entropy_with_logits
-- @tparam Output|table labels z, of logits' shape
-- @tparam Output logits x
-- @treturn Output
function M.sigmoid_cross_entropy_with_logits(...)
  local labels, logits = named({ "labels", "logits" }, ...)
  local g = graph_of(labels, logits)
  local dt = logits:dtype()
  labels = as_output(g, labels, dt)
  local neg_abs = npu.minimum(logits, npu.neg(logits))
  return npu.relu(logits) - logits * labels + npu.log(scalar(g, 1, dt) + npu.exp(neg_abs))
end

--- sum(t^2) / 2 (`tf.nn.l2_loss`; also npu.losses.l2_loss).
-- @tparam Output t
-- @treturn Output a scalar
function M.l2_loss(t)
  return npu.reduce_sum(npu.square(t)) * scalar(t:graph(), 0.5, t:dtype())
end

-- tf.losses' reduction SUM_BY_NONZERO_WEIGHTS: sum(losses * weights) / (the number of
-- nonzero weights broadcast to the losses' shape); 0 when there is none.
local function reduce_loss(losses, weights)
  if weights == nil then return npu.reduce_mean(losses) end
  local g, dt = losses:graph(), losses:dtype()
  if type(weights) == "number" then
    return weights == 0 and scalar(g, 0, dt) or npu.reduce_mean(losses) * scalar(g, weights, dt)
  end
  local w = npu.broadcast_like(as_output(g, weights, dt), losses, { axes = {} })
  local ones = npu.broadcast_like(scalar(g, 1, dt), losses, { axes = {} })
  local nonzero = npu.reduce_sum(npu.relu_grad(ones, npu.square(w))) -- 1 where w ~= 0
  return npu.reduce_sum(losses * w) / npu.maximum(nonzero, scalar(g, 1, dt))
end

--- The mean of (predictions - labels)^2 (`tf.losses.mean_squared_error`); weighted:
-- sum(w * d^2) / the count of nonzero weights.  Takes `(labels, predictions [, opts])` or
-- `{labels =, predictions =}`.
-- @function npu.losses.mean_squared_error
-- @tparam Output|table labels
-- @tparam Output predictions
-- @tparam[opt] table opts `{weights = number or Output}`
-- @treturn Output a scalar
function M.mean_squared_error(...)
  local labels, predictions, opts = named({ "labels", "predictions", "opts" }, ...)
  local g = graph_of(labels, predictions)
  labels = as_output(g, labels, predictions:dtype())
  local weights = type(opts) == "table" and opts.weights or nil
  return reduce_loss(npu.square(predictions - labels), weights)
end

--- The mean over examples of the softmax cross-entropy (`tf.losses.softmax_cross_entropy`).
-- Takes `(onehot_labels, logits)` or `{onehot_labels =, logits =}`.
-- @function npu.losses.softmax_cross_entropy
-- @tparam Output|table onehot_labels
-- @tparam Output logits
-- @treturn Output a scalar
function M.losses_softmax_cross_entropy(...)
  local labels, logits = named({ "onehot_labels", "logits" }, ...)
  return npu.reduce_mean(M.softmax_cross_entropy_with_logits(labels, logits))
end

--- The mean over examples of the sparse softmax cross-entropy
-- (`tf.losses.sparse_softmax_cross_entropy`).  Takes `(labels, logits)` or
-- `{labels =, logits =}`.
-- @function npu.losses.sparse_softmax_cross_entropy
-- @tparam Output|table labels class indices
-- @tparam Output logits
-- @treturn Output a scalar
function M.losses_sparse_softmax_cross_entropy(...)
  local labels, logits = named({ "labels", "logits" }, ...)
  return npu.reduce_mean(M.sparse_softmax_cross_entropy_with_logits(labels, logits))
end

-- Dropout -------------------------------------------------------------------------------

--- Dropout (`tf.nn.dropout`): each element kept with probability keep_prob and scaled by
-- 1 / keep_prob, else 0 (TensorFlow's mask floor(keep_prob + uniform)).  The mask comes from
-- a random_uniform op seeded by seed and the session's step counter: the same seed gives the
-- same sequence of masks in every new session.
-- @tparam Output x
-- @tparam[opt] table opts `keep_prob` (0.5) or `rate` (1 - keep_prob), `seed`, `training`
--   (false, or keep_prob 1, returns x)
-- @treturn Output
function M.dropout(x, opts)
  opts = opts or {}
  local keep = opts.keep_prob or (opts.rate and 1 - opts.rate) or 0.5
  if opts.training == false or keep >= 1 then return x end
  if keep <= 0 then error("dropout: keep_prob must be in (0, 1]", 2) end
  local g = x:graph()
  local dt = x:dtype()
  local u = npu.random_uniform(npu.shape(x), { dtype = dt, seed = opts.seed or 0 })
  local mask = npu.cast(npu.cast(u + scalar(g, keep, dt), "int32"), dt)
  return x * scalar(g, 1 / keep, dt) * mask
end

-- Initializers ---------------------------------------------------------------------------

local function fans(shape)
  if #shape == 0 then return 1, 1 end
  if #shape == 1 then return shape[1], shape[1] end
  if #shape == 2 then return shape[1], shape[2] end
  local receptive = 1
  for i = 1, #shape - 2 do receptive = receptive * shape[i] end
  return shape[#shape - 1] * receptive, shape[#shape] * receptive
end

local initializers = {}
M.initializers = initializers

--- Glorot (Xavier) uniform initializer (`tf.glorot_uniform_initializer`): uniform in
-- [-l, l], l = sqrt(6 / (fan_in + fan_out)).
-- @tparam[opt] table opts `{seed = 0}`
-- @treturn function `init(shape [, dtype])` returning a Tensor
function initializers.glorot_uniform(opts)
  opts = opts or {}
  return function(shape, dtype)
    local fan_in, fan_out = fans(shape)
    local limit = math.sqrt(6 / (fan_in + fan_out))
    return npu.random.uniform(shape, { minval = -limit, maxval = limit, seed = opts.seed or 0,
      dtype = dtype or "float32" })
  end
end

--- He normal initializer (TensorFlow 1.15's `he_normal`, VarianceScaling(2, fan_in,
-- truncated normal)): normal with stddev sqrt(2 / fan_in) / 0.87962566103423978, values
-- beyond 2 stddev redrawn from seeds seed + 1, seed + 2, ... (deterministic).
-- @tparam[opt] table opts `{seed = 0}`
-- @treturn function `init(shape [, dtype])` returning a Tensor
function initializers.he_normal(opts)
  opts = opts or {}
  return function(shape, dtype)
    local fan_in = fans(shape)
    local stddev = math.sqrt(2 / fan_in) / 0.87962566103423978
    local n = 1
    for _, d in ipairs(shape) do n = n * d end
    local seed = opts.seed or 0
    local vals = npu.random.normal({ n }, { stddev = stddev, seed = seed, dtype = "float64" }):totable()
    local bad = {}
    for i = 1, n do if math.abs(vals[i]) > 2 * stddev then bad[#bad + 1] = i end end
    local round = 0
    while #bad > 0 do
      round = round + 1
      local more = npu.random.normal({ #bad }, { stddev = stddev, seed = seed + round, dtype = "float64" }):totable()
      local still = {}
      for k, i in ipairs(bad) do
        if math.abs(more[k]) > 2 * stddev then still[#still + 1] = i else vals[i] = more[k] end
      end
      bad = still
    end
    return npu.tensor(vals, dtype or "float32"):reshape(shape)
  end
end

--- An initializer of zeros (`tf.zeros_initializer`).
-- @treturn function `init(shape [, dtype])` returning a Tensor
function initializers.zeros() return function(shape, dtype) return npu.zeros(shape, dtype or "float32") end end
--- An initializer of ones (`tf.ones_initializer`).
-- @treturn function `init(shape [, dtype])` returning a Tensor
function initializers.ones() return function(shape, dtype) return npu.ones(shape, dtype or "float32") end end
--- An initializer filling with one value (`tf.constant_initializer`).
-- @tparam number v
-- @treturn function `init(shape [, dtype])` returning a Tensor
function initializers.constant(v)
  return function(shape, dtype) return npu.fill(shape, v, dtype or "float32") end
end
initializers.glorot_uniform_initializer = initializers.glorot_uniform
initializers.zeros_initializer = initializers.zeros

-- Layers ---------------------------------------------------------------------------------

local layers = {}
M.layers = layers

local ACTIVATIONS = { relu = "relu", relu6 = "relu6", sigmoid = "sigmoid", tanh = "tanh",
  softmax = "softmax" }
local function activate(y, activation)
  if activation == nil then return y end
  if type(activation) == "string" then
    local op = ACTIVATIONS[activation]
    if not op then error("unknown activation '" .. activation .. "'", 3) end
    return npu[op](y)
  end
  return activation(y)
end

local function unique_scope(g, base)
  local ok = pcall(g.get_operation_by_name, g, base .. "/kernel")
  if not ok then return base end
  for k = 1, math.huge do
    local name = base .. "_" .. k
    if not pcall(g.get_operation_by_name, g, name .. "/kernel") then return name end
  end
end

-- Runs body() with the layer's nodes named "<outer scopes>/<name>/..." (name made unique as
-- TensorFlow does: "dense", "dense_1", ...): "fc/kernel", "fc/MatMul", "fc/BiasAdd", "fc/Relu".
local function in_layer_scope(g, base, body)
  local full = unique_scope(g, npu.get_name_scope(g) .. base)
  return npu.name_scope(full .. "/", body)
end

local DENSE_KEYS = { "activation", "use_bias", "kernel_initializer", "bias_initializer", "name" }
local CONV_KEYS = { "strides", "padding", "activation", "use_bias", "kernel_initializer",
  "bias_initializer", "name", "dilation_rate" }

--- A fully connected layer (`tf.layers.dense`): activation(x W + b), with the variables
-- "<name>/kernel" (in, units) and "<name>/bias" (units) in g:global_variables(), and the
-- nodes named as TensorFlow names them ("dense/MatMul", "dense/BiasAdd", "dense_1/...").
-- @tparam Output x (batch, in)
-- @tparam integer units
-- @tparam[opt] table opts `activation` ("relu", "relu6", "sigmoid", "tanh", "softmax" or a
--   function), `use_bias` (true), `kernel_initializer` (glorot_uniform), `bias_initializer`
--   (zeros), `name` ("dense")
-- @treturn Output (batch, units)
-- @raise NPU_ERR_ARG for an unknown option (naming the nearest)
-- @usage local h = npu.layers.dense(x, 128, {activation = "relu", name = "fc1"})
function layers.dense(x, units, opts)
  opts = opts or {}
  errors.check_keys("npu.layers.dense", opts, DENSE_KEYS)
  return in_layer_scope(x:graph(), opts.name or "dense", function() return layers._dense(x, units, opts) end)
end

function layers._dense(x, units, opts)
  local g = x:graph()
  local shape = x:shape()
  local n_in = shape and shape[#shape]
  if not n_in or n_in < 0 then error("dense: the input's last dimension must be known", 2) end
  local dt = x:dtype()
  local kinit = opts.kernel_initializer or initializers.glorot_uniform()
  local w = g:variable(kinit({ n_in, units }, dt), "kernel")
  local y
  if #shape == 2 then
    y = npu.matmul(x, w)
  else
    local flat = npu.reshape(x, { -1, n_in })
    y = npu.matmul(flat, w)
    -- back to x's leading dims (known when the graph is compiled) with `units` last
    y = npu.reshape(y, npu.concat({ npu.slice(npu.shape(x), { 0 }, { #shape - 1 }),
      g:const(npu.tensor({ units }, "int32")) }, 0))
  end
  if opts.use_bias ~= false then
    local binit = opts.bias_initializer or initializers.zeros()
    local b = g:variable(binit({ units }, dt), "bias")
    y = npu.nn.bias_add(y, b)
  end
  return activate(y, opts.activation)
end

local function pair(v) return type(v) == "table" and v or { v, v } end

--- A 2-D convolution layer (`tf.layers.conv2d`) on NHWC input, with the variables
-- "<name>/kernel" (kh, kw, in, filters) and "<name>/bias" (filters).
-- @tparam Output x (batch, height, width, channels), channels known
-- @tparam integer filters
-- @tparam integer|table kernel_size one size or `{kh, kw}`
-- @tparam[opt] table opts `strides` (1), `padding` ("valid" or "same"), `dilation_rate`,
--   `activation`, `use_bias` (true), `kernel_initializer` (glorot_uniform),
--   `bias_initializer` (zeros), `name` ("conv2d")
-- @treturn Output
-- @raise NPU_ERR_ARG for an unknown option or an unknown channel count
function layers.conv2d(x, filters, kernel_size, opts)
  opts = opts or {}
  errors.check_keys("npu.layers.conv2d", opts, CONV_KEYS)
  return in_layer_scope(x:graph(), opts.name or "conv2d", function()
    return layers._conv2d(x, filters, kernel_size, opts)
  end)
end

function layers._conv2d(x, filters, kernel_size, opts)
  local g = x:graph()
  local shape = x:shape()
  local c = shape and shape[4]
  if not c or c < 0 then error("conv2d: the input's channel dimension must be known", 2) end
  local k = pair(kernel_size)
  local dt = x:dtype()
  local kinit = opts.kernel_initializer or initializers.glorot_uniform()
  local w = g:variable(kinit({ k[1], k[2], c, filters }, dt), "kernel")
  local y = npu.nn.conv2d(x, w, { strides = pair(opts.strides or 1),
    padding = string.upper(opts.padding or "valid"),
    dilations = opts.dilation_rate and pair(opts.dilation_rate) or nil })
  if opts.use_bias ~= false then
    local binit = opts.bias_initializer or initializers.zeros()
    y = npu.nn.bias_add(y, g:variable(binit({ filters }, dt), "bias"))
  end
  return activate(y, opts.activation)
end

--- Dropout only when training (`tf.layers.dropout`).
-- @tparam Output x
-- @tparam[opt] table opts `{rate = 0.5, training = false, seed =}`
-- @treturn Output x itself when not training
function layers.dropout(x, opts)
  opts = opts or {}
  if not opts.training then return x end
  return M.dropout(x, { rate = opts.rate or 0.5, seed = opts.seed })
end

--- Batch normalization over every axis but the last (`tf.layers.batch_normalization`), with
-- the variables "<name>/gamma" (ones), "<name>/beta" (zeros) and the non-trainable
-- "<name>/moving_mean" (zeros) and "<name>/moving_variance" (ones).  Training uses the
-- batch's mean and (biased) variance and collects the moving-statistics updates
-- (moving -= (moving - batch) * (1 - momentum)) under "update_ops": run them with the train
-- op (`g:group({train_op, table.unpack(npu.get_collection("update_ops", g))})`), as
-- TensorFlow requires.  Inference uses the moving statistics.
-- @tparam Output x
-- @tparam[opt] table opts `training` (false), `momentum` (0.99), `epsilon` (0.001),
--   `center` (true), `scale` (true), `name` ("batch_normalization")
-- @treturn Output
function layers.batch_normalization(x, opts)
  opts = opts or {}
  local g = x:graph()
  local shape = x:shape()
  local c = shape and shape[#shape]
  if not c or c < 0 then error("batch_normalization: the input's last dimension must be known", 2) end
  local dt = x:dtype()
  local base = opts.name or "batch_normalization"
  local scope = base
  if pcall(g.get_operation_by_name, g, scope .. "/moving_mean") then
    for k = 1, math.huge do
      scope = base .. "_" .. k
      if not pcall(g.get_operation_by_name, g, scope .. "/moving_mean") then break end
    end
  end
  local momentum, eps = opts.momentum or 0.99, opts.epsilon or 0.001
  local train_mod = require("npu.train")
  local gamma = opts.scale ~= false and g:variable(npu.ones({ c }, dt), scope .. "/gamma") or nil
  local beta = opts.center ~= false and g:variable(npu.zeros({ c }, dt), scope .. "/beta") or nil
  local mm = train_mod.mark_non_trainable(g:variable(npu.zeros({ c }, dt), scope .. "/moving_mean"))
  local mv = train_mod.mark_non_trainable(g:variable(npu.ones({ c }, dt), scope .. "/moving_variance"))
  local axes = {}
  for i = 0, #shape - 2 do axes[#axes + 1] = i end
  local mean, var
  if opts.training then
    mean = npu.reduce_mean(x, axes)
    var = npu.reduce_mean(npu.square(x - mean), axes)
    local decay = scalar(g, 1 - momentum, dt)
    add_to_collection(g, "update_ops", npu.assign(mm, mm - (mm - mean) * decay))
    add_to_collection(g, "update_ops", npu.assign(mv, mv - (mv - var) * decay))
  else
    mean, var = mm, mv
  end
  local inv = scalar(g, 1, dt) / npu.sqrt(var + scalar(g, eps, dt))
  if gamma then inv = inv * gamma end
  local y = (x - mean) * inv
  if beta then y = y + beta end
  return y
end

--- Installs the losses, initializers and layers into the npu module as npu.nn.*,
-- npu.losses.*, npu.initializers, npu.layers and npu.get_collection (done by `require "npu"`).
-- @tparam table mod the npu module
-- @treturn table this module
function M.install(mod)
  npu = mod
  npu.nn = npu.nn or {}
  for _, k in ipairs({ "softmax_cross_entropy_with_logits", "sparse_softmax_cross_entropy_with_logits",
    "sigmoid_cross_entropy_with_logits", "l2_loss", "dropout" }) do
    npu.nn[k] = M[k]
  end
  npu.nn.softmax_cross_entropy_with_logits_v2 = M.softmax_cross_entropy_with_logits
  npu.losses = npu.losses or {}
  npu.losses.mean_squared_error = M.mean_squared_error
  npu.losses.softmax_cross_entropy = M.losses_softmax_cross_entropy
  npu.losses.sparse_softmax_cross_entropy = M.losses_sparse_softmax_cross_entropy
  npu.losses.l2_loss = M.l2_loss
  npu.initializers = initializers
  npu.layers = layers
  npu.get_collection = M.get_collection
  npu.GraphKeys = npu.GraphKeys or {}
  npu.GraphKeys.UPDATE_OPS = "update_ops"
  return M
end

return M
