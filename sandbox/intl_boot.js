// Stand-ins for Intl and the built-ins that format or compare for a locale (sandbox/intl.js):
// the first use compiles intl.js, once per context, and each stand-in then calls its real
// method. Evaluated with the boot, before the prelude; returns the function that loads intl.js
// (a fork server calls it before it forks). `source()` gives intl.js's text; `lineOf()` the line its
// frames are to start at, past the script's last, so that no error in it is read as the
// script's (QuickJS names every evaluated text's frames <input>:line).
(function (source, lineOf) {
  "use strict";
  const { defineProperty } = Object;
  const { apply } = Reflect;
  const indirectEval = eval;
  let made;
  const load = () => (made ??= indirectEval("\n".repeat(lineOf()) + source())());
  const data = (value) => ({ value, writable: true, configurable: true });
  defineProperty(globalThis, "Intl", {
    configurable: true,
    get() {
      const value = load().Intl;
      defineProperty(globalThis, "Intl", data(value));
      return value;
    },
    set(value) { defineProperty(globalThis, "Intl", data(value)); },
  });
  const stands = [
    [Number.prototype, "toLocaleString", "number", 0],
    [BigInt.prototype, "toLocaleString", "bigint", 0],
    [Date.prototype, "toLocaleString", "date", 0],
    [Date.prototype, "toLocaleDateString", "dateOnly", 0],
    [Date.prototype, "toLocaleTimeString", "timeOnly", 0],
    [String.prototype, "localeCompare", "compare", 1],
    [Array.prototype, "toLocaleString", "array", 0],
  ];
  for (const [proto, name, key, length] of stands) {
    const f = { [name](...args) { return apply(load().methods[key], this, args); } }[name];
    defineProperty(f, "length", { value: length });
    defineProperty(proto, name, data(f));
  }
  return load;
})
