// Generates tests/sandbox/intl_cases.json: random Intl cases with what Node.js (full ICU) gives
// for them, which tests/sandbox/test_intl.py holds sandbox/intl.js to. Run from the repository:
//   node tests/sandbox/intl_cases.js > tests/sandbox/intl_cases.json
// The seed is fixed, so a run on the same Node.js and ICU writes the same file.
"use strict";
let seed = 20261203;
const rnd = () => { seed |= 0; seed = (seed + 0x6d2b79f5) | 0; let t = Math.imul(seed ^ (seed >>> 15), 1 | seed); t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t; return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
const pick = (a) => a[Math.floor(rnd() * a.length)];
const COUNT = 1200;

// ---- Intl.NumberFormat
const values = () => {
  const k = rnd();
  if (k < 0.05) return pick(["NaN", "Infinity", "-Infinity", "-0", "0"]);
  if (k < 0.1) return pick(["123n", "-98765432109876543210n", "0n"]);
  if (k < 0.15) return "s:" + pick(["12345678901234567890.123", "-0.000", "1.005", "  42 ", "1e3", ".5"]);
  const mag = Math.floor(rnd() * 30) - 12;
  let v = (rnd() * 10) * Math.pow(10, mag);
  if (rnd() < 0.3) v = Math.round(v * 1000) / 1000;
  if (rnd() < 0.2) v = Math.round(v);
  if (rnd() < 0.1) v = pick([0.5, 1.5, 2.5, 1.005, 0.125, 999.5, 999999, 999950, 9999.5, 1, 1234.5, 0.0005]);
  v = rnd() < 0.3 ? -v : v; return Object.is(v, -0) ? "-0" : v;
};
const option = () => {
  const o = {};
  const style = pick(["decimal", "decimal", "percent", "currency", undefined]);
  if (style) o.style = style;
  if (style === "currency") {
    o.currency = pick(["USD", "EUR", "JPY", "GBP", "CHF", "CAD", "KWD", "XYZ", "INR"]);
    if (rnd() < 0.4) o.currencyDisplay = pick(["code", "symbol", "narrowSymbol", "name"]);
    if (o.currencyDisplay === "name" && o.currency === "XYZ") delete o.currencyDisplay;
    if (o.currencyDisplay === "name" && o.currency === "KWD") delete o.currencyDisplay;
    if (o.currencyDisplay === "name" && o.currency === "INR") delete o.currencyDisplay;
    if (rnd() < 0.2) o.currencySign = "accounting";
  }
  if (rnd() < 0.3) o.notation = pick(["standard", "scientific", "engineering", "compact"]);
  if (o.notation === "compact" && rnd() < 0.5) o.compactDisplay = pick(["short", "long"]);
  const r = rnd();
  if (r < 0.2) o.maximumFractionDigits = Math.floor(rnd() * 5);
  else if (r < 0.35) o.minimumFractionDigits = Math.floor(rnd() * 4);
  else if (r < 0.45) { o.minimumFractionDigits = Math.floor(rnd() * 3); o.maximumFractionDigits = o.minimumFractionDigits + Math.floor(rnd() * 3); }
  else if (r < 0.55) o.maximumSignificantDigits = 1 + Math.floor(rnd() * 5);
  else if (r < 0.6) { o.minimumSignificantDigits = 1 + Math.floor(rnd() * 4); o.maximumSignificantDigits = o.minimumSignificantDigits + Math.floor(rnd() * 3); }
  if (rnd() < 0.1) o.minimumIntegerDigits = 1 + Math.floor(rnd() * 5);
  if (rnd() < 0.15) o.useGrouping = pick([false, true, "min2", "always", "auto"]);
  if (rnd() < 0.15) o.signDisplay = pick(["auto", "never", "always", "exceptZero", "negative"]);
  if (rnd() < 0.15) o.roundingMode = pick(["ceil", "floor", "expand", "trunc", "halfCeil", "halfFloor", "halfExpand", "halfTrunc", "halfEven"]);
  if (rnd() < 0.1 && (o.maximumSignificantDigits || o.maximumFractionDigits !== undefined)) o.roundingPriority = pick(["morePrecision", "lessPrecision"]);
  if (rnd() < 0.1) o.trailingZeroDisplay = "stripIfInteger";
  return o;
};
const decode = (v) => typeof v !== "string" ? v : v.endsWith("n") ? BigInt(v.slice(0, -1)) : v.startsWith("s:") ? v.slice(2) : v === "-0" ? -0 : Number(v);
const number = [];
for (let i = 0; i < COUNT; i++) {
  const v = values(), o = option();
  let expected;
  try { expected = new Intl.NumberFormat("en-US", o).format(decode(v)); } catch (e) { expected = "!" + e.name; }
  number.push([v, o, expected]);
}

// ---- Intl.Collator and localeCompare
const alpha = [..."aAbBcCeEéÉèêëzZoOöøÖsSßtTnNñ01239 -_.,'’!?()$€#@&/\t", "e\u0301", "ae", "æ", "Æ", "ł", "þ", "ı", "i", "I", "10", "007", "İ", "ü", "Ü", "ç", "ÿ", "œ", "ŋ", "x", "y"];
const str = () => { let s = ""; const n = Math.floor(rnd() * 6); for (let i = 0; i < n; i++) s += pick(alpha); return s; };
const collatorOption = () => { const o = {}; if (rnd() < 0.3) o.sensitivity = pick(["base", "accent", "case", "variant"]); if (rnd() < 0.3) o.numeric = true; if (rnd() < 0.15) o.ignorePunctuation = true; if (rnd() < 0.15) o.caseFirst = pick(["upper", "lower", "false"]); return o; };
const collator = [];
for (let i = 0; i < COUNT; i++) {
  let a = str(), b = rnd() < 0.3 ? a.toUpperCase() : str(); if (rnd() < 0.3) b = a.slice(0, -1) + pick(alpha);
  const o = collatorOption();
  collator.push([a, b, o, Math.sign(new Intl.Collator("en-US", o).compare(a, b))]);
}

// ---- Intl.DateTimeFormat and Date's toLocale*String
const opt = (o, k, vals, p = 0.5) => { if (rnd() < p) o[k] = pick(vals); };
const dateOption = () => {
  const o = { timeZone: "UTC" };
  const k = rnd();
  if (k < 0.2) { opt(o, "dateStyle", ["full", "long", "medium", "short"], 0.7); opt(o, "timeStyle", ["full", "long", "medium", "short"], 0.6); if (rnd() < 0.2 && o.timeStyle) o.hourCycle = pick(["h11", "h12", "h23"]); return o; }
  const shape = pick(["mdy", "md", "my", "m", "y", "d", "none", "mdy", "mdy"]);
  if (shape.includes("m")) o.month = pick(["numeric", "2-digit", "short", "long", "narrow"]);
  if (shape.includes("d")) o.day = pick(["numeric", "2-digit"]);
  if (shape.includes("y")) o.year = pick(["numeric", "2-digit"]);
  if (shape.length >= 2 && shape.includes("m")) opt(o, "weekday", ["short", "long", "narrow"], 0.3);
  if (shape === "none") opt(o, "weekday", ["short", "long", "narrow"], 0.3);
  const time = pick(["", "h", "hm", "hms", "ms", "hm"]);
  if (time.includes("h")) o.hour = pick(["numeric", "2-digit"]);
  if (time.includes("m")) o.minute = pick(["numeric", "2-digit"]);
  if (time.includes("s")) o.second = pick(["numeric", "2-digit"]);
  if (time.includes("s")) opt(o, "fractionalSecondDigits", [1, 2, 3], 0.2);
  if (o.hour) opt(o, "hourCycle", ["h11", "h12", "h23"], 0.2);
  if (o.hour && !o.hourCycle) opt(o, "hour12", [true, false], 0.2);
  if (o.hour && rnd() < 0.2) o.timeZoneName = pick(["short", "long"]);
  if (shape === "mdy" && rnd() < 0.1) o.era = pick(["short", "long", "narrow"]);
  return o;
};
const date = [];
for (let i = 0; i < COUNT; i++) {
  const o = dateOption();
  let t = Math.floor((rnd() - 0.3) * 4e12);
  if (rnd() < 0.2) t = Math.floor(t / 3600000) * 3600000 + pick([0, 12 * 3600000]);
  if (o.hour12 === false && new Date(t).getUTCHours() === 0) t += 3600000; // Node 20 says 24:xx there (a V8 bug)
  const method = pick(["format", "format", "toLocaleString", "toLocaleDateString", "toLocaleTimeString"]);
  let expected;
  try {
    if (method === "format") expected = new Intl.DateTimeFormat("en-US", o).format(new Date(t));
    else {
      const oo = { ...o }; if (rnd() < 0.5) { for (const k of Object.keys(oo)) if (k !== "timeZone") delete oo[k]; }
      Object.assign(o, oo); for (const k of Object.keys(o)) if (!(k in oo)) delete o[k];
      expected = new Date(t)[method]("en-US", o);
    }
  } catch (e) { expected = "!" + e.name; }
  date.push([t, method, o, expected]);
}

// ---- Intl.PluralRules, Intl.ListFormat, Intl.RelativeTimeFormat
const plural = [];
for (let i = 0; i < COUNT / 4; i++) {
  const o = {};
  if (rnd() < 0.5) o.type = pick(["cardinal", "ordinal"]);
  if (rnd() < 0.2) o.minimumFractionDigits = Math.floor(rnd() * 3);
  if (rnd() < 0.1) o.maximumSignificantDigits = 1 + Math.floor(rnd() * 3);
  const n = pick([0, 1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111, 112, 113, 1.5, 1.0001, 0.999, -1, -2, -21, 1e6 + 1]);
  plural.push([n, o, new Intl.PluralRules("en-US", o).select(n)]);
}
const list = [];
for (let i = 0; i < COUNT / 4; i++) {
  const o = {};
  if (rnd() < 0.7) o.type = pick(["conjunction", "disjunction", "unit"]);
  if (rnd() < 0.7) o.style = pick(["long", "short", "narrow"]);
  const items = ["apples", "pears", "plums", "figs", "a b", ""].slice(0, Math.floor(rnd() * 6));
  list.push([items, o, new Intl.ListFormat("en-US", o).format(items)]);
}
const relative = [];
for (let i = 0; i < COUNT / 2; i++) {
  const o = {};
  if (rnd() < 0.7) o.style = pick(["long", "short", "narrow"]);
  if (rnd() < 0.5) o.numeric = pick(["always", "auto"]);
  const unit = pick(["second", "minutes", "hour", "day", "days", "week", "month", "quarter", "quarters", "year"]);
  const v = pick([-2, -1, 0, 1, 2, 1.5, -1234.5, 3, 100, -0.25, 1e6, 0.0001]);
  relative.push([v, unit, o, new Intl.RelativeTimeFormat("en-US", o).format(v, unit)]);
}
console.log(JSON.stringify({ node: process.versions.node, icu: process.versions.icu, number, collator, date, plural, list, relative }));
