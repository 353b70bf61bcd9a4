#!/usr/bin/env node
// tfjs_reference.mjs — reference outputs of a TensorFlow.js graph model, computed by
// TensorFlow.js itself (CPU backend), for comparing lua-npu against it (docs/import.md).
//
//   node tools/tfjs_reference.mjs MODEL.json OUTDIR [--unknown-dim N] [INPUT.npy ...]
//
// Loads MODEL.json and its weight files from disk (no network), feeds one .npy per input
// (inputs = the Placeholder nodes in file order, the order shared/models/README.md uses), or,
// without INPUT files, generates them with that README's recipe (Mulberry32, seed 20240601 + i,
// float inputs (r >> 8) / 2^24, integer inputs r >> 24; unknown dims set to 1, or to N with
// --unknown-dim N, the batch dim excepted), runs
// GraphModel.execute on the signature's outputs (userDefinedMetadata.signature, else signature;
// none: the model's own outputs) and writes
//   OUTDIR/input_<i>.npy, OUTDIR/output_<j>.npy   (NumPy 1.0, little-endian, C order)
//   OUTDIR/reference.json                         names, dtypes, shapes, tfjs version, backend,
//                                                 median_ms of 5 timed runs after one warm-up
// TFJS_BACKEND=wasm runs the WebAssembly backend instead (@tensorflow/tfjs-backend-wasm, one
// thread; another float32 summation order, for judging how sensitive a model is to it).
// TensorFlow.js is not a dependency of lua-npu: install it anywhere (npm install
// @tensorflow/tfjs@4.22.0 in a scratch directory) and point TFJS_DIR at that directory.
import fs from 'fs';
import path from 'path';
import { createRequire } from 'module';

const usage = 'usage: TFJS_DIR=<dir with node_modules/@tensorflow/tfjs> node tfjs_reference.mjs MODEL.json OUTDIR [--unknown-dim N] [INPUT.npy ...]';
const args = process.argv.slice(2);
let unknownDim = 1;
const k = args.indexOf('--unknown-dim');
if (k >= 0) {
  unknownDim = Number(args[k + 1]);
  args.splice(k, 2);
  if (!(unknownDim >= 1)) {
    console.error(`tfjs_reference: --unknown-dim expects a size >= 1\n${usage}`);
    process.exit(2);
  }
}
const [modelPath, outDir, ...inputFiles] = args;
if (!modelPath || !outDir) {
  console.error(usage);
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(process.env.TFJS_DIR || '.'), 'package.json'));
let tf;
try {
  tf = require('@tensorflow/tfjs');
} catch (e) {
  console.error(`tfjs_reference: cannot load @tensorflow/tfjs (set TFJS_DIR): ${e.message}\n${usage}`);
  process.exit(2);
}

// ---- .npy ----
const NPY_DTYPES = { float32: ['<f4', Float32Array], int32: ['<i4', Int32Array], bool: ['|b1', Uint8Array] };

function writeNpy(file, dtype, shape, values) {
  const [descr, Ctor] = NPY_DTYPES[dtype] || [];
  if (!descr) throw new Error(`${file}: no .npy form for dtype ${dtype}`);
  const dims = shape.length === 1 ? `${shape[0]},` : shape.join(', ');
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${dims}), }`;
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const pre = Buffer.alloc(10);
  pre.write('\x93NUMPY', 0, 'latin1');
  pre[6] = 1; pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  const data = Ctor.from(values);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'),
    Buffer.from(data.buffer, data.byteOffset, data.byteLength)]));
}

function readNpy(file) {
  const b = fs.readFileSync(file);
  if (b.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${file}: not a .npy file`);
  const hlen = b[6] === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const start = b[6] === 1 ? 10 : 12;
  const header = b.toString('latin1', start, start + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${file}: Fortran order`);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map(s => s.trim()).filter(s => s).map(Number);
  const entry = Object.entries(NPY_DTYPES).find(([, [d]]) => d === descr);
  if (!entry) throw new Error(`${file}: dtype ${descr} (expected <f4, <i4 or |b1)`);
  const [dtype, [, Ctor]] = entry;
  const body = b.subarray(start + hlen);
  const copy = new Uint8Array(body.length);
  copy.set(body);
  return { dtype, shape, values: new Ctor(copy.buffer, 0, body.length / Ctor.BYTES_PER_ELEMENT) };
}

// ---- the recipe of shared/models/README.md ----
function mulberry32(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6D2B79F5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1) >>> 0;
    t = (t ^ (t + Math.imul(t ^ (t >>> 7), t | 61))) >>> 0;
    return (t ^ (t >>> 14)) >>> 0;
  };
}

const TF_DTYPES = { DT_FLOAT: 'float32', DT_INT32: 'int32', DT_BOOL: 'bool', DT_UINT8: 'int32', DT_INT64: 'int32' };

function makeInput(i, dtype, shape) {
  const next = mulberry32(20240601 + i);
  const n = shape.reduce((a, d) => a * d, 1);
  const v = dtype === 'float32' ? new Float32Array(n) : new Int32Array(n);
  for (let k = 0; k < n; k++) {
    const r = next();
    v[k] = dtype === 'float32' ? (r >>> 8) / 16777216 : r >>> 24;
  }
  return v;
}

// ---- the model ----
const model = JSON.parse(fs.readFileSync(modelPath, 'utf8'));
const dir = path.dirname(modelPath);
const specs = [];
const buffers = [];
for (const group of model.weightsManifest || []) {
  specs.push(...group.weights);
  for (const p of group.paths) buffers.push(fs.readFileSync(path.join(dir, p)));
}
const all = Buffer.concat(buffers);
const weightData = all.buffer.slice(all.byteOffset, all.byteOffset + all.byteLength);
const handler = {
  load: async () => ({
    modelTopology: model.modelTopology, weightSpecs: specs, weightData, format: model.format,
    generatedBy: model.generatedBy, convertedBy: model.convertedBy, signature: model.signature,
    userDefinedMetadata: model.userDefinedMetadata, modelInitializer: model.modelInitializer,
  }),
};

const backend = process.env.TFJS_BACKEND || 'cpu';
if (backend === 'wasm') {
  const wasm = require('@tensorflow/tfjs-backend-wasm');
  wasm.setThreadsCount(1);
}
if (!(await tf.setBackend(backend))) throw new Error(`backend '${backend}' is not available`);
await tf.ready();
const graphModel = await tf.loadGraphModel(handler);

const placeholders = model.modelTopology.node.filter(n => n.op === 'Placeholder');
const signature = (model.userDefinedMetadata && model.userDefinedMetadata.signature) || model.signature;
let outputNames = signature && signature.outputs && Object.values(signature.outputs).map(o => o.name);
if (!outputNames || outputNames.length === 0) outputNames = graphModel.outputs.map(o => o.name);

fs.mkdirSync(outDir, { recursive: true });
const feeds = {};
const inputsMeta = [];
placeholders.forEach((node, i) => {
  const dtype = TF_DTYPES[node.attr.dtype.type];
  if (!dtype) throw new Error(`input '${node.name}': dtype ${node.attr.dtype.type} has no recipe`);
  const dims = ((node.attr.shape && node.attr.shape.shape.dim) || []).map(d => Number(d.size));
  let input;
  if (inputFiles.length) {
    if (!inputFiles[i]) throw new Error(`no .npy given for input ${i} ('${node.name}')`);
    input = readNpy(inputFiles[i]);
  } else {
    const shape = dims.map((d, a) => (d >= 0 ? d : a === 0 ? 1 : unknownDim));
    input = { dtype, shape, values: makeInput(i, dtype, shape) };
  }
  writeNpy(path.join(outDir, `input_${i}.npy`), input.dtype, input.shape, input.values);
  feeds[`${node.name}:0`] = tf.tensor(input.values, input.shape, input.dtype);
  inputsMeta.push({ index: i, name: `${node.name}:0`, dtype: input.dtype, shape: input.shape, file: `input_${i}.npy` });
});

// Models with control flow (Switch/Merge, loops) need executeAsync; the others run as before.
let dynamic = false;
const run = async () => {
  let out;
  if (!dynamic) {
    try { out = graphModel.execute(feeds, outputNames); } catch (e) {
      if (!/executeAsync/.test(e.message)) throw e;
      dynamic = true;
    }
  }
  if (dynamic) out = await graphModel.executeAsync(feeds, outputNames);
  const list = Array.isArray(out) ? out : [out];
  const vals = list.map(t => ({ dtype: t.dtype, shape: t.shape, values: t.dataSync() }));
  tf.dispose(list);
  return vals;
};
const outs = await run();
const times = [];
for (let k = 0; k < 5; k++) {
  const t0 = process.hrtime.bigint();
  await run();
  times.push(Number(process.hrtime.bigint() - t0) / 1e6);
}
times.sort((a, b) => a - b);
const outputsMeta = outs.map((o, j) => {
  writeNpy(path.join(outDir, `output_${j}.npy`), o.dtype, o.shape, o.values);
  return { index: j, name: outputNames[j], dtype: o.dtype, shape: o.shape, file: `output_${j}.npy` };
});
const meta = {
  model: path.basename(modelPath), tfjs: tf.version.tfjs, backend: tf.getBackend(),
  inputs: inputsMeta, outputs: outputsMeta, median_ms: times[2],
};
fs.writeFileSync(path.join(outDir, 'reference.json'), JSON.stringify(meta, null, 1) + '\n');
for (const o of outputsMeta) console.log(`${o.name} ${o.dtype} [${o.shape}] -> ${path.join(outDir, o.file)}`);
console.log(`tfjs ${meta.tfjs} ${meta.backend}: ${times[2].toFixed(1)} ms per run (median of 5)`);
