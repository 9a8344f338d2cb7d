// pipetab's engine in JavaScript: the WebAssembly module (pipetab.js + pipetab.wasm, the same
// library and command line as the native `pipetab`) behind one call,
//   engine.run(["compare", "-S", "4", "--format", "json"], {inputs, outputs, onStderr})
//     -> {code, stdout, stderr, files}
// that returns exactly what the native command prints. Used by the page's worker (worker.js) and
// by the tests under node (tests/web/). No DOM, no network: works in a page, a worker and node.
"use strict";

(function (root) {
  const decoder = new TextDecoder("utf-8");

  // A growing byte buffer: the module hands its stdout and stderr over one byte at a time.
  class Bytes {
    constructor() { this.reset(); }
    reset() { this.data = new Uint8Array(1 << 16); this.length = 0; }
    push(byte) {
      if (this.length === this.data.length) {
        const bigger = new Uint8Array(this.data.length * 2);
        bigger.set(this.data);
        this.data = bigger;
      }
      this.data[this.length++] = byte;
    }
    text() { return decoder.decode(this.data.subarray(0, this.length)); }
  }

  // createPipetab: the module factory of pipetab.js; moduleOptions: e.g. {wasmBinary} in node.
  async function createEngine(createPipetab, moduleOptions = {}) {
    const out = new Bytes();
    const err = new Bytes();
    let onStderrLine = null;
    let line = [];
    const stderrByte = (code) => {
      if (code === null || code === undefined) return;
      err.push(code & 0xff);
      if (onStderrLine) {
        if (code === 10) {
          onStderrLine(decoder.decode(new Uint8Array(line)));
          line = [];
        } else {
          line.push(code & 0xff);
        }
      }
    };
    const make = () => createPipetab(Object.assign({}, moduleOptions, {
      stdout: (code) => { if (code !== null && code !== undefined) out.push(code & 0xff); },
      stderr: stderrByte,
      print: () => {},
      printErr: () => {},
    }));
    let module = await make();

    // Runs one command. inputs: {path: string | Uint8Array} written before it runs (relative
    // paths are under /work, the working directory); outputs: paths read back after it ran.
    async function run(args, options = {}) {
      const { inputs = {}, outputs = [], onStderr = null } = options;
      out.reset();
      err.reset();
      line = [];
      onStderrLine = onStderr;
      const FS = module.FS;
      try { FS.mkdir("/work"); } catch (e) { /* exists */ }
      FS.chdir("/work");
      for (const [path, data] of Object.entries(inputs)) FS.writeFile(path, data);
      for (const path of outputs) { try { FS.unlink(path); } catch (e) { /* absent */ } }
      let code;
      try {
        // The arguments go through the module's heap, not its stack: ccall's "string" copies onto
        // the stack, and an argument list over about 1.3 MB trapped the engine.
        const bytes = new TextEncoder().encode(JSON.stringify(args));
        const at = module._malloc(bytes.length + 1);
        if (!at) throw new Error(`no memory for ${bytes.length} bytes of arguments`);
        module.HEAPU8.set(bytes, at);
        module.HEAPU8[at + bytes.length] = 0;
        try {
          code = module.ccall("pipetab_run", "number", ["number"], [at]);
        } finally {
          module._free(at);
        }
      } catch (e) {
        // A trap (out of memory, a bug) leaves the instance unusable: start a new one.
        module = await make();
        return { code: 1, stdout: out.text(), stderr: err.text() + `pipetab: error: the engine stopped: ${e}\n`, files: {} };
      } finally {
        onStderrLine = null;
      }
      const files = {};
      for (const path of outputs) {
        try { files[path] = FS.readFile(path); } catch (e) { /* not written */ }
      }
      return { code, stdout: out.text(), stderr: err.text(), files };
    }
    return { run };
  }

  if (typeof module === "object" && module.exports) module.exports = { createEngine };
  else root.createEngine = createEngine;
})(typeof self !== "undefined" ? self : this);
