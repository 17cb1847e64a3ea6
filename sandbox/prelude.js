// The script's world: `tools`, `console`, a fixed clock and a seeded Math.random.
//
// Evaluated before any text of the script is parsed, on a context nothing has run in yet, so
// the built-ins it copies are the engine's own. It then compiles the script's body on its own
// (`compile`) and runs it, in two parts: the world itself (all but what one script's record
// sets), made once per context before any script exists (a fork server makes it before it
// forks), and `begin(config, code)`, once, which sets the script's tools, clock, seed and
// bounds, then compiles and runs its body. Host functions (`__cm_*`) take and give strings
// only: numbers that cross into Python come back as 32-bit integers, silently, and a string
// that crosses is cut at its first NUL character.
//
// The stack is closed to scripts (no `Error.prepareStackTrace`, no `Error.captureStackTrace`),
// so script code that runs under a frame of ours (its valueOf, toJSON, a getter) cannot reach
// that frame's function. Besides, the replacements never give a real built-in a script's
// object: the real Date only ever gets primitives, converted here, and what goes to the host
// is a checked copy of plain data that JSON.stringify writes without running script code.
// `web` is what sandbox/web.js gives; `intlBrand` (sandbox/lazy.js's) names the kind of an
// Intl object, for console.log (undefined in a context booted without Intl).
(function (host, web, intlBrand) {
  "use strict";

  // ---- The engine's own built-ins, copied before any script text exists. ----
  const { apply, construct, getOwnPropertyDescriptor, get: reflectGet } = Reflect;
  const { create, defineProperty, freeze, getPrototypeOf, setPrototypeOf, keys: objectKeys } = Object;
  const isArray = Array.isArray;
  const isFinite = Number.isFinite, objectIs = Object.is;
  const ObjectProto = Object.prototype, ArrayProto = Array.prototype;
  const globalEval = globalThis.eval;
  const fnToString = Function.prototype.toString;
  const promiseThen = Promise.prototype.then;
  const toPrimitiveKey = Symbol.toPrimitive, symbolToString = Symbol.prototype.toString;
  const { toWellFormed, replaceAll, includes: stringIncludes, split: stringSplit } = String.prototype;
  // A host's answer, read as the prelude's own: its tag (the first character's code) and the
  // rest (a script that replaced charCodeAt had a tool call fail with "cannot read property
  // 'resolve' of undefined", and files.list() say "the run has ended").
  const { charCodeAt: stringCharCodeAt, slice: answerSlice } = String.prototype;
  const tagOf = (answer) => apply(stringCharCodeAt, answer, [0]);
  const restOf = (answer) => apply(answerSlice, answer, [1]);
  const RealDate = Date;
  const dateGetTime = RealDate.prototype.getTime, dateToISOString = RealDate.prototype.toISOString;
  const dateToString = RealDate.prototype.toString;
  const NativeError = Error, NativeTypeError = TypeError, NativeRangeError = RangeError;
  const NativeSyntaxError = SyntaxError, NativeInternalError = InternalError;
  const NativeMap = Map, NativeSet = Set, NativeProxy = Proxy, NativePromise = Promise;
  // A settled promise of the engine's own (a script that replaced Promise.resolve had its
  // function make what a stream's next gave: "iterator must return an object").
  const { resolve: promiseResolve, reject: promiseReject } = NativePromise;
  const resolvedWith = (value) => apply(promiseResolve, NativePromise, [value]);
  const rejectedWith = (error) => apply(promiseReject, NativePromise, [error]);
  const asyncIteratorKey = Symbol.asyncIterator, toStringTagKey = Symbol.toStringTag;
  const NativeWeakMap = WeakMap, NativeWeakSet = WeakSet, NativeRegExp = RegExp;
  const NativeBoolean = Boolean, NativeString = String;
  const NativeArrayBuffer = ArrayBuffer, isView = ArrayBuffer.isView;
  const NativeAggregateError = AggregateError, hasOwn = Object.hasOwn;
  const { get: weakMapGet, set: weakMapSet, has: weakMapHas } = WeakMap.prototype;
  const { get: mapGet, set: mapSet, delete: mapDelete, forEach: mapForEach, clear: mapClear } = Map.prototype;
  const { has: setHas, add: setAdd, forEach: setForEach } = Set.prototype;
  const { has: weakSetHas, add: weakSetAdd } = WeakSet.prototype;
  const mapSize = getOwnPropertyDescriptor(Map.prototype, "size").get;
  // Taken before the script runs, so a script that replaces JSON does not change what the
  // host is sent (the host checks everything anyway).
  const JSON = freeze({ stringify: globalThis.JSON.stringify, parse: globalThis.JSON.parse });
  // What one script's record sets (see `begin`): nothing reads them before it.
  let MAX_DEPTH = 0, PRINTED_BOUND = 0, VALUE_HALF = 0, NOW = 0;
  // `methods` as `target`'s own properties, so that a script's change to the prototype they
  // come from does not reach the private object they are called on (as methods: Reflect.apply
  // cost a call 3 us more).
  const ownMethods = (target, methods) => {
    for (const key of objectKeys(methods)) defineProperty(target, key, { __proto__: null, value: methods[key] });
    return target;
  };
  // Lists of the prelude's own (every list it makes is one of these, made and filled here), of
  // no prototype (neither a script's push nor a setter it put on Array.prototype reaches
  // them), added to and joined with no method a script can replace: one that replaced
  // Array.prototype.push had console.log print {} for any object, and new Date(2026, 0, 1)
  // read the wrong date.
  // Made in sandbox/web.js, evaluated first, whose built-ins use them too. With them, `isA`:
  // `value instanceof Kind`, for a built-in `Kind`, as the engine's own (`instanceof` asks
  // Kind[Symbol.hasInstance] first, which a script may define on the constructor itself, and
  // a Map or an Error then printed {}); a typed array's length, read with the built-in
  // getter; and ToPrimitive (intl.js's too).
  const { listOf, put, joined, holds, isA, typedLength, toPrimitive, unboxed, boxKinds } = web.own;
  // The script's tools (see `begin`): a replaced Set.prototype.has, or its iterator, was
  // handed this set, and a script that added a name to it called a tool the host never gave.
  const toolNames = ownMethods(new NativeSet(), { has: setHas, add: setAdd });
  let toolArray = []; // the same names, as the record lists them

  // ---- The stack is not the script's to inspect. ----
  // quickjs-ng hands `Error.prepareStackTrace` the call sites of every frame, native ones
  // included, and `getFunction()` returns each frame's function: the real Date, a host
  // function. Both setters are replaced by fixed, read-only values, so no script can install
  // a hook; `captureStackTrace` goes too (it is the other way to ask for frames).
  Error.prepareStackTrace = undefined;
  for (const key of ["prepareStackTrace", "captureStackTrace"]) {
    defineProperty(NativeError, key, { __proto__: null, value: undefined, writable: false, enumerable: false, configurable: false });
  }
  // An error's frames as QuickJS wrote them where it was made (no "Name: message" line),
  // which the engine reads to name the script's lines: not what a script set `e.stack` to
  // (see `stack` below), so a script cannot name lines it never ran.
  const stackAccessor = getOwnPropertyDescriptor(NativeError.prototype, "stack");
  const nativeStack = stackAccessor.get;
  // A DOMException (atob's, one the script makes) holds its frames as a value of its own,
  // made where it was: the accessor gives none for it (such an error named no line).
  const NativeDOMException = DOMException;
  function framesOf(e) {
    try {
      let frames = apply(nativeStack, e, []);
      if (frames === undefined && isA(e, NativeDOMException)) {
        const own = getOwnPropertyDescriptor(e, "stack");
        frames = domFrames.get(e) ?? (own && own.value);
      }
      return typeof frames === "string" ? ownFrames(frames) : "";
    } catch (_) {
      return ""; // an object that only inherits from Error has none
    }
  }
  // Text the script parses as it runs (JSON.parse, eval) is named "<input>" too, as the
  // script is: its lines are no lines of the script (`JSON.parse("{bad")` on line 3 named
  // line 1 first, and `e.stack` read `at <input>:1:2`). Its frames go: eval'd code's
  // (`at <eval> (<input>:3:1)`) and the place a parse failed, a frame of no function's
  // (`at <input>:1:2`) with a frame of the script's after it (the script's own parse
  // failing, in `compile`, has none: no line of it is counted yet).
  const evalFrame = /^\s*at <eval> \(/, parsedAt = /^\s*at <input>:\d/;
  const scriptFrame = /^\s*at \S[^(]* \(<input>:(\d{1,9}):/;
  function ownFrames(frames) {
    const lines = apply(stringSplit, frames, ["\n"]);
    let out = "", ran = false; // whether a frame of the script's comes after this one
    for (let i = lines.length - 1; i >= 0; i--) {
      const line = lines[i];
      if (apply(regExpExec, evalFrame, [line]) !== null) continue;
      if (ran && apply(regExpExec, parsedAt, [line]) !== null) continue;
      const m = apply(regExpExec, scriptFrame, [line]);
      if (m !== null && +m[1] <= scriptLines()) ran = true;
      out = i === lines.length - 1 ? line : line + "\n" + out;
    }
    return out;
  }
  // The script's frames where it runs now, as framesOf gives them: the CPU stop calls this
  // from QuickJS's interrupt poll, the script's frames under it (see CpuStop in
  // sandbox/replay.py), to name its lines. QuickJS keeps a frame's place at its calls (and
  // what may throw) alone, so the frame the poll came in names its last call, not where it
  // runs (a loop of `x++` after an `await` named the await's line): it is left out unless
  // native; its callers' places are where they called. No script code may run here: the
  // error is the prelude's own, made HERE_FRAMES deep whatever the script set
  // Error.stackTraceLimit to (QuickJS converts an object set there, by its valueOf, at each
  // error), then set back.
  const HERE_FRAMES = 10; // this function's, the polled one's and eight lines' (as named)
  const traceLimit = getOwnPropertyDescriptor(NativeError, "stackTraceLimit");
  function here() {
    const limit = apply(traceLimit.get, NativeError, []);
    apply(traceLimit.set, NativeError, [HERE_FRAMES]);
    let frames;
    try {
      frames = apply(stringSplit, apply(nativeStack, new NativeError(""), []), ["\n"]);
    } finally {
      apply(traceLimit.set, NativeError, [limit]);
    }
    let out = "";
    const native = frames.length > 1 && apply(stringIncludes, frames[1], ["(native)"]);
    for (let i = native ? 1 : 2; i < frames.length; i++) out += frames[i] + "\n";
    return ownFrames(out);
  }

  // ---- Determinism: the clock and randomness come from the script record. ----
  const isObject = (v) => (typeof v === "object" && v !== null) || typeof v === "function";
  // ToPrimitive is web.js's (taken above): the real Date constructor is only ever given
  // primitives, so no script code (valueOf, toString, Symbol.toPrimitive) runs with it on the
  // stack.
  function timeOf(v) { // a Date's time value, or undefined for anything else (runs no script code)
    try { return apply(dateGetTime, v, []); } catch (_) { return undefined; }
  }
  // What JSON turns into {} or an object of indexes, told apart without running script
  // code: each getter throws for (or, a typed array's name, gives undefined to) any other.
  const getter = (proto, key) => getOwnPropertyDescriptor(proto, key).get;
  const typedArrayName = getter(getPrototypeOf(Uint8Array.prototype), Symbol.toStringTag);
  const bufferLength = getter(ArrayBuffer.prototype, "byteLength");
  const viewLength = getter(DataView.prototype, "byteLength");
  const regExpSource = getter(RegExp.prototype, "source");
  // A RegExp's flags, read from the RegExp itself: `flags` reads them through its prototype,
  // which one of no prototype has not (`/x/g` printed `/x/`), or the script's getters.
  const FLAG_GETTERS = listOf();
  for (const [key, flag] of [["hasIndices", "d"], ["global", "g"], ["ignoreCase", "i"], ["multiline", "m"],
    ["dotAll", "s"], ["unicode", "u"], ["unicodeSets", "v"], ["sticky", "y"]]) {
    put(FLAG_GETTERS, [getter(RegExp.prototype, key), flag]);
  }
  function regExpFlags() {
    let flags = "";
    for (let i = 0; i < FLAG_GETTERS.length; i++) if (apply(FLAG_GETTERS[i][0], this, [])) flags += FLAG_GETTERS[i][1];
    return flags;
  }
  const got = (get, v) => { try { return apply(get, v, []); } catch (_) { return undefined; } };
  // A boxed primitive (`new Number(1)`, `Object("s")`) as Node.js shows it, `[Number: 1]`,
  // `[Number (Money): 5]` of a subclass's, `[Number (null prototype): 7]`: it printed {},
  // and a String an object of its indexes. Told by its kind's own valueOf (web.js's
  // `unboxed`), asked only of an object that inherits from a kind's prototype, or of one
  // of no prototype whose keys `ks` are none or begin with a String's indexes (each miss
  // makes an error, as heldBrand's).
  // Of each kind (by the typeof of what it boxes, "bigint"): its prototype and its name. Read
  // from web.js's kinds at boot, before any script code runs.
  const BOXES = { __proto__: null }, BOX_NAMES = { __proto__: null };
  for (let i = 0; i < boxKinds.length; i++) {
    const Box = boxKinds[i], kind = Box.name.toLowerCase();
    BOXES[kind] = Box.prototype;
    BOX_NAMES[kind] = Box.name;
  }
  const inheritsABox = (value) => {
    for (let i = 0; i < boxKinds.length; i++) if (isA(value, boxKinds[i])) return true;
    return false;
  };
  function boxedPrimitive(value, proto, ks) { // [the primitive, its kind's name], or undefined
    if (proto === null ? ks.length !== 0 && ks[0] !== "0" : !inheritsABox(value)) return undefined;
    const inner = unboxed(value, BOXES);
    if (inner === BOXES) return undefined; // an object of its own that inherits from Number.prototype
    const kind = typeof inner, name = BOX_NAMES[kind];
    if (proto === BOXES[kind]) return [inner, name];
    if (proto === null) return [inner, name + " (null prototype)"];
    let made;
    try { made = proto.constructor.name; } catch (_) { made = undefined; }
    return [inner, typeof made === "string" && made !== "" && made !== name ? name + " (" + made + ")" : name];
  }
  const setSize = getter(Set.prototype, "size");
  // A Map's entries ([key, value] each) and a Set's items, as they are held, as Node.js shows
  // them: not what a script's iterator gives (one that never ended filled the heap in
  // console.log, which printed "[unprintable: Error]").
  function entriesOf(map) {
    const out = listOf();
    apply(mapForEach, map, [(v, k) => { put(out, [k, v]); }]);
    return out;
  }
  function itemsOf(set) {
    const out = listOf();
    apply(setForEach, set, [(v) => { put(out, v); }]);
    return out;
  }
  // The built-in whose data an object of no prototype holds ("Map", "Set", "RegExp",
  // "Date", "ArrayBuffer", "DataView", a typed array's name; its prototype set to null), or
  // undefined: `instanceof` and the constructor's name say nothing of it, and it was printed
  // {}, or named "an object of no class", and JSON and the copy for a tool read keys alone
  // and made {} of it (of a typed array, an object of indexes) without a word. Of an object
  // with keys, only a typed array's name. Asked of objects of no prototype only (each miss
  // makes an error). `ks`: its keys, when the caller has them.
  function heldBrand(v, ks) {
    const typed = apply(typedArrayName, v, []);
    if (typed !== undefined) return typed;
    if ((ks === undefined ? objectKeys(v) : ks).length !== 0) return undefined;
    if (got(mapSize, v) !== undefined) return "Map";
    if (got(setSize, v) !== undefined) return "Set";
    if (got(regExpSource, v) !== undefined) return "RegExp";
    if (timeOf(v) !== undefined) return "Date";
    if (got(bufferLength, v) !== undefined) return "ArrayBuffer";
    return got(viewLength, v) !== undefined ? "DataView" : undefined;
  }
  const isPrototypeOf = Object.prototype.isPrototypeOf;
  const IteratorProto = getPrototypeOf(getPrototypeOf([][Symbol.iterator]()));
  const AsyncIteratorProto = getPrototypeOf(getPrototypeOf(getPrototypeOf((async function* () {})())));
  // "an Error", "a Map"; "a URL", "a User", "an Update": a U read "you" takes "a".
  const readYou = /^[Uu](?:[A-Z]|ni|int|s[aeiu]|ti)/;
  const withArticle = (name) => (apply(stringIncludes, "AEIOUaeiou", [name[0]]) &&
    apply(regExpExec, readYou, [name]) === null ? "an " : "a ") + name;
  // "async" for an async generator, "sync" for any other iterator (a generator's, keys(),
  // matchAll()), undefined for anything else.
  function iteratorKind(v) {
    if (apply(isPrototypeOf, AsyncIteratorProto, [v])) return "async";
    return apply(isPrototypeOf, IteratorProto, [v]) ? "sync" : undefined;
  }
  function dateArgs(args) {
    if (args.length === 0) return [NOW];
    if (args.length === 1) {
      const t = isObject(args[0]) ? timeOf(args[0]) : undefined;
      return [t !== undefined ? t : toPrimitive(args[0], "default")];
    }
    const numbers = listOf();
    for (let i = 0; i < args.length && i < 7; i++) put(numbers, +args[i]);
    return numbers;
  }
  function FixedDate(...args) {
    if (new.target === undefined) return apply(dateToString, new RealDate(NOW), []);
    const date = construct(RealDate, dateArgs(args));
    if (new.target !== FixedDate) {
      // A subclass: its prototype, read here rather than by the real constructor.
      const proto = new.target.prototype;
      setPrototypeOf(date, isObject(proto) ? proto : RealDate.prototype);
    }
    return date;
  }
  // Not a subclass of the real Date: Object.getPrototypeOf(Date) would hand out its clock.
  defineProperty(FixedDate, "prototype", { __proto__: null, value: RealDate.prototype });
  defineProperty(FixedDate, "name", { __proto__: null, value: "Date" });
  defineProperty(FixedDate, "length", { __proto__: null, value: 7 });
  const realParse = RealDate.parse, realUTC = RealDate.UTC;
  const fixedStatics = {
    parse(text) { return apply(realParse, undefined, ["" + toPrimitive(text, "string")]); },
    UTC(...args) { return apply(realUTC, undefined, dateArgs(args.length < 2 ? [args[0], 0] : args)); },
  };
  defineProperty(fixedStatics.UTC, "length", { __proto__: null, value: 7 });
  for (const key of ["parse", "UTC"]) {
    defineProperty(FixedDate, key, { __proto__: null, value: fixedStatics[key], writable: true, configurable: true });
  }
  const now = { now: () => NOW }.now; // named as the built-in it stands for, as each below
  defineProperty(FixedDate, "now", { __proto__: null, value: now, writable: true, configurable: true });
  defineProperty(RealDate, "now", { __proto__: null, value: now, writable: true, configurable: true });
  defineProperty(RealDate.prototype, "constructor", { __proto__: null, value: FixedDate, writable: true, configurable: true });
  globalThis.Date = FixedDate;

  // sfc32, seeded in `begin` from the record's seed: the same sequence on every run.
  let a = 0, b = 0, c = 0x9e3779b9, d = 1;
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
  defineProperty(nextRandom, "name", { __proto__: null, value: "random" });
  defineProperty(Math, "random", { __proto__: null, value: nextRandom, writable: true, configurable: true });
  web(nextRandom, text); // crypto's values come from the same generator (sandbox/web.js)
  // Garbage-collection timing must not reach the script: it differs between runs.
  delete globalThis.WeakRef;
  delete globalThis.FinalizationRegistry;

  // ---- Formatting values as text (console.log, error messages). ----
  // A value's text stops growing at half of what printed text keeps of a run (its first and
  // last 64 KiB), which leaves room for what the count below misses (some punctuation) and
  // for the counts that close it: the rest of each array, object, Map or Set is a count of
  // what is left out. Formatted whole, a big value cost CPU in proportion to its size for
  // text then thrown away (an object of 300,000 small entries: about 9 s, past a script's
  // compute_ms).
  function describe(value, depth, ancestors, budget) {
    const before = budget.left;
    const s = describeOne(value, depth, ancestors, budget);
    if (budget.left === before) budget.left -= s.length; // a leaf: its items did not count
    return s;
  }
  // The items of a container, each by `item(i)`, until the budget is spent, joined by
  // `separator`.
  function listed(count, item, budget, what, separator) {
    const parts = listOf();
    for (let i = 0; i < count; i++) {
      if (budget.left <= 0) {
        put(parts, "... " + (count - i) + " more " + what);
        break;
      }
      put(parts, item(i));
      budget.left -= 1; // its separator
    }
    return joined(parts, separator);
  }
  function describeOne(value, depth, ancestors, budget) {
    switch (typeof value) {
      case "string": return JSON.stringify(value);
      case "number": return objectIs(value, -0) ? "-0" : "" + value; // as Node.js shows it
      case "bigint": return value + "n";
      case "boolean": return value ? "true" : "false";
      case "undefined": return "undefined";
      // The engine's own: a script's Symbol.prototype.toString gave what is no text, and a
      // thrown symbol's error could not be made (the script failed as stuck, waiting).
      case "symbol": return apply(symbolToString, value, []);
      case "function": return "[Function" + (value.name ? " " + value.name : "") + "]";
    }
    if (value === null) return "null";
    if (forgottenAwait(value)) return "Promise { " + forgotten(value) + " }";
    if (isA(value, NativePromise)) return "Promise { <await it for its value> }";
    if (holds(ancestors, value)) return "[Circular]";
    if (isA(value, NativeError)) return errorShown(value, depth, ancestors, budget);
    const time = timeOf(value); // a real Date, read without running any script code
    if (time !== undefined) {
      const text = time !== time ? "Invalid Date" : apply(dateToISOString, value, []);
      // One whose prototype was set to null as Node.js shows it (it was its bare ISO string).
      if (getPrototypeOf(value) === null) return "[Date: null prototype] " + text;
      return time !== time ? text : JSON.stringify(text);
    }
    // Plain objects and arrays, the most of any value, are none of the kinds below.
    const proto = getPrototypeOf(value);
    const plainKind = proto === ObjectProto || proto === ArrayProto || proto === null;
    // Read once for the two checks of an object of no prototype (no script code runs between).
    const nullKeys = proto === null ? objectKeys(value) : undefined;
    const box = proto === ObjectProto || proto === ArrayProto ? undefined : boxedPrimitive(value, proto, nullKeys);
    if (box !== undefined) return boxShown(value, box, depth, ancestors, budget);
    // A built-in's data with its prototype set to null is named as Node.js names it:
    // `[Map(1): null prototype] {...}`, `[RegExp: null prototype] /x/`.
    const bare = proto === null && !isArray(value) ? heldBrand(value, nullKeys) : undefined;
    const shown = plainKind && bare === undefined ? undefined : shownAsNode(value, budget, bare);
    if (shown !== undefined) return shown;
    if (depth > 8) return isArray(value) ? "[Array]" : "[Object]";
    put(ancestors, value);
    try {
      const typed = plainKind && bare === undefined ? undefined : apply(typedArrayName, value, []);
      if (isArray(value) || typed !== undefined) {
        const n = typed === undefined ? value.length : apply(typedLength, value, []);
        // A hole shows as nothing, as Array.prototype.join has it ("[1,,3]").
        return (typed === undefined ? "" : nullNamed(typed + "(" + n + ")", bare) + " ") + "[" + listed(n, (i) =>
          (i in value ? describe(value[i], depth + 1, ancestors, budget) : ""), budget, "items", ",") + "]";
      }
      if (isA(value, NativeMap) || bare === "Map") {
        const entries = entriesOf(value);
        return nullNamed("Map(" + apply(mapSize, value, []) + ")", bare) + " {" + listed(entries.length, (i) =>
          describe(entries[i][0], depth + 1, ancestors, budget) + " => " +
          describe(entries[i][1], depth + 1, ancestors, budget), budget, "entries", ", ") + "}";
      }
      if (isA(value, NativeSet) || bare === "Set") {
        const items = itemsOf(value);
        return nullNamed("Set(" + apply(setSize, value, []) + ")", bare) + " {" + listed(items.length, (i) =>
          describe(items[i], depth + 1, ancestors, budget), budget, "items", ", ") + "}";
      }
      if (typeof value.toJSON === "function") return describe(value.toJSON(), depth + 1, ancestors, budget);
      const ks = objectKeys(value);
      const iterating = ks.length === 0 && !plainKind ? iteratorKind(value) : undefined;
      if (iterating !== undefined) {
        return "Object [" + (iterating === "async" ? "AsyncGenerator" : "" + value[toStringTagKey]) + "] {}";
      }
      return keysShown(value, ks, 0, depth, ancestors, budget);
    } finally {
      ancestors.length--;
    }
  }
  // `{"key":value,...}` of an object's keys `ks` from `from` on; its caller has put the
  // object among `ancestors`.
  function keysShown(value, ks, from, depth, ancestors, budget) {
    const parts = listOf();
    for (let i = from; i < ks.length; i++) {
      if (budget.left <= 0) {
        put(parts, "... " + (ks.length - i) + " more keys");
        break;
      }
      // A key whose value is undefined, a function or a symbol is shown, as Node.js shows
      // it (JSON leaves it out): `{ mail: c.emial }` printed `{}`, hiding the typo.
      const v = value[ks[i]];
      const key = JSON.stringify(ks[i]);
      budget.left -= key.length + 1;
      put(parts, key + ":" + describe(v, depth + 1, ancestors, budget));
    }
    return "{" + joined(parts, ",") + "}";
  }
  // A boxed primitive, `[Number: 1]`, with its own keys after it as Node.js shows them
  // (`[Number: 1] {"note":"kept?"}`; they were left out). A String box's keys begin with
  // its indexes, which are its text: they are skipped, and its keys are listed only when
  // its text is within the budget (a 1e8-character one made 1e8 keys to skip).
  function boxShown(value, box, depth, ancestors, budget) {
    const shown = "[" + box[1] + ": " + describeOne(box[0], depth, ancestors, budget) + "]";
    const from = typeof box[0] === "string" ? box[0].length : 0;
    if (from > budget.left) return shown;
    const ks = objectKeys(value);
    if (ks.length <= from) return shown;
    if (depth > 8) return shown + " [Object]";
    put(ancestors, value);
    try {
      return shown + " " + keysShown(value, ks, from, depth, ancestors, budget);
    } finally {
      ancestors.length--;
    }
  }
  // A value JSON writes as {} (or an object of indexes) as Node.js shows it, or undefined.
  // `bare`: the built-in's name (heldBrand) when the value's prototype is null.
  const nullNamed = (name, bare) => (bare === undefined ? name : "[" + name + ": null prototype]");
  function shownAsNode(value, budget, bare) {
    const source = got(regExpSource, value);
    if (source !== undefined) {
      return (bare === undefined ? "" : nullNamed("RegExp", bare) + " ") + "/" + source + "/" + got(regExpFlags, value);
    }
    const bytes = got(bufferLength, value);
    if (bytes !== undefined) return nullNamed("ArrayBuffer", bare) + " { byteLength: " + bytes + " }";
    const viewed = got(viewLength, value);
    if (viewed !== undefined) return nullNamed("DataView", bare) + " { byteLength: " + viewed + " }";
    if (isA(value, NativeWeakMap) || isA(value, NativeWeakSet)) {
      return (isA(value, NativeWeakMap) ? "WeakMap" : "WeakSet") + " { <items unknown> }";
    }
    // What a URLSearchParams' iterator has yet to give, as Node.js shows it
    // (`URLSearchParams Iterator {["a","1"], ["b","2"]}`), not "Object [URLSearchParams Iterator] {}".
    // An Intl object as Node.js shows it (`NumberFormat [Intl.NumberFormat] {}`), not {}
    // (intlBrand: undefined in a context booted without Intl).
    const intl = intlBrand === undefined ? undefined : intlBrand(value);
    if (intl !== undefined && objectKeys(value).length === 0) return intl + " [Intl." + intl + "] {}";
    const left = web.iterated(value);
    if (left !== undefined) {
      return "URLSearchParams Iterator {" + listed(left.length, (i) => (typeof left[i] === "string"
        ? JSON.stringify(left[i]) : "[" + JSON.stringify(left[i][0]) + "," + JSON.stringify(left[i][1]) + "]"),
      budget, "items", ", ") + "}";
    }
    const pairs = web.pairsOf(value);
    if (pairs === undefined) return undefined;
    return "URLSearchParams {" + listed(pairs.length, (i) => JSON.stringify(pairs[i][0]) + " => " +
      JSON.stringify(pairs[i][1]), budget, "entries", ", ") + "}";
  }
  // An error as Node.js shows it, less its stack: its cause and an AggregateError's errors
  // after it (`Error: outer { [cause]: Error: inner }`); they were left out, and with them
  // what went wrong first.
  function errorShown(e, depth, ancestors, budget) {
    return errorText(e) + errorMore(e, depth, ancestors, budget);
  }
  function errorMore(e, depth, ancestors, budget) {
    if (depth > 8) return "";
    const more = listOf();
    put(ancestors, e);
    try {
      if (hasOwn(e, "cause")) put(more, "[cause]: " + describe(e.cause, depth + 1, ancestors, budget));
      if (isA(e, NativeAggregateError) && isArray(e.errors)) {
        put(more, "[errors]: " + describe(e.errors, depth + 1, ancestors, budget));
      }
    } finally {
      ancestors.length--;
    }
    return more.length ? " { " + joined(more, ", ") + " }" : "";
  }
  function errorText(e) {
    try {
      const name = e && e.name !== undefined ? "" + toPrimitive(e.name, "string") : "Error";
      const message = e && e.message !== undefined ? "" + toPrimitive(e.message, "string") : "";
      return message ? name + ": " + message : name;
    } catch (_) {
      return "Error";
    }
  }
  // A string as itself (console.log's); `described` for one quoted, as a value among others
  // (console.dir's).
  function text(value) {
    return typeof value === "string" ? value : described(value);
  }
  function described(value) {
    try {
      return describe(value, 0, listOf(), { left: PRINTED_BOUND });
    } catch (e) {
      return "[unprintable: " + errorText(e) + "]";
    }
  }
  // Every string handed to the host goes through this: it replaces lone surrogates and NUL
  // characters (the binding would cut the string at the first), and it flattens a
  // concatenated ("rope") string, which the binding cannot convert.
  const wellFormed = (s) => apply(replaceAll, apply(toWellFormed, s, []), ["\0", "\uFFFD"]);

  // console.group indents what is printed after it, by two spaces a level, as Node.js does.
  let indent = "";
  const emit = (line) => {
    host.print(wellFormed(indent ? indent + apply(replaceAll, line, ["\n", "\n" + indent]) : line));
  };
  // console.log's first argument, when a string with % in it, formats the ones after it as
  // Node.js's util.format does: %s %d %i %f %j %o %O %c, %% a percent sign; a specifier with
  // no argument left stays as written, and the arguments left over follow, space-separated.
  const NativeNumber = Number, nativeParseInt = parseInt, nativeParseFloat = parseFloat;
  const stringSlice = String.prototype.slice;
  const CYCLE_MESSAGE = "circular reference"; // JSON.stringify's TypeError for a cycle
  const numberText = (n) => (objectIs(n, -0) ? "-0" : "" + n);
  function specified(kind, value) {
    const type = typeof value;
    switch (kind) {
      case "s":
        if (type === "string") return value;
        if (type === "bigint") return value + "n";
        if (type === "number") return numberText(value);
        return type === "object" || type === "function" || type === "symbol" ? described(value) : "" + value;
      case "d": case "i":
        if (type === "bigint") return value + "n";
        if (type === "symbol") return "NaN";
        try {
          return numberText(kind === "d" ? NativeNumber(value) : nativeParseInt(value));
        } catch (_) { return "NaN"; }
      case "f":
        if (type === "symbol") return "NaN";
        try { return numberText(nativeParseFloat(value)); } catch (_) { return "NaN"; }
      case "j":
        try {
          const json = JSON.stringify(value);
          return json === undefined ? "undefined" : json;
        } catch (e) {
          if (outOfMemory(e)) return "[out of memory]";
          // A cycle alone is [Circular]; any other error (a BigInt's, a toJSON's own) is
          // thrown, as util.format throws it (each was printed as [Circular]).
          if (isA(e, NativeTypeError) && e.message === CYCLE_MESSAGE) return "[Circular]";
          throw e;
        }
      case "c": return "";
      default: return described(value); // o, O
    }
  }
  // How many lines the script has: a frame past the last is the engine's (the prelude and
  // what lazy.js compiles are placed after it). Counted when a stack is first read, not at
  // every run's start; 0 before `begin`.
  let scriptCode = "", scriptLineCount = -1;
  function scriptLines() {
    if (scriptLineCount < 0 && scriptCode) scriptLineCount = apply(stringSplit, scriptCode, ["\n"]).length;
    return scriptLineCount < 0 ? 0 : scriptLineCount;
  }
  // The function a script's body is compiled as (see `compile`), and the text compiled before
  // the body, on its first line. QuickJS counts that line's columns from 0 (the others' from
  // 1): a column there is the script's, one further on.
  const MAIN = "__cm_main", WRAPPER = "async function " + MAIN + "() {";
  const BEFORE_BODY = "throw 0; " + WRAPPER, FIRST_LINE_SHIFT = BEFORE_BODY.length - 1;
  const regExpExec = NativeRegExp.prototype.exec;
  const frameLine = /<input>:(\d{1,9})(?!\d)/g;
  // The script's line an error printed by itself was made at, in place of the stack Node.js
  // prints after it (`    at line 6`): the first of its frames that is a line of the script.
  function madeAt(e) {
    const stack = framesOf(e);
    frameLine.lastIndex = 0;
    for (let m; (m = apply(regExpExec, frameLine, [stack])) !== null;) {
      const line = +m[1];
      if (line >= 1 && line <= scriptLines()) return "\n    at line " + line;
    }
    return "";
  }
  // `e.stack` as a script reads it, as Node.js writes it: "Name: message", then the frames
  // (QuickJS's are the frames alone: a script that printed `e.stack` printed no message),
  // the script's own only (the engine's are numbered past its last line: `get
  // (<input>:301191:66)` named no line of it), its top level as `at <input>:L:C`, the
  // columns of its first line as it wrote them. What a script sets it to, it reads back.
  const setStacks = ownMethods(new NativeWeakMap(), { get: weakMapGet, set: weakMapSet, has: weakMapHas });
  // A built-in's frame (`at map (native)`) is kept only when a frame of the script's called it:
  // one the engine called (`at apply (native)` under atob's wrapper) is the engine's.
  const frameParts = /^(\s*at )(?:(\S[^(]*) \()?<input>:(\d{1,9}):(\d{1,9})\)?$/;
  function scriptFrames(frames) {
    const lines = apply(stringSplit, frames, ["\n"]);
    let out = "", builtIns = ""; // the built-ins' frames since the last of a function's
    for (let i = 0; i < lines.length; i++) {
      let line = lines[i];
      if (!line) continue;
      const m = apply(regExpExec, frameParts, [line]);
      if (m === null) {
        builtIns += "\n" + line;
        continue;
      }
      const number = +m[3];
      if (number > scriptLines()) { // the engine's
        builtIns = "";
        continue;
      }
      const column = number === 1 && +m[4] > FIRST_LINE_SHIFT ? +m[4] - FIRST_LINE_SHIFT : +m[4];
      const where = "<input>:" + number + ":" + column;
      line = m[1] + (m[2] === undefined || m[2] === MAIN ? where : m[2] + " (" + where + ")");
      out += builtIns + "\n" + line;
      builtIns = "";
    }
    return out;
  }
  defineProperty(NativeError.prototype, "stack", { __proto__: null,
    get() {
      if (setStacks.has(this)) return setStacks.get(this);
      const frames = apply(nativeStack, this, []);
      if (typeof frames !== "string" || !scriptLines()) return frames;
      return errorText(this) + scriptFrames(ownFrames(frames));
    },
    set(value) {
      setStacks.set(this, value);
    },
    enumerable: stackAccessor.enumerable,
    configurable: stackAccessor.configurable,
  });
  // A DOMException keeps the frames QuickJS wrote as a value of its own, the engine's too and
  // no "Name: message" line (`at begin (<input>:1851:17)`): atob's and btoa's, and each one
  // the script makes (`new DOMException("stopped", "AbortError")`, of a class extending it
  // too), are given the stack a script reads of any error, and their frames are kept here for
  // the engine (see framesOf).
  const domFrames = ownMethods(new NativeWeakMap(), { get: weakMapGet, set: weakMapSet });
  function tidied(e) {
    const own = getOwnPropertyDescriptor(e, "stack");
    if (own && typeof own.value === "string" && own.configurable) {
      domFrames.set(e, own.value);
      defineProperty(e, "stack", { __proto__: null, value: errorText(e) + scriptFrames(ownFrames(own.value)),
        writable: true, enumerable: own.enumerable, configurable: true });
    }
    return e;
  }
  for (const name of ["atob", "btoa"]) {
    const native = globalThis[name];
    const wrapped = { [name](data) { // the parameter gives it the native's length, 1
      try {
        return apply(native, undefined, arguments);
      } catch (e) {
        throw isA(e, NativeDOMException) ? tidied(e) : e;
      }
    } }[name];
    defineProperty(globalThis, name, { __proto__: null, value: wrapped, writable: true, enumerable: false, configurable: true });
  }
  // The constructor is the native behind a Proxy that tidies what it makes: `instanceof`,
  // its statics, its name and `e.constructor` read as the native's.
  const DOMExceptionMaker = new NativeProxy(NativeDOMException, { __proto__: null,
    construct(target, args, newTarget) {
      return tidied(construct(target, args, newTarget === DOMExceptionMaker ? target : newTarget));
    },
  });
  defineProperty(globalThis, "DOMException", { __proto__: null, value: DOMExceptionMaker, writable: true, enumerable: false, configurable: true });
  defineProperty(NativeDOMException.prototype, "constructor", { __proto__: null, value: DOMExceptionMaker, writable: true, enumerable: false, configurable: true });
  // An array's toString and toLocaleString make text of each item, of an array by calling them
  // again, through frames of their own: one nested thousands deep, or one that holds itself,
  // ran out of stack more frames deep than an error keeps (64), and its RangeError named no
  // line of the script (`String(rows)`, `${rows}`, `rows.join()`). Wrapped, the outermost
  // call makes it again, where its frames reach the script's line; an overflow that names a
  // line already (an item's own toString recursing) stays as it is.
  let textDepth = 0; // 1 while the outermost runs: the calls inside it go straight to the native
  function madeText(native, array, args) {
    textDepth = 1;
    try {
      return apply(native, array, args);
    } catch (e) {
      if (overflowed(e)) {
        throw new NativeRangeError(web.OVERFLOW + ": an array made into text (by String, join " +
          "or a template) holds itself or is nested too deeply; flatten it, or remove the cycle");
      }
      throw e;
    } finally {
      textDepth = 0;
    }
  }
  const overflowed = (e) => {
    try {
      return isA(e, NativeRangeError) && e.message === web.OVERFLOW && madeAt(e) === "";
    } catch (_) {
      return false; // a revoked Proxy thrown
    }
  };
  const { toString: arrayToString, toLocaleString: arrayToLocaleString } = ArrayProto;
  const noArguments = freeze([]);
  const textMakers = {
    toString() {
      return textDepth ? apply(arrayToString, this, noArguments) : madeText(arrayToString, this, noArguments);
    },
    toLocaleString() { // lazy.js's stand-in
      return textDepth ? apply(arrayToLocaleString, this, arguments) : madeText(arrayToLocaleString, this, arguments);
    },
  };
  for (const name of ["toString", "toLocaleString"]) {
    defineProperty(ArrayProto, name, { __proto__: null, value: textMakers[name], writable: true, enumerable: false, configurable: true });
  }
  // One of console.log's arguments: an error is followed by its line.
  // Whether to print an error's line after it: `instanceof` reads the prototype, which a
  // revoked Proxy throws for (printing it threw, and failed the script).
  const isError = (value) => {
    try {
      return isA(value, NativeError);
    } catch (_) {
      return false;
    }
  };
  const logged = (value) => (isError(value) ? text(value) + madeAt(value) : text(value));
  function formatted(args) {
    const first = args[0];
    if (typeof first !== "string" || args.length < 2 || !apply(stringIncludes, first, ["%"])) {
      let out = "";
      for (let i = 0; i < args.length; i++) out += (i ? " " : "") + logged(args[i]);
      return out;
    }
    let out = "", next = 1, from = 0;
    for (let i = 0; i < first.length - 1; i++) {
      if (first[i] !== "%") continue;
      const kind = first[i + 1];
      if (kind === "%") {
        out += apply(stringSlice, first, [from, i]) + "%";
      } else if (next < args.length && apply(stringIncludes, "sdifjoOc", [kind])) {
        out += apply(stringSlice, first, [from, i]) + specified(kind, args[next++]);
      } else {
        continue;
      }
      i++;
      from = i + 1;
    }
    out += apply(stringSlice, first, [from]);
    for (; next < args.length; next++) out += " " + logged(args[next]);
    return out;
  }
  // console.log, info, ...: each named as Node.js names it.
  const printer = (name) => ({ [name]: (...args) => { emit(formatted(args)); } })[name];
  // What `first` and then each of `args` print as, one line, as console.log prints them: a
  // list of the prelude's own (a spread took the script's Array.prototype[Symbol.iterator],
  // and console.group("G") printed what it gave).
  const printAfter = (first, args, from) => {
    const all = listOf();
    put(all, first);
    for (let i = from; i < args.length; i++) put(all, args[i]);
    emit(formatted(all));
  };
  const counts = ownMethods(new NativeMap(), { get: mapGet, set: mapSet, delete: mapDelete });
  const label = (l) => (l === undefined ? "default" : "" + l);
  const group = (labels) => {
    if (labels.length) printAfter(labels[0], labels, 1);
    indent += "  ";
  };
  globalThis.console = freeze({
    log: printer("log"), info: printer("info"), warn: printer("warn"), error: printer("error"),
    debug: printer("debug"), trace: printer("trace"),
    dir: (value) => emit(described(value) + (isError(value) ? madeAt(value) : "")),
    dirxml: printer("dirxml"),
    table: (data, columns) => emit(table(data, columns)),
    group: (...labels) => { group(labels); },
    groupCollapsed: (...labels) => { group(labels); },
    groupEnd: () => { indent = apply(stringSlice, indent, [0, -2]); },
    count: (l) => {
      const key = label(l), n = (counts.get(key) || 0) + 1;
      counts.set(key, n);
      emit(key + ": " + n);
    },
    countReset: (l) => { counts.delete(label(l)); },
    assert: (ok, ...args) => {
      if (ok) return;
      // As Node.js's: a message in front of a text, a line of its own in front of a value.
      if (!args.length) emit("Assertion failed");
      else if (typeof args[0] === "string") printAfter("Assertion failed: " + args[0], args, 1);
      else printAfter("Assertion failed:", args, 0);
    },
    // The script's clock is fixed (Date.now and performance.now never move): no time passes.
    time: () => {}, timeEnd: (l) => emit(label(l) + ": 0ms"), timeLog: (l, ...args) => printAfter(label(l) + ": 0ms", args, 0),
  });
  // console.table's text, laid out as Node.js's: a row per entry of `data` (an array, an
  // object, a Map or a Set), a column per key of the entries that are objects ("Values" for the
  // others), only `columns` when given. A value that is none of those prints as console.log's.
  const TABLE_CELLS = 250000;
  // It is laid out with the prelude's own lists, strings and brand checks: with the script's
  // (its push, map, join, repeat, Math.max, a Map's `instanceof`), a script that replaced
  // Array.prototype.push printed a table of no rows.
  const stringRepeat = String.prototype.repeat;
  const spaced = (text, width) => text + apply(stringRepeat, " ", [width - codePoints(text)]);
  // How many characters `text` shows as: a surrogate pair is one, as `[...text].length` has it.
  function codePoints(text) {
    let n = text.length;
    for (let i = 0; i + 1 < text.length; i++) {
      const c = apply(stringCharCodeAt, text, [i]);
      if (c >= 0xd800 && c <= 0xdbff) {
        const next = apply(stringCharCodeAt, text, [i + 1]);
        if (next >= 0xdc00 && next <= 0xdfff) { n--; i++; }
      }
    }
    return n;
  }
  function table(data, columns) {
    if (data === null || typeof data !== "object") return text(data);
    const budget = { __proto__: null, left: PRINTED_BOUND };
    const cell = (v) => {
      try { return describe(v, 1, listOf(), budget); } catch (e) { return "[unprintable: " + errorText(e) + "]"; }
    };
    const keyed = got(mapSize, data) !== undefined;
    let head = "(index)";
    const rows = listOf(); // [index, value, key] each
    if (keyed) {
      head = "(iteration index)";
      const entries = entriesOf(data);
      for (let i = 0; i < entries.length; i++) put(rows, ["" + i, entries[i][1], entries[i][0]]);
    } else if (got(setSize, data) !== undefined) {
      head = "(iteration index)";
      const items = itemsOf(data);
      for (let i = 0; i < items.length; i++) put(rows, ["" + i, items[i]]);
    } else {
      const ks = objectKeys(data);
      for (let i = 0; i < ks.length; i++) put(rows, [ks[i], data[ks[i]]]);
    }
    const wanted = listOf(); // the columns asked for, as given
    if (isArray(columns)) for (let i = 0; i < columns.length; i++) put(wanted, columns[i]);
    const keys = listOf(), seen = { __proto__: null }, body = listOf();
    let values = false, left = 0;
    for (let r = 0; r < rows.length; r++) {
      // Each row holds a cell for every column, filled or not: rows of keys of their own
      // (5,000 rows, a key each) made a grid of 25 million cells, past the heap.
      if (budget.left <= 0 || r * keys.length > TABLE_CELLS) {
        left = rows.length - r;
        break;
      }
      const index = rows[r][0], v = rows[r][1];
      const line = { __proto__: null, index, key: "", value: "", cells: { __proto__: null } };
      if (keyed) line.key = cell(rows[r][2]);
      if (v !== null && typeof v === "object" && got(mapSize, v) === undefined && got(setSize, v) === undefined) {
        const ks = objectKeys(v);
        for (let i = 0; i < ks.length; i++) {
          const k = ks[i];
          if (columns !== undefined && !(isArray(columns) && holds(wanted, k))) continue;
          if (!hasOwn(seen, k)) { seen[k] = true; put(keys, k); }
          line.cells[k] = cell(v[k]);
        }
      } else if (columns === undefined) {
        values = true;
        line.value = cell(v);
      }
      put(body, line);
    }
    let order = keys;
    if (isArray(columns)) {
      order = listOf();
      for (let i = 0; i < wanted.length; i++) if (hasOwn(seen, "" + wanted[i])) put(order, "" + wanted[i]);
    }
    const names = listOf();
    put(names, head);
    if (keyed) put(names, "Key");
    for (let i = 0; i < order.length; i++) put(names, order[i]);
    if (values) put(names, "Values");
    const grid = listOf();
    for (let r = 0; r < body.length; r++) {
      const line = body[r], cells = listOf();
      put(cells, line.index);
      if (keyed) put(cells, line.key);
      for (let i = 0; i < order.length; i++) put(cells, hasOwn(line.cells, order[i]) ? line.cells[order[i]] : "");
      if (values) put(cells, line.value);
      put(grid, cells);
    }
    const width = listOf();
    for (let c = 0; c < names.length; c++) {
      let w = codePoints(names[c]);
      for (let r = 0; r < grid.length; r++) {
        const n = codePoints(grid[r][c]);
        if (n > w) w = n;
      }
      put(width, w + 2);
    }
    const rule = (l, m, r) => {
      let out = l;
      for (let c = 0; c < width.length; c++) out += (c ? m : "") + apply(stringRepeat, "─", [width[c]]);
      return out + r;
    };
    const row = (cells) => {
      let out = "│";
      for (let c = 0; c < cells.length; c++) out += " " + spaced(cells[c], width[c] - 1) + "│";
      return out;
    };
    let out = rule("┌", "┬", "┐") + "\n" + row(names) + "\n" + rule("├", "┼", "┤");
    for (let r = 0; r < grid.length; r++) out += "\n" + row(grid[r]);
    out += "\n" + rule("└", "┴", "┘");
    return left ? out + "\n... " + left + " more rows" : out;
  }

  // ---- Arguments must be plain data: what crosses to the host is JSON. ----
  // An object whose prototype is another plain object: what a model that means data with a
  // "__proto__" key writes (it was "an Object", which said nothing of why).
  const INHERITS = "an object whose prototype is another object (made by { __proto__: x } or " +
    "Object.create(x): in a literal, __proto__ sets the prototype and is no key; write " +
    "{ [\"__proto__\"]: x } for a key of that name";
  // `plain` checks a value and returns a copy of it made of plain data only (objects without a
  // prototype, arrays without one), read once. JSON.stringify of the copy runs no script code
  // (no toJSON, getter or proxy trap), so what is sent is exactly what was checked.
  // Its refusals are made where the copy stopped, which may be more frames deep than a stack
  // keeps (quickjs-ng keeps 10): the refusal thrown is made again at the top, so its stack
  // holds the script's line that made the call (an argument nested past MAX_DEPTH named none).
  // The value refused is named by its path from `root` ("the argument"), found again from the
  // objects the copy was in (`seen`) once it stopped: a value that is fine builds no path.
  let refusal; // the refusal made last
  let root; // what `plain` checks, as its refusals name it
  const refuse = (seen, depth, value, message) =>
    (refusal = new NativeTypeError(pathIn(seen, depth, value) + message));
  function plain(value, name) {
    const outer = root; // a getter of the value's may pass data of its own
    root = name;
    try {
      return plainCopy(value, listOf(), 0);
    } catch (e) {
      if (e !== refusal || refusal === undefined) throw e; // a getter's or a trap's of the script's
      refusal = undefined;
      throw new NativeTypeError(e.message);
    } finally {
      root = outer;
    }
  }
  // `root` and the steps from it to `value`, whose containers are seen[0] to seen[depth - 1]:
  // each step is the first member of its container that is the next (the one the copy met
  // first, as it stopped there); a getter or a trap that says otherwise ends the path there.
  function pathIn(seen, depth, value) {
    let at = root;
    try {
      for (let d = 0; d < depth; d++) {
        const holder = seen[d], member = d + 1 < depth ? seen[d + 1] : value;
        let step;
        if (isArray(holder)) {
          for (let i = 0; i < holder.length && step === undefined; i++) {
            if (objectIs(holder[i], member)) step = "[" + i + "]";
          }
        } else {
          const ks = objectKeys(holder);
          for (let i = 0; i < ks.length && step === undefined; i++) {
            if (objectIs(holder[ks[i]], member)) step = keyStep(ks[i]);
          }
        }
        if (step === undefined) break;
        at += step;
      }
    } catch (_) {
      // as far as it was found
    }
    return at;
  }
  function plainCopy(value, seen, depth) {
    switch (typeof value) {
      case "string": case "boolean": return value;
      case "number":
        if (!isFinite(value)) throw refuse(seen, depth, value, " is " + value + ", which JSON cannot carry");
        return value;
      case "undefined": throw refuse(seen, depth, value, " is undefined; leave the key out instead");
      case "bigint": throw refuse(seen, depth, value, " is a BigInt; pass a number or a string");
      case "function": throw refuse(seen, depth, value, " is a function; arguments must be plain data");
      case "symbol": throw refuse(seen, depth, value, " is a symbol; arguments must be plain data");
    }
    if (value === null) return null;
    for (let i = 0; i < depth; i++) {
      if (seen[i] === value) throw refuse(seen, depth, value, " refers to itself; arguments must be a tree of plain data");
    }
    if (depth >= MAX_DEPTH) {
      throw refuse(seen, depth, value, " nests deeper than " + MAX_DEPTH + " levels of objects and arrays, " +
        "the most data passed to a tool may nest (MAX_DEPTH); flatten it");
    }
    if (forgottenAwait(value)) throw refuse(seen, depth, value, " is not data: " + forgotten(value));
    if (isA(value, NativePromise)) throw refuse(seen, depth, value, " is " + PROMISE_NOT_DATA);
    const proto = getPrototypeOf(value);
    const array = isArray(value);
    const bare = !array && proto === null ? heldBrand(value) : undefined;
    if (!array && proto === null && bare === undefined) {
      // A box of no prototype (Object.setPrototypeOf(new Number(5), null)) was copied as its
      // keys alone: {}, or a string's indexes.
      const box = boxedPrimitive(value, null, objectKeys(value));
      if (box !== undefined) throw refuse(seen, depth, value, " is " + withArticle(box[1]) + "; arguments must be plain data");
    }
    if (!array && proto !== ObjectProto && (proto !== null || bare !== undefined)) {
      const name = "" + ((proto && proto.constructor && proto.constructor.name) || bare || "non-plain object");
      const iterating = objectKeys(value).length === 0 ? iteratorKind(value) : undefined;
      const kind = timeOf(value) !== undefined ? "a Date (pass date.toISOString())"
        : name === "URL" ? "a URL (pass url.href)"
        : isA(value, NativeMap) || bare === "Map" ? "a Map (pass Object.fromEntries(map))"
        : isA(value, NativeSet) || bare === "Set" ? "a Set (pass [...set])"
        : web.pairsOf(value) !== undefined ? "a URLSearchParams (pass Object.fromEntries(params), or String(params))"
        : iterating === "sync" ? "an iterator (pass [...iterator])"
        : iterating === "async" ? "an async generator (collect its values into an array, and pass that)"
        : name === "Object" ? INHERITS + ", or pass { ...value })"
        : withArticle(name);
      throw refuse(seen, depth, value, " is " + kind + "; arguments must be plain data");
    }
    seen[depth] = value;
    let copy;
    if (array) {
      const length = value.length;
      copy = listOf();
      for (let i = 0; i < length; i++) copy[i] = plainCopy(value[i], seen, depth + 1);
    } else {
      copy = { __proto__: null };
      const ks = objectKeys(value);
      for (let i = 0; i < ks.length; i++) {
        const key = ks[i];
        const v = value[key];
        if (v === undefined) continue; // JSON leaves it out, as the model meant
        copy[key] = plainCopy(v, seen, depth + 1);
      }
    }
    seen[depth] = undefined;
    return copy;
  }

  // A promise that is not a call's (an async function's: `items.map(async (x) => ...)` with
  // no Promise.all) is no more data than a call's: JSON.stringify made it "{}", and a script
  // returned [{}, {}] as if the tools had answered nothing.
  const PROMISE_NOT_DATA = "a promise, not data: await it for its value (for an array of " +
    "promises, await Promise.all(...))";
  defineProperty(NativePromise.prototype, "toJSON", { __proto__: null,
    value: function toJSON(key) {
      // A returned value's failure says it (see finished).
      throw notData(key, PROMISE_NOT_DATA, undefined, this);
    },
    writable: true, enumerable: false, configurable: true,
  });

  // JSON.parse of a tool's result, which is already data: the engine's "unexpected token:
  // 'object'" (it parsed "[object Object]") becomes what to do instead.
  const scriptParse = {
    parse(text, reviver) {
      // A call's promise (a forgotten await) is no tool's result: it says what to write.
      if (forgottenAwait(text)) throw new NativeTypeError(forgotten(text));
      if (typeof text === "object" && text !== null && !isA(text, NativeString)) {
        throw new NativeSyntaxError("JSON.parse takes text, and it was given " +
          (isArray(text) ? "an array" : "an object") + ": a tool's result is already data, " +
          "so use it as it is (JSON.stringify makes text of it)");
      }
      return apply(JSON.parse, undefined, arguments.length > 1 ? [text, reviver] : [text]);
    },
  }.parse;
  defineProperty(globalThis.JSON, "parse", { __proto__: null, value: scriptParse, writable: true, configurable: true });

  // ---- tools: a call answered from the log settles; a new call never settles this run. ----
  const never = () => new NativePromise(() => {});
  // Calls whose promises settle when the job queue is next empty (script version 2, see
  // runtime.py): in call order, each with its resolvers and the Error it rejects with, made
  // at the call so that its stack names the script's line. The array has no prototype, so
  // no script change to Array.prototype reaches it.
  let pending = listOf();
  function defer(name) {
    const entry = { __proto__: null, name, error: new NativeError(""), resolve: null, reject: null,
      promise: null };
    entry.promise = new NativePromise((resolve, reject) => { entry.resolve = resolve; entry.reject = reject; });
    put(pending, entry);
    return entry.promise;
  }
  // The host settles the first `answers.length` deferred calls, in call order: each answer
  // is [1, result] or [0, error message].
  function settle(json) {
    if (json === "returned") {
      // The run is over: whether what ran after the return changed the returned value.
      returnedLater();
      return;
    }
    if (json === "untaken") {
      // The run is over and every call the log answers settled: those that failed after
      // the ending (a call never awaited, answered once the script had returned).
      untaken();
      return;
    }
    if (json === "") {
      // The host asks for the script's ending again: the jobs ran out with none reported.
      // The ending's own work can fail with the heap full (its error went into the promise
      // that then() made, which nothing watches); what was freed since lets it through.
      if (promise !== undefined) apply(promiseThen, promise, [ending(finished), ending(failed)]);
      return;
    }
    const answers = JSON.parse(json);
    const count = answers.length;
    const settled = pending;
    pending = listOf();
    for (let i = count; i < settled.length; i++) pending[i - count] = settled[i];
    for (let i = 0; i < count; i++) {
      const entry = settled[i], answer = answers[i];
      if (answer[0] === 1) {
        entry.resolve(answer[1]);
      } else {
        entry.error.message = answer[1];
        namesTool(entry.error, entry.name);
        failing(entry.promise, entry.error);
        entry.reject(entry.error);
      }
    }
  }
  // A call's promise, used as if it were its result (a forgotten await): what a script does
  // with a result and never with a promise throws a TypeError that names the fix, and
  // console.log shows it so (it was `{}`, and `prs.filter` "not a function"). The promise's
  // prototype is a frozen child of Promise.prototype with those members: it stays a native
  // promise whose constructor is Promise, so await and Promise.all take it as before, without
  // an extra turn of the job queue (a replay makes its calls in the same order). The same
  // for a call answered from the log and a new one: a live run and a replay print the same.
  // Each call's promise has its record: the tool's name, and whether anything took the
  // promise's outcome. Whatever does (await, then, catch, finally, Promise.all and its kind)
  // reads the promise's `constructor` first, so the prototype's getter of it marks the call
  // taken; there is no other way to see an await of a native promise.
  const callRecords = ownMethods(new NativeWeakMap(), { get: weakMapGet, set: weakMapSet, has: weakMapHas });
  // The promises of files.text and files.sheets, which are made so too (see fileRead), with
  // how each was called.
  const fileReads = ownMethods(new NativeWeakMap(), { get: weakMapGet, set: weakMapSet, has: weakMapHas });
  const forgottenAwait = (value) => callRecords.has(value) || fileReads.has(value);
  const shownCall = (name) => "tools." + name + "(...)";
  function forgotten(promise) {
    const call = callRecords.get(promise);
    const shown = call !== undefined ? shownCall(call.name) : fileReads.get(promise) ?? "a tool call";
    return shown + " gives a promise, not its result: write \"await " + shown + "\"";
  }
  // The calls that failed, in the order they failed. Those nothing took when the script
  // ends are printed lines, as Python's "failed and nothing awaited it" (see `untaken`).
  const failedCalls = listOf();
  function failing(promise, error) {
    const call = callRecords.get(promise);
    if (call === undefined) return;
    call.message = error.message;
    call.stack = framesOf(error);
    put(failedCalls, call);
  }
  // The returned value, kept with its JSON when the script returned while calls its code
  // waits on (awaited, chained: taken) had not answered, with how many and the first: that
  // code runs after the return, and may change the value (`items.map(async ...)` pushing
  // into it, with no Promise.all), which the model, given the value as it was, should hear
  // of (`returnedLater`). The same in a live run and a replay: both settle calls only when
  // the job queue is empty.
  // Only plain data is kept (see readsAsData): the value is read again once the calls have
  // answered, and a value whose reading runs the script's code (a getter, a toJSON) could
  // read otherwise without any code changing it (`get at() { return Math.random() }` had the
  // line say the late code changed it, and the getter ran once more after the return).
  let returned;
  function keepReturned(value, json) {
    let count = 0, first;
    for (let i = 0; i < pending.length; i++) {
      const call = callRecords.get(pending[i].promise);
      if (call !== undefined && call.taken && count++ === 0) first = pending[i];
    }
    if (count && readsAsData(value)) returned = { __proto__: null, value, json, count, first };
  }
  function returnedLater() {
    const kept = returned;
    returned = undefined;
    if (kept === undefined) return;
    let json;
    try {
      // A value that is no longer plain data was changed (a getter or a toJSON put in it).
      json = readsAsData(kept.value) ? JSON.stringify(kept.value, opaqueRefused) : undefined;
    } catch (_) {
      return; // no line rather than a guess (the heap may be full)
    }
    if (json !== kept.json) {
      host.changed("" + kept.count, wellFormed(shownCall(kept.first.name)),
        wellFormed(framesOf(kept.first.error)));
    }
  }
  // Whether JSON.stringify reads `root` without running any code of the script's: plain
  // objects and arrays (no holes) of data properties, no toJSON of their own or on their
  // prototypes, down to primitives. Read by property descriptors: no getter runs here.
  function readsAsData(root) {
    if (hasOwn(ObjectProto, "toJSON") || hasOwn(ArrayProto, "toJSON")) return false;
    const todo = listOf();
    put(todo, root);
    while (todo.length) {
      const value = todo[todo.length - 1];
      todo.length--;
      if (typeof value !== "object" || value === null) continue;
      const proto = getPrototypeOf(value);
      if (proto !== ObjectProto && proto !== ArrayProto && proto !== null) return false;
      const keys = objectKeys(value);
      if (isArray(value) && keys.length !== value.length) return false; // a hole reads its prototype
      for (let i = 0; i < keys.length; i++) {
        if (keys[i] === "toJSON") return false;
        const own = getOwnPropertyDescriptor(value, keys[i]);
        if (own === undefined || !hasOwn(own, "value")) return false; // an accessor
        put(todo, own.value);
      }
    }
    return true;
  }
  // Promises rejected with nothing to handle them (`main();` of an async main that threw):
  // QuickJS's rejection tracker (sandbox/rejections.py) calls `rejection` with the promise as
  // `this`, `handled` 0 when it is rejected with no handler and 1 when one is added later.
  // Those left when the run ends are printed lines, as untaken calls are; a call's promise
  // is not one of them (untaken names it). The same in a live run and a replay: both run
  // the same jobs. At most UNHANDLED_KEPT are kept, each with its reason (a loop of them
  // would fill the heap); those past it are only counted (and counted off when handled).
  const UNHANDLED_KEPT = 100, UNHANDLED_SHOWN = 10;
  const unhandled = ownMethods(new NativeMap(), { set: mapSet, delete: mapDelete });
  let unhandledMore = 0; // rejected with no handler once the map was full
  // Answers 1 for a promise rejected, with no handler, by QuickJS's out-of-memory error: the
  // tracker notes that the heap ran out in a job (as it does of a null, what QuickJS throws
  // when it cannot make even that error), and the run ends on the memory limit.
  function rejection(reason, handled) {
    if (handled) {
      // QuickJS says "handled" only of a promise it said was not: one kept, or one counted.
      if (!unhandled.delete(this) && !callRecords.has(this) && unhandledMore > 0) unhandledMore--;
      return 0;
    }
    if (apply(mapSize, unhandled, []) < UNHANDLED_KEPT) {
      unhandled.set(this, reason); // a call's too: a recorded failure is rejected before `called`
    } else if (!callRecords.has(this)) {
      unhandledMore++;
    }
    return reason !== null && outOfMemory(reason) ? 1 : 0; // a null: the tracker's to weigh
  }
  let untakenShown = 0; // how many of failedCalls untaken() has looked at
  let warned = 0; // lines untaken() printed in this run: at most UNHANDLED_SHOWN in all
  function untaken() {
    const lines = listOf();
    for (; untakenShown < failedCalls.length; untakenShown++) {
      const call = failedCalls[untakenShown];
      if (!call.taken) put(lines, [shownCall(call.name), call.message, call.stack]);
    }
    const reasons = listOf();
    apply(mapForEach, unhandled, [(reason, promise) => {
      if (!callRecords.has(promise)) put(reasons, reason);
    }]);
    apply(mapClear, unhandled, []);
    for (let i = 0; i < reasons.length; i++) {
      const parts = errorParts(reasons[i]), name = parts.name, message = parts.message;
      put(lines, ["an async function or promise",
        name === "Uncaught" ? message : message ? name + ": " + message : name, parts.stack]);
    }
    // Calls that failed unawaited and promises rejected with nothing to handle them share
    // the lines: at most UNHANDLED_SHOWN in a run, the last saying how many more (900
    // failed calls were 900 lines, the printed text cut down to make room for them).
    const room = UNHANDLED_SHOWN - warned > 0 ? UNHANDLED_SHOWN - warned : 0;
    const shown = lines.length < room ? lines.length : room;
    const more = lines.length - shown + unhandledMore; // the last line shown counts them
    unhandledMore = 0;
    warned += shown;
    for (let i = 0; i < shown; i++) {
      const line = lines[i];
      const last = i === shown - 1 && more > 0;
      host.untaken(wellFormed(line[0] + (last ? " (and " + more + " more like it)" : "")),
        wellFormed(line[1]), wellFormed(line[2]));
    }
    if (shown === 0 && more > 0 && room > 0) {
      // Every one kept was handled later; those past the kept ones have no reason.
      warned += 1;
      host.untaken("an async function or promise" + (more > 1 ? " (and " + (more - 1) +
        " more like it)" : ""), "its error was not kept (over " + UNHANDLED_KEPT +
        " failed unawaited at once)", "");
    }
  }
  // Made with the world, before any script (a fork server's, before it forks; about 10 us of
  // a run's own context): made at a run's first call, it took Promise.prototype's then, the
  // array iterator and Symbol as the script had left them (a script that replaced
  // Array.prototype[Symbol.iterator] failed its first call with its own error).
  const CallPromise = callPromise();
  function callPromise() {
    // Below the members named here, any other name a promise has not (`r.items`, `n.toFixed`,
    // `const { a } = r`) says the await is missing too, where it read as undefined.
    // The proxy's target inherits from Promise.prototype, so that it stays on the promise's
    // prototype chain (`p instanceof Promise`).
    const promises = create(NativePromise.prototype);
    const unknown = new NativeProxy(promises, { __proto__: null, get(target, key, receiver) {
      if (typeof key === "symbol" || key in target) return reflectGet(target, key, receiver);
      throw new NativeTypeError(forgotten(receiver));
    } });
    const proto = create(unknown);
    // A promise's own members, here, so that their lookups (each `then` of Promise.all and
    // of an await's chain) never reach the proxy's trap.
    for (const key of ["then", "catch", "finally"]) {
      defineProperty(proto, key, { __proto__: null, value: NativePromise.prototype[key], writable: true, enumerable: false, configurable: true });
    }
    const misuse = { __proto__: null, get() { throw new NativeTypeError(forgotten(this)); }, enumerable: false };
    defineProperty(proto, "constructor", { __proto__: null, get() {
      const call = callRecords.get(this);
      if (call !== undefined) call.taken = true;
      return NativePromise;
    }, enumerable: false });
    for (const key of ["length", "map", "filter", "forEach", "find", "findIndex", "reduce", "some",
      "every", "includes", "indexOf", "slice", "join", "sort", "concat", "flat", "flatMap", "at",
      "toJSON", toPrimitiveKey, Symbol.iterator, Symbol.asyncIterator]) {
      defineProperty(proto, key, misuse);
    }
    return freeze(proto);
  }
  // What copies a promise's own keys (`{ ...r }`, `Object.assign({}, r)`) reads no
  // prototype, and a promise has no own keys: it gave `{}`. A call's promise holds one,
  // a symbol (so `Object.keys` and `for...in` still see none) whose getter says the await
  // is missing.
  const spreadKey = Symbol("missing await");
  const spreadMisuse = { __proto__: null, get() { throw new NativeTypeError(forgotten(this)); }, enumerable: true };
  // `promise` made one whose misuse says the await is missing (see CallPromise), kept in
  // `records` (callRecords, fileReads) with what it is.
  function awaitable(promise, records, record) {
    setPrototypeOf(promise, CallPromise);
    defineProperty(promise, spreadKey, spreadMisuse);
    records.set(promise, record);
    return promise;
  }
  function called(name, promise) {
    return awaitable(promise, callRecords, { __proto__: null, name, taken: false, message: "", stack: "" });
  }
  function noSuchTool(name) {
    const near = JSON.parse(host.closest(wellFormed(name)));
    let message = name === "run_code"
      ? "tools.run_code cannot be called from a script: a script is already running code"
      : "tools." + name + " does not exist";
    for (let i = 0; i < near.length; i++) {
      message += (i ? ", " : "; the closest tools are ") + "tools." + near[i];
    }
    return new NativeError(message + ". Find tools with await tools.tool_search({ query: \"...\" }).");
  }
  // A call whose arguments are wrong is not made, and its promise rejects with why, as an
  // async function's own check of them would: `Promise.allSettled` and `.catch` take it (it
  // was thrown at the call, and failed the whole batch). Running out of heap still throws.
  // files.text and files.sheets give a promise, as a call does, and theirs says the await is
  // missing as a call's does (without it, `text.split` was "not a function", and
  // JSON.parse(text) said a tool's result is already data). It settles as the async
  // function's it was: with what the read gives, or rejected with why it failed.
  function fileRead(op, id) {
    const promise = new NativePromise((resolve, reject) => {
      try {
        resolve(fileOp(op, { id }));
      } catch (e) {
        reject(e);
      }
    });
    return awaitable(promise, fileReads, "files." + op + "(...)");
  }
  // A failed call's error names its tool (`e.tool`), as its own property: assigned, it went
  // through a setter a script put on Object.prototype or Error.prototype, which took it (or
  // threw, and the host's settling of the call failed with the script's error).
  const namesTool = (error, name) => {
    defineProperty(error, "tool", { __proto__: null, value: name, writable: true, enumerable: true, configurable: true });
  };
  function refusedCall(name, error) {
    if (error === null || isA(error, NativeInternalError)) throw error;
    const promise = called(name, rejectedWith(error));
    failing(promise, error);
    return promise;
  }
  function callTool(name, args) {
    if (!toolNames.has(name)) throw noSuchTool(name);
    if (args === undefined) args = {};
    let json;
    try {
      if (typeof args !== "object" || args === null || isArray(args)) {
        throw new NativeTypeError("tools." + name + " takes one object of arguments, as tools." + name +
          "({ ... }); it was given " + (isArray(args) ? "an array"
          : typeof args === "string" ? "a string" : text(args)));
      }
      json = JSON.stringify(plain(args, "the argument"));
    } catch (e) {
      return refusedCall(name, e);
    }
    const answer = host.call(wellFormed(name), wellFormed(json));
    const tag = tagOf(answer);
    const rest = restOf(answer);
    switch (tag) {
      case 114: return called(name, resolvedWith(JSON.parse(rest))); // "r": a recorded result
      case 101: { // "e": a recorded error
        const err = new NativeError(rest);
        namesTool(err, name);
        const promise = called(name, rejectedWith(err));
        failing(promise, err);
        return promise;
      }
      case 116: return refusedCall(name, new NativeTypeError(rest)); // "t": this call is wrong
      case 108: return refusedCall(name, new NativeRangeError(rest)); // "l": over a per-call limit
      case 100: return called(name, defer(name)); // "d": settles when the job queue is next empty
      case 76: // "L": it met a limit of the script's; the run ends on it at this line
        host.limit(framesOf(new NativeError("")));
        return called(name, never());
      default: return called(name, never()); // "p": a new call, or "x": the run has ended
    }
  }
  const callers = ownMethods(new NativeMap(), { get: mapGet, set: mapSet });
  const callerFor = (name) => {
    let f = callers.get(name);
    if (!f) {
      f = native({ [name]: function (args) {
        if (arguments.length > 1) {
          return refusedCall(name, new NativeTypeError("tools." + name + " takes one object of " +
            "arguments, as tools." + name + "({ ... }); it was given " + arguments.length + " arguments"));
        }
        return callTool(name, args);
      } }[name]);
      if (!toolNames.has(name)) {
        // `tools.github.list_prs(...)`: a member of a name that is no tool says so, and how
        // the tool is named (it was "not a function"). A function's own members, `then`
        // (await looks it up) and symbols are as they are.
        f = new NativeProxy(f, {
          __proto__: null,
          get(target, prop, receiver) {
            if (typeof prop !== "string" || prop === "then" || prop in target) {
              return apply(reflectGet, undefined, [target, prop, receiver]);
            }
            if (toolNames.has(name + "__" + prop)) {
              throw new NativeError("tools." + name + "." + prop + " is not a tool: write tools." +
                name + "__" + prop);
            }
            throw noSuchTool(name);
          },
        });
      }
      callers.set(name, f);
    }
    return f;
  };
  // What `tools` itself shows as, where no tool takes the name: `console.log(tools)` and
  // `JSON.stringify(tools)` the names of the tools, `${tools}` a line of them.
  const arraySort = ArrayProto.sort;
  // A list of the prelude's own: a setter a script put on Array.prototype[0] took the first
  // name (`Object.keys(tools)` failed with "proxy: duplicate property"), or all of them.
  const toolList = () => {
    const names = listOf();
    for (let i = 0; i < toolArray.length; i++) put(names, toolArray[i]);
    return setPrototypeOf(apply(arraySort, names, []), ArrayProto); // filled: an array as any
  };
  const shownAs = freeze({
    toJSON: () => toolList(),
    toString: () => "[tools: " + joined(toolList(), ", ") + "]",
  });
  const readOnly = () => { throw new NativeTypeError("tools is read-only"); };
  globalThis.tools = new NativeProxy({ __proto__: null }, {
    __proto__: null,
    get(_, prop) {
      if (prop === toPrimitiveKey) return shownAs.toString;
      if (typeof prop !== "string" || prop === "then") return undefined;
      if (!toolNames.has(prop) && (prop === "toJSON" || prop === "toString")) return shownAs[prop];
      return callerFor(prop);
    },
    has: (_, prop) => toolNames.has(prop),
    ownKeys: toolList,
    getOwnPropertyDescriptor: (_, prop) => toolNames.has(prop)
      ? { __proto__: null, value: callerFor(prop), enumerable: true, configurable: true, writable: false }
      : undefined,
    // Object.freeze, preventExtensions and setPrototypeOf too: each went through to the
    // target, and tools, no longer extensible, failed each Object.keys with the engine's
    // "proxy: property not present in target were returned by non extensible proxy".
    set: readOnly, defineProperty: readOnly, deleteProperty: readOnly,
    preventExtensions: readOnly, setPrototypeOf: readOnly,
  });

  // ---- files: read through the runner; decoded on the Python side, in batches. ----
  function fileOp(op, args) {
    // Named here, as the script wrote it: the host reads null and undefined alike (None), and
    // told a script that passed null "none was given".
    const id = hasOwn(args, "id") ? args.id : "";
    if (id === null || id === undefined) {
      throw new NativeError('a file id is a string, as in files.' + (op === "open" ? args.kind : op) +
        '("data.csv"); ' + id + " was given");
    }
    const answer = host.file(op, wellFormed(JSON.stringify(plain(args, "the argument"))));
    const tag = tagOf(answer);
    if (tag === 114) return JSON.parse(restOf(answer)); // "r"
    if (tag === 116) throw new NativeError(restOf(answer)); // "t": a bad use, or a file that is gone
    throw new NativeError("the run has ended"); // "x": in a real process, it has already exited
  }
  function options(name, opts) {
    if (opts === undefined) return {};
    if (typeof opts !== "object" || opts === null || isArray(opts)) {
      throw new NativeTypeError("files." + name + " takes an object of options, as { limit: 10 }");
    }
    return plain(opts, "the options");
  }
  function stream(kind) {
    return { [kind]: function (id, opts) {
      const given = options(kind, opts);
      let handle = 0, buffer = [], index = 0, done = false, opened = false;
      const close = () => {
        if (opened && !done) fileOp("close", { handle });
        done = true;
        buffer = [];
      };
      const iterator = {
        __proto__: StreamProto,
        next() {
          try {
            if (!opened) {
              opened = true;
              handle = fileOp("open", { kind, id, options: given });
            }
            while (index >= buffer.length) {
              if (done) return resolvedWith({ value: undefined, done: true });
              const batch = fileOp("next", { handle });
              buffer = batch.items;
              index = 0;
              done = batch.done;
            }
            return resolvedWith({ value: buffer[index++], done: false });
          } catch (e) {
            done = true;
            return rejectedWith(e);
          }
        },
        return(value) {
          close();
          return resolvedWith({ value, done: true });
        },
        [asyncIteratorKey]() { return this; },
      };
      // Read as if it were an array of rows (`for ... of` without await, `rows.length`,
      // returned): it says how it is read, where it was "value is not iterable", undefined
      // or {}.
      native(iterator.next);
      native(iterator.return);
      native(iterator[asyncIteratorKey]);
      const misuse = { __proto__: null, get: native(() => { throw new NativeTypeError(streamMisused(kind)); }) };
      for (let i = 0; i < STREAM_MISUSES.length; i++) defineProperty(iterator, STREAM_MISUSES[i], misuse);
      streamKinds.set(iterator, kind);
      return iterator;
    } }[kind];
  }
  const STREAM_MISUSES = ["length", "map", "filter", "forEach", "slice", Symbol.iterator];
  // What a stream inherits from (for the returned value's check, see opaqueRefused), and the
  // function that made each.
  const StreamProto = create(ObjectProto);
  const streamKinds = ownMethods(new NativeWeakMap(), { get: weakMapGet, set: weakMapSet });
  const streamMisused = (kind) => "files." + kind + "(...) gives its " + (kind === "chunks" ? "chunks" :
    kind === "lines" ? "lines" : "rows") + " one at a time, not an array: read them with `for await (const " +
    "x of files." + kind + "(...))` (collect what you keep in that loop)";
  globalThis.files = freeze({
    list: () => fileOp("list", {}),
    stat: (id) => fileOp("stat", { id }),
    text: (id) => fileRead("text", id),
    show: (id) => { fileOp("show", { id }); },
    sheets: (id) => fileRead("sheets", id),
    lines: stream("lines"),
    jsonl: stream("jsonl"),
    csv: stream("csv"),
    chunks: stream("chunks"),
    xlsx: stream("xlsx"),
  });

  // ---- The end of the script: its value or its error goes to the host as text. ----
  // What QuickJS throws when an allocation fails: an InternalError "out of memory", or null
  // when it could not allocate even that. Told without allocating (no string made, no
  // arguments array): the heap is full when it matters, and a check that failed there said
  // "not out of memory", which let the failure escape and the run end with no ending.
  function outOfMemory(e) {
    if (e === null) return true;
    try {
      return isA(e, NativeInternalError) && e.message === "out of memory";
    } catch (_) {
      return false; // a message that cannot be read is not the engine's
    }
  }
  // The script's ending goes to the host through one of these. Its text is copied on the
  // way (made well-formed, then to UTF-8 for the host) inside the heap, so text the heap
  // holds once may not fit twice: that is the memory limit met. Left to escape, it would
  // leave the run with no ending at all, read as a script that waits forever.
  const ending = (report) => (outcome) => {
    try {
      // The calls that failed with nothing to take them, after the script's own lines;
      // not when the heap is full (as Python's run, which reports them but for that). Lines
      // that do not fit are left out: the ending goes first.
      if (failedCalls.length) {
        try {
          if (report !== failed || !outOfMemory(outcome)) untaken();
        } catch (_) {}
      }
      report(outcome);
    } catch (e) {
      if (!outOfMemory(e)) throw e;
      outcome = null; // let the script's ending go before saying so
      host.fail("InternalError", "out of memory", "");
    }
  };
  // Where in the returned value, as `value.a.b[0]`, the first object that `hit` takes is
  // (`hit(v, holding)`, `holding` the objects from the top down to v's own), or null when not
  // found within CYCLE_WALK objects and MAX_DEPTH deep. Walked on a failure's path only.
  const CYCLE_WALK = 100000;
  function pathWhere(root, hit) {
    const path = listOf(); // no script change to Array.prototype reaches it
    let budget = CYCLE_WALK;
    function walk(v, where) {
      if (typeof v !== "object" || v === null) return null;
      if (hit(v, path)) return where;
      if (--budget < 0 || path.length >= MAX_DEPTH) return null;
      put(path, v);
      if (isArray(v)) {
        for (let i = 0; i < v.length; i++) {
          const found = walk(v[i], where + "[" + i + "]");
          if (found !== null) return found;
        }
      } else {
        const ks = objectKeys(v);
        for (let i = 0; i < ks.length; i++) {
          const found = walk(v[ks[i]], where + keyStep(ks[i]));
          if (found !== null) return found;
        }
      }
      path.length -= 1;
      return null;
    }
    try {
      return walk(root, "value");
    } catch (_) {
      return null; // a getter that throws, a proxy: the plain message stands
    }
  }
  const NAME_KEY = /^[A-Za-z_$][\w$]*$/;
  const keyStep = (k) => apply(regExpExec, NAME_KEY, [k]) !== null ? "." + k : "[" + JSON.stringify(k) + "]";
  // Where the returned value refers back to an object that holds it: JSON's "circular
  // reference" said neither where nor what to do.
  function cycleAt(root) {
    return pathWhere(root, (v, holding) => {
      for (let i = 0; i < holding.length; i++) if (holding[i] === v) return true;
      return false;
    });
  }
  function finished(value) {
    if (value === undefined) { host.done("u"); return; }
    if (typeof value === "function" || typeof value === "symbol") {
      // JSON.stringify gives nothing for one: the run would end as if it returned nothing.
      host.fail("TypeError", "the returned value is not JSON data: it is " + (typeof value === "function"
        ? "a function, which JSON drops; call it (`return f()`), or return the data it makes"
        : "a Symbol, which JSON drops; return its description"), "");
      return;
    }
    const half = VALUE_HALF;
    if (typeof value === "string" && value.length > 2 * half) {
      // A huge string is cut here: turning it into JSON first could exhaust memory.
      // Sliced by the prelude's own slice, in an array of no prototype: a script's
      // String.prototype.slice, or a toJSON on Array.prototype or Object.prototype, gave the
      // host what was no [head, tail, length], and the sandbox process failed reading it.
      const cut = setPrototypeOf([apply(stringSlice, value, [0, half]), apply(stringSlice, value, [-half]),
        value.length], null);
      host.done(wellFormed("c" + JSON.stringify(cut)));
      return;
    }
    let json;
    try {
      // The replacer refuses what JSON would make {} or a bag of indexes of without a word.
      json = JSON.stringify(value, opaqueRefused);
    } catch (e) {
      if (e !== null && outOfMemory(e)) {
        host.fail("InternalError", "out of memory", "");
        return;
      }
      // A null is the heap's, or the script's own `throw null` in a toJSON: failed() says
      // which it is to the host, which reads the script's text (runtime.py's _failed).
      const why = e === refused ? refusedWhere(value) : e === null ? undefined : notJSON(e, value);
      if (why === undefined) {
        // The script's own code threw as its value was read (a getter, a toJSON, a Proxy's
        // trap): its error, at its line, as the same value given to a tool throws there.
        failed(e);
      } else {
        host.fail("TypeError", wellFormed("the returned value is not JSON data: " + why), "");
      }
      return;
    }
    // Only a value the model reads whole is kept (its JSON at most the value's bound): a
    // copy of a larger one could take the room the late code needs.
    if (pending.length && typeof value === "object" && value !== null &&
        json !== undefined && json.length <= 2 * half) {
      try { keepReturned(value, json); } catch (_) {} // a line less with the heap full
    }
    host.done(json === undefined ? "u" : wellFormed("j" + json));
  }
  // Why JSON.stringify itself threw (a cycle, with where it closes; nesting past its stack),
  // or undefined: it was not JSON.stringify, but code of the script's it ran.
  function notJSON(e, value) {
    let message;
    try {
      if (!(isA(e, NativeTypeError) || isA(e, NativeRangeError))) return undefined;
      message = "" + e.message;
    } catch (_) {
      return undefined; // a revoked Proxy's, or a message that cannot be read
    }
    if (isA(e, NativeRangeError)) {
      if (!apply(stringIncludes, message, ["stack"])) return undefined;
      return "it nests deeper than " + MAX_DEPTH + " levels of objects and arrays, the most " +
        "data may nest to cross between the sandbox and the host (MAX_DEPTH); flatten it";
    }
    if (message !== CYCLE_MESSAGE) return undefined;
    const at = cycleAt(value);
    return (at === null ? "it holds" : at + " refers back to") + " an object that holds it (a " +
      "cycle, which JSON cannot carry); return a copy without that reference";
  }
  // A replacer that refuses what JSON turns into {} without a word (a Map, a Set, an Error,
  // a RegExp, an iterator, an object of a class with no fields of its own) or into an object
  // of indexes (a typed array). Plain objects and arrays, the most of any value, pass first.
  let refused; // the error it threw last
  let refusedAt; // (key, kind, holder, value) of that error, for refusedWhere
  // The error that says the value at `key` ("" or undefined: the value itself) of `holder`
  // (undefined: not known, but the value is `value`) is `kind`.
  function notData(key, kind, holder, value) {
    refused = new NativeTypeError((key === "" || key === undefined ? "it is " : "at key " +
      JSON.stringify("" + key) + " it holds ") + kind);
    refusedAt = [key, kind, holder, value];
    return refused;
  }
  // The refusal of the returned value `root`, naming where in it the value refused is, as
  // `value.a[2] is NaN` (the replacer is told only its key); found again on the failure's
  // path only, so a value that is fine costs nothing more. A value of a toJSON's making is
  // not in `root`: its key alone names it.
  function refusedWhere(root) {
    const key = refusedAt[0], kind = refusedAt[1], holder = refusedAt[2], value = refusedAt[3];
    let where = null;
    if (holder !== undefined) {
      where = pathWhere(root, (v) => v === holder);
      if (where !== null) where += isArray(holder) ? "[" + key + "]" : keyStep("" + key);
    } else if (typeof value === "object" && value !== null) {
      where = pathWhere(root, (v) => v === value);
    }
    return where === null ? refused.message : where + " is " + kind;
  }
  // Whether `proto`, the prototype of a returned object with fields of its own, is a plain
  // object of no class that holds data ({ __proto__: { unit: "kg" }, n: 3 } in a literal):
  // JSON writes the own fields alone, and the prototype's were lost without a word. One
  // that holds only methods (a prototype written as an object, not a class) loses nothing.
  function inheritsData(proto) {
    if (getPrototypeOf(proto) !== ObjectProto || hasOwn(proto, "constructor")) return false;
    const ks = objectKeys(proto);
    for (let i = 0; i < ks.length; i++) {
      const own = getOwnPropertyDescriptor(proto, ks[i]);
      if (own !== undefined && (!hasOwn(own, "value") || typeof own.value !== "function")) return true;
    }
    return false;
  }
  function opaqueRefused(key, value) {
    if (typeof value === "bigint") {
      // JSON.stringify's own error named neither where nor the fix.
      throw notData(key, "a BigInt, which JSON cannot carry; return String(n), or Number(n) if it fits",
        this);
    }
    if (typeof value === "number" && !isFinite(value)) {
      // JSON writes null for it: `{ avg: total / 0 }` read as if there were no value.
      throw notData(key, value + ", which JSON writes as null; return null where there is no " +
        "number, or check the arithmetic that made it", this);
    }
    if (typeof value !== "object" || value === null || isArray(value)) return value;
    const proto = getPrototypeOf(value);
    if (proto === ObjectProto) return value;
    const nullKeys = proto === null ? objectKeys(value) : undefined;
    if (proto === null) {
      // A box of no prototype: JSON.stringify failed converting it ("cannot convert object to
      // primitive value", naming nothing); it gives the value it boxes, as a box with its
      // prototype does.
      const box = boxedPrimitive(value, null, nullKeys);
      if (box !== undefined) return box[0];
    }
    const bare = proto === null ? heldBrand(value, nullKeys) : undefined;
    if (proto === null && bare === undefined) return value;
    // `new Number(3)`, `new Boolean(false)`, `new String("a")`: JSON gives the value they box.
    if (isA(value, NativeNumber) || isA(value, NativeBoolean) || isA(value, NativeString)) {
      return value;
    }
    let kind;
    if (isA(value, NativeMap) || bare === "Map") {
      kind = "a Map, which JSON turns into {}; return Object.fromEntries(map), or [...map] for its entries";
    } else if (isA(value, NativeSet) || bare === "Set") {
      kind = "a Set, which JSON turns into {}; return [...set]";
    } else if (bare === "Date") {
      kind = "a Date, which JSON turns into {}; return its text, Date.prototype.toISOString.call(date)";
    } else if (isA(value, NativeError)) {
      kind = "an Error, which JSON turns into {} (its message is lost); return error.message, or String(error)";
    } else if (isView(value) || isA(value, NativeArrayBuffer) || bare === "ArrayBuffer") {
      kind = "binary data, which JSON turns into an object of indexes or {}; return Array.from(bytes)";
    } else if (isA(value, NativeRegExp) || bare === "RegExp") {
      kind = "a RegExp, which JSON turns into {}; return regexp.source, or String(regexp)";
    } else if (proto === StreamProto && streamKinds.get(value) !== undefined) {
      kind = "a stream, which JSON turns into {}: " + streamMisused(streamKinds.get(value));
    } else if (web.pairsOf(value) !== undefined) {
      kind = "a URLSearchParams, which JSON turns into {}; return Object.fromEntries(params), or " +
        "String(params) for its query";
    } else if (objectKeys(value).length === 0 && iteratorKind(value) === "async") {
      kind = "an async generator, which JSON turns into {}; collect its values into an array " +
        "(`for await (const x of gen) items.push(x)`) and return that";
    } else if (objectKeys(value).length === 0 && iteratorKind(value) === "sync") {
      kind = "an iterator (a generator's, or of keys(), values(), entries(), matchAll()), which " +
        "JSON turns into {}; return [...iterator]";
    } else if (isA(value, NativeWeakMap) || isA(value, NativeWeakSet) || objectKeys(value).length === 0) {
      const name = "" + ((proto && proto.constructor && proto.constructor.name) || "object of no class");
      kind = name === "Object" ? INHERITS + "), which JSON turns into {}"
        : withArticle(name) + ", which JSON turns into {}; return the plain data it holds";
    } else if (inheritsData(proto)) {
      kind = INHERITS + "), and JSON writes its own fields alone, leaving its prototype's out; " +
        "return { ...Object.getPrototypeOf(value), ...value }";
    } else {
      return value; // an object of a class of the script's, with its fields
    }
    throw notData(key, kind, this);
  }
  function failed(error) {
    const parts = errorParts(error);
    host.fail(wellFormed(parts.name), wellFormed(parts.message), wellFormed(parts.stack), error === null);
  }
  // The name, message and stack of a thrown value; name "Uncaught" for one that is no Error.
  function errorParts(error) {
    let name = "Error", message = "", stack = "";
    try {
      if (isA(error, NativeError)) {
        // First: it runs no code of the script's, and a getter of its name or message may
        // throw (the error that cannot be read named no line).
        stack = framesOf(error);
        name = "" + toPrimitive(error.name, "string");
        message = "" + toPrimitive(error.message, "string");
        // What it wraps says what went wrong first (`throw new Error("sync failed", { cause })`).
        try {
          message += errorMore(error, 0, listOf(), { left: PRINTED_BOUND });
        } catch (_) {
          // a cause that cannot be read leaves the error as it is
        }
      } else {
        name = "Uncaught";
        message = error === "" ? '""' : text(error); // an empty text thrown: say so
      }
    } catch (e) {
      message = "an error that cannot be read: " + errorText(e);
    }
    return { __proto__: null, name, message, stack };
  }

  // ---- The script: compiled on its own, now that everything above is in place. ----
  // The body is never pasted into source that also holds code of ours: `compile` evaluates
  // "throw 0; async function __cm_main() {<body>}" and nothing else. The source is parsed
  // whole before any of it runs and its first statement throws, so no text of the script
  // runs here, whatever it closes or opens. What is left is the declared function, and it
  // is the script's only if its source text is the whole declaration: a body that closes
  // the function early (`}; evil(); (function () {`) leaves a shorter __cm_main (or
  // another one), never one whose text is all of it. The body begins on the declaration's
  // line, so its line n is line n here too, in the stacks the script itself reads (its first
  // line's columns QuickJS counts from what is before the body: `e.stack` takes them off).
  // With `mayStrip`, a body that does not parse gives undefined instead of its SyntaxError:
  // nothing of it was declared, so the host may strip its types and begin again.
  function compile(body, mayStrip) {
    const declaration = WRAPPER + body + "\n}";
    try {
      apply(globalEval, undefined, [BEFORE_BODY + body + "\n}"]);
    } catch (e) {
      if (e !== 0) { // the body does not parse (a SyntaxError; or out of memory or stack)
        if (mayStrip && isA(e, NativeSyntaxError)) return undefined;
        if (isA(e, NativeRangeError)) {
          // The parser's stack ran out: "Maximum call stack size exceeded" named no line.
          throw new NativeSyntaxError("the script nests too deeply to parse (parentheses, " +
            "brackets, braces or operators inside one another, thousands deep); flatten it");
        }
        throw e;
      }
    }
    const found = getOwnPropertyDescriptor(globalThis, MAIN);
    delete globalThis[MAIN];
    const main = found && found.value;
    if (typeof main !== "function" || apply(fnToString, main, []) !== declaration) {
      throw new NativeSyntaxError("the script closes the function it is the body of (a `}` with " +
        "no `{` before it); a script is the body of an async function and must parse as one");
    }
    return main;
  }

  // ---- What the engine made reads as built-in, as a host's built-ins do. ----
  // `String(console.log)` and `tools.x.toString()` gave the prelude's source (what it keeps
  // and calls, how it checks), and a script that tells the engine's functions from its own by
  // `[native code]` took console.log for one of its own. Every function the boot made (the
  // prelude's, web.js's and lazy.js's files'), found from the global object before any script
  // exists, and those made later for a script (`native`), read as QuickJS writes its own:
  // `function log() {\n    [native code]\n}`. Function.prototype.toString is replaced, in
  // the same place and with the same name and length; the script's own functions read as ever.
  const nativeMade = ownMethods(new NativeWeakSet(), { has: weakSetHas, add: weakSetAdd });
  const native = (f) => { nativeMade.add(f); return f; };
  const builtInText = {
    toString() {
      if (!nativeMade.has(this)) return apply(fnToString, this, []);
      const own = getOwnPropertyDescriptor(this, "name"); // no getter of the script's runs
      return "function " + (own && typeof own.value === "string" ? own.value : "") + "() {\n    [native code]\n}";
    },
  }.toString;
  defineProperty(Function.prototype, "toString", { __proto__: null, value: builtInText, writable: true, enumerable: false, configurable: true });
  const { ownKeys } = Reflect;
  const { getOwnPropertyDescriptors } = Object;
  // Every function reachable from `roots` through properties (values, getters, setters) and
  // prototypes, in one pass (what the roots share is walked once): called before any script
  // exists, when all there is is the engine's. Run by every context that boots (an exec'd
  // run's, an in-process run's): it reads each object's descriptors in one call, and none of
  // one whose only keys are length and name (most functions), which hold no object.
  function allNative(roots) {
    const seen = ownMethods(new NativeWeakSet(), { has: weakSetHas, add: weakSetAdd });
    const todo = listOf();
    for (let i = 0; i < roots.length; i++) put(todo, roots[i]);
    while (todo.length) {
      const v = todo[todo.length - 1];
      todo.length--;
      if (seen.has(v)) continue;
      seen.add(v);
      if (typeof v === "function") nativeMade.add(v);
      const proto = getPrototypeOf(v);
      if (proto !== null) put(todo, proto);
      const keys = ownKeys(v);
      if (keys.length === 2 && keys[0] === "length" && keys[1] === "name") continue;
      const descriptors = getOwnPropertyDescriptors(v);
      for (let i = 0; i < keys.length; i++) {
        const own = descriptors[keys[i]];
        if (own === undefined) continue;
        // A data descriptor's get and set, and an accessor's value, are undefined (nothing
        // is on Object.prototype to read before a script runs).
        const { value, get, set } = own;
        if (isObject(value)) put(todo, value);
        if (get !== undefined) put(todo, get);
        if (set !== undefined) put(todo, set);
      }
    }
  }
  // What `tools` shows as (shownAs) too: the walk does not open a Proxy's handler.
  allNative([globalThis, CallPromise, shownAs]);
  native(spreadMisuse.get);

  // ---- One script: its record's settings, then its body. Once per context. ----
  // `begin(config, code, mayStrip)`: with `mayStrip`, a body that does not parse begins
  // nothing and gives "unparsed" (the host strips its TypeScript types and calls again).
  let promise; // the script's, which settle reads
  let begun = false;
  return { __proto__: null, begin, rejection, here };
  function begin(config, code, mayStrip) {
    if (begun) throw new NativeError("a context runs one script");
    let main, problem, broken = false;
    try {
      main = compile(code, mayStrip === true);
      if (main === undefined) return "unparsed";
    } catch (e) {
      broken = true;
      problem = e;
    }
    begun = true;
    MAX_DEPTH = config.max_depth;
    scriptCode = code;
    scriptLineCount = -1;
    toolArray = config.tools;
    for (let i = 0; i < toolArray.length; i++) toolNames.add(toolArray[i]);
    NOW = config.now_ms;
    a = config.seed_lo >>> 0; b = config.seed_hi >>> 0; c = 0x9e3779b9; d = 1;
    for (let i = 0; i < 12; i++) nextRandom();
    // The engine's own `performance` reads the machine's clock; replace it whole.
    const moment = { now: () => 0 }.now;
    globalThis.performance = freeze({ now: native(moment), timeOrigin: NOW });
    PRINTED_BOUND = config.printed_bound / 2;
    VALUE_HALF = config.value_bound >> 1;
    if (broken) {
      ending(failed)(problem);
      return settle;
    }
    try {
      promise = main();
    } catch (e) { // an async function does not throw; this is only for safety
      ending(failed)(e);
      return settle;
    }
    apply(promiseThen, promise, [ending(finished), ending(failed)]);
    return settle;
  };
})
