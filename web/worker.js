// The engine in a Web Worker, so that a long plan never freezes the page. Messages in:
// {id, args, inputs, outputs}; out: {id, line} for each stderr line while it runs (plan's
// progress), then {id, result: {code, stdout, stderr, files}}. The first message out is
// {ready: true} once the module is instantiated.
"use strict";
importScripts("pipetab.js", "engine.js");

const queue = [];
let engine = null;
let busy = false;

async function drain() {
  if (busy) return;
  busy = true;
  while (engine && queue.length) {
    const { id, args, inputs, outputs } = queue.shift();
    const result = await engine.run(args, {
      inputs, outputs, onStderr: (line) => postMessage({ id, line }),
    });
    postMessage({ id, result });
  }
  busy = false;
}

onmessage = (event) => {
  queue.push(event.data);
  drain();
};

createEngine(createPipetab).then((e) => {
  engine = e;
  postMessage({ ready: true });
  drain();
}, (error) => postMessage({ failed: String(error) }));
