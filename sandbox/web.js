// The web globals a script reaches for, as browsers and Node.js have them: crypto
// (randomUUID, getRandomValues), structuredClone, TextEncoder, TextDecoder and URLSearchParams.
//
// Evaluated once per context, before the prelude and before any text of the script exists (in
// a fork server, before it forks): what it makes costs a run nothing, and the built-ins it
// takes are the engine's own. What it needs of a run (the seeded generator Math.random uses,
// so that crypto's values repeat on every run of the script, and the prelude's value
// formatter) the prelude hands it with the function this returns. Like the engine's own
// built-ins, these run with the script's rights only: a script that changes a prototype they
// use changes them for itself alone.
(function () {
  "use strict";
  const { apply, construct, getOwnPropertyDescriptor } = Reflect;
  const { defineProperty, freeze, getPrototypeOf, keys: objectKeys } = Object;
  const isArray = Array.isArray, arrayFrom = Array.from, ObjectProto = Object.prototype;
  const NativeArray = Array, NativeObject = Object, NativeParseInt = parseInt;
  const NativeError = Error, NativeTypeError = TypeError, NativeRangeError = RangeError;
  const NativeMap = Map, NativeSet = Set, NativePromise = Promise, NativeWeakMap = WeakMap;
  const RealDate = Date, dateGetTime = Date.prototype.getTime;
  const toStringTagKey = Symbol.toStringTag, iteratorKey = Symbol.iterator;
  const { toWellFormed } = String.prototype;
  const stringify = JSON.stringify;
  let run = { nextRandom: () => 0, text: (v) => "" + v };
  // Lists of the engine's own, which sandbox/prelude.js takes too (`own`): of no prototype (no
  // push, iterator or index setter a script puts on Array.prototype reaches them), added to
  // and read by index only. A script that replaced Array.prototype[Symbol.iterator] had
  // structuredClone({ a: [1] }) give {"evil":undefined}, and one that replaced push had
  // TextEncoder encode nothing.
  const setPrototypeOf = Object.setPrototypeOf;
  const listOf = () => setPrototypeOf([], null);
  const put = (list, item) => { list[list.length] = item; };
  function joined(list, separator) {
    let out = "";
    for (let i = 0; i < list.length; i++) out += (i ? separator : "") + list[i];
    return out;
  }
  function holds(list, item) {
    for (let i = 0; i < list.length; i++) if (list[i] === item) return true;
    return false;
  }
  // A value set as the key's own, as a native built-in sets it: assigned, a key "__proto__"
  // set the copy's prototype, and a setter the script put on Object.prototype or
  // Array.prototype took the value.
  const own = (target, key, value) => {
    defineProperty(target, key, { __proto__: null, value, writable: true, enumerable: true, configurable: true });
  };
  const ownPut = (array, item) => own(array, array.length, item);
  const { slice: stringSlice, indexOf: stringIndexOf, trim: stringTrim,
    toLowerCase: stringToLowerCase } = String.prototype;
  const { sort: arraySort } = Array.prototype;
  const typedLength = getOwnPropertyDescriptor(getPrototypeOf(Uint8Array.prototype), "length").get;
  const { set: typedSet, subarray: typedSubarray } = getPrototypeOf(Uint8Array.prototype);
  const isPrototypeOf = Object.prototype.isPrototypeOf;
  const isA = (v, Kind) => apply(isPrototypeOf, Kind.prototype, [v]);
  function timeOf(v) { // a Date's time value, or undefined for anything else (runs no script code)
    try { return apply(dateGetTime, v, []); } catch (_) { return undefined; }
  }

  const NativeUint8Array = Uint8Array;
  const isView = ArrayBuffer.isView;
  const { fromCharCode, fromCodePoint } = String;
  const { charCodeAt, codePointAt } = String.prototype;
  // The characters of `s` by code point, as a list of the engine's own (a spread or for...of
  // takes the script's String.prototype[Symbol.iterator]); url.js and intl.js take it. Its
  // methods are called through Function.prototype.call bound to each: no list of arguments is
  // made per character, as Reflect.apply needs.
  const uncurry = apply(Function.prototype.bind, Function.prototype.bind, [Function.prototype.call]);
  const codePointOf = uncurry(codePointAt), sliceOf = uncurry(stringSlice);
  function chars(s) {
    const out = listOf();
    for (let i = 0; i < s.length;) {
      const n = codePointOf(s, i) > 0xffff ? 2 : 1;
      put(out, sliceOf(s, i, i + n));
      i += n;
    }
    return out;
  }
  // ToPrimitive (hint "string", "number" or "default"), by the engine's own: the prelude's
  // Date and errors and intl.js's format take it. The two methods are named here, not read
  // from a list with for...of (which took the script's Array.prototype[Symbol.iterator]: new
  // Date(value) said "cannot convert object to primitive value" of a value with both).
  const isObject = (v) => (typeof v === "object" && v !== null) || typeof v === "function";
  const toPrimitiveKey = Symbol.toPrimitive;
  const invoke = uncurry(Function.prototype.call); // invoke(f, self, ...args): f's call, as taken here
  function toPrimitive(v, hint) {
    if (!isObject(v)) return v;
    const exotic = v[toPrimitiveKey];
    if (exotic !== undefined && exotic !== null) {
      if (typeof exotic !== "function") throw new NativeTypeError("Symbol.toPrimitive is not a function");
      const p = invoke(exotic, v, hint);
      if (isObject(p)) throw new NativeTypeError("cannot convert object to primitive value");
      return p;
    }
    const text = hint === "string";
    let method = v[text ? "toString" : "valueOf"];
    if (typeof method === "function") {
      const p = invoke(method, v);
      if (!isObject(p)) return p;
    }
    method = v[text ? "valueOf" : "toString"];
    if (typeof method === "function") {
      const p = invoke(method, v);
      if (!isObject(p)) return p;
    }
    throw new NativeTypeError("cannot convert object to primitive value");
  }
  // A byte's two hex digits (Number.prototype.toString is the script's).
  const hex = (n) => "0123456789abcdef"[n >> 4] + "0123456789abcdef"[n & 15];
  const HEX = (n) => "0123456789ABCDEF"[n >> 4] + "0123456789ABCDEF"[n & 15];
  // An error of the kind a browser's DOMException gives (its `name` says which).
  function domError(name, message) {
    const e = new NativeError(message);
    defineProperty(e, "name", { __proto__: null, value: name, writable: true, configurable: true });
    return e;
  }
  const INTEGER_ARRAYS = ["Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array", "Uint16Array",
    "Int32Array", "Uint32Array", "BigInt64Array", "BigUint64Array"];
  const DataViewProto = DataView.prototype;
  const typedArrayTag = getOwnPropertyDescriptor(getPrototypeOf(NativeUint8Array.prototype), toStringTagKey).get;
  const viewParts = (view) => { // the buffer, offset, length and tag of a typed array or DataView
    const tag = apply(typedArrayTag, view, []);
    const proto = tag === undefined ? DataViewProto : getPrototypeOf(NativeUint8Array.prototype);
    const part = (key) => apply(getOwnPropertyDescriptor(proto, key).get, view, []);
    return { __proto__: null, buffer: part("buffer"), offset: part("byteOffset"), length: part("byteLength"), tag };
  };
  const crypto = freeze({
    randomUUID() {
      let s = "";
      for (let i = 0; i < 16; i++) {
        let b = (run.nextRandom() * 256) | 0;
        if (i === 6) b = (b & 0x0f) | 0x40; // version 4
        if (i === 8) b = (b & 0x3f) | 0x80; // the RFC 4122 variant
        s += (i === 4 || i === 6 || i === 8 || i === 10 ? "-" : "") + hex(b);
      }
      return s;
    },
    getRandomValues(array) {
      if (!isView(array) || !holds(INTEGER_ARRAYS, apply(typedArrayTag, array, []))) {
        throw domError("TypeMismatchError", "getRandomValues takes an integer typed array (a Uint8Array, say)");
      }
      const { buffer, offset, length } = viewParts(array);
      if (length > 65536) {
        throw domError("QuotaExceededError", "getRandomValues fills at most 65536 bytes at a time, not " + length);
      }
      const bytes = new NativeUint8Array(buffer, offset, length);
      for (let i = 0; i < length; i++) bytes[i] = (run.nextRandom() * 256) | 0;
      return array;
    },
  });

  // structuredClone, as the HTML spec's: data and the built-in kinds of it (Date, RegExp, Map,
  // Set, ArrayBuffer, typed arrays, errors, boxed primitives), cycles and shared parts kept;
  // a class instance becomes a plain object; functions, symbols, promises and the like are
  // refused (DataCloneError).
  const mapSize = getOwnPropertyDescriptor(Map.prototype, "size").get;
  const setSize = getOwnPropertyDescriptor(Set.prototype, "size").get;
  const bufferLength = getOwnPropertyDescriptor(ArrayBuffer.prototype, "byteLength").get;
  const regexpSource = getOwnPropertyDescriptor(RegExp.prototype, "source").get;
  const regexpFlags = getOwnPropertyDescriptor(RegExp.prototype, "flags").get;
  const { forEach: mapForEach } = Map.prototype;
  const { forEach: setForEach } = Set.prototype;
  const { slice: bufferSlice } = ArrayBuffer.prototype;
  const { get: nativeMapGet, set: nativeMapSet, has: nativeMapHas } = Map.prototype;
  const { add: nativeSetAdd } = Set.prototype;
  const NativeRegExp = RegExp, NativeWeakSet = WeakSet, NativeDataView = DataView;
  const TYPED_ARRAYS = { __proto__: null, Float32Array: Float32Array, Float64Array: Float64Array };
  for (const name of INTEGER_ARRAYS) TYPED_ARRAYS[name] = globalThis[name];
  const branded = (getter, v) => { try { apply(getter, v, []); return true; } catch (_) { return false; } };
  // A boxed primitive's kinds' own valueOf, each of which throws for any other object and
  // runs no script code: `unboxed(v, none)` is the primitive `v` holds, or `none` for an
  // object that boxes none. The prelude's console printing takes it too.
  const boxKinds = listOf(); // the real ones, not what a script later names so
  const boxed = listOf();
  for (const Box of [Boolean, Number, String, BigInt, Symbol]) {
    put(boxKinds, Box);
    put(boxed, Box.prototype.valueOf);
  }
  function unboxed(v, none) {
    for (let i = 0; i < boxed.length; i++) {
      try { return apply(boxed[i], v, []); } catch (_) { /* not of this kind */ }
    }
    return none;
  }
  const ERRORS = { __proto__: null };
  for (const name of ["Error", "EvalError", "RangeError", "ReferenceError", "SyntaxError", "TypeError", "URIError"]) ERRORS[name] = globalThis[name];
  function uncloneable(v) {
    let shown;
    try { shown = typeof v === "function" ? "function " + (v.name || "") + "() {}" : run.text(v); } catch (_) { shown = "value"; }
    return domError("DataCloneError", shown + " could not be cloned.");
  }
  function structuredClone(value) {
    if (arguments.length === 0) throw new NativeTypeError("structuredClone requires a value to clone");
    const memory = new NativeMap();
    const remember = (from, to) => { apply(nativeMapSet, memory, [from, to]); return to; };
    function clone(v) {
      if (typeof v === "symbol" || typeof v === "function") throw uncloneable(v);
      if (typeof v !== "object" || v === null) return v;
      if (apply(nativeMapHas, memory, [v])) return apply(nativeMapGet, memory, [v]);
      if (isArray(v)) {
        const out = remember(v, new NativeArray(v.length));
        const ks = objectKeys(v);
        for (let i = 0; i < ks.length; i++) own(out, ks[i], clone(v[ks[i]]));
        return out;
      }
      // Most of what a script clones is plain objects: the checks below each throw for one,
      // and a thrown error costs more than the whole copy (100,000 objects, each with an
      // array: 4.6 s before, 1.1 s). A built-in whose prototype a script set to
      // Object.prototype is copied as a plain object.
      const proto = getPrototypeOf(v);
      if (proto === ObjectProto || proto === null) return plain(v);
      const time = timeOf(v);
      if (time !== undefined) return remember(v, new RealDate(time));
      if (branded(regexpSource, v) && v !== NativeRegExp.prototype) {
        return remember(v, new NativeRegExp(apply(regexpSource, v, []), apply(regexpFlags, v, [])));
      }
      if (branded(mapSize, v)) {
        const out = remember(v, new NativeMap());
        const keys = listOf(), values = listOf();
        apply(mapForEach, v, [(x, k) => { put(keys, k); put(values, x); }]);
        for (let i = 0; i < keys.length; i++) apply(nativeMapSet, out, [clone(keys[i]), clone(values[i])]);
        return out;
      }
      if (branded(setSize, v)) {
        const out = remember(v, new NativeSet());
        const items = listOf();
        apply(setForEach, v, [(x) => { put(items, x); }]);
        for (let i = 0; i < items.length; i++) apply(nativeSetAdd, out, [clone(items[i])]);
        return out;
      }
      if (branded(bufferLength, v)) return remember(v, apply(bufferSlice, v, [0]));
      if (isView(v)) {
        const { buffer, offset, length, tag } = viewParts(v);
        const copy = clone(buffer);
        if (tag === undefined) return remember(v, new NativeDataView(copy, offset, length));
        const Kind = TYPED_ARRAYS[tag];
        return remember(v, construct(Kind, [copy, offset, length / Kind.BYTES_PER_ELEMENT]));
      }
      const inner = unboxed(v, unboxed);
      if (inner !== unboxed) {
        if (typeof inner === "symbol") throw uncloneable(v); // as a symbol is
        return remember(v, NativeObject(inner));
      }
      if (isA(v, NativePromise) || isA(v, NativeWeakMap) || isA(v, NativeWeakSet)) {
        throw uncloneable(v);
      }
      if (isA(v, NativeError)) {
        const name = "" + v.name;
        const Kind = ERRORS[name] || NativeError;
        const out = remember(v, new Kind(v.message === undefined ? "" : "" + v.message));
        if (name !== out.name) defineProperty(out, "name", { __proto__: null, value: name, writable: true, configurable: true });
        if (v.cause !== undefined) defineProperty(out, "cause", { __proto__: null, value: clone(v.cause), writable: true, configurable: true });
        return out;
      }
      return plain(v);
    }
    function plain(v) {
      const out = remember(v, {});
      const ks = objectKeys(v);
      for (let i = 0; i < ks.length; i++) own(out, ks[i], clone(v[ks[i]]));
      return out;
    }
    try {
      return clone(value);
    } catch (e) {
      // The stack ran out deep in the copy, more frames deep than a stack keeps: made again
      // here, the error names the script's line that cloned (it named none).
      if (!(e instanceof NativeRangeError) || e.message !== OVERFLOW) throw e;
      throw new NativeRangeError(OVERFLOW + ": structuredClone of a value nested too deeply; flatten it");
    }
  }
  const OVERFLOW = "Maximum call stack size exceeded";

  // TextEncoder and TextDecoder: UTF-8, as every browser's.
  // The engine's own encoder and decoder, which its other parts call (a script's
  // TextEncoder.prototype.encode, or TextDecoder's decode, is not theirs).
  function utf8(input) {
      const s = apply(toWellFormed, "" + input, []);
      const out = listOf();
      for (let i = 0; i < s.length; i++) {
        const c = apply(codePointAt, s, [i]);
        if (c > 0xffff) i++;
        if (c < 0x80) put(out, c);
        else if (c < 0x800) { put(out, 0xc0 | (c >> 6)); put(out, 0x80 | (c & 63)); }
        else if (c < 0x10000) { put(out, 0xe0 | (c >> 12)); put(out, 0x80 | ((c >> 6) & 63)); put(out, 0x80 | (c & 63)); }
        else {
          put(out, 0xf0 | (c >> 18)); put(out, 0x80 | ((c >> 12) & 63));
          put(out, 0x80 | ((c >> 6) & 63)); put(out, 0x80 | (c & 63));
        }
      }
      return new NativeUint8Array(out); // of no prototype, so read by index, not iterated
  }
  class TextEncoder {
    get encoding() { return "utf-8"; }
    encode(input = "") { return utf8(input); }
    encodeInto(input, destination) {
      const bytes = utf8(input);
      const { buffer, offset, length, tag } = isView(destination) ? viewParts(destination) : { __proto__: null };
      if (tag !== "Uint8Array") throw new NativeTypeError("encodeInto writes into a Uint8Array");
      // Whole characters only: stop before one that does not fit.
      let written = 0, read = 0;
      const s = apply(toWellFormed, "" + input, []);
      for (let i = 0; i < s.length; i++) {
        const c = apply(codePointAt, s, [i]);
        const size = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
        if (written + size > length) break;
        written += size;
        read += c > 0xffff ? 2 : 1;
        if (c > 0xffff) i++;
      }
      apply(typedSet, new NativeUint8Array(buffer, offset, length), [apply(typedSubarray, bytes, [0, written])]);
      return { read, written };
    }
  }
  class TextDecoder {
    #fatal; #ignoreBOM;
    constructor(label = "utf-8", options = {}) {
      const name = apply(stringToLowerCase, apply(stringTrim, "" + label, []), []);
      if (name !== "utf-8" && name !== "utf8" && name !== "unicode-1-1-utf-8") {
        throw new NativeRangeError("TextDecoder decodes UTF-8 only in a script, not " + stringify("" + label));
      }
      this.#fatal = !!(options && options.fatal);
      this.#ignoreBOM = !!(options && options.ignoreBOM);
    }
    get encoding() { return "utf-8"; }
    get fatal() { return this.#fatal; }
    get ignoreBOM() { return this.#ignoreBOM; }
    decode(input = new NativeUint8Array(0)) { return decodeUtf8(input, this.#fatal, this.#ignoreBOM); }
  }
  function decodeUtf8(input, fatal, ignoreBOM) {
      let bytes;
      if (branded(bufferLength, input)) bytes = new NativeUint8Array(input);
      else if (isView(input)) { const { buffer, offset, length } = viewParts(input); bytes = new NativeUint8Array(buffer, offset, length); }
      else throw new NativeTypeError("decode takes an ArrayBuffer, a typed array or a DataView");
      let out = "", i = 0;
      const n = apply(typedLength, bytes, []);
      if (!ignoreBOM && n >= 3 && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) i = 3;
      const bad = () => {
        if (fatal) throw new NativeTypeError("The encoded data was not valid UTF-8");
        out += "\uFFFD";
      };
      while (i < n) {
        const b = bytes[i];
        if (b < 0x80) { out += fromCharCode(b); i++; continue; }
        // The WHATWG decoder: a bad sequence is one U+FFFD for its longest valid prefix.
        let need, c, lower = 0x80, upper = 0xbf;
        if (b >= 0xc2 && b <= 0xdf) { need = 1; c = b & 0x1f; }
        else if (b >= 0xe0 && b <= 0xef) { need = 2; c = b & 0xf; if (b === 0xe0) lower = 0xa0; if (b === 0xed) upper = 0x9f; }
        else if (b >= 0xf0 && b <= 0xf4) { need = 3; c = b & 0x7; if (b === 0xf0) lower = 0x90; if (b === 0xf4) upper = 0x8f; }
        else { bad(); i++; continue; }
        let j = i + 1, ok = true;
        for (let k = 0; k < need; k++, j++) {
          const x = j < n ? bytes[j] : -1;
          if (x < lower || x > upper) { ok = false; break; }
          lower = 0x80; upper = 0xbf;
          c = (c << 6) | (x & 0x3f);
        }
        if (!ok) { bad(); i = j; continue; }
        out += fromCodePoint(c);
        i = j;
      }
      return out;
  }
  // URLSearchParams: a query string (application/x-www-form-urlencoded), as the URL spec's.
  const usv = (x) => apply(toWellFormed, "" + x, []);
  function formEncode(text) {
    const bytes = utf8(text);
    let out = "";
    for (let i = 0, n = apply(typedLength, bytes, []); i < n; i++) {
      const b = bytes[i];
      if (b === 0x20) out += "+";
      else if ((b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a) ||
               b === 0x2a || b === 0x2d || b === 0x2e || b === 0x5f) out += fromCharCode(b);
      else out += "%" + HEX(b);
    }
    return out;
  }
  const isHex = (c) => (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
  function formDecode(text) {
    const bytes = listOf();
    for (let i = 0; i < text.length; i++) {
      const c = apply(charCodeAt, text, [i]);
      if (c === 0x2b) put(bytes, 0x20);
      else if (c === 0x25 && i + 2 < text.length + 0 && isHex(apply(charCodeAt, text, [i + 1])) &&
               isHex(apply(charCodeAt, text, [i + 2]))) {
        put(bytes, NativeParseInt(text[i + 1] + text[i + 2], 16));
        i += 2;
      } else if (c < 0x80) put(bytes, c);
      else {
        const point = apply(codePointAt, text, [i]);
        const encoded = utf8(fromCodePoint(point));
        for (let k = 0, n = apply(typedLength, encoded, []); k < n; k++) put(bytes, encoded[k]);
        if (point > 0xffff) i++;
      }
    }
    return decodeUtf8(new NativeUint8Array(bytes), false, true);
  }
  function parseQuery(query) { // application/x-www-form-urlencoded: [name, value] pairs
    const list = listOf();
    for (let start = 0; start <= query.length;) {
      let end = apply(stringIndexOf, query, ["&", start]);
      if (end < 0) end = query.length;
      const part = apply(stringSlice, query, [start, end]);
      start = end + 1;
      if (part === "") continue;
      const eq = apply(stringIndexOf, part, ["="]);
      put(list, eq < 0 ? [formDecode(part), ""]
        : [formDecode(apply(stringSlice, part, [0, eq])), formDecode(apply(stringSlice, part, [eq + 1]))]);
    }
    return list;
  }
  // A URL's searchParams (sandbox/url.js): made with the URL's query, and the URL told of
  // every change, as the URL Standard links them.
  let linkParams, replaceParams, pairsOf, iterated;
  // What entries, keys, values and [Symbol.iterator] give, as Node.js has it: an object of
  // one prototype, "URLSearchParams Iterator" (inheriting %IteratorPrototype%), whose next
  // reads the params' list as it is then, by index. It is a generator (QuickJS resumes one
  // twice as fast as it calls a next of ours) of that prototype, whose next is
  // %GeneratorPrototype%.next as it was at boot: a script may replace that one, and
  // new URLSearchParams(params) and a script's for...of went through what it put there.
  const IteratorProto = getPrototypeOf(getPrototypeOf(apply(NativeArray.prototype[iteratorKey], [], [])));
  const ParamsIteratorProto = { __proto__: IteratorProto };
  defineProperty(ParamsIteratorProto, "next", { __proto__: null,
    value: getPrototypeOf(function* () {}).prototype.next, writable: true, enumerable: true, configurable: true });
  defineProperty(ParamsIteratorProto, toStringTagKey, { __proto__: null, value: "URLSearchParams Iterator", configurable: true });
  const { get: weakGet, set: weakSet } = NativeWeakMap.prototype;
  const walks = new NativeWeakMap(); // an iterator -> its { params, kind (0: pairs, 1: names, 2: values), index }
  let walk; // (in URLSearchParams, to read its list)
  const { bind, call } = Function.prototype;
  const remember = apply(bind, call, [weakSet]); // (walks, it, state): no list made per call
  function paramsIterator(params, kind) {
    const state = { __proto__: null, params, kind, index: 0 };
    const it = walk(state); // of ParamsIteratorProto, walk's prototype
    remember(walks, it, state);
    return it;
  }
  // What an iterator has yet to give (runs no script code), or undefined for any other value:
  // sandbox/prelude.js shows it (and keeps it from the script: a pair needs no copy).
  iterated = (v) => {
    const state = apply(weakGet, walks, [v]);
    if (state === undefined) return undefined;
    const list = pairsOf(state.params), kind = state.kind, out = listOf();
    for (let i = state.index; i < list.length; i++) put(out, kind === 0 ? list[i] : list[i][kind - 1]);
    return out;
  };
  class URLSearchParams {
    #list = listOf();
    #changed = undefined; // the URL's, for a URL's searchParams
    static {
      linkParams = (query, changed) => {
        const params = new URLSearchParams();
        params.#list = parseQuery(query);
        params.#changed = changed;
        return params;
      };
      replaceParams = (params, query) => { params.#list = parseQuery(query); };
      // Its [name, value] pairs, or undefined for any other value (runs no script code).
      pairsOf = (v) => (typeof v === "object" && v !== null && #list in v ? v.#list : undefined);
      walk = function* (state) {
        const params = state.params, kind = state.kind;
        for (;;) {
          const list = params.#list, i = state.index;
          if (i >= list.length) { // done for good, as a generator is: nothing left to show either
            state.index = Infinity;
            return;
          }
          state.index = i + 1;
          yield kind === 0 ? [list[i][0], list[i][1]] : list[i][kind - 1];
        }
      };
      defineProperty(walk, "prototype", { __proto__: null, value: ParamsIteratorProto });
    }
    #update() { if (this.#changed !== undefined) this.#changed(this.#serialize()); }
    #serialize() {
      let out = "";
      const list = this.#list;
      for (let i = 0; i < list.length; i++) out += (out ? "&" : "") + formEncode(list[i][0]) + "=" + formEncode(list[i][1]);
      return out;
    }
    constructor(init = "") {
      const method = typeof init === "object" && init !== null ? init[iteratorKey] : undefined;
      if (method !== undefined && method === this[iteratorKey] && #list in init) {
        // Another URLSearchParams, iterated as it would be: its pairs copied (Node.js's
        // shortcut), not through what a script can change of the iterator on the way.
        const list = init.#list;
        for (let i = 0; i < list.length; i++) put(this.#list, [list[i][0], list[i][1]]);
      } else if (typeof method === "function") {
        for (const pair of init) {
          const items = apply(arrayFrom, NativeArray, [pair]);
          if (items.length !== 2) throw new NativeTypeError("each pair of a URLSearchParams' init must be [name, value]");
          put(this.#list, [usv(items[0]), usv(items[1])]);
        }
      } else if ((typeof init === "object" && init !== null) || typeof init === "function") {
        const ks = objectKeys(init);
        for (let i = 0; i < ks.length; i++) put(this.#list, [usv(ks[i]), usv(init[ks[i]])]);
      } else {
        let query = usv(init);
        if (query[0] === "?") query = apply(stringSlice, query, [1]);
        this.#list = parseQuery(query);
      }
    }
    get size() { return this.#list.length; }
    append(name, value) {
      put(this.#list, [usv(name), usv(value)]);
      this.#update();
    }
    delete(name, value) {
      name = usv(name);
      const only = value === undefined ? undefined : usv(value);
      const kept = listOf(), list = this.#list;
      for (let i = 0; i < list.length; i++) {
        if (!(list[i][0] === name && (only === undefined || list[i][1] === only))) put(kept, list[i]);
      }
      this.#list = kept;
      this.#update();
    }
    get(name) {
      name = usv(name);
      const list = this.#list;
      for (let i = 0; i < list.length; i++) if (list[i][0] === name) return list[i][1];
      return null;
    }
    getAll(name) {
      name = usv(name);
      const out = [], list = this.#list;
      for (let i = 0; i < list.length; i++) if (list[i][0] === name) ownPut(out, list[i][1]);
      return out;
    }
    has(name, value) {
      name = usv(name);
      const only = value === undefined ? undefined : usv(value);
      const list = this.#list;
      for (let i = 0; i < list.length; i++) {
        if (list[i][0] === name && (only === undefined || list[i][1] === only)) return true;
      }
      return false;
    }
    set(name, value) {
      name = usv(name);
      value = usv(value);
      let found = false;
      const kept = listOf(), list = this.#list;
      for (let i = 0; i < list.length; i++) {
        if (list[i][0] !== name) put(kept, list[i]);
        else if (!found) { found = true; put(kept, [name, value]); }
      }
      if (!found) put(kept, [name, value]);
      this.#list = kept;
      this.#update();
    }
    sort() { // stable, by code units
      apply(arraySort, this.#list, [(x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0)]);
      this.#update();
    }
    toString() { return this.#serialize(); }
    forEach(callback, thisArg) {
      for (let i = 0; i < this.#list.length; i++) apply(callback, thisArg, [this.#list[i][1], this.#list[i][0], this]);
    }
    // (this.#list: a TypeError for another receiver)
    entries() { this.#list; return paramsIterator(this, 0); }
    keys() { this.#list; return paramsIterator(this, 1); }
    values() { this.#list; return paramsIterator(this, 2); }
    [iteratorKey]() { this.#list; return paramsIterator(this, 0); }
    get [toStringTagKey]() { return "URLSearchParams"; }
  }

  const made = { crypto, structuredClone, TextEncoder, TextDecoder, URLSearchParams };
  // As Node.js has them: writable, configurable, not enumerable.
  for (const name of objectKeys(made)) {
    defineProperty(globalThis, name, { __proto__: null, value: made[name], writable: true, configurable: true });
  }
  const setRun = (nextRandom, text) => { run = { nextRandom, text }; };
  // The engine's own lists, its instanceof, a typed array's length, ToPrimitive and a boxed
  // primitive's value, which sandbox/prelude.js uses too.
  setRun.own = freeze({ listOf, put, joined, holds, isA, typedLength, toPrimitive, unboxed, boxKinds });
  // What sandbox/url.js takes from here: its searchParams, and the text helpers it shares.
  setRun.url = freeze({ makeParams: linkParams, replaceParams, usv, isHex, utf8, decodeUtf8, HEX, listOf, put, typedLength, chars });
  // What sandbox/intl.js takes: the lists, a string's characters, an index set as an array's
  // own, and ToPrimitive.
  setRun.intl = freeze({ listOf, put, holds, joined, chars, ownPut, toPrimitive });
  // What sandbox/prelude.js takes: how a URLSearchParams shows, as a value and as no data;
  // the message of QuickJS's RangeError when the stack runs out.
  setRun.pairsOf = pairsOf;
  setRun.iterated = iterated;
  setRun.OVERFLOW = OVERFLOW;
  return setRun;
})()
