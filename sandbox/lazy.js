// Stand-ins for what a script has that is large to compile and seldom used: Intl and the
// built-ins that format, compare or change case for a locale (sandbox/intl.js), and URL
// (sandbox/url.js).
// The first use compiles the file, once per context; each stand-in then calls its real method.
// Evaluated with the boot, before the prelude; returns the function that compiles them all (a
// fork server calls it before it forks, so that no child pays for them).
//
// `source(name)` gives a file's text ("intl", "url"); `lineOf()` the line its frames are to
// start at, past the script's last, so that no error in it is read as the script's (QuickJS
// names every evaluated text's frames <input>:line); `web` is what url.js takes from web.js
// (its URLSearchParams, and text helpers).
(function (source, lineOf, web) {
  "use strict";
  const { defineProperty } = Object;
  const { apply } = Reflect;
  const indirectEval = eval;
  // Taken now: a script that replaced String.prototype.repeat before its first Intl or URL
  // had its own text compiled in front of the file's, and was handed what the file is given.
  const { repeat } = String.prototype;
  const made = { __proto__: null };
  const compile = (name) => indirectEval(apply(repeat, "\n", [lineOf()]) + source(name));
  const intl = () => (made.intl ??= compile("intl")());
  const url = () => (made.url ??= compile("url")(web));
  const data = (value) => ({ __proto__: null, value, writable: true, configurable: true });
  // A global that is made when first read (a script that assigns it keeps what it assigned).
  function lazyGlobal(name, make) {
    defineProperty(globalThis, name, { __proto__: null,
      configurable: true,
      get() {
        const value = make();
        try {
          defineProperty(globalThis, name, data(value));
        } catch (_) {
          // globalThis frozen by the script ("property is not configurable" failed its first
          // `new URL`): the stand-in stays, and each read gives the value made once.
        }
        return value;
      },
      set(value) { defineProperty(globalThis, name, data(value)); },
    });
  }
  lazyGlobal("Intl", () => intl().Intl);
  lazyGlobal("URL", url);
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
    const f = { [name](...args) { return apply(intl().methods[key], this, args); } }[name];
    defineProperty(f, "length", { __proto__: null, value: length });
    defineProperty(proto, name, data(f));
  }
  // Case mapping is the language's own for English; another locale (Turkish's dotted i) is
  // refused, as for formatting, not mapped as English.
  const { toUpperCase, toLowerCase } = String.prototype;
  for (const [name, native] of [["toLocaleUpperCase", toUpperCase], ["toLocaleLowerCase", toLowerCase]]) {
    const f = {
      [name](locales) {
        if (this === undefined || this === null) throw new TypeError(`String.prototype.${name} called on null or undefined`);
        if (locales !== undefined) intl().methods.locale(locales, "String.prototype." + name);
        return apply(native, this, []);
      },
    }[name];
    defineProperty(f, "length", { __proto__: null, value: 0 });
    defineProperty(String.prototype, name, data(f));
  }
  return () => { intl(); url(); };
})
