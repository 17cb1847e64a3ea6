// The script's world: `tools`, `console`, a fixed clock and a seeded Math.random.
//
// Evaluated after the script's own lines, in the same source, so a stack frame whose line
// falls inside the script is the model's own line. Host functions (`__cm_*`) take and give
// strings only: numbers that cross into Python come back as 32-bit integers, silently.
(function (config, host) {
  "use strict";

  const toolNames = new Set(config.tools);
  // Taken before the script runs, so a script that replaces JSON does not change what the
  // host is sent (the host checks everything anyway).
  const JSON = Object.freeze({ stringify: globalThis.JSON.stringify, parse: globalThis.JSON.parse });

  // ---- Determinism: the clock and randomness come from the script record. ----
  const RealDate = Date;
  const NOW = config.now_ms;
  function FixedDate(...args) {
    if (new.target === undefined) return new RealDate(NOW).toString();
    return Reflect.construct(RealDate, args.length === 0 ? [NOW] : args, new.target);
  }
  // Not a subclass of the real Date: Object.getPrototypeOf(Date) would hand out its clock.
  Object.defineProperty(FixedDate, "prototype", { value: RealDate.prototype });
  Object.defineProperty(FixedDate, "name", { value: "Date" });
  Object.defineProperty(FixedDate, "length", { value: 7 });
  for (const key of ["parse", "UTC"]) {
    Object.defineProperty(FixedDate, key, { value: RealDate[key], writable: true, configurable: true });
  }
  Object.defineProperty(FixedDate, "now", { value: () => NOW, writable: true, configurable: true });
  Object.defineProperty(RealDate, "now", { value: () => NOW, writable: true, configurable: true });
  Object.defineProperty(RealDate.prototype, "constructor", { value: FixedDate, writable: true, configurable: true });
  globalThis.Date = FixedDate;

  // sfc32, seeded from the record's seed: the same sequence on every run of the script.
  let a = config.seed_lo >>> 0, b = config.seed_hi >>> 0, c = 0x9e3779b9, d = 1;
  const nextRandom = () => {
    a >>>= 0; b >>>= 0; c >>>= 0; d >>>= 0;
    let t = (a + b) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    d = (d + 1) | 0;
    t = (t + d) | 0;
    c = (c + t) | 0;
    return (t >>> 0) / 4294967296;
  };
  for (let i = 0; i < 12; i++) nextRandom();
  Object.defineProperty(Math, "random", { value: nextRandom, writable: true, configurable: true });
  // The engine's own `performance` reads the machine's clock; replace it whole.
  globalThis.performance = Object.freeze({ now: () => 0, timeOrigin: NOW });
  // Garbage-collection timing must not reach the script: it differs between runs.
  delete globalThis.WeakRef;
  delete globalThis.FinalizationRegistry;

  // ---- Formatting values as text (console.log, error messages). ----
  function describe(value, depth, ancestors) {
    switch (typeof value) {
      case "string": return JSON.stringify(value);
      case "number": return Number.isFinite(value) ? String(value) : String(value);
      case "bigint": return value + "n";
      case "boolean": return String(value);
      case "undefined": return "undefined";
      case "symbol": return value.toString();
      case "function": return "[Function" + (value.name ? " " + value.name : "") + "]";
    }
    if (value === null) return "null";
    if (ancestors.includes(value)) return "[Circular]";
    if (value instanceof Error) return errorText(value);
    if (value instanceof RealDate) return isNaN(value) ? "Invalid Date" : JSON.stringify(value.toISOString());
    if (depth > 8) return Array.isArray(value) ? "[Array]" : "[Object]";
    ancestors.push(value);
    try {
      if (Array.isArray(value)) {
        return "[" + value.map((v) => describe(v, depth + 1, ancestors)).join(",") + "]";
      }
      if (value instanceof Map) {
        return "Map(" + JSON.stringify(value.size) + ") {" + [...value].map(([k, v]) =>
          describe(k, depth + 1, ancestors) + " => " + describe(v, depth + 1, ancestors)).join(", ") + "}";
      }
      if (value instanceof Set) {
        return "Set(" + value.size + ") {" + [...value].map((v) => describe(v, depth + 1, ancestors)).join(", ") + "}";
      }
      if (typeof value.toJSON === "function") return describe(value.toJSON(), depth + 1, ancestors);
      const parts = [];
      for (const key of Object.keys(value)) {
        const v = value[key];
        if (v === undefined || typeof v === "function" || typeof v === "symbol") continue;
        parts.push(JSON.stringify(key) + ":" + describe(v, depth + 1, ancestors));
      }
      return "{" + parts.join(",") + "}";
    } finally {
      ancestors.pop();
    }
  }
  function errorText(e) {
    try {
      const name = e && e.name !== undefined ? String(e.name) : "Error";
      const message = e && e.message !== undefined ? String(e.message) : "";
      return message ? name + ": " + message : name;
    } catch (_) {
      return "Error";
    }
  }
  function text(value) {
    try {
      return typeof value === "string" ? value : describe(value, 0, []);
    } catch (e) {
      return "[unprintable: " + errorText(e) + "]";
    }
  }
  // Every string handed to the host goes through this: it replaces lone surrogates, and it
  // flattens a concatenated ("rope") string, which the binding cannot convert.
  const wellFormed = (s) => s.toWellFormed();

  const print = (...args) => { host.print(wellFormed(args.map(text).join(" "))); };
  globalThis.console = Object.freeze({
    log: print, info: print, warn: print, error: print, debug: print, trace: print,
  });

  // ---- Arguments must be plain data: what crosses to the host is JSON. ----
  function checkPlain(value, path, seen) {
    switch (typeof value) {
      case "string": case "boolean": return;
      case "number":
        if (!Number.isFinite(value)) throw new TypeError(path + " is " + value + ", which JSON cannot carry");
        return;
      case "undefined": throw new TypeError(path + " is undefined; leave the key out instead");
      case "bigint": throw new TypeError(path + " is a BigInt; pass a number or a string");
      case "function": throw new TypeError(path + " is a function; arguments must be plain data");
      case "symbol": throw new TypeError(path + " is a symbol; arguments must be plain data");
    }
    if (value === null) return;
    if (seen.includes(value)) throw new TypeError(path + " refers to itself; arguments must be a tree of plain data");
    const proto = Object.getPrototypeOf(value);
    const isArray = Array.isArray(value);
    if (!isArray && proto !== Object.prototype && proto !== null) {
      const kind = value instanceof RealDate ? "a Date (pass date.toISOString())"
        : "a " + ((proto && proto.constructor && proto.constructor.name) || "non-plain object");
      throw new TypeError(path + " is " + kind + "; arguments must be plain data");
    }
    seen.push(value);
    if (isArray) {
      for (let i = 0; i < value.length; i++) checkPlain(value[i], path + "[" + i + "]", seen);
    } else {
      for (const key of Object.keys(value)) {
        const v = value[key];
        if (v === undefined) continue; // JSON leaves it out, as the model meant
        checkPlain(v, path + "." + key, seen);
      }
    }
    seen.pop();
  }

  // ---- tools: a call answered from the log settles; a new call never settles this run. ----
  const never = () => new Promise(() => {});
  function callTool(name, args) {
    if (!toolNames.has(name)) {
      const near = JSON.parse(host.closest(wellFormed(name)));
      let message = name === "run_code"
        ? "tools.run_code cannot be called from a script: a script is already running code"
        : "tools." + name + " does not exist";
      if (near.length) message += "; the closest tools are " + near.map((n) => "tools." + n).join(", ");
      message += ". Find tools with await tools.tool_search({ query: \"...\" }).";
      throw new Error(message);
    }
    if (args === undefined) args = {};
    if (typeof args !== "object" || args === null || Array.isArray(args)) {
      throw new TypeError("tools." + name + " takes one object of arguments, as tools." + name +
        "({ ... }); it was given " + (Array.isArray(args) ? "an array"
        : typeof args === "string" ? "a string" : text(args)));
    }
    checkPlain(args, "the argument", []);
    const answer = host.call(wellFormed(name), wellFormed(JSON.stringify(args)));
    const tag = answer.charCodeAt(0);
    const rest = answer.slice(1);
    switch (tag) {
      case 114: return Promise.resolve(JSON.parse(rest)); // "r": a recorded result
      case 101: { // "e": a recorded error
        const err = new Error(rest);
        err.tool = name;
        return Promise.reject(err);
      }
      case 116: throw new TypeError(rest); // "t": this call is wrong
      case 108: throw new RangeError(rest); // "l": this call is over a per-call limit
      default: return never(); // "p": a new call, or "x": the run has ended
    }
  }
  const callers = new Map();
  const callerFor = (name) => {
    let f = callers.get(name);
    if (!f) {
      f = { [name]: function (args) { return callTool(name, args); } }[name];
      callers.set(name, f);
    }
    return f;
  };
  globalThis.tools = new Proxy(Object.create(null), {
    get(_, prop) {
      if (typeof prop !== "string" || prop === "then") return undefined;
      return callerFor(prop);
    },
    has: (_, prop) => toolNames.has(prop),
    ownKeys: () => [...toolNames].sort(),
    getOwnPropertyDescriptor: (_, prop) => toolNames.has(prop)
      ? { value: callerFor(prop), enumerable: true, configurable: true, writable: false }
      : undefined,
    set() { throw new TypeError("tools is read-only"); },
    defineProperty() { throw new TypeError("tools is read-only"); },
    deleteProperty() { throw new TypeError("tools is read-only"); },
  });

  // ---- files: read through the runner; decoded on the Python side, in batches. ----
  function fileOp(op, args) {
    const answer = host.file(op, wellFormed(JSON.stringify(args)));
    const tag = answer.charCodeAt(0);
    if (tag === 114) return JSON.parse(answer.slice(1)); // "r"
    if (tag === 116) throw new Error(answer.slice(1)); // "t": a bad use, or a file that is gone
    throw new Error("the run has ended"); // "x": in a real process, it has already exited
  }
  function options(name, opts) {
    if (opts === undefined) return {};
    if (typeof opts !== "object" || opts === null || Array.isArray(opts)) {
      throw new TypeError("files." + name + " takes an object of options, as { limit: 10 }");
    }
    checkPlain(opts, "the options", []);
    return opts;
  }
  function stream(kind) {
    return function (id, opts) {
      const given = options(kind, opts);
      let handle = 0, buffer = [], index = 0, done = false, opened = false;
      const close = () => {
        if (opened && !done) fileOp("close", { handle });
        done = true;
        buffer = [];
      };
      const iterator = {
        next() {
          try {
            if (!opened) {
              opened = true;
              handle = fileOp("open", { kind, id, options: given });
            }
            while (index >= buffer.length) {
              if (done) return Promise.resolve({ value: undefined, done: true });
              const batch = fileOp("next", { handle });
              buffer = batch.items;
              index = 0;
              done = batch.done;
            }
            return Promise.resolve({ value: buffer[index++], done: false });
          } catch (e) {
            done = true;
            return Promise.reject(e);
          }
        },
        return(value) {
          close();
          return Promise.resolve({ value, done: true });
        },
        [Symbol.asyncIterator]() { return this; },
      };
      return iterator;
    };
  }
  globalThis.files = Object.freeze({
    list: () => fileOp("list", {}),
    stat: (id) => fileOp("stat", { id }),
    text: async (id) => fileOp("text", { id }),
    show: (id) => { fileOp("show", { id }); },
    sheets: async (id) => fileOp("sheets", { id }),
    lines: stream("lines"),
    jsonl: stream("jsonl"),
    csv: stream("csv"),
    chunks: stream("chunks"),
    xlsx: stream("xlsx"),
  });

  // ---- The end of the script: its value or its error goes to the host as text. ----
  return function settle(main) {
    main.then(
      (value) => {
        if (value === undefined) { host.done("u"); return; }
        const half = config.value_bound >> 1;
        if (typeof value === "string" && value.length > 2 * half) {
          // A huge string is cut here: turning it into JSON first could exhaust memory.
          host.done(wellFormed("c" + JSON.stringify([value.slice(0, half),
            value.slice(-half), value.length])));
          return;
        }
        let json;
        try {
          json = JSON.stringify(value);
        } catch (e) {
          if (e === null || (e instanceof InternalError && /out of memory/.test(e.message))) {
            host.fail("InternalError", "out of memory", "");
          } else {
            host.fail("TypeError", wellFormed("the returned value is not JSON data: " + errorText(e)), "");
          }
          return;
        }
        host.done(json === undefined ? "u" : wellFormed("j" + json));
      },
      (error) => {
        let name = "Error", message = "", stack = "";
        try {
          if (error instanceof Error) {
            name = String(error.name);
            message = String(error.message);
            stack = typeof error.stack === "string" ? error.stack : "";
          } else {
            name = "Uncaught";
            message = text(error);
          }
        } catch (e) {
          message = "an error that cannot be read: " + errorText(e);
        }
        host.fail(wellFormed(name), wellFormed(message), wellFormed(stack));
      },
    );
  };
})
