// TypeScript's types, removed from a script inside the confined process.
//
// The Makefile bundles this file with Sucrase (npm `sucrase`, MIT) into
// typescript.bundle.js; sandbox/typescript.py compiles that bundle once per fork server, so a
// script pays only the transform (about 1 ms for a short script). Sucrase removes types in
// place and never moves a line, so an error in the stripped script names the model's line.
//
// The subset: annotations, `as` and `<T>x` casts, `satisfies`, non-null `!`, interfaces, type
// aliases, `declare`, generics in calls and definitions, `enum` and `const enum`, access
// modifiers and parameter properties, `abstract`, `implements`, type-only imports. Left out:
// value namespaces (`namespace N { ... }`, which Sucrase drops silently: refused once it has;
// one of types alone is removed, as TypeScript does),
// decorators, `import`/`export` of values (a script has no modules), JSX (refused, saying so).
import { transform } from "sucrase";

const OPTIONS = Object.freeze({
  transforms: ["typescript"],
  disableESTransforms: true, // keep the script's JavaScript as the model wrote it
  keepUnusedImports: true,
});

// Something shaped like a namespace (`namespace N {`, `module N {`), wherever it is: Sucrase
// parses a namespace as a type and removes it, value namespaces too, in any place (after a
// `;`, in a block). What has this shape in the script but not in Sucrase's output (which
// keeps strings, comments and every line) was such a declaration, unless it is in an ambient
// block (`declare namespace`, `declare module "m"`, `declare global`), which is only types.
const NAMESPACE = /(?<![\w$.])(namespace|module)[ \t\r\n]+([A-Za-z_$][\w$.]*)[ \t\r\n]*\{/g;
const AMBIENT =
  /(?<![\w$.])declare[ \t\r\n]+(?:global|(?:namespace|module)[ \t\r\n]*(?:[A-Za-z_$][\w$.]*|"[^"\n]*"|'[^'\n]*'))[ \t\r\n]*\{/g;

// The index just past the `}` that closes the `{` at `open` (strings and comments skipped).
function blockEnd(code, open) {
  let depth = 0;
  for (let i = open; i < code.length; i++) {
    const c = code[i];
    if (c === "{") depth += 1;
    else if (c === "}" && --depth === 0) return i + 1;
    else if (c === '"' || c === "'" || c === "`") {
      for (i++; i < code.length && code[i] !== c; i++) if (code[i] === "\\") i++;
    } else if (c === "/" && code[i + 1] === "/") {
      while (i < code.length && code[i] !== "\n") i++;
    } else if (c === "/" && code[i + 1] === "*") {
      const close = code.indexOf("*/", i + 2);
      i = close < 0 ? code.length : close + 1;
    }
  }
  return code.length;
}

// What ends a line of a script, as sandbox/replay.py's source_lines counts lines (the
// engine shows line n of that count): Sucrase's own positions count line feeds only, so in a
// script whose lines end with a lone CR every error was on line 1.
const LINE_BREAK = /\r\n|[\r\n\u2028\u2029]/g;

// The line and column (from 1) of `index` in `code`.
function position(code, index) {
  const before = code.slice(0, index);
  const breaks = Array.from(before.matchAll(LINE_BREAK));
  const last = breaks.length ? breaks[breaks.length - 1] : null;
  const start = last ? last.index + last[0].length : 0;
  return { line: breaks.length + 1, column: index - start + 1 };
}

// Whether the body of the namespace whose `{` is at `open` declares only types (interfaces,
// type aliases, `declare`, namespaces of types): TypeScript emits nothing for one, so
// removing it loses nothing, and `namespace Api { export interface Pr { ... } }` read as
// `Api.Pr` is a model's common way to group types. A namespace nested in it is matched and
// judged on its own. What Sucrase keeps of the body, past blanks, `;` and comments, is a value.
function onlyTypes(code, open) {
  let out;
  try {
    out = transform(code.slice(open + 1, blockEnd(code, open) - 1), OPTIONS).code;
  } catch (e) {
    if (e === null || e instanceof RangeError || e instanceof InternalError) throw e;
    return false;
  }
  for (let i = 0; i < out.length; i++) {
    const c = out[i];
    if (c === "/" && out[i + 1] === "/") {
      while (i < out.length && out[i] !== "\n") i++;
    } else if (c === "/" && out[i + 1] === "*") {
      const close = out.indexOf("*/", i + 2);
      if (close < 0) return false;
      i = close + 1;
    } else if (c !== ";" && !/\s/.test(c)) {
      return false;
    }
  }
  return true;
}

// The first value namespace Sucrase removed from `code` (giving `out`), or null.
function removedNamespace(code, out) {
  const ambient = Array.from(code.matchAll(AMBIENT), (m) => [
    m.index,
    blockEnd(code, m.index + m[0].length - 1),
  ]);
  const kept = Array.from(out.matchAll(NAMESPACE), (m) => m[1] + " " + m[2]);
  let next = 0;
  for (const m of code.matchAll(NAMESPACE)) {
    if (ambient.some(([start, end]) => start <= m.index && m.index < end)) continue;
    if (next < kept.length && kept[next] === m[1] + " " + m[2]) next += 1;
    else if (!onlyTypes(code, m.index + m[0].length - 1)) return m;
  }
  return null;
}

// A script that is not TypeScript but parses as TSX has JSX in it (TSX only adds JSX, and
// takes `<T>x` casts away): Sucrase's own error for it named a regular expression or a
// token ("Unterminated regular expression", 'expected ">"'). Every element ends with `</`
// or `/>`, so a script without either pays no second parse. The line is the first
// element's, found as the first call of a pragma no script writes (lines are kept).
const JSX_PRAGMA = "__cm_jsx";
const JSX_OPTIONS = Object.freeze({
  ...OPTIONS,
  transforms: ["typescript", "jsx"],
  production: true,
  jsxPragma: JSX_PRAGMA,
  jsxFragmentPragma: JSX_PRAGMA,
});
function jsxLine(code) {
  if (!code.includes("</") && !code.includes("/>")) return 0;
  let out;
  try {
    out = transform(code, JSX_OPTIONS).code;
  } catch (e) {
    if (e === null || e instanceof RangeError || e instanceof InternalError) throw e;
    return 0;
  }
  const at = out.indexOf(JSX_PRAGMA + "(");
  return at < 0 ? 0 : position(out, at).line;
}

// The answer is JSON text: {"code"} or {"error", "line"}; strings only cross to Python.
globalThis.__cm_typescript = function strip(code) {
  try {
    const out = transform(code, OPTIONS).code;
    const namespace = removedNamespace(code, out);
    if (namespace) {
      return JSON.stringify({
        error: "TypeScript " + namespace[1] + " declarations are not supported in a script; " +
          "use an object (const N = { ... }) instead",
        line: position(code, namespace.index).line,
      });
    }
    return JSON.stringify({ code: out });
  } catch (e) {
    // Out of stack or memory (QuickJS throws null when it cannot even make the error).
    if (e === null || e instanceof RangeError || e instanceof InternalError) throw e;
    let message = String(e && e.message !== undefined ? e.message : e);
    const jsx = jsxLine(code);
    if (jsx) {
      return JSON.stringify({
        error: "JSX is not supported in a script: build markup as text with a template " +
          "string (`<li>${name}</li>`), or return the data itself",
        line: jsx,
      });
    }
    if (e && typeof e.pos === "number") {
      // Sucrase ends its message with where it stopped, as it counts lines: said again here.
      const at = position(code, e.pos);
      message = message.replace(/ \(\d+:\d+\)$/, "") + " (" + at.line + ":" + at.column + ")";
      return JSON.stringify({ error: message, line: at.line });
    }
    return JSON.stringify({ error: message, line: 0 });
  }
};
