// Intl and the built-ins that format, compare or change case for a locale (sandbox/intl.js),
// and URL (sandbox/url.js), installed as the engine's built-ins are: each method on its
// prototype, with its name and length, calls the file's.
// Evaluated with the boot, before the prelude and before any script, in every mode (a fork
// server's context before it forks, so that no child pays for it; a context of a run's own at
// the run's start). The files' own set-up takes built-ins (Object.keys, WeakMap,
// Reflect.apply, ...), which are then the engine's own: compiled at a script's first use, as
// they once were, they took what the script had put in their place, and a script answered
// otherwise in an exec'd process than in a pool's child.
//
// `source(name)` gives a file's text ("intl", "url"); `line` the line its frames are to
// start at, past the script's last, so that no error in it is read as the script's (QuickJS
// names every evaluated text's frames <input>:line); `web` is what web.js hands out: url.js
// takes web.url (its URLSearchParams, and text helpers), intl.js web.intl (lists and text
// helpers). Returns the kind of Intl object a value is
// (intl.js's brandOf), for the prelude's console.log.
(function (source, line, web) {
  "use strict";
  const { defineProperty } = Object;
  const { apply } = Reflect;
  const NativeTypeError = TypeError;
  const indirectEval = eval;
  const { repeat } = String.prototype;
  const compile = (name) => indirectEval(apply(repeat, "\n", [line]) + source(name));
  const intl = compile("intl")(web.intl);
  const data = (value) => ({ __proto__: null, value, writable: true, configurable: true });
  defineProperty(globalThis, "Intl", data(intl.Intl));
  defineProperty(globalThis, "URL", data(compile("url")(web.url)));
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
    const f = { [name](...args) { return apply(intl.methods[key], this, args); } }[name];
    defineProperty(f, "length", { __proto__: null, value: length });
    defineProperty(proto, name, data(f));
  }
  // Case mapping is the language's own for English; another locale (Turkish's dotted i) is
  // refused, as for formatting, not mapped as English.
  const { toUpperCase, toLowerCase } = String.prototype;
  for (const [name, native] of [["toLocaleUpperCase", toUpperCase], ["toLocaleLowerCase", toLowerCase]]) {
    const f = {
      [name](locales) {
        if (this === undefined || this === null) throw new NativeTypeError("String.prototype." + name + " called on null or undefined");
        if (locales !== undefined) intl.methods.locale(locales, "String.prototype." + name);
        return apply(native, this, []);
      },
    }[name];
    defineProperty(f, "length", { __proto__: null, value: 0 });
    defineProperty(String.prototype, name, data(f));
  }
  return intl.brandOf;
})
