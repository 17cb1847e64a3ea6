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
// value namespaces (`namespace N { ... }`, refused before Sucrase, which would drop them
// silently), decorators, `import`/`export` of values (a script has no modules), JSX.
import { transform } from "sucrase";

const OPTIONS = Object.freeze({
  transforms: ["typescript"],
  disableESTransforms: true, // keep the script's JavaScript as the model wrote it
  keepUnusedImports: true,
});

// A value namespace at the start of a line: not JavaScript, and not in the subset.
const NAMESPACE = /^[ \t]*(?:export[ \t]+)?(namespace|module)[ \t]+[A-Za-z_$][\w$.]*[ \t]*\{/m;

// The answer is JSON text: {"code"} or {"error", "line"}; strings only cross to Python.
globalThis.__cm_typescript = function strip(code) {
  const namespace = NAMESPACE.exec(code);
  if (namespace) {
    const line = code.slice(0, namespace.index).split("\n").length;
    return JSON.stringify({
      error: "TypeScript " + namespace[1] + " declarations are not supported in a script; " +
        "use an object (const N = { ... }) instead",
      line,
    });
  }
  try {
    return JSON.stringify({ code: transform(code, OPTIONS).code });
  } catch (e) {
    // Out of stack or memory (QuickJS throws null when it cannot even make the error).
    if (e === null || e instanceof RangeError || e instanceof InternalError) throw e;
    const loc = e && e.loc;
    return JSON.stringify({
      error: String(e && e.message !== undefined ? e.message : e),
      line: loc && typeof loc.line === "number" ? loc.line : 0,
    });
  }
};
