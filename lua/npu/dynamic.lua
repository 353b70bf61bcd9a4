--- npu.dynamic — ops whose results are sized by the data (docs/dynamic.md, "Values sized when
-- they run"): npu.where (one argument: the coordinates of the true elements; three: select_v2),
-- npu.unique (values and their positions, two results), npu.boolean_mask (a composite of
-- reshape, where and gather), npu.image's non-max suppression (true output size, padded,
-- soft).  The steps that consume them are sized when they run too.
-- @module npu.dynamic
local core = require("npu.core")
local errors = require("npu.errors")
local error = errors.error -- npu errors are values (lua/npu/errors.lua)

local M = {}

local function is_output(v) return getmetatable(v) == core.Output_mt end

function M.install(npu)
  local where_op, select_v2, unique_op = npu.where, npu.select_v2, npu.unique

  --- With cond alone, the coordinates of cond's true (nonzero) elements in row-major order
  -- (`tf.where(cond)`: int64 (n, rank(cond)), n known when it runs); with x and y, an
  -- elementwise choice with broadcasting (`tf.where` of TensorFlow 2, select_v2).
  -- @tparam Output cond
  -- @tparam[opt] Output|Tensor|number x
  -- @tparam[opt] Output|Tensor|number y
  -- @tparam[opt] table opts `{name = s}`
  -- @treturn Output
  -- @raise NPU_ERR_ARG when y is given without x
  function npu.where(cond, x, y, opts)
    if x == nil and y ~= nil then -- a misspelt x would otherwise pick the one-argument form
      errors.raise("npu.where", "NPU_ERR_ARG", "x is nil but y is given: give cond alone, or cond, x and y")
    end
    if x == nil or (y == nil and type(x) == "table" and not is_output(x) and not npu.is_tensor(x)
        and next(x) ~= nil and type(next(x)) == "string") then
      return where_op(cond, x) -- x: the options table, or nil
    end
    if y == nil then errors.raise("npu.where", "NPU_ERR_ARG", "give cond alone, or cond, x and y") end
    return select_v2(cond, x, y, opts)
  end

  --- The distinct values of a 1-D tensor in order of first occurrence, and for each element
  -- of x the position of its value in them (`tf.unique`): y[idx[i]] == x[i].
  -- @tparam Output x
  -- @tparam[opt="int32"] string out_idx the dtype of idx ("int32" or "int64")
  -- @tparam[opt] table opts `{name = s}`
  -- @treturn Output y
  -- @treturn Output idx
  function npu.unique(x, out_idx, opts)
    local r = unique_op(x, out_idx, opts)
    return r[1], r[2]
  end

  --- The elements (or slices) of tensor where mask is true (`tf.boolean_mask`): mask (bool,
  -- rank k, shape known) covers dims axis .. axis+k-1 of tensor, which become one dim of the
  -- selected count.
  -- @tparam Output|Tensor tensor
  -- @tparam Output|Tensor|table mask
  -- @tparam[opt] table|integer opts `{axis = 0, name = s}`, or the axis
  -- @treturn Output
  -- @raise NPU_ERR_ARG for a mask that is nil or not bool, or a bad axis
  function npu.boolean_mask(tensor, mask, opts)
    local where_ = "npu.boolean_mask"
    if math.type(opts) == "integer" then opts = { axis = opts } end -- tf.boolean_mask(t, m, axis)
    if opts ~= nil and (type(opts) ~= "table" or getmetatable(opts) ~= nil) then
      errors.raise(where_, "NPU_ERR_ARG", "argument 3 must be the axis (an integer) or {axis =, name =}, got "
        .. (type(opts) == "number" and tostring(opts) or errors.typename(opts)))
    end
    opts = opts or {}
    errors.check_keys(where_, opts, { "axis", "name" })
    if opts.axis ~= nil and math.type(opts.axis) ~= "integer" then
      errors.raise(where_, "NPU_ERR_ARG", "axis must be an integer, got " ..
        (type(opts.axis) == "number" and tostring(opts.axis) or errors.typename(opts.axis)))
    end
    if mask == nil then errors.raise(where_, "NPU_ERR_ARG", "mask is nil (a misspelt variable?)") end
    if not is_output(tensor) then tensor = npu.convert_to_tensor(tensor, nil, is_output(mask) and mask:graph() or nil) end
    if not is_output(mask) then mask = npu.convert_to_tensor(mask, "bool", tensor:graph()) end
    if mask:dtype() ~= "bool" then
      errors.raise(where_, "NPU_ERR_DTYPE", "mask must be bool, got " .. mask:dtype())
    end
    local mshape, tshape = mask:shape(), tensor:shape()
    if mshape == nil then errors.raise(where_, "NPU_ERR_SHAPE", "the mask's rank must be known") end
    local k, axis = #mshape, opts.axis or 0
    if k == 0 then errors.raise(where_, "NPU_ERR_SHAPE", "the mask must not be a scalar") end
    local rank = tshape and #tshape
    if rank then
      if axis < 0 then axis = axis + rank end
      if axis < 0 or axis + k > rank then
        errors.raise(where_, "NPU_ERR_SHAPE", ("a rank-%d mask at axis %s does not fit a tensor of shape [%s]")
          :format(k, tostring(opts.axis or 0), table.concat(tshape, ",")))
      end
      for i = 1, k do
        local a, b = tshape[axis + i], mshape[i]
        if a >= 0 and b >= 0 and a ~= b then
          errors.raise(where_, "NPU_ERR_SHAPE", ("mask [%s] does not match dims %d..%d of tensor [%s]")
            :format(table.concat(mshape, ","), axis, axis + k - 1, table.concat(tshape, ",")))
        end
      end
    elseif axis < 0 then
      errors.raise(where_, "NPU_ERR_SHAPE", "a negative axis needs the tensor's rank")
    end
    local g = tensor:graph()
    local flat = tensor
    if k > 1 then -- the k masked dims become one: shape[:axis] ++ {-1} ++ shape[axis+k:]
      local s = npu.shape(tensor)
      local n = rank or -1
      local parts = { npu.slice(s, { 0 }, { axis }), g:const(npu.tensor({ -1 }, "int32")) }
      parts[3] = npu.slice(s, { axis + k }, { n < 0 and -1 or n - axis - k })
      flat = npu.reshape(tensor, npu.concat(parts, 0))
      mask = npu.reshape(mask, { -1 })
    end
    local idx = npu.reshape(npu.where(mask), { -1 })
    return npu.gather(flat, idx, axis, opts.name and { name = opts.name } or nil)
  end

  -- non_max_suppression (NonMaxSuppressionV5): operands given as numbers become attributes,
  -- as Outputs inputs (in TensorFlow's order).
  local function nms(boxes, scores, operands, pad, name)
    local g = is_output(boxes) and boxes:graph() or is_output(scores) and scores:graph() or npu.get_default_graph()
    local inputs, attrs = { boxes, scores }, { pad_to_max_output_size = pad or nil }
    local names = { "max_output_size", "iou_threshold", "score_threshold", "soft_nms_sigma" }
    for i, k in ipairs(names) do
      local v = operands[i]
      if is_output(v) then inputs[#inputs + 1] = v elseif v ~= nil then attrs[k] = v end
    end
    return g:op("non_max_suppression", inputs, attrs, name)
  end
  npu.image = npu.image or {}
  --- The indices of the boxes kept by non-maximum suppression, best first
  -- (`tf.image.non_max_suppression`): int32 (n), n <= max_output_size known when it runs.
  -- @tparam Output boxes (n, 4)
  -- @tparam Output scores (n)
  -- @tparam integer|Output max_output_size
  -- @tparam[opt=0.5] number|Output iou_threshold
  -- @tparam[opt=-inf] number|Output score_threshold
  -- @tparam[opt] string name
  -- @treturn Output
  function npu.image.non_max_suppression(boxes, scores, max_output_size, iou_threshold, score_threshold, name)
    return nms(boxes, scores, { max_output_size, iou_threshold, score_threshold }, false, name)[1]
  end
  --- Non-maximum suppression with the count of boxes kept
  -- (`tf.image.non_max_suppression_padded`).
  -- @tparam Output boxes
  -- @tparam Output scores
  -- @tparam integer|Output max_output_size
  -- @tparam[opt=0.5] number|Output iou_threshold
  -- @tparam[opt=-inf] number|Output score_threshold
  -- @tparam[opt=false] boolean pad pad the indices with 0 to max_output_size
  -- @tparam[opt] string name
  -- @treturn Output selected_indices
  -- @treturn Output valid_outputs
  function npu.image.non_max_suppression_padded(boxes, scores, max_output_size, iou_threshold, score_threshold, pad, name)
    local r = nms(boxes, scores, { max_output_size, iou_threshold, score_threshold }, pad, name)
    return r[1], r[3]
  end
  --- Non-maximum suppression returning the kept boxes' scores too
  -- (`tf.image.non_max_suppression_with_scores`); soft NMS when sigma > 0 (overlapping boxes'
  -- scores decay instead of dropping).
  -- @tparam Output boxes
  -- @tparam Output scores
  -- @tparam integer|Output max_output_size
  -- @tparam[opt=0.5] number|Output iou_threshold
  -- @tparam[opt=-inf] number|Output score_threshold
  -- @tparam[opt=0] number|Output sigma soft_nms_sigma
  -- @tparam[opt] string name
  -- @treturn Output selected_indices
  -- @treturn Output selected_scores
  function npu.image.non_max_suppression_with_scores(boxes, scores, max_output_size, iou_threshold, score_threshold, sigma, name)
    local r = nms(boxes, scores, { max_output_size, iou_threshold, score_threshold, sigma }, false, name)
    return r[1], r[2]
  end

  local Output_methods = core.Output_mt.__index
  Output_methods.where, Output_methods.unique, Output_methods.boolean_mask =
    npu.where, npu.unique, npu.boolean_mask
end

return M
