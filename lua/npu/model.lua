--- npu.model — TensorFlow models in and out (over npu.core's graph_import_* / export).
--
--   local g, info = npu.load_model("blazeface/blazeface.json")   -- or a frozen .pb
--   local sess <close> = npu.Session{graph = g, options = {precision_mode = "force_fp32"}}
--   local y = sess:run(info.outputs[1].name, {[info.inputs[1].name] = x})
--
-- The graph keeps the model's node names (g:get_tensor_by_name("input:0")).  `info` is the
-- model's signature:
--   info.format            "tfjs", "graphdef" or "savedmodel"
--   info.signature_source  "userDefinedMetadata.signature", "signature", "signature_def" or "graph" (no
--                          signature: the Placeholders and the outputs no node consumes)
--   info.inputs, info.outputs   lists of {key =, name = "node:i", dtype =, shape = {...}}
--                          (-1 for unknown dims; shape nil for an unknown rank), in the
--                          signature's order; also indexed by key: info.outputs.by_key[k]
--   info.input_names, info.output_names   the tensor names, in order
-- @module npu.model
local core = require("npu.core")
local errors = require("npu.errors")
local error = errors.error -- npu errors are values (lua/npu/errors.lua)

local M = {}

local function decorate(info)
  for _, side in ipairs({ "inputs", "outputs" }) do
    local list, by_key, names = info[side], {}, {}
    for i, e in ipairs(list) do
      by_key[e.key] = e
      names[i] = e.name
    end
    list.by_key = by_key
    info[side:sub(1, -2) .. "_names"] = names
  end
  return info
end

--- Loads a TensorFlow model as a graph (as TensorFlow.js `loadGraphModel` /
-- `tf.saved_model.load`): a TensorFlow.js model.json (its weight files beside it), a binary
-- GraphDef .pb, or a directory: a SavedModel (saved_model.pb + variables/), else the
-- directory's model.json or its one .pb.  Also npu.load_model.
-- @tparam string path
-- @tparam[opt] table opts SavedModel only: `tags` ("serve", comma-separated: the meta
--   graph's exact tag set), `signature` ("serving_default"; info.signatures lists them),
--   `variables` (false: the variables become constants, frozen for serving; true: they stay
--   variables — g:global_variables() lists them in the bundle's order, each initialized
--   to the bundle's value by g:global_variables_initializer(), float ones trainable — so
--   the model can be fine-tuned and saved with npu.train.Saver)
-- @treturn Graph
-- @treturn table info: `inputs`, `outputs` (lists of `{name, key, dtype, shape}`, with
--   `by_key`), `input_names`, `output_names`, `format`; a SavedModel's also `signature_key`,
--   `method_name`, `signatures`
-- @raise NPU_ERR_IO, NPU_ERR_FORMAT, NPU_ERR_NOT_FOUND naming the file and node;
--   NPU_ERR_UNSUPPORTED listing every unsupported op type
-- @usage local g, info = npu.load_model("model.json")
-- local y = sess:run(info.output_names, {[info.input_names[1]] = x})
function M.load_model(path, opts)
  if type(path) ~= "string" then
    error(("npu.load_model: expected a file name, got %s"):format(type(path)), 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(("npu.load_model: opts must be a table, got %s"):format(type(opts)), 2)
  end
  errors.check_keys("npu.load_model", opts, { "tags", "signature", "variables" })
  for _, k in ipairs({ "tags", "signature" }) do
    if opts and opts[k] ~= nil and type(opts[k]) ~= "string" then
      errors.raise("npu.load_model", "NPU_ERR_ARG", ("%s must be a string%s, got %s"):format(k,
        k == "tags" and " (comma-separated)" or "", errors.typename(opts[k])))
    end
  end
  if opts and opts.variables ~= nil and type(opts.variables) ~= "boolean" then
    errors.raise("npu.load_model", "NPU_ERR_ARG", ("variables must be a boolean, got %s")
      :format(errors.typename(opts.variables)))
  end
  local g, info
  if opts and (opts.tags or opts.signature or opts.variables) then
    g, info = core.graph_import_savedmodel(path, opts.tags, opts.signature, opts.variables)
  else
    g, info = core.graph_import_file(path)
  end
  return g, decorate(info)
end

local function tensor_name(v)
  if type(v) == "string" then return v end
  local ok, name = pcall(function() return v:name() end) -- an npu.Output
  return ok and name or tostring(v)
end

local function io_lists(spec, what)
  local keys, names = {}, {}
  if spec == nil then return keys, names end
  if type(spec) ~= "table" then
    error(("npu.export_saved_model: %s must be a table"):format(what), 3)
  end
  if #spec > 0 then -- a list of tensor names: the key is the node name
    errors.check_list("npu.export_saved_model", what, spec) -- no holes, no keys besides
    for i, name in ipairs(spec) do
      names[i] = tensor_name(name)
      keys[i] = names[i]:gsub(":%d+$", "")
    end
  else
    for k in pairs(spec) do
      if type(k) ~= "string" then
        errors.raise("npu.export_saved_model", "NPU_ERR_ARG", ("%s: keys must be strings (or give a list), got %s")
          :format(what, tostring(k)))
      end
      keys[#keys + 1] = k
    end
    table.sort(keys)
    for i, k in ipairs(keys) do names[i] = tensor_name(spec[k]) end
  end
  return keys, names
end

--- Writes a SavedModel directory (`tf.saved_model.simple_save`): the graph as a GraphDef,
-- the const nodes named in variables as VariableV2 with their values in variables/ (a tensor
-- bundle), and one predict signature.  Also npu.export_saved_model.
-- @tparam Graph g
-- @tparam string dir
-- @tparam table spec `inputs`, `outputs` (required): `{key = tensor name or Output}` or a
--   list of them (keyed by node name); `variables`: const node names; `signature_key`
--   ("serving_default")
-- @treturn boolean true
-- @raise NPU_ERR_ARG for a bad spec; NPU_ERR_IO when the directory cannot be written
function M.export_saved_model(g, dir, spec)
  if getmetatable(g) ~= core.Graph_mt then
    errors.raise("npu.export_saved_model", "NPU_ERR_ARG", "argument 1 must be an npu.Graph, got " .. errors.typename(g))
  end
  if type(dir) ~= "string" then
    error(("npu.export_saved_model: expected a directory name, got %s"):format(type(dir)), 2)
  end
  if spec ~= nil and type(spec) ~= "table" then
    errors.raise("npu.export_saved_model", "NPU_ERR_ARG", "argument 3 must be a table {inputs =, outputs =, "
      .. "variables =, signature_key =}, got " .. errors.typename(spec))
  end
  spec = spec or {}
  errors.check_keys("npu.export_saved_model", spec, { "inputs", "outputs", "variables", "signature_key" })
  if spec.outputs == nil then
    errors.raise("npu.export_saved_model", "NPU_ERR_ARG", "outputs is required (the signature's outputs)")
  end
  local ik, iname = io_lists(spec.inputs, "inputs")
  local ok, oname = io_lists(spec.outputs, "outputs")
  return core.graph_export_savedmodel(g, dir, spec.signature_key, ik, iname, ok, oname,
                                      spec.variables or {})
end

local function is_file(s)
  if #s > 4096 or s:find("\0", 1, true) then return false end
  local f = io.open(s, "rb")
  if f then f:close() end
  return f ~= nil
end

--- A graph from a file name (as load_model), the bytes of a binary GraphDef, or the text of
-- a TensorFlow.js model.json (`tf.import_graph_def`).  Also npu.import_graph_def.
-- @tparam string src
-- @tparam[opt="."] string weights_dir where a model.json's weight files are
-- @treturn Graph
-- @treturn table info, as load_model's
function M.import_graph_def(src, weights_dir)
  if type(src) ~= "string" then
    error(("npu.import_graph_def: expected a file name or bytes, got %s"):format(type(src)), 2)
  end
  if is_file(src) then return M.load_model(src) end
  local g, info
  if src:match("^%s*{") then
    g, info = core.graph_import_tfjs(src, weights_dir or ".")
  else
    g, info = core.graph_import_graphdef(src)
  end
  return g, decorate(info)
end

--- Writes a graph as a binary GraphDef .pb, with TensorFlow's attribute types
-- (`tf.io.write_graph(..., as_text=False)`).  Also npu.export_graph_def.
-- @tparam Graph g
-- @tparam[opt] string path without it, the bytes are returned
-- @return true, or the bytes as a string when path is nil
-- @raise NPU_ERR_IO when the file cannot be written
function M.export_graph_def(g, path)
  if path == nil then return core.graph_serialize_graphdef(g) end
  return core.graph_export_graphdef(g, path)
end

return M
