// Intl for the one locale a script has, en-US, in the one time zone it runs in, UTC: what
// Node.js (full ICU) gives for them, without locale data. Intl.NumberFormat,
// Intl.DateTimeFormat, Intl.Collator, Intl.PluralRules, Intl.ListFormat and
// Intl.RelativeTimeFormat, and the built-ins that use them: toLocaleString of
// numbers, BigInts, dates and arrays, toLocaleDateString, toLocaleTimeString and localeCompare.
// Another locale or time zone is a RangeError that says what to do instead, never output in a
// locale the script did not ask for.
//
// Compiled with the boot, before any script (sandbox/lazy.js), so that what it takes of the
// built-ins is the engine's own; a fork server compiles it before it forks, so that no child
// pays for it. `web` is what it takes from sandbox/web.js (its lists and text helpers).
// Returns Intl and the built-ins' methods, which lazy.js installs. It runs with the script's
// rights only, as the engine's built-ins do.
(function (web) {
  "use strict";
  // What this file uses of the built-ins is taken here, as it loads, and called with apply: a
  // script that replaces a built-in's method, iterator or static (Array.prototype's iterator,
  // a string's split, Math.floor, a WeakMap's get) changes it for itself, not for Intl, as a
  // native Intl is not changed. (Array.prototype[Symbol.iterator] replaced, (1234.5)
  // .toLocaleString() gave "" and new Intl.NumberFormat("en-US") threw "Incorrect locale
  // information provided".) Hence: no for...of, spread or array destructuring at run time (they
  // take the script's iterators), objects of no prototype for what is the file's own (a setter
  // or getter the script puts on Object.prototype reaches no option), lists of no prototype
  // (listOf) read by index, arrays a script is given made with own properties (ownArray), and
  // no template literal with a substitution (QuickJS joins one with String.prototype.concat,
  // looked up at run time): text is joined with +.
  const { defineProperty, keys: objectKeys } = Object;
  const NativeObject = Object, NativeRangeError = RangeError, NativeTypeError = TypeError;
  const NativeString = String, NativeNumber = Number, NativeDate = Date;
  const isArray = Array.isArray, isFinite = Number.isFinite, isInteger = Number.isInteger;
  const parseInteger = Number.parseInt, { fromCharCode } = String, stringify = JSON.stringify;
  const { floor, abs, trunc, min: least, max: most } = Math;
  const { apply } = Reflect;
  const hasOwn = Object.prototype.hasOwnProperty;
  const numberValueOf = Number.prototype.valueOf, bigIntValueOf = BigInt.prototype.valueOf;
  const { normalize, codePointAt, charCodeAt, slice, indexOf, trim, toUpperCase, toLowerCase, repeat } =
    String.prototype;
  const { exec } = RegExp.prototype;
  const { getTime, getUTCFullYear, getUTCMonth, getUTCDate, getUTCDay, getUTCHours, getUTCMinutes,
    getUTCSeconds, getUTCMilliseconds } = Date.prototype;
  const { get: weakGet, set: weakSet } = WeakMap.prototype;
  const { get: mapGet } = Map.prototype;
  // uncurry(f)(self, ...args) calls f on self: Function.prototype.call bound to f, as Reflect
  // .apply does it but without a list of arguments made at each call (a third faster).
  const { bind, call } = Function.prototype;
  const uncurry = apply(bind, bind, [call]);
  const sliced = uncurry(slice), codeAt = uncurry(charCodeAt), codePointOf = uncurry(codePointAt);
  const repeated = uncurry(repeat), upper = uncurry(toUpperCase), lower = uncurry(toLowerCase);
  const trimmed = uncurry(trim), indexIn = uncurry(indexOf), normalized = uncurry(normalize);
  // exec, not test or search: those look up the script's RegExp.prototype.exec at each call.
  const execOf = uncurry(exec);
  const matches = (re, s) => execOf(re, s) !== null;
  const searched = (re, s) => { const m = execOf(re, s); return m === null ? -1 : m.index; };
  const weakOf = uncurry(weakGet), setWeak = uncurry(weakSet), mapGetOf = uncurry(mapGet);
  // web.js's (sandbox/web.js, evaluated first): lists of no prototype, added to and read by
  // index; a string's characters by code point (codePoints: a spread or for...of takes the
  // script's string iterator); an item set as an array's own; ToPrimitive.
  const { listOf, put, holds, joined, chars: codePoints, ownPut, toPrimitive } = web;
  // An array for a script, of a list's items: its own properties, which no index setter on
  // Array.prototype takes.
  function ownArray(list) {
    const out = [];
    for (let i = 0; i < list.length; i++) ownPut(out, list[i]);
    return out;
  }
  // A copy of one of the file's objects for a script (resolvedOptions), of an ordinary
  // prototype, its properties its own.
  function ownCopy(o, names) {
    const picked = { __proto__: null };
    for (let i = 0; i < names.length; i++) if (o[names[i]] !== undefined) picked[names[i]] = o[names[i]];
    return { ...picked }; // (a spread defines its properties: no setter of Object.prototype runs)
  }

  // ---- locales ------------------------------------------------------------------------------
  const LOCALE = "en-US";
  const SUPPORTED = /^en(?:-us)?$/i;
  // A well-formed BCP 47 tag, roughly as ICU checks it ("en_US" is not one).
  const WELL_FORMED = /^[a-z]{2,3}(?:-[a-z]{4})?(?:-(?:[a-z]{2}|\d{3}))?(?:-(?:[a-z\d]{5,8}|\d[a-z\d]{3}))*(?:-[a-wyz\d](?:-[a-z\d]{2,8})+)*(?:-x(?:-[a-z\d]{1,8})+)?$/i;
  function requested(locales) {
    if (locales === undefined) return [];
    if (locales === null) throw new NativeTypeError("Cannot convert undefined or null to object");
    if (typeof locales !== "string" && !isArray(locales)) return []; // an object: no tags
    const list = typeof locales === "string" ? [locales] : locales;
    const out = listOf();
    // By index, as ECMA-402's CanonicalizeLocaleList reads a list (not with its iterator).
    for (let i = 0, n = list.length; i < n; i++) {
      const tag = list[i];
      if (typeof tag !== "string" && (typeof tag !== "object" || tag === null)) {
        throw new NativeTypeError("Language ID should be string or object.");
      }
      const text = NativeString(tag);
      if (!matches(WELL_FORMED, text)) throw new NativeRangeError("Incorrect locale information provided");
      put(out, text);
    }
    return out;
  }
  // The locale to format for: en-US, for no locale or a list that holds en or en-US (the
  // first of the list that is, as a browser picks); any other is refused.
  // en or en-US, with any Unicode extension ("en-US-u-nu-latn").
  const supported = (tag) => {
    const u = indexIn(tag, "-u-", 0);
    return matches(SUPPORTED, u < 0 ? tag : sliced(tag, 0, u));
  };
  function pickLocale(locales, what) {
    const list = requested(locales);
    if (list.length === 0) return LOCALE;
    for (let i = 0; i < list.length; i++) if (supported(list[i])) return LOCALE;
    throw new NativeRangeError(
      what + ": a script has the en-US locale only (no locale data for " + stringify(list[0]) + "): " +
      "format for en-US (pass no locale or 'en-US'), or build the text yourself");
  }

  // ---- options ------------------------------------------------------------------------------
  function optionsObject(options) {
    if (options === undefined) return { __proto__: null };
    if (options === null) throw new NativeTypeError("Cannot convert undefined or null to object");
    return NativeObject(options);
  }
  function getOption(options, name, values, fallback, kind) {
    let value = options[name];
    if (value === undefined) return fallback;
    if (kind === "boolean") return !!value;
    value = NativeString(value);
    if (values !== undefined && !holds(values, value)) {
      throw new NativeRangeError("Value " + value + " out of range for " + kind + " options property " + name);
    }
    return value;
  }
  function getNumberOption(options, name, min, max, fallback) {
    const value = options[name];
    if (value === undefined) return fallback;
    const n = NativeNumber(value);
    if (!(n >= min && n <= max)) throw new NativeRangeError(name + " value is out of range.");
    return floor(n);
  }

  // A getter that gives its object's function, made once and bound to the object's options,
  // as ECMA-402's format and compare are (so `list.map(nf.format)` works). It is a bound
  // function of no name, as a built-in's is: its text reads as native (`String(nf.format)`
  // gave this file's source).
  function boundGetter(proto, name, optionsOf, make) {
    const bound = new WeakMap();
    defineProperty(proto, name, { __proto__: null,
      configurable: true,
      get() {
        const o = optionsOf(this, name);
        let f = weakOf(bound, this);
        if (f === undefined) {
          f = apply(bind, make(o), [undefined]);
          defineProperty(f, "name", { __proto__: null, value: "" });
          setWeak(bound, this, f);
        }
        return f;
      },
    });
  }

  // Methods on a constructor's prototype as a built-in's are (writable, configurable, not
  // enumerable), and its toStringTag.
  function methodsOf(C, tag, methods) {
    for (const k of objectKeys(methods)) {
      defineProperty(C.prototype, k, { __proto__: null, value: methods[k], writable: true, configurable: true });
    }
    defineProperty(C.prototype, Symbol.toStringTag, { __proto__: null, value: tag, configurable: true });
  }
  // What an Intl object was made with (in `made`), or a TypeError for anything else.
  function receiver(made, self, tag, method) {
    const o = weakOf(made, self);
    if (o === undefined) throw new NativeTypeError("Method " + tag + ".prototype." + method + " called on incompatible receiver");
    return o;
  }

  // ---- decimal numbers as digit strings --------------------------------------------------------
  // Without its trailing zeros, in time linear in its length (/0+$/ is quadratic in QuickJS:
  // it tries each run of zeros to its end).
  function withoutTrailingZeros(digits) {
    let end = digits.length;
    while (end > 0 && codeAt(digits, end - 1) === 48) end--;
    return sliced(digits, 0, end);
  }
  // A finite non-negative value as { digits, point }: value = 0.digits * 10^point, digits
  // without leading or trailing zeros ("" for zero). From the shortest text that reads back as
  // the double, as ICU formats a double (so 1.005 rounds to 1.01, not to toFixed's 1.00).
  function decimalOf(text) {
    let mantissa = text, exponent = 0;
    const e = searched(/e/i, text);
    if (e >= 0) {
      mantissa = sliced(text, 0, e);
      exponent = NativeNumber(sliced(text, e + 1));
    }
    let dot = indexIn(mantissa, ".", 0);
    if (dot < 0) dot = mantissa.length;
    let digits = sliced(mantissa, 0, dot) + sliced(mantissa, dot + 1);
    let point = dot + exponent;
    const lead = searched(/[^0]/, digits);
    if (lead < 0) return { __proto__: null, digits: "", point: 0 };
    digits = sliced(digits, lead);
    point -= lead;
    digits = withoutTrailingZeros(digits);
    return { __proto__: null, digits, point };
  }
  // Round ``d`` to keep digits up to position ``at`` (counted from the point: 2 keeps
  // hundredths, -1 tens) with rounding ``mode``, ``negative`` telling the sign.
  function roundAt(d, at, mode, negative) {
    const keep = d.point + at; // how many of d.digits stay
    if (keep >= d.digits.length) return d;
    let kept = keep > 0 ? sliced(d.digits, 0, keep) : "";
    const rest = keep >= 0 ? sliced(d.digits, keep) : repeated("0", -keep) + d.digits;
    // rest is non-empty and has a non-zero digit: compare it with one half
    const first = codeAt(rest, 0) - 48;
    const half = first > 5 || (first === 5 && rest.length > 1) ? 1 : first === 5 ? 0 : -1;
    const lastOdd = kept.length > 0 && (codeAt(kept, kept.length - 1) - 48) % 2 === 1;
    let up;
    switch (mode) {
      case "ceil": up = !negative; break;
      case "floor": up = negative; break;
      case "expand": up = true; break;
      case "trunc": up = false; break;
      case "halfCeil": up = half > 0 || (half === 0 && !negative); break;
      case "halfFloor": up = half > 0 || (half === 0 && negative); break;
      case "halfTrunc": up = half > 0; break;
      case "halfEven": up = half > 0 || (half === 0 && lastOdd); break;
      default: up = half >= 0; // halfExpand
    }
    let point = d.point;
    if (keep < 0) {
      kept = "";
      point = -at;
    }
    if (up) {
      // add one at the last kept position: the nines before it become zeros
      let i = kept.length - 1;
      while (i >= 0 && codeAt(kept, i) === 57) i--;
      const zeros = repeated("0", kept.length - 1 - i);
      if (i >= 0) kept = sliced(kept, 0, i) + fromCharCode(codeAt(kept, i) + 1) + zeros;
      else {
        kept = "1" + zeros;
        point += 1;
      }
      if (keep <= 0) point = -at + 1, kept = "1";
    }
    const lead = searched(/[^0]/, kept);
    if (lead < 0) return { __proto__: null, digits: "", point: 0 };
    return { __proto__: null, digits: withoutTrailingZeros(sliced(kept, lead)), point: point - lead };
  }
  function magnitude(d) { // the exponent of the leading digit (0 for 1..9, -1 for 0.1..)
    return d.digits === "" ? 0 : d.point - 1;
  }
  // The rounded value and how many fraction digits to show at least.
  function roundFraction(d, min, max, mode, negative) {
    return { __proto__: null, d: roundAt(d, max, mode, negative), minFraction: min };
  }
  function roundSignificant(d, min, max, mode, negative) {
    const r = roundAt(d, max - d.point, mode, negative);
    const point = r.digits === "" ? 1 : r.point;
    return { __proto__: null, d: r, minFraction: most(0, min - point) };
  }
  function rounded(d, o, negative) {
    const fraction = () => roundFraction(d, o.minimumFractionDigits, o.maximumFractionDigits, o.roundingMode, negative);
    const significant = () => roundSignificant(d, o.minimumSignificantDigits, o.maximumSignificantDigits, o.roundingMode, negative);
    if (o.rounding === "fraction") return fraction();
    if (o.rounding === "significant") return significant();
    const a = significant(), b = fraction();
    // ECMA-402: the result rounded at the smaller magnitude has more precision (a tie goes
    // to the significant digits).
    const sMagnitude = (a.d.digits === "" ? 0 : magnitude(a.d)) - o.maximumSignificantDigits + 1;
    const fMagnitude = -o.maximumFractionDigits;
    if (o.rounding === "morePrecision") return sMagnitude <= fMagnitude ? a : b;
    return sMagnitude <= fMagnitude ? b : a;
  }
  // The integer and fraction digit strings of a rounded value.
  function split(d, minFraction, minInteger) {
    let integer, fraction;
    if (d.point <= 0) {
      integer = "";
      fraction = repeated("0", -d.point) + d.digits;
    } else if (d.point >= d.digits.length) {
      integer = d.digits + repeated("0", d.point - d.digits.length);
      fraction = "";
    } else {
      integer = sliced(d.digits, 0, d.point);
      fraction = sliced(d.digits, d.point);
    }
    if (fraction.length < minFraction) fraction += repeated("0", minFraction - fraction.length);
    if (integer.length < minInteger) integer = repeated("0", minInteger - integer.length) + integer;
    return { __proto__: null, integer, fraction };
  }
  function grouped(integer, grouping) {
    const out = listOf();
    if (grouping === false || integer.length <= 3 || (grouping === "min2" && integer.length <= 4)) {
      put(out, integer);
      return out;
    }
    let head = integer.length % 3 || 3;
    put(out, sliced(integer, 0, head));
    for (; head < integer.length; head += 3) put(out, sliced(integer, head, head + 3));
    return out;
  }

  // ---- currencies -----------------------------------------------------------------------------
  // en-US's symbols (CLDR): a currency not here shows its code and a no-break space.
  const SYMBOLS = { __proto__: null,
    USD: ["$", "$"], EUR: ["€", "€"], GBP: ["£", "£"], JPY: ["¥", "¥"], CNY: ["CN¥", "¥"],
    INR: ["₹", "₹"], CAD: ["CA$", "$"], AUD: ["A$", "$"], NZD: ["NZ$", "$"], HKD: ["HK$", "$"],
    MXN: ["MX$", "$"], BRL: ["R$", "R$"], KRW: ["₩", "₩"], ILS: ["₪", "₪"], TWD: ["NT$", "$"],
    VND: ["₫", "₫"], PHP: ["₱", "₱"], XAF: ["FCFA", "FCFA"], XOF: ["F\u202fCFA", "F\u202fCFA"],
    XCD: ["EC$", "$"], XPF: ["CFPF", "CFPF"],
    CHF: ["CHF"], SEK: ["SEK", "kr"], NOK: ["NOK", "kr"], DKK: ["DKK", "kr"], PLN: ["PLN", "zł"],
    RUB: ["RUB", "₽"], TRY: ["TRY", "₺"], ZAR: ["ZAR", "R"], SGD: ["SGD", "$"], THB: ["THB", "฿"],
    UAH: ["UAH", "₴"], NGN: ["NGN", "₦"], ARS: ["ARS", "$"], CLP: ["CLP", "$"], COP: ["COP", "$"],
    EGP: ["EGP", "E£"], HUF: ["HUF", "Ft"], CZK: ["CZK", "Kč"], IDR: ["IDR", "Rp"], MYR: ["MYR", "RM"],
  };
  // ISO 4217 minor units where they are not 2 (CLDR's, as ICU uses them).
  const DIGITS = { __proto__: null,
    BHD: 3, IQD: 0, JOD: 3, KWD: 3, LYD: 3, OMR: 3, TND: 3, JPY: 0, KRW: 0, VND: 0, CLP: 0,
    ISK: 0, UGX: 0, XAF: 0, XOF: 0, XPF: 0, PYG: 0, RWF: 0, KMF: 0, GNF: 0, DJF: 0, BIF: 0,
    VUV: 0, CLF: 4, UYW: 4, ALL: 0, AMD: 2, IRR: 0, LAK: 0, LBP: 0, MGA: 0, MMK: 0, RSD: 0,
    SLE: 2, SLL: 0, SOS: 0, STD: 0, SYP: 0, YER: 0, COP: 2, IDR: 2, TWD: 2, HUF: 2, PKR: 2,
  };
  // Names for currencyDisplay "name": [one, other].
  const NAMES = { __proto__: null,
    USD: ["US dollar", "US dollars"], EUR: ["euro", "euros"], GBP: ["British pound", "British pounds"],
    JPY: ["Japanese yen", "Japanese yen"], CNY: ["Chinese yuan", "Chinese yuan"],
    INR: ["Indian rupee", "Indian rupees"], CAD: ["Canadian dollar", "Canadian dollars"],
    AUD: ["Australian dollar", "Australian dollars"], CHF: ["Swiss franc", "Swiss francs"],
    MXN: ["Mexican peso", "Mexican pesos"], BRL: ["Brazilian real", "Brazilian reals"],
    KRW: ["South Korean won", "South Korean won"], SEK: ["Swedish krona", "Swedish kronor"],
    NOK: ["Norwegian krone", "Norwegian kroner"], DKK: ["Danish krone", "Danish kroner"],
    NZD: ["New Zealand dollar", "New Zealand dollars"], SGD: ["Singapore dollar", "Singapore dollars"],
    HKD: ["Hong Kong dollar", "Hong Kong dollars"], PLN: ["Polish zloty", "Polish zlotys"],
    RUB: ["Russian ruble", "Russian rubles"], ZAR: ["South African rand", "South African rand"],
    TRY: ["Turkish lira", "Turkish Lira"],
  };

  // ---- Intl.NumberFormat ----------------------------------------------------------------------
  const numberOptions = new WeakMap();
  const STYLES = ["decimal", "percent", "currency", "unit"];
  const GROUPINGS = ["min2", "auto", "always"];
  const ROUNDING_MODES = ["ceil", "floor", "expand", "trunc", "halfCeil", "halfFloor", "halfExpand", "halfTrunc", "halfEven"];
  function resolveNumber(locales, options) {
    const locale = pickLocale(locales, "Intl.NumberFormat");
    options = optionsObject(options);
    const o = { __proto__: null, locale, numberingSystem: "latn" };
    const numbering = options.numberingSystem;
    if (numbering !== undefined && NativeString(numbering) !== "latn") {
      throw new NativeRangeError("numberingSystem " + NativeString(numbering) + ": a script has latn (0-9) digits only");
    }
    o.style = getOption(options, "style", STYLES, "decimal", "Intl.NumberFormat");
    let currency = options.currency;
    if (currency !== undefined) {
      currency = NativeString(currency);
      if (!matches(/^[a-z]{3}$/i, currency)) throw new NativeRangeError("Invalid currency code : " + currency);
      currency = upper(currency);
    }
    const currencyDisplay = getOption(options, "currencyDisplay", ["code", "symbol", "narrowSymbol", "name"], "symbol", "Intl.NumberFormat");
    const currencySign = getOption(options, "currencySign", ["standard", "accounting"], "standard", "Intl.NumberFormat");
    if (options.unit !== undefined || o.style === "unit") {
      throw new NativeRangeError(
        "Intl.NumberFormat: style 'unit' is not available in a script (no unit names): format " +
        "the number, then add the unit's name yourself");
    }
    if (o.style === "currency") {
      if (currency === undefined) throw new NativeTypeError("Currency code is required with currency style.");
      if (currencyDisplay === "name" && NAMES[currency] === undefined) {
        throw new NativeRangeError(
          "Intl.NumberFormat: no name for the currency " + currency + " here (names for " + joined(objectKeys(NAMES), ", ") + "): " +
          "use currencyDisplay 'code' or 'symbol'");
      }
      o.currency = currency;
      o.currencyDisplay = currencyDisplay;
      o.currencySign = currencySign;
    }
    const notation = getOption(options, "notation", ["standard", "scientific", "engineering", "compact"], "standard", "Intl.NumberFormat");
    const cDigits = o.style === "currency" ? (DIGITS[currency] ?? 2) : 0;
    const mnfdDefault = o.style === "currency" ? cDigits : 0;
    const mxfdDefault = o.style === "currency" ? cDigits : o.style === "percent" ? 0 : 3;
    // ECMA-402's SetNumberFormatDigitOptions
    o.minimumIntegerDigits = getNumberOption(options, "minimumIntegerDigits", 1, 21, 1);
    const mnfd = options.minimumFractionDigits, mxfd = options.maximumFractionDigits;
    const mnsd = options.minimumSignificantDigits, mxsd = options.maximumSignificantDigits;
    const increment = getNumberOption(options, "roundingIncrement", 1, 5000, 1);
    if (increment !== 1) {
      throw new NativeRangeError("Intl.NumberFormat: roundingIncrement other than 1 is not available in a script: round the number yourself first");
    }
    o.roundingMode = getOption(options, "roundingMode", ROUNDING_MODES, "halfExpand", "Intl.NumberFormat");
    let priority = getOption(options, "roundingPriority", ["auto", "morePrecision", "lessPrecision"], "auto", "Intl.NumberFormat");
    const trailing = getOption(options, "trailingZeroDisplay", ["auto", "stripIfInteger"], "auto", "Intl.NumberFormat");
    const hasSd = mnsd !== undefined || mxsd !== undefined;
    const hasFd = mnfd !== undefined || mxfd !== undefined;
    let needSd = true, needFd = true;
    if (priority === "auto") {
      needSd = hasSd;
      if (needSd || (!hasFd && notation === "compact")) needFd = false;
    }
    if (needSd) {
      if (hasSd) {
        o.minimumSignificantDigits = getNumberOption(options, "minimumSignificantDigits", 1, 21, 1);
        o.maximumSignificantDigits = getNumberOption(options, "maximumSignificantDigits", o.minimumSignificantDigits, 21, 21);
      } else {
        o.minimumSignificantDigits = 1;
        o.maximumSignificantDigits = 21;
      }
    }
    if (needFd) {
      if (hasFd) {
        let min = getNumberOption(options, "minimumFractionDigits", 0, 100, undefined);
        let max = getNumberOption(options, "maximumFractionDigits", 0, 100, undefined);
        if (min === undefined) min = least(mnfdDefault, max);
        else if (max === undefined) max = most(mxfdDefault, min);
        else if (min > max) throw new NativeRangeError("maximumFractionDigits value is out of range.");
        o.minimumFractionDigits = min;
        o.maximumFractionDigits = max;
      } else {
        o.minimumFractionDigits = mnfdDefault;
        o.maximumFractionDigits = mxfdDefault;
      }
    }
    if (!needSd && !needFd) {
      o.minimumFractionDigits = 0;
      o.maximumFractionDigits = 0;
      o.minimumSignificantDigits = 1;
      o.maximumSignificantDigits = 2;
      o.rounding = "morePrecision";
      priority = "morePrecision";
    } else if (priority === "auto") {
      o.rounding = needSd ? "significant" : "fraction";
    } else {
      o.rounding = priority;
    }
    let grouping = options.useGrouping;
    const groupingDefault = notation === "compact" ? "min2" : "auto";
    if (grouping === undefined) grouping = groupingDefault;
    else if (grouping === true || grouping === "true" || grouping === "false") grouping = groupingDefault === "min2" && grouping !== true ? groupingDefault : "always";
    else if (grouping === false || grouping === null || grouping === 0 || grouping === "") grouping = false;
    else {
      grouping = NativeString(grouping);
      if (!holds(GROUPINGS, grouping)) {
        throw new NativeRangeError("Value " + grouping + " out of range for Intl.NumberFormat options property useGrouping");
      }
    }
    o.useGrouping = grouping;
    o.notation = notation;
    if (notation === "compact") {
      o.compactDisplay = getOption(options, "compactDisplay", ["short", "long"], "short", "Intl.NumberFormat");
    }
    o.signDisplay = getOption(options, "signDisplay", ["auto", "never", "always", "exceptZero", "negative"], "auto", "Intl.NumberFormat");
    o.roundingIncrement = 1;
    o.trailingZeroDisplay = trailing;
    o.roundingPriority = priority;
    return o;
  }

  const COMPACT_SHORT = ["", "K", "M", "B", "T"];
  const COMPACT_LONG = ["", " thousand", " million", " billion", " trillion"];
  // The parts of x as Intl.NumberFormat.prototype.formatToParts gives them.
  function numberParts(o, x) {
    let negative, d, special;
    if (typeof x === "bigint") {
      negative = x < 0n;
      d = decimalOf(NativeString(negative ? -x : x));
    } else if (typeof x === "string" && exactDecimal(x) !== undefined) {
      negative = codeAt(trimmed(x), 0) === 45; // "-"
      d = exactDecimal(x);
    } else {
      const n = NativeNumber(x);
      negative = n < 0 || (n === 0 && 1 / n < 0);
      if (n !== n) special = "nan";
      else if (n === Infinity || n === -Infinity) special = "infinity";
      else d = decimalOf(NativeString(negative ? -n : n));
    }
    const parts = listOf();
    let exponent = 0, compact = 0, minFraction = 0;
    if (special === undefined) {
      if (o.style === "percent" && d.digits !== "") d = { __proto__: null, digits: d.digits, point: d.point + 2 };
      if (o.notation !== "standard") {
        // The exponent to show (or, compact, the power of a thousand to name), taken again
        // from the rounded value when rounding carries it over (999,999 is 1M, not 1000K).
        const exponentFor = (m) =>
          o.notation === "scientific" ? m
            : o.notation === "engineering" ? floor(m / 3) * 3
              : m < 3 ? 0 : least(floor(m / 3), 4) * 3;
        const scaled = (e) => rounded({ __proto__: null, digits: d.digits, point: d.digits === "" ? 0 : d.point - e }, o, negative);
        let e = exponentFor(magnitude(d));
        let r = scaled(e);
        const carried = exponentFor(r.d.digits === "" ? e : magnitude(r.d) + e);
        if (carried !== e) r = scaled((e = carried));
        d = r.d;
        minFraction = r.minFraction;
        if (o.notation === "compact") compact = e / 3;
        else exponent = e;
      } else {
        const r = rounded(d, o, negative);
        d = r.d;
        minFraction = r.minFraction;
      }
    }
    const zero = special === undefined && d.digits === "";
    let sign = "";
    switch (o.signDisplay) {
      case "auto": sign = negative ? "-" : ""; break;
      case "always": sign = negative ? "-" : "+"; break;
      case "exceptZero": sign = zero || special === "nan" ? "" : negative ? "-" : "+"; break;
      case "negative": sign = negative && !zero ? "-" : ""; break;
      default: sign = "";
    }
    if (special === "nan") sign = o.signDisplay === "always" ? "+" : "";
    // Accounting's parentheses go with a symbol or a code, not with a name or a compact
    // suffix (ICU's en-US patterns).
    const accounting = o.style === "currency" && o.currencySign === "accounting" && sign === "-" &&
      o.currencyDisplay !== "name" && compact === 0;
    let currency = "", spaced = false;
    if (o.style === "currency") {
      if (o.currencyDisplay === "code") { currency = o.currency; spaced = true; }
      else if (o.currencyDisplay === "name") currency = "";
      else {
        const symbols = SYMBOLS[o.currency];
        if (symbols === undefined) { currency = o.currency; spaced = true; }
        else {
          currency = o.currencyDisplay === "narrowSymbol" && symbols.length > 1 ? symbols[1] : symbols[0];
          spaced = matches(/[A-Za-z]$/, currency);
        }
      }
    }
    if (accounting) put(parts, { type: "literal", value: "(" });
    else if (sign) put(parts, { type: sign === "-" ? "minusSign" : "plusSign", value: sign });
    if (currency) {
      put(parts, { type: "currency", value: currency });
      if (spaced && special === undefined) put(parts, { type: "literal", value: "\u00a0" }); // by a digit only
    }
    let pluralOne = false;
    if (special === "nan") put(parts, { type: "nan", value: "NaN" });
    else if (special === "infinity") put(parts, { type: "infinity", value: "∞" });
    else {
      const { integer, fraction } = split(d, minFraction, o.minimumIntegerDigits);
      let shownFraction = fraction;
      if (o.trailingZeroDisplay === "stripIfInteger" && matches(/^0*$/, fraction)) shownFraction = "";
      // en-US groups a compact number from five digits on unless told "always".
      const grouping = o.notation === "compact" && o.useGrouping === "auto" ? "min2" : o.useGrouping;
      const groups = grouped(integer === "" ? "0" : integer, grouping);
      for (let i = 0; i < groups.length; i++) {
        if (i) put(parts, { type: "group", value: "," });
        put(parts, { type: "integer", value: groups[i] });
      }
      if (shownFraction) {
        put(parts, { type: "decimal", value: "." });
        put(parts, { type: "fraction", value: shownFraction });
      }
      // CLDR's "one" in English: the integer 1, no fraction shown, no exponent or suffix.
      pluralOne = matches(/^0*1$/, integer) && shownFraction === "" && o.notation !== "scientific" &&
        o.notation !== "engineering" && !compact;
      if (o.notation === "scientific" || o.notation === "engineering") {
        put(parts, { type: "exponentSeparator", value: "E" });
        if (exponent < 0) put(parts, { type: "exponentMinusSign", value: "-" });
        put(parts, { type: "exponentInteger", value: NativeString(abs(exponent)) });
      }
      if (compact) {
        // With a currency's symbol or code, the compact form is the short one.
        const long = o.compactDisplay === "long" && (o.style !== "currency" || o.currencyDisplay === "name");
        const word = (long ? COMPACT_LONG : COMPACT_SHORT)[compact];
        if (codeAt(word, 0) === 32) { // " "
          put(parts, { type: "literal", value: " " });
          put(parts, { type: "compact", value: sliced(word, 1) });
        } else put(parts, { type: "compact", value: word });
      }
    }
    if (o.style === "percent") put(parts, { type: "percentSign", value: "%" });
    if (o.style === "currency" && o.currencyDisplay === "name") {
      const names = NAMES[o.currency];
      put(parts, { type: "literal", value: " " });
      put(parts, { type: "currency", value: pluralOne ? names[0] : names[1] });
    }
    if (accounting) put(parts, { type: "literal", value: ")" });
    return parts;
  }
  // A decimal string's exact value (ECMA-402 formats "12345678901234567890.5" without going
  // through a double), or undefined for other text and for a magnitude past a double's
  // (1e999999999 is Infinity, as a number: laid out exactly it would be a gigabyte of zeros).
  function exactDecimal(x) {
    // (one way to match any text: a regular expression that could split a run of digits
    // two ways takes time in the square of its length to refuse one)
    if (!matches(/^\s*[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?\s*$/i, x)) return undefined;
    const t = trimmed(x), c = codeAt(t, 0);
    const d = decimalOf(c === 43 || c === 45 ? sliced(t, 1) : t); // without its + or -
    return d.digits !== "" && (d.point > 400 || d.point < -400) ? undefined : d;
  }
  const join = (parts) => { let s = ""; for (let i = 0; i < parts.length; i++) s += parts[i].value; return s; };

  function formatNumber(o, x) {
    return join(numberParts(o, x));
  }
  // What format takes, as ECMA-402's ToIntlMathematicalValue: one ToPrimitive, hint "number"
  // (an object's valueOf ran twice, and a Symbol.toPrimitive's BigInt was made a number), then
  // a BigInt or a decimal string as is, anything else a number.
  function toNumeric(x) {
    const p = (typeof x === "object" && x !== null) || typeof x === "function" ? toPrimitive(x, "number") : x;
    return typeof p === "bigint" || typeof p === "string" ? p : NativeNumber(p);
  }

  const NUMBER_RESOLVED = ["locale", "numberingSystem", "style", "currency", "currencyDisplay", "currencySign",
    "minimumIntegerDigits", "minimumFractionDigits", "maximumFractionDigits",
    "minimumSignificantDigits", "maximumSignificantDigits", "useGrouping", "notation",
    "compactDisplay", "signDisplay", "roundingMode", "roundingIncrement", "trailingZeroDisplay",
    "roundingPriority"];
  function NumberFormat(locales, options) {
    if (!new.target) return new NumberFormat(locales, options);
    setWeak(numberOptions, this, resolveNumber(locales, options));
  }
  const numberThis = (self, method) => receiver(numberOptions, self, "Intl.NumberFormat", method);
  boundGetter(NumberFormat.prototype, "format", numberThis, (o) => (x) => formatNumber(o, toNumeric(x)));
  const numberMethods = {
    formatToParts(x) { return ownArray(numberParts(numberThis(this, "formatToParts"), toNumeric(x))); },
    resolvedOptions() { return ownCopy(numberThis(this, "resolvedOptions"), NUMBER_RESOLVED); },
  };
  methodsOf(NumberFormat, "Intl.NumberFormat", numberMethods);

  // ---- Intl.Collator ----------------------------------------------------------------------
  // CLDR's root collation (which en uses) for Latin script, digits, punctuation and symbols,
  // as ICU orders them; other scripts sort by their lowercase letters' code points, after
  // Latin. A string becomes collation elements [primary, secondary, tertiary]; two strings
  // compare on their primaries, then secondaries (accents), then tertiaries (case).
  //
  // Punctuation, symbols and digits in ICU's order (from Node.js's Intl.Collator); characters
  // in one group differ only in their tertiary weight (' and ’).
  const VARIABLE = ["\t", "\n", "\v", "\f", "\r", " \u00a0", "_", "-", "–", "—", ",", ";", ":", "!",
    "¡", "?", "¿", ".", "…", "·", "'‘’‚", "‹", "›", "\"“”„", "«", "»", "(", ")", "[", "]", "{", "}",
    "§", "¶", "@", "*", "/", "\\", "&", "#", "%", "‰", "†", "‡", "•", "′", "″", "`", "´", "^", "¯",
    "¨", "¸", "°", "©", "®", "←", "→", "↑", "↓", "+", "±", "÷", "×", "<", "=", ">", "¬", "|", "¦",
    "~", "√", "∞", "≈", "≤", "≥", "¤", "¢", "$", "£", "¥", "€"];
  const DIGIT_CHARS = "0123456789";
  // Combining marks in the order of their secondary weights (from Node.js: "a" plus each mark
  // of U+0300..U+036F, sorted).
  const MARKS = "34f 332 313 343 314 301 341 300 340 306 302 30c 30a 342 308 344 30b 303 307 338 327 328 304 30d 30e 312 315 31a 33d 33e 33f 346 34a 34b 34c 350 351 352 357 35b 35d 35e 316 317 318 319 31c 31d 31e 31f 320 329 32a 32b 32c 32f 333 33a 33b 33c 347 348 349 34d 34e 353 354 355 356 359 35a 35c 35f 362 336 337 335 305 309 30f 310 311 31b 321 322 323 324 325 326 32d 32e 330 331 334 339 345 358 360 361 363 368 369 364 36a 365 36b 366 36c 36d 367 36e 36f";
  const COMMON = 1, UPPER = 2; // tertiary: lowercase (and uncased) first
  const primaryOf = new Map(); // a character's [primary, secondary, tertiary] when not a letter
  let rank = 1, LAST_VARIABLE = 0;
  for (const group of VARIABLE) {
    let k = 0;
    // A no-break space is a space a tertiary apart; quotation marks differ in the secondary.
    for (const c of group) primaryOf.set(c, group[0] === " " ? [rank, COMMON, COMMON + k++] : [rank, COMMON + k++, COMMON]);
    // ignorePunctuation ignores spaces and punctuation, up to ″; symbols from ` on count
    if (group === "″") LAST_VARIABLE = rank;
    rank++;
  }
  const DIGIT_BASE = rank;
  for (const c of DIGIT_CHARS) primaryOf.set(c, [rank++, COMMON, COMMON]);
  const LETTER_BASE = rank; // a letter's primary: LETTER_BASE + 2 * (its index in a..z) (+1: after it)
  const OTHER_BASE = LETTER_BASE + 60; // other scripts: OTHER_BASE + the lowercase's code point
  const secondaryOf = new Map();
  MARKS.split(" ").forEach((h, i) => secondaryOf.set(parseInteger(h, 16), COMMON + 1 + i));
  const STROKE = secondaryOf.get(0x338);
  const UNKNOWN_MARK = COMMON + 200;
  const letter = (c, after = 0) => LETTER_BASE + 2 * (codeAt(c, 0) - 97) + after;
  // Latin letters NFD does not take apart: [their letters, a secondary that sets them apart
  // (0: none), primary offset (1: a letter of its own after the first)]. Every entry here and
  // in primaryOf has all three items: a missing one is read through Array.prototype, which a
  // script can give an index ("1".localeCompare("１") was NaN-weighted, then 1 both ways).
  const SPECIAL = { __proto__: null,
    "æ": ["ae", STROKE, 0], "œ": ["oe", STROKE, 0], "ß": ["ss", STROKE, 0], "ð": ["d", STROKE, 0],
    "đ": ["d", STROKE, 0], "ø": ["o", STROKE, 0], "ł": ["l", STROKE, 0], "ŀ": ["l", STROKE, 0],
    "ħ": ["h", STROKE, 0], "ſ": ["s", STROKE, 0], "ĳ": ["ij", 0, 0], "ı": ["i", 0, 1], "ĸ": ["q", 0, 1],
    "ŋ": ["n", 0, 1], "ŧ": ["t", 0, 1], "ƒ": ["f", 0, 1], "þ": ["z", 0, 1],
  };
  // (checked by code point, not with a regular expression: a string's collation elements are
  // made a character at a time, and localeCompare is what a script's sort calls)
  const ignorable = (cp) => cp <= 0x08 || (cp >= 0x0e && cp <= 0x1f) || (cp >= 0x7f && cp <= 0x9f) || cp === 0xad ||
    (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x2064) || cp === 0xfeff;
  const MARK = /\p{M}/u; // (none before U+0300)
  function elements(text, numeric) {
    const out = listOf(); // flat: primary, secondary, tertiary, variable (1: punctuation or space)
    const push = (p, s, t, v) => { put(out, p); put(out, s); put(out, t); put(out, v); };
    const chars = codePoints(normalized(NativeString(text), "NFD"));
    for (let i = 0; i < chars.length; i++) {
      const c = chars[i];
      const cp = codePointOf(c, 0);
      if (ignorable(cp)) continue;
      if (cp >= 0x300 && matches(MARK, c)) { push(0, mapGetOf(secondaryOf, cp) ?? UNKNOWN_MARK, COMMON, 0); continue; }
      if (numeric && cp >= 48 && cp <= 57) {
        let j = i;
        while (j < chars.length && chars[j] >= "0" && chars[j] <= "9") j++;
        // the number's digits, without its leading zeros (but one)
        let k = i;
        while (k < j - 1 && chars[k] === "0") k++;
        // One element that sorts as a digit, then the number's length and digits (compared
        // only against another number's).
        push(DIGIT_BASE, COMMON, COMMON, 0);
        push(j - k, 0, 0, 0);
        for (; k < j; k++) push(codeAt(chars[k], 0) - 47, 0, 0, 0);
        i = j - 1;
        continue;
      }
      const small = lower(c);
      const tertiary = small !== c ? UPPER : COMMON;
      const first = codeAt(small, 0);
      if (small.length === 1 && first >= 97 && first <= 122) { push(letter(small), COMMON, tertiary, 0); continue; } // a..z
      const special = SPECIAL[small];
      if (special !== undefined) {
        const base = special[0], secondary = special[1], after = special[2];
        for (let k = 0; k < base.length; k++) push(letter(base[k], after), COMMON, tertiary, 0);
        if (secondary) push(0, secondary, COMMON, 0);
        continue;
      }
      const known = mapGetOf(primaryOf, c);
      if (known !== undefined) { push(known[0], known[1], known[2], known[0] <= LAST_VARIABLE ? 1 : 0); continue; }
      const compatible = normalized(c, "NFKD");
      if (compatible !== c) { // ¹, ª, ™, fullwidth letters: what they stand for, a tertiary apart
        const parts = elements(compatible, false);
        for (let k = 0; k < parts.length; k += 4) push(parts[k], parts[k + 1], parts[k + 2] + 2, parts[k + 3]);
        continue;
      }
      push(OTHER_BASE + codePointOf(small, 0), COMMON, tertiary, 0);
    }
    return out;
  }
  function compareLevel(a, b, level, skipVariable, caseFirst) {
    let i = 0, j = 0;
    for (;;) {
      // the next element with a weight at this level
      while (i < a.length && (a[i + level] === 0 || (skipVariable && a[i + 3]))) i += 4;
      while (j < b.length && (b[j + level] === 0 || (skipVariable && b[j + 3]))) j += 4;
      if (i >= a.length || j >= b.length) return i >= a.length ? (j >= b.length ? 0 : -1) : 1;
      let x = a[i + level], y = b[j + level];
      if (level === 2 && caseFirst === "upper") {
        x = x === UPPER ? 0 : x;
        y = y === UPPER ? 0 : y;
      }
      if (x !== y) return x < y ? -1 : 1;
      i += 4;
      j += 4;
    }
  }
  // The case level of sensitivity "case": the primaries' case, accents ignored.
  // Only upper or not counts there: a compatibility character is the case of what it stands
  // for (its tertiary two past it: "ａ" is lower, "Ⓐ" upper), and a space or punctuation has
  // none (a no-break space's tertiary is UPPER's number; "a\u00a0b" was after "a b", and
  // "ａ" after "A", where ICU has them equal and before).
  const caseOf = (tertiary, variable) => (!variable && (tertiary === UPPER || tertiary === UPPER + 2) ? UPPER : COMMON);
  function compareCase(a, b, skipVariable, caseFirst) {
    const cases = (e) => {
      const out = listOf();
      for (let i = 0; i < e.length; i += 4) {
        if (e[i] !== 0 && !(skipVariable && e[i + 3])) { put(out, 0); put(out, 0); put(out, caseOf(e[i + 2], e[i + 3])); put(out, 0); }
      }
      return out;
    };
    return compareLevel(cases(a), cases(b), 2, false, caseFirst);
  }
  const collatorOptions = new WeakMap();
  const COLLATIONS = ["default", "standard"];
  const COLLATOR_RESOLVED = ["locale", "usage", "sensitivity", "ignorePunctuation", "collation", "numeric", "caseFirst"];
  function resolveCollator(locales, options) {
    const locale = pickLocale(locales, "Intl.Collator");
    options = optionsObject(options);
    const o = { __proto__: null, locale };
    o.usage = getOption(options, "usage", ["sort", "search"], "sort", "Intl.Collator");
    o.sensitivity = getOption(options, "sensitivity", ["base", "accent", "case", "variant"], "variant", "Intl.Collator");
    o.ignorePunctuation = getOption(options, "ignorePunctuation", undefined, false, "boolean");
    o.collation = "default";
    const collation = options.collation;
    if (collation !== undefined && !holds(COLLATIONS, NativeString(collation))) {
      throw new NativeRangeError("Intl.Collator: a script has the default collation only, not " + NativeString(collation));
    }
    o.numeric = getOption(options, "numeric", undefined, false, "boolean");
    o.caseFirst = getOption(options, "caseFirst", ["upper", "lower", "false"], "false", "Intl.Collator");
    return o;
  }
  function collate(o, x, y) {
    const a = elements(x, o.numeric), b = elements(y, o.numeric);
    const skip = o.ignorePunctuation;
    const first = compareLevel(a, b, 0, skip);
    if (first !== 0 || o.sensitivity === "base") return first;
    if (o.sensitivity === "case") return compareCase(a, b, skip, o.caseFirst);
    const second = compareLevel(a, b, 1, skip);
    if (second !== 0 || o.sensitivity === "accent") return second;
    return compareLevel(a, b, 2, skip, o.caseFirst);
  }
  function Collator(locales, options) {
    if (!new.target) return new Collator(locales, options);
    setWeak(collatorOptions, this, resolveCollator(locales, options));
  }
  const collatorThis = (self, method) => receiver(collatorOptions, self, "Intl.Collator", method);
  boundGetter(Collator.prototype, "compare", collatorThis, (o) => (x, y) => collate(o, NativeString(x), NativeString(y)));
  methodsOf(Collator, "Intl.Collator", {
    resolvedOptions() { return ownCopy(collatorThis(this, "resolvedOptions"), COLLATOR_RESOLVED); },
  });

  // ---- Intl.DateTimeFormat -----------------------------------------------------------------
  // en-US's patterns (CLDR) for the gregorian calendar, in UTC, the one time zone a script has.
  const WEEKDAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
  const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
    "September", "October", "November", "December"];
  const UTC_NAMES = /^(?:utc|etc\/utc|etc\/gmt|gmt|etc\/uct|uct|etc\/universal|universal|etc\/zulu|zulu|etc\/gmt[+-]0|gmt[+-]?0|etc\/greenwich|greenwich)$/i;
  const DATE_FIELDS = ["weekday", "year", "month", "day"];
  const TIME_FIELDS = ["dayPeriod", "hour", "minute", "second", "fractionalSecondDigits"];
  const dateOptions = new WeakMap();
  const STYLE_VALUES = ["full", "long", "medium", "short"];
  const CALENDARS = ["gregory", "iso8601"];
  const FIELDS = ["weekday", "era", "year", "month", "day", "dayPeriod", "hour", "minute", "second",
    "fractionalSecondDigits", "timeZoneName"];
  const DATE_RESOLVED = ["locale", "calendar", "numberingSystem", "timeZone", "hourCycle", "hour12", ...FIELDS,
    "dateStyle", "timeStyle"];
  function resolveDate(locales, options, required, defaults) {
    const locale = pickLocale(locales, "Intl.DateTimeFormat");
    options = optionsObject(options);
    const o = { __proto__: null, locale, calendar: "gregory", numberingSystem: "latn" };
    const calendar = options.calendar;
    if (calendar !== undefined && !holds(CALENDARS, NativeString(calendar))) {
      throw new NativeRangeError("Intl.DateTimeFormat: a script has the gregorian calendar only, not " + NativeString(calendar));
    }
    const numbering = options.numberingSystem;
    if (numbering !== undefined && NativeString(numbering) !== "latn") {
      throw new NativeRangeError("numberingSystem " + NativeString(numbering) + ": a script has latn (0-9) digits only");
    }
    const hour12 = options.hour12 === undefined ? undefined : !!options.hour12;
    let hourCycle = getOption(options, "hourCycle", ["h11", "h12", "h23", "h24"], undefined, "Intl.DateTimeFormat");
    let timeZone = options.timeZone;
    if (timeZone !== undefined) {
      timeZone = NativeString(timeZone);
      if (!matches(UTC_NAMES, timeZone)) {
        throw new NativeRangeError(
          "Intl.DateTimeFormat: a script runs in UTC and has no time zone data (timeZone " + stringify(timeZone) + "): " +
          "format in UTC (timeZone 'UTC' or none), or shift the time yourself by the zone's offset " +
          "(new Date(t + offsetHours * 3600000)) and say which zone it is");
      }
    }
    o.timeZone = "UTC";
    const fields = { __proto__: null,
      weekday: getOption(options, "weekday", ["narrow", "short", "long"], undefined, "Intl.DateTimeFormat"),
      era: getOption(options, "era", ["narrow", "short", "long"], undefined, "Intl.DateTimeFormat"),
      year: getOption(options, "year", ["2-digit", "numeric"], undefined, "Intl.DateTimeFormat"),
      month: getOption(options, "month", ["2-digit", "numeric", "narrow", "short", "long"], undefined, "Intl.DateTimeFormat"),
      day: getOption(options, "day", ["2-digit", "numeric"], undefined, "Intl.DateTimeFormat"),
      dayPeriod: getOption(options, "dayPeriod", ["narrow", "short", "long"], undefined, "Intl.DateTimeFormat"),
      hour: getOption(options, "hour", ["2-digit", "numeric"], undefined, "Intl.DateTimeFormat"),
      minute: getOption(options, "minute", ["2-digit", "numeric"], undefined, "Intl.DateTimeFormat"),
      second: getOption(options, "second", ["2-digit", "numeric"], undefined, "Intl.DateTimeFormat"),
      fractionalSecondDigits: getNumberOption(options, "fractionalSecondDigits", 1, 3, undefined),
      timeZoneName: getOption(options, "timeZoneName", ["short", "long", "shortOffset", "longOffset", "shortGeneric", "longGeneric"], undefined, "Intl.DateTimeFormat"),
    };
    const formatMatcher = getOption(options, "formatMatcher", ["basic", "best fit"], "best fit", "Intl.DateTimeFormat");
    void formatMatcher;
    const dateStyle = getOption(options, "dateStyle", STYLE_VALUES, undefined, "Intl.DateTimeFormat");
    const timeStyle = getOption(options, "timeStyle", STYLE_VALUES, undefined, "Intl.DateTimeFormat");
    if (dateStyle !== undefined || timeStyle !== undefined) {
      for (let i = 0; i < FIELDS.length; i++) {
        const k = FIELDS[i];
        if (fields[k] !== undefined) throw new NativeTypeError("Can't set option " + k + " when " + (dateStyle !== undefined ? "dateStyle" : "timeStyle") + " is used");
      }
      if (required === "date" && timeStyle !== undefined) throw new NativeTypeError("Invalid option : timeStyle");
      if (required === "time" && dateStyle !== undefined) throw new NativeTypeError("Invalid option : dateStyle");
      if (dateStyle !== undefined) o.dateStyle = dateStyle;
      if (timeStyle !== undefined) o.timeStyle = timeStyle;
    } else {
      let needDefaults = true;
      if (required === "date" || required === "any") {
        for (let i = 0; i < DATE_FIELDS.length; i++) if (fields[DATE_FIELDS[i]] !== undefined) needDefaults = false;
      }
      if (required === "time" || required === "any") {
        for (let i = 0; i < TIME_FIELDS.length; i++) if (fields[TIME_FIELDS[i]] !== undefined) needDefaults = false;
      }
      if (needDefaults && (defaults === "date" || defaults === "all")) {
        fields.year = fields.month = fields.day = "numeric";
      }
      if (needDefaults && (defaults === "time" || defaults === "all")) {
        fields.hour = fields.minute = fields.second = "numeric";
      }
    }
    const hasHour = fields.hour !== undefined || timeStyle !== undefined;
    if (hasHour) {
      // ECMA-402: hour12 decides the cycle over hourCycle; en-US's own is h12.
      if (hour12 !== undefined) hourCycle = hour12 ? "h12" : "h23";
      else if (hourCycle === undefined) hourCycle = "h12";
      o.hourCycle = hourCycle;
      o.hour12 = hourCycle === "h11" || hourCycle === "h12";
    }
    for (let i = 0; i < FIELDS.length; i++) if (fields[FIELDS[i]] !== undefined) o[FIELDS[i]] = fields[FIELDS[i]];
    return o;
  }
  const pad2 = (n) => (n < 10 ? "0" : "") + n;
  function fieldsOf(t) {
    const d = new NativeDate(t);
    const read = (get) => apply(get, d, []);
    return { __proto__: null,
      year: read(getUTCFullYear), month: read(getUTCMonth), day: read(getUTCDate), weekday: read(getUTCDay),
      hour: read(getUTCHours), minute: read(getUTCMinutes), second: read(getUTCSeconds), ms: read(getUTCMilliseconds),
    };
  }
  function dayPeriodOf(hour, minute, second, width) {
    if (hour === 12 && minute === 0 && second === 0) return width === "narrow" ? "n" : "noon";
    if (hour >= 6 && hour < 12) return "in the morning";
    if (hour >= 12 && hour < 18) return "in the afternoon";
    if (hour >= 18 && hour < 21) return "in the evening";
    return "at night";
  }
  // The parts of time t as formatToParts gives them.
  function dateParts(o, t) {
    const f = fieldsOf(t);
    const parts = listOf();
    const lit = (value) => {
      const last = parts[parts.length - 1];
      if (last !== undefined && last.type === "literal") last.value += value;
      else put(parts, { type: "literal", value });
    };
    const part = (type, value) => put(parts, { type, value: NativeString(value) });
    const eraYear = f.year <= 0 ? 1 - f.year : f.year;
    const yearText = (style) => style === "2-digit" ? pad2(eraYear % 100) : NativeString(eraYear);
    const shortened = (name, style) => style === "long" ? name : sliced(name, 0, style === "short" ? 3 : 1);
    const textMonth = (style) => shortened(MONTHS[f.month], style);
    const textWeekday = (style) => shortened(WEEKDAYS[f.weekday], style);
    let { weekday, era, year, month, day, hour, minute, second, fractionalSecondDigits, timeZoneName, dayPeriod } = o;
    let joiner = ", ";
    if (o.dateStyle !== undefined) {
      const style = o.dateStyle;
      if (style === "full") weekday = "long";
      month = style === "full" || style === "long" ? "long" : style === "medium" ? "short" : "numeric";
      day = "numeric";
      year = style === "short" ? "2-digit" : "numeric";
      if (style === "full" || style === "long") joiner = " at ";
    }
    if (o.timeStyle !== undefined) {
      const style = o.timeStyle;
      hour = "numeric";
      minute = "2-digit";
      if (style !== "short") second = "2-digit";
      if (style === "full") timeZoneName = "long";
      if (style === "long") timeZoneName = "short";
    }
    // CLDR's long glue (" at ") with a long month; a weekday alone is followed by a space.
    if (o.dateStyle === undefined && month === "long") joiner = " at ";
    const weekdayOnly = weekday !== undefined && year === undefined && month === undefined && day === undefined && era === undefined;
    // ("Thu 3:04:05 PM", "Thu 3 PM", "Thu 15:04", but "Thu, 15" and "Thu, 3:04 PM UTC")
    const h12 = o.hourCycle === "h11" || o.hourCycle === "h12";
    if (o.dateStyle === undefined && weekdayOnly && hour !== undefined && (minute !== undefined || h12) &&
      fractionalSecondDigits === undefined && timeZoneName === undefined) joiner = " ";
    // the date
    const hasDate = weekday !== undefined || year !== undefined || month !== undefined || day !== undefined || era !== undefined;
    if (hasDate) {
      const textual = month === "long" || month === "short" || month === "narrow";
      const dayText = day === undefined ? undefined : day === "2-digit" ? pad2(f.day) : NativeString(f.day);
      // The weekday leads a date with a month and a day ("Thu, Dec 3"), and follows any other
      // ("12/2026 Thu", "3 Thursday")
      const leading = weekday !== undefined && month !== undefined && dayText !== undefined;
      if (leading) { part("weekday", textWeekday(weekday)); lit(", "); }
      if (month !== undefined && textual) {
        part("month", textMonth(month));
        if (dayText !== undefined) { lit(" "); part("day", dayText); }
        if (year !== undefined) { lit(dayText !== undefined ? ", " : " "); part("year", yearText(year)); }
      } else if (month !== undefined) {
        part("month", month === "2-digit" ? pad2(f.month + 1) : f.month + 1);
        if (dayText !== undefined) { lit("/"); part("day", dayText); }
        if (year !== undefined) { lit("/"); part("year", yearText(year)); }
      } else if (year !== undefined) {
        part("year", yearText(year));
        if (dayText !== undefined) { lit(" (day: "); part("day", dayText); lit(")"); }
      } else if (dayText !== undefined) {
        part("day", dayText);
      }
      if (weekday !== undefined && !leading) {
        if (parts.length) lit(" ");
        part("weekday", textWeekday(weekday));
      }
      if (era !== undefined) {
        if (parts.length) lit(" ");
        const bc = f.year <= 0;
        part("era", era === "long" ? (bc ? "Before Christ" : "Anno Domini") : era === "short" ? (bc ? "BC" : "AD") : (bc ? "B" : "A"));
      }
    }
    // the time
    const hasTime = hour !== undefined || minute !== undefined || second !== undefined || fractionalSecondDigits !== undefined || dayPeriod !== undefined;
    if (hasTime) {
      if (hasDate) lit(joiner);
      const cycle = o.hourCycle;
      if (hour !== undefined) {
        const h = cycle === "h11" ? f.hour % 12 : cycle === "h23" ? f.hour : cycle === "h24" ? f.hour || 24 : f.hour % 12 || 12;
        part("hour", hour === "2-digit" || cycle === "h23" || cycle === "h24" ? pad2(h) : h);
        // CLDR's "HH'h' z": a 24-hour hour alone before a zone's name
        if (minute === undefined && !h12 && timeZoneName !== undefined && second === undefined) lit("h");
      }
      const clock = (hour !== undefined ? 1 : 0) + (minute !== undefined ? 1 : 0) + (second !== undefined ? 1 : 0);
      if (minute !== undefined) {
        if (hour !== undefined) lit(":");
        part("minute", clock > 1 || minute === "2-digit" && false ? pad2(f.minute) : f.minute);
      }
      if (second !== undefined) {
        if (hour !== undefined || minute !== undefined) lit(":");
        part("second", clock > 1 ? pad2(f.second) : f.second);
      }
      if (fractionalSecondDigits !== undefined) {
        if (second !== undefined) lit(".");
        const ms = sliced(NativeString(f.ms + 1000), 1, 1 + fractionalSecondDigits);
        part("fractionalSecond", ms);
      }
      if (hour !== undefined && (cycle === "h11" || cycle === "h12")) {
        lit(" ");
        if (dayPeriod !== undefined) part("dayPeriod", dayPeriodOf(f.hour, f.minute, f.second, dayPeriod));
        else part("dayPeriod", f.hour < 12 ? "AM" : "PM");
      } else if (dayPeriod !== undefined && hour === undefined) {
        if (parts.length && parts[parts.length - 1].type !== "literal") lit(" ");
        part("dayPeriod", dayPeriodOf(f.hour, f.minute, f.second, dayPeriod));
      }
    }
    if (timeZoneName !== undefined) {
      lit(hasTime ? " " : hasDate ? ", " : "");
      const name = timeZoneName === "long" ? "Coordinated Universal Time"
        : timeZoneName === "short" ? "UTC" : "GMT";
      part("timeZoneName", name);
    }
    return parts;
  }
  function timeValue(x) {
    // (the engine's Date.now, looked up at the call: the prelude sets it to the run's clock
    // after this file loads, and a script cannot reach it, its Date being the prelude's)
    const t = x === undefined ? NativeDate.now() : NativeNumber(typeof x === "object" && x !== null ? apply(getTime, x, []) : x);
    if (!(isFinite(t) && abs(t) <= 8.64e15)) throw new NativeRangeError("Invalid time value");
    return trunc(t) + 0;
  }
  function dateValue(x) { // what format takes: a Date, a number, or nothing (now)
    if (x === undefined) return timeValue(undefined);
    if (typeof x === "object" && x !== null) {
      let t;
      try { t = apply(getTime, x, []); } catch (_) { t = NativeNumber(x); }
      return timeValue(t);
    }
    return timeValue(x);
  }
  function DateTimeFormat(locales, options) {
    if (!new.target) return new DateTimeFormat(locales, options);
    setWeak(dateOptions, this, resolveDate(locales, options, "any", "date"));
  }
  const dateThis = (self, method) => receiver(dateOptions, self, "Intl.DateTimeFormat", method);
  boundGetter(DateTimeFormat.prototype, "format", dateThis, (o) => (x) => join(dateParts(o, dateValue(x))));
  const dateMethods = {
    formatToParts(x) { return ownArray(dateParts(dateThis(this, "formatToParts"), dateValue(x))); },
    resolvedOptions() { return ownCopy(dateThis(this, "resolvedOptions"), DATE_RESOLVED); },
  };
  methodsOf(DateTimeFormat, "Intl.DateTimeFormat", dateMethods);
  function formatDate(x, locales, options, required, defaults) {
    const t = apply(getTime, x, []); // a TypeError for what is not a Date, as the built-in
    if (t !== t) return "Invalid Date";
    return join(dateParts(resolveDate(locales, options, required, defaults), t));
  }

  // ---- Intl.PluralRules, Intl.ListFormat, Intl.RelativeTimeFormat -------------------------
  // English's rules (CLDR): a cardinal is "one" for 1 shown without a fraction; an ordinal is
  // "one", "two" or "few" for what ends in 1, 2 or 3 (but not 11, 12, 13).
  const DIGIT_OPTIONS = ["minimumIntegerDigits", "minimumFractionDigits", "maximumFractionDigits",
    "minimumSignificantDigits", "maximumSignificantDigits", "roundingPriority", "roundingIncrement",
    "roundingMode", "trailingZeroDisplay"];
  const pluralOptions = new WeakMap();
  function pluralOf(o, x) {
    const shown = formatNumber(o.digits, NativeNumber(x));
    if (o.type === "cardinal") return matches(/^-?0*1$/, shown) ? "one" : "other";
    // An ordinal goes by the number shown (without its sign), "101.0" as 101.
    const value = NativeNumber(codeAt(shown, 0) === 45 ? sliced(shown, 1) : shown);
    if (!isInteger(value)) return "other";
    const n = value % 100;
    if (n % 10 === 1 && n !== 11) return "one";
    if (n % 10 === 2 && n !== 12) return "two";
    if (n % 10 === 3 && n !== 13) return "few";
    return "other";
  }
  function PluralRules(locales, options) {
    if (!new.target) throw new NativeTypeError("Constructor Intl.PluralRules requires 'new'");
    const locale = pickLocale(locales, "Intl.PluralRules");
    options = optionsObject(options);
    const type = getOption(options, "type", ["cardinal", "ordinal"], "cardinal", "Intl.PluralRules");
    const digitOptions = { __proto__: null, useGrouping: false };
    for (let i = 0; i < DIGIT_OPTIONS.length; i++) {
      const k = DIGIT_OPTIONS[i];
      if (options[k] !== undefined) digitOptions[k] = options[k];
    }
    setWeak(pluralOptions, this, { __proto__: null, locale, type, digits: resolveNumber(locale, digitOptions) });
  }
  const pluralThis = (self, method) => receiver(pluralOptions, self, "Intl.PluralRules", method);
  const pluralMethods = {
    select(x) { return pluralOf(pluralThis(this, "select"), x); },
    selectRange(x, y) {
      pluralThis(this, "selectRange");
      if (x === undefined || y === undefined) throw new NativeTypeError("start and end are required");
      if (NativeNumber(x) !== NativeNumber(x) || NativeNumber(y) !== NativeNumber(y)) throw new NativeRangeError("Invalid number");
      return "other"; // English's plural ranges all end in "other"
    },
    resolvedOptions() { // locale, type, the digit options set, pluralCategories: Node.js's order
      const o = pluralThis(this, "resolvedOptions"), digits = o.digits;
      const picked = { __proto__: null, locale: o.locale, type: o.type };
      for (let i = 0; i < DIGIT_OPTIONS.length; i++) {
        const k = DIGIT_OPTIONS[i];
        if (digits[k] !== undefined) picked[k] = digits[k];
      }
      picked.pluralCategories = o.type === "cardinal" ? ["one", "other"] : ["few", "one", "two", "other"];
      return { ...picked }; // (as ownCopy: a spread defines, no setter of Object.prototype runs)
    },
  };
  methodsOf(PluralRules, "Intl.PluralRules", pluralMethods);

  // ListFormat's glue: [between two, between the first ones, before the last of three or more].
  const LIST_GLUE = { __proto__: null,
    conjunction: { long: [" and ", ", ", ", and "], short: [" & ", ", ", ", & "], narrow: [", ", ", ", ", "] },
    disjunction: { long: [" or ", ", ", ", or "], short: [" or ", ", ", ", or "], narrow: [" or ", ", ", ", or "] },
    unit: { long: [", ", ", ", ", "], short: [", ", ", ", ", "], narrow: [" ", " ", " "] },
  };
  const listOptions = new WeakMap();
  const LIST_RESOLVED = ["locale", "type", "style"];
  function ListFormat(locales, options) {
    if (!new.target) throw new NativeTypeError("Constructor Intl.ListFormat requires 'new'");
    const locale = pickLocale(locales, "Intl.ListFormat");
    options = optionsObject(options);
    const type = getOption(options, "type", ["conjunction", "disjunction", "unit"], "conjunction", "Intl.ListFormat");
    const style = getOption(options, "style", ["long", "short", "narrow"], "long", "Intl.ListFormat");
    setWeak(listOptions, this, { __proto__: null, locale, type, style });
  }
  function listParts(self, list, method) {
    const o = receiver(listOptions, self, "Intl.ListFormat", method);
    const items = listOf();
    if (list !== undefined) {
      // with the list's own iterator, as ECMA-402's StringListFromIterable (and Node.js) read it
      for (const item of list) {
        if (typeof item !== "string") throw new NativeTypeError("Iterable yielded " + NativeString(item) + " which is not a string");
        put(items, item);
      }
    }
    const glue = LIST_GLUE[o.type][o.style];
    const parts = listOf();
    for (let i = 0; i < items.length; i++) {
      if (i) put(parts, { type: "literal", value: items.length === 2 ? glue[0] : i === items.length - 1 ? glue[2] : glue[1] });
      put(parts, { type: "element", value: items[i] });
    }
    return parts;
  }
  const listMethods = {
    format(list) { return join(listParts(this, list, "format")); },
    formatToParts(list) { return ownArray(listParts(this, list, "formatToParts")); },
    resolvedOptions() { return ownCopy(receiver(listOptions, this, "Intl.ListFormat", "resolvedOptions"), LIST_RESOLVED); },
  };
  methodsOf(ListFormat, "Intl.ListFormat", listMethods);

  // RelativeTimeFormat's units: [long one, long other, short one, short other, narrow suffix].
  const TIME_UNITS = { __proto__: null,
    second: ["second", "seconds", "sec.", "sec.", "s"], minute: ["minute", "minutes", "min.", "min.", "m"],
    hour: ["hour", "hours", "hr.", "hr.", "h"], day: ["day", "days", "day", "days", "d"],
    week: ["week", "weeks", "wk.", "wk.", "w"], month: ["month", "months", "mo.", "mo.", "mo"],
    quarter: ["quarter", "quarters", "qtr.", "qtrs.", "q"], year: ["year", "years", "yr.", "yr.", "y"],
  };
  // numeric "auto": the words for -1, 0 and 1 of a unit ([long, short and narrow]). Each table
  // of no prototype: a key it lacks ("none", 1 for a second) is not looked up on the script's
  // Object.prototype.
  const TIME_WORDS = { __proto__: null,
    second: { __proto__: null, 0: ["now", "now", "now"] },
    minute: { __proto__: null, 0: ["this minute", "this minute", "this minute"] },
    hour: { __proto__: null, 0: ["this hour", "this hour", "this hour"] },
    day: { __proto__: null, "-1": ["yesterday", "yesterday", "yesterday"], 0: ["today", "today", "today"], 1: ["tomorrow", "tomorrow", "tomorrow"] },
  };
  for (const [unit, long, short] of [["week", "week", "wk."], ["month", "month", "mo."], ["quarter", "quarter", "qtr."], ["year", "year", "yr."]]) {
    TIME_WORDS[unit] = { __proto__: null,
      "-1": ["last " + long, "last " + short, "last " + short],
      0: ["this " + long, "this " + short, "this " + short],
      1: ["next " + long, "next " + short, "next " + short],
    };
  }
  const relativeOptions = new WeakMap();
  const RELATIVE_RESOLVED = ["locale", "style", "numeric", "numberingSystem"];
  let relativeNumber; // the numbers' format: en-US's default
  function RelativeTimeFormat(locales, options) {
    if (!new.target) throw new NativeTypeError("Constructor Intl.RelativeTimeFormat requires 'new'");
    const locale = pickLocale(locales, "Intl.RelativeTimeFormat");
    options = optionsObject(options);
    const style = getOption(options, "style", ["long", "short", "narrow"], "long", "Intl.RelativeTimeFormat");
    const numeric = getOption(options, "numeric", ["always", "auto"], "always", "Intl.RelativeTimeFormat");
    setWeak(relativeOptions, this, { __proto__: null, locale, style, numeric, numberingSystem: "latn" });
  }
  function relativeParts(self, value, unit, method) {
    const o = receiver(relativeOptions, self, "Intl.RelativeTimeFormat", method);
    const x = NativeNumber(value);
    unit = NativeString(unit);
    const stem = sliced(unit, 0, -1); // "days": "day"
    const singular = codeAt(unit, unit.length - 1) === 115 && TIME_UNITS[stem] !== undefined ? stem : unit;
    const names = TIME_UNITS[singular];
    if (names === undefined || !apply(hasOwn, TIME_UNITS, [singular])) {
      throw new NativeRangeError("Invalid unit argument for Intl.RelativeTimeFormat.prototype." + method + "() '" + unit + "'");
    }
    if (!isFinite(x)) throw new NativeRangeError("Value need to be finite number for Intl.RelativeTimeFormat.prototype." + method + "()");
    const width = o.style === "long" ? 0 : o.style === "short" ? 1 : 2;
    const past = x < 0 || (x === 0 && 1 / x < 0);
    relativeNumber ??= resolveNumber(undefined, undefined);
    const shown = numberParts(relativeNumber, past ? -x : x);
    for (let i = 0; i < shown.length; i++) shown[i] = { type: shown[i].type, value: shown[i].value, unit: singular };
    const text = join(shown);
    if (o.numeric === "auto") { // by the number shown: 0.0001 days is "today"
      const words = TIME_WORDS[singular][text === "0" ? 0 : text === "1" ? (past ? -1 : 1) : "none"];
      if (words !== undefined) {
        const only = listOf();
        put(only, { type: "literal", value: words[width] });
        return only;
      }
    }
    const one = text === "1";
    const name = width === 2 ? names[4] : names[width * 2 + (one ? 0 : 1)];
    const parts = listOf();
    if (!past) put(parts, { type: "literal", value: "in " });
    for (let i = 0; i < shown.length; i++) put(parts, shown[i]);
    const after = (width === 2 ? "" : " ") + name + (past ? " ago" : "");
    put(parts, { type: "literal", value: after });
    return parts;
  }
  const relativeMethods = {
    format(value, unit) { return join(relativeParts(this, value, unit, "format")); },
    formatToParts(value, unit) { return ownArray(relativeParts(this, value, unit, "formatToParts")); },
    resolvedOptions() {
      return ownCopy(receiver(relativeOptions, this, "Intl.RelativeTimeFormat", "resolvedOptions"), RELATIVE_RESOLVED);
    },
  };
  methodsOf(RelativeTimeFormat, "Intl.RelativeTimeFormat", relativeMethods);

  // ---- the globals ---------------------------------------------------------------------------
  const supportedLocalesOf = (locales) => {
    const list = requested(locales), out = listOf();
    for (let i = 0; i < list.length && out.length === 0; i++) if (supported(list[i])) put(out, LOCALE);
    return ownArray(out);
  };
  for (const C of [NumberFormat, DateTimeFormat, Collator, PluralRules, ListFormat, RelativeTimeFormat]) {
    defineProperty(C, "supportedLocalesOf", { __proto__: null, value: supportedLocalesOf, writable: true, configurable: true });
  }
  const Intl = {};
  const made = {
    NumberFormat, DateTimeFormat, Collator, PluralRules, ListFormat, RelativeTimeFormat,
    getCanonicalLocales(locales) {
      const list = requested(locales), out = listOf();
      for (let i = 0; i < list.length; i++) {
        const tag = list[i];
        put(out, matches(SUPPORTED, tag) ? (tag.length === 2 ? "en" : LOCALE) : tag);
      }
      return ownArray(out);
    },
  };
  for (const name of objectKeys(made)) {
    defineProperty(Intl, name, { __proto__: null, value: made[name], writable: true, configurable: true });
  }
  defineProperty(Intl, Symbol.toStringTag, { __proto__: null, value: "Intl", configurable: true });
  // What a script names of the rest of Intl says what it has instead.
  for (const name of ["DisplayNames", "Segmenter", "Locale", "DurationFormat", "supportedValuesOf"]) {
    defineProperty(Intl, name, { __proto__: null,
      configurable: true, writable: true,
      value: { [name]: function () { // named as the built-in it stands for
        throw new NativeTypeError(
          "Intl." + name + " is not available in a script (it has Intl.NumberFormat, DateTimeFormat, " +
          "Collator, PluralRules, ListFormat and RelativeTimeFormat, for en-US in UTC): build that text yourself");
      } }[name],
    });
  }

  // The built-ins that format or compare for a locale, as ECMA-402 defines them.
  const thisNumber = (v, method) => {
    if (typeof v === "number") return v;
    try { return apply(numberValueOf, v, []); } catch (_) {
      throw new NativeTypeError("Number.prototype." + method + " requires that 'this' be a Number");
    }
  };
  const thisBigInt = (v) => {
    if (typeof v === "bigint") return v;
    try { return apply(bigIntValueOf, v, []); } catch (_) {
      throw new NativeTypeError("BigInt.prototype.toLocaleString requires that 'this' be a BigInt");
    }
  };
  let plainNumber; // the formatter of toLocaleString() with no arguments, made once
  const methods = {
    number(locales, options) {
      const x = thisNumber(this, "toLocaleString");
      if (locales === undefined && options === undefined) {
        plainNumber ??= resolveNumber(undefined, undefined);
        return formatNumber(plainNumber, x);
      }
      return formatNumber(resolveNumber(locales, options), x);
    },
    bigint(locales, options) {
      return formatNumber(resolveNumber(locales, options), thisBigInt(this));
    },
    date(locales, options) {
      return formatDate(this, locales, options, "any", "all");
    },
    dateOnly(locales, options) {
      return formatDate(this, locales, options, "date", "date");
    },
    timeOnly(locales, options) {
      return formatDate(this, locales, options, "time", "time");
    },
    compare(that, locales, options) {
      if (this === undefined || this === null) throw new NativeTypeError("String.prototype.localeCompare called on null or undefined");
      return collate(resolveCollator(locales, options), NativeString(this), NativeString(that));
    },
    locale(locales, what) { pickLocale(locales, what); }, // refuses what is not en-US
    array(locales, options) {
      const list = NativeObject(this);
      const n = list.length >>> 0;
      let out = "";
      for (let i = 0; i < n; i++) {
        if (i) out += ",";
        const item = list[i];
        if (item !== undefined && item !== null) out += NativeString(item.toLocaleString(locales, options));
      }
      return out;
    },
  };
  // The kind of Intl object a value is ("NumberFormat"), or undefined for any other value
  // (runs no script code): sandbox/prelude.js shows one as Node.js does.
  const BRANDS = [[numberOptions, "NumberFormat"], [dateOptions, "DateTimeFormat"], [collatorOptions, "Collator"],
    [pluralOptions, "PluralRules"], [listOptions, "ListFormat"], [relativeOptions, "RelativeTimeFormat"]];
  function brandOf(v) {
    if ((typeof v !== "object" && typeof v !== "function") || v === null) return undefined;
    for (let i = 0; i < BRANDS.length; i++) if (weakOf(BRANDS[i][0], v) !== undefined) return BRANDS[i][1];
    return undefined;
  }
  return { Intl, methods, brandOf };
})
