#!/usr/bin/env node
// ONNX Runtime's side of tools/bench/run: one ONNX file on ORT's CPU
// execution provider, timed as dlrun bench times a model.
//
//   node tools/bench/ort.js MODEL.onnx (-i INPUT.npy | --shape 1,3,224,224)
//        [-t THREADS] [-k K] [--warmup W] [-o OUTPUT.npy] [--print]
//
// The session: intraOpNumThreads THREADS (default 1), interOpNumThreads 1,
// graphOptimizationLevel 'all', executionMode 'sequential' (ORT's own
// defaults otherwise, so its intra-op threads spin between runs). The
// input is an .npy file (float32 or int64, C order) given to the model's
// first input, or with --shape a float32 tensor of that shape filled with
// uniform [0, 1) values from a fixed seed. -o writes the first output as
// a float32 .npy file, --print prints its shape and first values on
// stderr. Then W warm-up runs (default 3) and K timed ones (default 10);
// stdout gets one line of JSON: {"median_ms":..,"min_ms":..,"max_ms":..}
// (wall time of each awaited session.run). Peak RSS is the caller's to
// measure (/usr/bin/time).
//
// onnxruntime-node is looked up in $ORT_DIR/node_modules (default
// tools/bench/ort/node_modules), then on node's own path. Install it with
//   cd tools/bench/ort && ONNXRUNTIME_NODE_INSTALL=skip \
//       npm install --no-save onnxruntime-node@1.30.0
// (the variable skips the postinstall's GPU download; the CPU library
// ships in the package). It is a benchmark peer, never a dependency of
// dlrun. Exit status 2 on bad usage or input.
'use strict';

const fs = require('fs');
const path = require('path');

function die(msg) {
  process.stderr.write('ort.js: ' + msg + '\n');
  process.exit(2);
}

const USAGE = 'usage: node ort.js MODEL.onnx (-i INPUT.npy | --shape D0,D1,...) ' +
  '[-t THREADS] [-k K] [--warmup W] [-o OUTPUT.npy] [--print]';

function positiveInt(flag, v, min) {
  if (v === undefined || !/^[0-9]+$/.test(v) || Number(v) < min)
    die(flag + ': expected an integer >= ' + min + ', got ' + JSON.stringify(v));
  return Number(v);
}

function parseArgs(argv) {
  const a = { threads: 1, k: 10, warmup: 3, print: false };
  for (let i = 0; i < argv.length; i++) {
    const f = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) die(f + ' needs a value\n' + USAGE);
      return argv[++i];
    };
    if (f === '-h' || f === '--help') {
      process.stdout.write(USAGE + '\n');
      process.exit(0);
    } else if (f === '-i' || f === '--input') a.input = next();
    else if (f === '--shape') {
      const s = next();
      if (!/^[0-9]+(,[0-9]+)*$/.test(s)) die('--shape: expected D0,D1,..., got ' + JSON.stringify(s));
      a.shape = s.split(',').map(Number);
    } else if (f === '-t' || f === '--threads') a.threads = positiveInt(f, next(), 1);
    else if (f === '-k') a.k = positiveInt(f, next(), 1);
    else if (f === '--warmup') a.warmup = positiveInt(f, next(), 0);
    else if (f === '-o' || f === '--output') a.output = next();
    else if (f === '--print') a.print = true;
    else if (f.startsWith('-')) die('unknown option ' + f + '\n' + USAGE);
    else if (a.model === undefined) a.model = f;
    else die('one model only, got ' + JSON.stringify(f) + ' too\n' + USAGE);
  }
  if (a.model === undefined) die('no model\n' + USAGE);
  if ((a.input === undefined) === (a.shape === undefined)) die('give one of -i and --shape\n' + USAGE);
  return a;
}

// ---- .npy, the subset numpy.save writes for float32 and int64 arrays ----

function readNpy(file) {
  let buf;
  try {
    buf = fs.readFileSync(file);
  } catch (e) {
    die(file + ': ' + e.message);
  }
  if (buf.length < 10 || buf.toString('latin1', 0, 6) !== '\x93NUMPY')
    die(file + ': not an .npy file');
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = (major === 1 ? 10 : 12) + hlen;
  const header = buf.toString('latin1', major === 1 ? 10 : 12, start);
  const descr = /'descr':\s*'([^']*)'/.exec(header);
  const fortran = /'fortran_order':\s*(True|False)/.exec(header);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header);
  if (!descr || !fortran || !shape) die(file + ': bad .npy header');
  if (fortran[1] === 'True') die(file + ': Fortran-order arrays are not read');
  const dims = shape[1].split(',').map(s => s.trim()).filter(s => s !== '').map(Number);
  const n = dims.reduce((p, d) => p * d, 1);
  const types = { '<f4': ['float32', Float32Array], '<i8': ['int64', BigInt64Array] };
  const t = types[descr[1]];
  if (!t) die(file + ': dtype ' + descr[1] + ' is not read (float32 <f4 or int64 <i8)');
  const [type, Ctor] = t;
  if (buf.length - start < n * Ctor.BYTES_PER_ELEMENT) die(file + ': data shorter than its shape');
  // copied: the file's data need not be aligned for the typed array
  const data = new Ctor(n);
  new Uint8Array(data.buffer).set(buf.subarray(start, start + n * Ctor.BYTES_PER_ELEMENT));
  return { type, data, dims };
}

function writeNpy(file, data, dims) {
  const shape = dims.length === 1 ? '(' + dims[0] + ',)' : '(' + dims.join(', ') + ')';
  let header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ', }';
  // magic (6) + version (2) + length (2) + header + '\n', padded to 64
  const pad = 64 - ((10 + header.length + 1) % 64);
  header += ' '.repeat(pad % 64) + '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1;
  head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  const f32 = Float32Array.from(data);
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(header, 'latin1'),
    Buffer.from(f32.buffer, f32.byteOffset, f32.byteLength)]));
}

function uniform(dims) {
  const n = dims.reduce((p, d) => p * d, 1);
  const data = new Float32Array(n);
  let s = 12345;   // a 32-bit LCG: the values only need to be fixed
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    data[i] = (s >>> 8) / 16777216;
  }
  return { type: 'float32', data, dims };
}

function loadOrt() {
  const dir = process.env.ORT_DIR || path.join(__dirname, 'ort');
  try {
    return require(path.join(dir, 'node_modules', 'onnxruntime-node'));
  } catch (e) {
    try {
      return require('onnxruntime-node');
    } catch (e2) {
      die('onnxruntime-node not found in ' + path.join(dir, 'node_modules') +
          ' or on node\'s path; install it: cd tools/bench/ort && ' +
          'ONNXRUNTIME_NODE_INSTALL=skip npm install --no-save onnxruntime-node@1.30.0');
    }
  }
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const x = a.input !== undefined ? readNpy(a.input) : uniform(a.shape);
  const ort = loadOrt();
  let session;
  try {
    session = await ort.InferenceSession.create(a.model, {
      executionProviders: ['cpu'],
      intraOpNumThreads: a.threads,
      interOpNumThreads: 1,
      graphOptimizationLevel: 'all',
      executionMode: 'sequential',
    });
  } catch (e) {
    die(a.model + ': ' + e.message);
  }
  const feeds = { [session.inputNames[0]]: new ort.Tensor(x.type, x.data, x.dims) };
  const outName = session.outputNames[0];
  let out;
  try {
    out = (await session.run(feeds))[outName];
  } catch (e) {
    die(a.model + ': ' + e.message);
  }
  if (a.output !== undefined) writeNpy(a.output, out.data, out.dims);
  if (a.print) {
    const head = Array.from(out.data.slice(0, 8), v => Number(v).toPrecision(6));
    process.stderr.write(outName + ' [' + out.dims.join(', ') + ']: ' + head.join(' ') +
                         (out.data.length > 8 ? ' ...' : '') + '\n');
  }
  for (let i = 0; i < a.warmup; i++) await session.run(feeds);
  const times = [];
  for (let i = 0; i < a.k; i++) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((p, q) => p - q);
  const m = times.length >> 1;
  const median = times.length % 2 ? times[m] : (times[m - 1] + times[m]) / 2;
  process.stdout.write(JSON.stringify({ median_ms: median, min_ms: times[0],
                                        max_ms: times[times.length - 1] }) + '\n');
}

main().catch(e => die(e.stack || String(e)));
