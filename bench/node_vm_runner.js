// The benchmark's `node:vm` reference: one node process per step, as many hosts run model
// code (unconfined: a vm context is not a security boundary). It reads one script as JSON on
// stdin ({code, records, clock}), runs it with the same replay semantics as the sandbox (a
// recorded call resolves with its result, a call past the log is collected and never
// settles), and writes one JSON line: {outcome, value | calls | error, printed}.
"use strict";

const vm = require("node:vm");

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => main(JSON.parse(input)));

function canonical(value) {
  if (Array.isArray(value)) return "[" + value.map(canonical).join(",") + "]";
  if (value && typeof value === "object") {
    const keys = Object.keys(value).sort();
    return "{" + keys.map((k) => JSON.stringify(k) + ":" + canonical(value[k])).join(",") + "}";
  }
  return JSON.stringify(value);
}

function main(script) {
  const records = script.records || [];
  const calls = [];
  const printed = [];
  let position = 0;
  let divergence = null;

  const tools = new Proxy(
    {},
    {
      get(_target, name) {
        if (typeof name !== "string") return undefined;
        return (args = {}) => {
          const index = position++;
          const copy = JSON.parse(JSON.stringify(args));
          if (index < records.length) {
            const record = records[index];
            if (record.name !== name || canonical(record.arguments) !== canonical(copy)) {
              divergence = divergence || `call ${index + 1} differs from the log`;
              return new Promise(() => {});
            }
            if (record.error != null) return Promise.reject(new Error(record.error));
            return Promise.resolve(JSON.parse(JSON.stringify(record.result)));
          }
          calls.push({ name, arguments: copy });
          return new Promise(() => {});
        };
      },
    },
  );

  const context = vm.createContext({
    tools,
    console: { log: (...parts) => printed.push(parts.map(String).join(" ")) },
  });
  // Time and randomness from the log, as in the sandbox.
  const clock = script.clock || { now_ms: 0, seed: 1 };
  vm.runInContext(
    `(() => {
      const now = ${Number(clock.now_ms)};
      Date.now = () => now;
      let s = ${Number(clock.seed) >>> 0} || 1;
      Math.random = () => { s ^= s << 13; s ^= s >>> 17; s ^= s << 5; return (s >>> 0) / 4294967296; };
    })()`,
    context,
  );

  let settled = null;
  let promise;
  try {
    promise = vm.runInContext("(async function () {\n" + script.code + "\n})()", context);
  } catch (e) {
    promise = Promise.reject(e);
  }
  promise.then(
    (value) => (settled = { outcome: "finished", value }),
    (e) => (settled = { outcome: "failed", error: errorOf(e) }),
  );
  // setImmediate runs once the microtask queue is empty: every recorded call has resolved.
  setImmediate(() => {
    let out;
    if (divergence) out = { outcome: "failed", error: { name: "DivergenceError", message: divergence } };
    else if (calls.length) out = { outcome: "calls", calls };
    else if (settled) out = settled;
    else out = { outcome: "failed", error: { name: "StuckError", message: "the script is stuck" } };
    out.printed = printed.length ? printed.join("\n") + "\n" : "";
    if (out.outcome === "finished" && out.value === undefined) delete out.value;
    process.stdout.write(JSON.stringify(out) + "\n");
  });
}

function errorOf(e) {
  if (e && typeof e === "object") return { name: String(e.name || "Error"), message: String(e.message) };
  return { name: "Error", message: String(e) };
}
