// The reference side of nanoddp's tokenizer tests and benchmark, run under node with the npm
// packages that scripts/setup.sh installs into $NANODDP_CACHE/npm/node_modules.
//
//   encode --encodings gpt2,cl100k_base,o200k_base --input DOCS --out PREFIX
//       token ids from the npm `tiktoken` encoder (tiktoken's Rust core compiled to WASM), one file
//       PREFIX.<encoding>.bin per encoding: for each document a uint32 count, then the uint32 ids.
//   split --pattern PATTERN --input DOCS --out FILE
//       the pieces JavaScript's own regex engine cuts each document into (an engine independent of
//       PCRE2): for each document a uint32 count, then each piece's length in UTF-8 bytes.
//   bench --encoding cl100k_base --input DOCS [--repeat 3]
//       encodes every document `repeat` times and prints JSON with the best pass's wall-clock time,
//       its CPU time and its throughput.
//
// DOCS: documents back to back, each a uint32 byte length then its UTF-8 bytes. All integers are
// little-endian. --modules DIR overrides where the npm packages are looked up.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { homedir } from "node:os";
import { join } from "node:path";

function parseArgs(argv) {
  const args = { command: argv[0] };
  for (let i = 1; i < argv.length; i += 2) {
    if (!argv[i].startsWith("--") || i + 1 >= argv.length) throw new Error(`bad argument ${argv[i]}`);
    args[argv[i].slice(2)] = argv[i + 1];
  }
  return args;
}

function readDocs(path) {
  const buf = readFileSync(path);
  const decoder = new TextDecoder("utf-8", { fatal: true });  // invalid UTF-8 is an error, not U+FFFD
  const docs = [];
  for (let pos = 0; pos < buf.length; ) {
    const n = buf.readUInt32LE(pos);
    docs.push(decoder.decode(buf.subarray(pos + 4, pos + 4 + n)));
    pos += 4 + n;
  }
  return docs;
}

// uint32 arrays, each preceded by its length, concatenated into one buffer.
function packArrays(arrays) {
  let total = 0;
  for (const a of arrays) total += 1 + a.length;
  const out = new Uint32Array(total);
  let at = 0;
  for (const a of arrays) {
    out[at++] = a.length;
    out.set(a, at);
    at += a.length;
  }
  return Buffer.from(out.buffer);
}

// Rust-regex syntax (tiktoken's) to JavaScript's, for the constructs the tokenizer patterns use:
//  - \s / \S: Rust means Unicode White_Space; JavaScript's \s differs (it has U+FEFF, lacks U+0085),
//    so both become explicit classes;
//  - possessive quantifiers (?+ ++ *+): JavaScript has none; in these patterns what follows a
//    possessive run can never match inside it, so the greedy form matches the same;
//  - (?i:...): scoped flags are missing from node 20; each ASCII letter inside becomes a class of its
//    simple case folds (s also matches U+017F LONG S, k also U+212A KELVIN SIGN, as in Rust).
const WHITE_SPACE = "\\t-\\r \\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000";
const FOLDS = { s: "sS\\u017F", k: "kK\\u212A" };
function foldClass(ch) {
  const lower = ch.toLowerCase();
  return FOLDS[lower] ?? lower + lower.toUpperCase();
}
function toJsRegex(p) {
  let out = "";
  let inClass = false;
  let caselessDepth = 0;      // > 0 inside (?i:...)
  const groups = [];          // for each open group, whether it is a (?i: group
  let afterQuantifier = false;  // the last thing copied was a quantifier
  for (let i = 0; i < p.length; i++) {
    const c = p[i];
    const wasQuantifier = afterQuantifier;
    afterQuantifier = false;
    if (c === "\\") {
      const d = p[++i];
      if (d === "s") out += inClass ? WHITE_SPACE : `[${WHITE_SPACE}]`;
      else if (d === "S") {
        if (inClass) throw new Error("\\S inside a class");
        out += `[^${WHITE_SPACE}]`;
      } else if (d === "p" || d === "P") {
        const end = p.indexOf("}", i);
        out += "\\" + p.slice(i, end + 1);
        i = end;
      } else out += "\\" + d;
      continue;
    }
    if (inClass) {
      if (c === "]") inClass = false;
      out += c !== "]" && caselessDepth > 0 && /[a-zA-Z]/.test(c) ? foldClass(c) : c;
      continue;
    }
    if (c === "[") {
      inClass = true;
      out += c;
      if (p[i + 1] === "^") out += p[++i];
    } else if (c === "(" && p.startsWith("(?i:", i)) {
      groups.push(true);
      caselessDepth++;
      out += "(?:";
      i += 3;
    } else if (c === "(" && p[i + 1] === "?") {  // (?: (?! (?= : copied whole, the ? is no quantifier
      groups.push(false);
      out += p.slice(i, i + 3);
      i += 2;
    } else if (c === "(") {
      groups.push(false);
      out += c;
    } else if (c === ")") {
      if (groups.pop()) caselessDepth--;
      out += c;
    } else if (c === "{") {  // a counted quantifier {m,n}
      const end = p.indexOf("}", i);
      out += p.slice(i, end + 1);
      i = end;
      afterQuantifier = true;
    } else if (c === "?" || c === "*" || c === "+") {
      if (c === "+" && wasQuantifier) continue;  // possessive -> greedy
      out += c;
      afterQuantifier = true;
    } else {
      out += caselessDepth > 0 && /[a-zA-Z]/.test(c) ? `[${foldClass(c)}]` : c;
    }
  }
  return new RegExp(out, "gu");
}

function loadTiktoken(args) {
  const modules = args.modules ?? join(process.env.NANODDP_CACHE || join(homedir(), ".cache/nanoddp"), "npm/node_modules");
  const require = createRequire(join(modules, "noop.js"));
  return require("tiktoken");
}

function encodeCommand(args) {
  const { get_encoding } = loadTiktoken(args);
  const docs = readDocs(args.input);
  for (const name of args.encodings.split(",")) {
    const enc = get_encoding(name);
    writeFileSync(`${args.out}.${name}.bin`, packArrays(docs.map((d) => enc.encode_ordinary(d))));
    enc.free();
  }
}

function splitCommand(args) {
  const re = toJsRegex(args.pattern);
  const docs = readDocs(args.input);
  const lengths = docs.map((d) => Uint32Array.from(d.match(re) ?? [], (piece) => Buffer.byteLength(piece, "utf8")));
  writeFileSync(args.out, packArrays(lengths));
}

function benchCommand(args) {
  const { get_encoding } = loadTiktoken(args);
  const docs = readDocs(args.input);
  const enc = get_encoding(args.encoding);
  const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d, "utf8"), 0);
  const repeat = Number(args.repeat ?? 3);
  let best = Infinity, bestCpu = 0, tokens = 0;
  for (let r = 0; r < repeat; r++) {
    tokens = 0;
    const cpu0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    for (const d of docs) tokens += enc.encode_ordinary(d).length;
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    const cpu = process.cpuUsage(cpu0);  // this process's CPU time during the pass, all threads
    if (seconds < best) [best, bestCpu] = [seconds, (cpu.user + cpu.system) / 1e6];
  }
  enc.free();
  console.log(JSON.stringify({ encoder: "npm tiktoken (WASM)", encoding: args.encoding, documents: docs.length,
                               bytes, tokens, best_seconds: best, cpu_seconds: bestCpu, mb_per_s: bytes / 1e6 / best }));
}

const args = parseArgs(process.argv.slice(2));
const commands = { encode: encodeCommand, split: splitCommand, bench: benchCommand };
if (!commands[args.command]) {
  console.error("usage: tiktoken_reference.mjs encode|split|bench --input DOCS ... (see the comment at the top)");
  process.exit(2);
}
commands[args.command](args);
