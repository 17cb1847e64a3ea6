// URL as the WHATWG URL Standard defines it (and Node.js and browsers have it): the parser,
// its setters, searchParams kept in step with the URL, URL.canParse and URL.parse. A script
// has no network, so a URL is text to take apart and build: a link in a tool's result, the
// next page of a listing, a query string for a tool.
//
// Host names are taken to ASCII as UTS #46 does for what they mostly hold (lower case,
// NFC, the ideographic full stops, Punycode for a label that is not ASCII); a host that needs
// more of UTS #46's mapping tables than that may differ from Node.js's.
//
// Compiled with the boot, before any script (sandbox/lazy.js). `web` links it to the
// URLSearchParams of sandbox/web.js (`web.makeParams(query, onChange)` makes one whose changes
// call onChange(serialized); `web.replaceParams(searchParams, query)` sets its list) and gives
// the text helpers the two share (`usv`, `isHex`).
(function (web) {
  "use strict";
  const { defineProperty } = Object;
  const NativeTypeError = TypeError, NativeUint8Array = Uint8Array, NativeWeakMap = WeakMap;
  const NativeParseInt = parseInt, floor = Math.floor, stringify = JSON.stringify;
  const { fromCharCode } = String;
  const { normalize, toLowerCase, codePointAt, charCodeAt, slice } = String.prototype;
  // exec, not test: test looks up the script's RegExp.prototype.exec at every call.
  const { exec: regExpExec } = RegExp.prototype;
  const hasOwn = Object.prototype.hasOwnProperty, setHas = Set.prototype.has;
  const { get: weakGet, set: weakSet } = WeakMap.prototype;
  const { apply } = Reflect;
  // web.js's own UTF-8 encoder and decoder: a TextEncoder's encode is the script's to
  // replace, and one that did had every URL with a character past ASCII refused. The lists
  // (listOf, put) and hex digits are web.js's too: what a script can replace on the built-in
  // prototypes (an array's push and iterator, a number's toString, a string's toLowerCase, a
  // typed array's length) it changes for itself, not for the URLs it parses.
  // (chars: a string's characters by code point, as a list of the engine's own)
  const { usv, isHex, utf8, decodeUtf8, HEX, listOf, put, typedLength, chars } = web;
  // Messages are joined with +, not a template literal: QuickJS joins a template's parts with
  // String.prototype.concat, looked up at run time (a script that replaced it had every
  // 'Invalid URL' message read as its concat's answer).
  const lower = (s) => apply(toLowerCase, s, []);
  const sliced = (s, start, end) => apply(slice, s, [start, end]);
  const codeOf = (ch) => apply(codePointAt, ch, [0]);
  const matches = (re, s) => apply(regExpExec, re, [s]) !== null;
  const has = (set, c) => apply(setHas, set, [c]);
  function copied(list) {
    const out = listOf();
    for (let i = 0; i < list.length; i++) put(out, list[i]);
    return out;
  }
  const SPECIAL = { "ftp": 21, "file": null, "http": 80, "https": 443, "ws": 80, "wss": 443 };
  const isSpecialScheme = (s) => apply(hasOwn, SPECIAL, [s]);
  const defaultPort = (s) => (isSpecialScheme(s) ? SPECIAL[s] : null);

  // ---- percent-encoding --------------------------------------------------------------------
  const inC0 = (c) => c < 0x20 || c > 0x7e;
  const FRAGMENT = new Set([0x20, 0x22, 0x3c, 0x3e, 0x60]);
  const QUERY = new Set([0x20, 0x22, 0x23, 0x3c, 0x3e]);
  // The standard added ^ in 2024; Node.js 20, which scripts are written against, leaves it.
  const PATH = new Set([...QUERY, 0x3f, 0x60, 0x7b, 0x7d]);
  const USERINFO = new Set([...PATH, 0x2f, 0x3a, 0x3b, 0x3d, 0x40, 0x5b, 0x5c, 0x5d, 0x7c]);
  const sets = {
    c0: inC0,
    fragment: (c) => inC0(c) || has(FRAGMENT, c),
    query: (c) => inC0(c) || has(QUERY, c),
    specialQuery: (c) => inC0(c) || has(QUERY, c) || c === 0x27,
    path: (c) => inC0(c) || has(PATH, c),
    userinfo: (c) => inC0(c) || has(USERINFO, c),
  };
  function encodeCodePoint(ch, inSet) {
    const c = codeOf(ch);
    if (!inSet(c)) return ch;
    let out = "";
    const bytes = utf8(ch);
    for (let i = 0, n = apply(typedLength, bytes, []); i < n; i++) out += "%" + HEX(bytes[i]);
    return out;
  }
  function encodeString(s, inSet) {
    let out = "";
    const cs = chars(s);
    for (let i = 0; i < cs.length; i++) out += encodeCodePoint(cs[i], inSet);
    return out;
  }
  function percentDecode(s) { // to bytes
    const bytes = utf8(s);
    const out = listOf();
    for (let i = 0, n = apply(typedLength, bytes, []); i < n; i++) {
      const b = bytes[i];
      if (b === 0x25 && i + 2 < n && isHex(bytes[i + 1]) && isHex(bytes[i + 2])) {
        put(out, NativeParseInt(fromCharCode(bytes[i + 1], bytes[i + 2]), 16));
        i += 2;
      } else put(out, b);
    }
    return new NativeUint8Array(out); // a list of no prototype: no iterator is looked up
  }

  // ---- hosts ---------------------------------------------------------------------------------
  const FORBIDDEN_HOST = new Set([0x00, 0x09, 0x0a, 0x0d, 0x20, 0x23, 0x2f, 0x3a, 0x3c, 0x3e, 0x3f, 0x40, 0x5b, 0x5c, 0x5d, 0x5e, 0x7c]);
  const forbiddenHost = (c) => has(FORBIDDEN_HOST, c);
  const forbiddenDomain = (c) => forbiddenHost(c) || c <= 0x1f || c === 0x25 || c === 0x7f;
  const FAILURE = null;

  function ipv4Number(s) { // [number, validation error] or FAILURE
    if (s === "") return FAILURE;
    let radix = 10;
    if (s.length >= 2 && s[0] === "0" && (s[1] === "x" || s[1] === "X")) { s = sliced(s, 2); radix = 16; }
    else if (s.length >= 2 && s[0] === "0") { s = sliced(s, 1); radix = 8; }
    if (s === "") return 0;
    const valid = radix === 10 ? /^[0-9]+$/ : radix === 16 ? /^[0-9a-fA-F]+$/ : /^[0-7]+$/;
    if (!matches(valid, s)) return FAILURE;
    return NativeParseInt(s, radix);
  }
  function splitDots(s) { // s.split(".") as a list of the engine's own
    const parts = listOf();
    let start = 0;
    for (let i = 0; i <= s.length; i++) {
      if (i === s.length || s[i] === ".") { put(parts, sliced(s, start, i)); start = i + 1; }
    }
    return parts;
  }
  function endsInNumber(s) {
    const parts = splitDots(s);
    if (parts[parts.length - 1] === "") {
      if (parts.length === 1) return false;
      parts.length--;
    }
    const last = parts[parts.length - 1];
    if (last !== "" && matches(/^[0-9]+$/, last)) return true;
    return ipv4Number(last) !== FAILURE;
  }
  function parseIPv4(s) {
    const parts = splitDots(s);
    if (parts[parts.length - 1] === "" && parts.length > 1) parts.length--;
    if (parts.length > 4) return FAILURE;
    const numbers = listOf();
    for (let i = 0; i < parts.length; i++) {
      const n = ipv4Number(parts[i]);
      if (n === FAILURE) return FAILURE;
      put(numbers, n);
    }
    for (let i = 0; i < numbers.length - 1; i++) if (numbers[i] > 255) return FAILURE;
    const last = numbers[numbers.length - 1];
    if (last >= 256 ** (5 - numbers.length)) return FAILURE;
    let ipv4 = last;
    for (let i = 0; i < numbers.length - 1; i++) ipv4 += numbers[i] * 256 ** (3 - i);
    let out = "";
    for (let i = 0; i < 4; i++) {
      out = (i ? "." : "") + out;
      out = "" + (ipv4 % 256) + out;
      ipv4 = floor(ipv4 / 256);
    }
    return out;
  }
  function parseIPv6(input) {
    const address = listOf();
    for (let i = 0; i < 8; i++) put(address, 0);
    let piece = 0, compress = null, p = 0;
    const cs = codePoints(input);
    const at = (i) => cs[i];
    const isDigit = (c) => c >= 0x30 && c <= 0x39;
    if (at(p) === 0x3a) {
      if (at(p + 1) !== 0x3a) return FAILURE;
      p += 2;
      compress = ++piece;
    }
    while (at(p) !== undefined) {
      if (piece === 8) return FAILURE;
      if (at(p) === 0x3a) {
        if (compress !== null) return FAILURE;
        p++;
        compress = ++piece;
        continue;
      }
      let value = 0, length = 0;
      while (length < 4 && at(p) !== undefined && isHex(at(p))) {
        value = value * 0x10 + NativeParseInt(fromCharCode(at(p)), 16);
        p++;
        length++;
      }
      if (at(p) === 0x2e) {
        if (length === 0) return FAILURE;
        p -= length;
        if (piece > 6) return FAILURE;
        let numbersSeen = 0;
        while (at(p) !== undefined) {
          let ipv4Piece = null;
          if (numbersSeen > 0) {
            if (at(p) === 0x2e && numbersSeen < 4) p++;
            else return FAILURE;
          }
          if (at(p) === undefined || !isDigit(at(p))) return FAILURE;
          while (at(p) !== undefined && isDigit(at(p))) {
            const number = at(p) - 0x30;
            if (ipv4Piece === null) ipv4Piece = number;
            else if (ipv4Piece === 0) return FAILURE;
            else ipv4Piece = ipv4Piece * 10 + number;
            if (ipv4Piece > 255) return FAILURE;
            p++;
          }
          address[piece] = address[piece] * 0x100 + ipv4Piece;
          numbersSeen++;
          if (numbersSeen === 2 || numbersSeen === 4) piece++;
        }
        if (numbersSeen !== 4) return FAILURE;
        break;
      } else if (at(p) === 0x3a) {
        p++;
        if (at(p) === undefined) return FAILURE;
      } else if (at(p) !== undefined) return FAILURE;
      address[piece] = value;
      piece++;
    }
    if (compress !== null) {
      let swaps = piece - compress;
      piece = 7;
      while (piece !== 0 && swaps > 0) {
        const t = address[piece];
        address[piece] = address[compress + swaps - 1];
        address[compress + swaps - 1] = t;
        piece--;
        swaps--;
      }
    } else if (piece !== 8) return FAILURE;
    // serialize: the first longest run of two or more zero pieces becomes "::"
    let best = -1, bestLength = 1;
    for (let i = 0; i < 8;) {
      if (address[i] !== 0) { i++; continue; }
      let j = i;
      while (j < 8 && address[j] === 0) j++;
      if (j - i > bestLength) { best = i; bestLength = j - i; }
      i = j;
    }
    let out = "", ignore0 = false;
    for (let i = 0; i < 8; i++) {
      if (ignore0 && address[i] === 0) continue;
      ignore0 = false;
      if (best === i) {
        out += i === 0 ? "::" : ":";
        ignore0 = true;
        continue;
      }
      out += hex16(address[i]);
      if (i !== 7) out += ":";
    }
    return "[" + out + "]";
  }

  // A piece of an IPv6 address in hex, without leading zeros (as Number's toString(16), which
  // is the script's).
  function hex16(n) {
    let out = "";
    do { out = "0123456789abcdef"[n & 15] + out; n >>= 4; } while (n);
    return out;
  }
  function codePoints(s) {
    const cs = chars(s);
    for (let i = 0; i < cs.length; i++) cs[i] = codeOf(cs[i]);
    return cs;
  }

  // RFC 3492's Punycode, for a label that is not ASCII.
  function punycode(label) {
    const input = codePoints(label);
    let n = 128, delta = 0, bias = 72, out = "";
    for (let i = 0; i < input.length; i++) if (input[i] < 128) out += fromCharCode(input[i]);
    const basic = out.length;
    let h = basic;
    if (basic) out += "-";
    const digit = (d) => fromCharCode(d + 22 + 75 * (d < 26));
    const adapt = (d, count, first) => {
      d = first ? floor(d / 700) : d >> 1;
      d += floor(d / count);
      let k = 0;
      while (d > 455) { d = floor(d / 35); k += 36; }
      return k + floor((36 * d) / (d + 38));
    };
    while (h < input.length) {
      let m = Infinity;
      for (let i = 0; i < input.length; i++) if (input[i] >= n && input[i] < m) m = input[i];
      delta += (m - n) * (h + 1);
      n = m;
      for (let i = 0; i < input.length; i++) {
        const c = input[i];
        if (c < n) delta++;
        if (c === n) {
          let q = delta;
          for (let k = 36; ; k += 36) {
            const t = k <= bias ? 1 : k >= bias + 26 ? 26 : k - bias;
            if (q < t) break;
            out += digit(t + ((q - t) % (36 - t)));
            q = floor((q - t) / (36 - t));
          }
          out += digit(q);
          bias = adapt(delta, h + 1, h === basic);
          delta = 0;
          h++;
        }
      }
      delta++;
      n++;
    }
    return out;
  }
  const MAX_LABEL = 1000;
  function domainToASCII(domain) {
    let mapped = domain;
    if (matches(/[^\x00-\x7f]/, domain)) {
      // UTS #46's mapping for what host names mostly hold: the full stops, lower case, NFC.
      let stopped = "";
      for (let i = 0; i < domain.length; i++) {
        const c = apply(charCodeAt, domain, [i]);
        stopped += c === 0x3002 || c === 0xff0e || c === 0xff61 ? "." : domain[i];
      }
      mapped = apply(normalize, lower(stopped), ["NFC"]);
      const labels = splitDots(mapped);
      // Punycode takes time in the square of a label's length: a label longer than any name
      // could use (DNS takes 63 octets) is refused, not encoded for seconds.
      for (let i = 0; i < labels.length; i++) if (labels[i].length > MAX_LABEL) return FAILURE;
      mapped = "";
      for (let i = 0; i < labels.length; i++) {
        const l = labels[i];
        mapped += (i ? "." : "") + (matches(/[^\x00-\x7f]/, l) ? "xn--" + punycode(l) : l);
      }
    } else mapped = lower(domain);
    if (mapped === "") return FAILURE;
    return mapped;
  }
  function parseHost(input, opaque) {
    if (input !== "" && input[0] === "[") { // ""[0] would read Object.prototype[0]
      if (input[input.length - 1] !== "]") return FAILURE;
      return parseIPv6(sliced(input, 1, input.length - 1));
    }
    if (opaque) {
      const cs = codePoints(input);
      for (let i = 0; i < cs.length; i++) if (forbiddenHost(cs[i])) return FAILURE;
      return encodeString(input, sets.c0);
    }
    const domain = decodeUtf8(percentDecode(input), false, false);
    const ascii = domainToASCII(domain);
    if (ascii === FAILURE) return FAILURE;
    const cs = codePoints(ascii);
    for (let i = 0; i < cs.length; i++) if (forbiddenDomain(cs[i])) return FAILURE;
    if (endsInNumber(ascii)) return parseIPv4(ascii);
    return ascii;
  }

  // `s` without the code units `drop` takes at its start (unless `endOnly`) and its end, in time
  // linear in its length (a regular expression ending in +$ takes time in the square of a
  // run's length in QuickJS).
  function trimmed(s, drop, endOnly = false) {
    let start = 0, end = s.length;
    if (!endOnly) while (start < end && drop(apply(charCodeAt, s, [start]))) start++;
    while (end > start && drop(apply(charCodeAt, s, [end - 1]))) end--;
    return sliced(s, start, end);
  }

  // ---- the basic URL parser -----------------------------------------------------------------
  const isAlpha = (c) => c !== undefined && matches(/^[A-Za-z]$/, c);
  const isDriveLetter = (s, normalized) => s.length === 2 && isAlpha(s[0]) && (s[1] === ":" || (!normalized && s[1] === "|"));
  const startsWithDriveLetter = (cps, i) => cps.length - i >= 2 && isDriveLetter(cps[i] + cps[i + 1], false) &&
    (cps.length - i === 2 || cps[i + 2] === "/" || cps[i + 2] === "\\" || cps[i + 2] === "?" || cps[i + 2] === "#");
  const record = () => ({ scheme: "", username: "", password: "", host: null, port: null, path: listOf(), query: null, fragment: null });
  const opaquePath = (url) => typeof url.path === "string";
  const credentials = (url) => url.username !== "" || url.password !== "";
  function shorten(url) {
    const path = url.path;
    if (url.scheme === "file" && path.length === 1 && isDriveLetter(path[0], true)) return;
    if (path.length) path.length--;
  }
  const SINGLE_DOT = (s) => s === "." || lower(s) === "%2e";
  const DOUBLE_DOT = (s) => { s = lower(s); return s === ".." || s === ".%2e" || s === "%2e." || s === "%2e%2e"; };

  // States, by name.
  const S = {
    schemeStart: 1, scheme: 2, noScheme: 3, specialRelativeOrAuthority: 4, pathOrAuthority: 5,
    relative: 6, relativeSlash: 7, specialAuthoritySlashes: 8, specialAuthorityIgnoreSlashes: 9,
    authority: 10, host: 11, hostname: 12, port: 13, file: 14, fileSlash: 15, fileHost: 16,
    pathStart: 17, path: 18, opaquePath: 19, query: 20, fragment: 21,
  };
  // The URL `input` names (relative to `base`), or FAILURE; with `url` and `override`, the
  // setter's change to `url` (in place), or FAILURE.
  function parse(input, base, url, override) {
    if (url === undefined) {
      url = record();
      input = trimmed(input, (c) => c <= 0x20);
    }
    let kept = "";
    for (let i = 0; i < input.length; i++) if (input[i] !== "\t" && input[i] !== "\n" && input[i] !== "\r") kept += input[i];
    input = kept;
    let state = override || S.schemeStart;
    let buffer = "", atSign = false, brackets = false, passwordToken = false;
    const cps = chars(input);
    const special = () => isSpecialScheme(url.scheme);
    for (let p = 0; ; p++) {
      const c = cps[p]; // undefined: the end
      const EOF = c === undefined;
      switch (state) {
        case S.schemeStart:
          if (isAlpha(c)) { buffer += lower(c); state = S.scheme; }
          else if (!override) { state = S.noScheme; p--; }
          else return FAILURE;
          break;
        case S.scheme:
          if (!EOF && matches(/^[A-Za-z0-9+\-.]$/, c)) buffer += lower(c);
          else if (c === ":") {
            if (override) {
              if (isSpecialScheme(url.scheme) !== isSpecialScheme(buffer)) return url;
              if ((credentials(url) || url.port !== null) && buffer === "file") return url;
              if (url.scheme === "file" && url.host === "") return url;
            }
            url.scheme = buffer;
            if (override) {
              if (url.port === defaultPort(url.scheme)) url.port = null;
              return url;
            }
            buffer = "";
            if (url.scheme === "file") state = S.file;
            else if (special() && base && base.scheme === url.scheme) state = S.specialRelativeOrAuthority;
            else if (special()) state = S.specialAuthoritySlashes;
            else if (cps[p + 1] === "/") { state = S.pathOrAuthority; p++; }
            else { url.path = ""; state = S.opaquePath; }
          } else if (!override) { buffer = ""; state = S.noScheme; p = -1; }
          else return FAILURE;
          break;
        case S.noScheme:
          if (!base || (opaquePath(base) && c !== "#")) return FAILURE;
          if (opaquePath(base) && c === "#") {
            url.scheme = base.scheme;
            url.path = base.path;
            url.query = base.query;
            url.fragment = "";
            state = S.fragment;
          } else if (base.scheme !== "file") { state = S.relative; p--; }
          else { state = S.file; p--; }
          break;
        case S.specialRelativeOrAuthority:
          if (c === "/" && cps[p + 1] === "/") { state = S.specialAuthorityIgnoreSlashes; p++; }
          else { state = S.relative; p--; }
          break;
        case S.pathOrAuthority:
          if (c === "/") state = S.authority;
          else { state = S.path; p--; }
          break;
        case S.relative:
          url.scheme = base.scheme;
          if (c === "/" || (special() && c === "\\")) state = S.relativeSlash;
          else {
            url.username = base.username;
            url.password = base.password;
            url.host = base.host;
            url.port = base.port;
            url.path = copied(base.path);
            url.query = base.query;
            if (c === "?") { url.query = ""; state = S.query; }
            else if (c === "#") { url.fragment = ""; state = S.fragment; }
            else if (!EOF) { url.query = null; shorten(url); state = S.path; p--; }
          }
          break;
        case S.relativeSlash:
          if (special() && (c === "/" || c === "\\")) state = S.specialAuthorityIgnoreSlashes;
          else if (c === "/") state = S.authority;
          else {
            url.username = base.username;
            url.password = base.password;
            url.host = base.host;
            url.port = base.port;
            state = S.path;
            p--;
          }
          break;
        case S.specialAuthoritySlashes:
          state = S.specialAuthorityIgnoreSlashes;
          if (c === "/" && cps[p + 1] === "/") p++;
          else p--;
          break;
        case S.specialAuthorityIgnoreSlashes:
          if (c !== "/" && c !== "\\") { state = S.authority; p--; }
          break;
        case S.authority:
          if (c === "@") {
            if (atSign) buffer = "%40" + buffer;
            atSign = true;
            const cs = chars(buffer);
            for (let i = 0; i < cs.length; i++) {
              const ch = cs[i];
              if (ch === ":" && !passwordToken) { passwordToken = true; continue; }
              const encoded = encodeCodePoint(ch, sets.userinfo);
              if (passwordToken) url.password += encoded;
              else url.username += encoded;
            }
            buffer = "";
          } else if (EOF || c === "/" || c === "?" || c === "#" || (special() && c === "\\")) {
            if (atSign && buffer === "") return FAILURE;
            p -= chars(buffer).length + 1;
            buffer = "";
            state = S.host;
          } else buffer += c;
          break;
        case S.host:
        case S.hostname:
          if (override && url.scheme === "file") { p--; state = S.fileHost; }
          else if (c === ":" && !brackets) {
            if (buffer === "") return FAILURE;
            if (override === S.hostname) return FAILURE;
            const host = parseHost(buffer, !special());
            if (host === FAILURE) return FAILURE;
            url.host = host;
            buffer = "";
            state = S.port;
          } else if (EOF || c === "/" || c === "?" || c === "#" || (special() && c === "\\")) {
            p--;
            if (special() && buffer === "") return FAILURE;
            if (override && buffer === "" && (credentials(url) || url.port !== null)) return FAILURE;
            const host = parseHost(buffer, !special());
            if (host === FAILURE) return FAILURE;
            url.host = host;
            buffer = "";
            state = S.pathStart;
            if (override) return url;
          } else {
            if (c === "[") brackets = true;
            if (c === "]") brackets = false;
            buffer += c;
          }
          break;
        case S.port:
          if (!EOF && matches(/^[0-9]$/, c)) buffer += c;
          else if (EOF || c === "/" || c === "?" || c === "#" || (special() && c === "\\") || override) {
            if (buffer !== "") {
              const port = NativeParseInt(buffer, 10);
              if (port > 65535) return FAILURE;
              url.port = port === defaultPort(url.scheme) ? null : port;
              buffer = "";
            }
            if (override) return url;
            state = S.pathStart;
            p--;
          } else return FAILURE;
          break;
        case S.file:
          url.scheme = "file";
          url.host = "";
          if (c === "/" || c === "\\") state = S.fileSlash;
          else if (base && base.scheme === "file") {
            url.host = base.host;
            url.path = copied(base.path);
            url.query = base.query;
            if (c === "?") { url.query = ""; state = S.query; }
            else if (c === "#") { url.fragment = ""; state = S.fragment; }
            else if (!EOF) {
              url.query = null;
              if (!startsWithDriveLetter(cps, p)) shorten(url);
              else url.path = listOf();
              state = S.path;
              p--;
            }
          } else { state = S.path; p--; }
          break;
        case S.fileSlash:
          if (c === "/" || c === "\\") state = S.fileHost;
          else {
            if (base && base.scheme === "file") {
              url.host = base.host;
              if (!startsWithDriveLetter(cps, p) && base.path.length && isDriveLetter(base.path[0], true)) put(url.path, base.path[0]);
            }
            state = S.path;
            p--;
          }
          break;
        case S.fileHost:
          if (EOF || c === "/" || c === "\\" || c === "?" || c === "#") {
            p--;
            if (!override && isDriveLetter(buffer, false)) state = S.path;
            else if (buffer === "") {
              url.host = "";
              if (override) return url;
              state = S.pathStart;
            } else {
              let host = parseHost(buffer, !special());
              if (host === FAILURE) return FAILURE;
              if (host === "localhost") host = "";
              url.host = host;
              if (override) return url;
              buffer = "";
              state = S.pathStart;
            }
          } else buffer += c;
          break;
        case S.pathStart:
          if (special()) {
            state = S.path;
            if (c !== "/" && c !== "\\") p--;
          } else if (!override && c === "?") { url.query = ""; state = S.query; }
          else if (!override && c === "#") { url.fragment = ""; state = S.fragment; }
          else if (!EOF) { state = S.path; if (c !== "/") p--; }
          else if (override && url.host === null) put(url.path, "");
          break;
        case S.path:
          if (EOF || c === "/" || (special() && c === "\\") || (!override && (c === "?" || c === "#"))) {
            const slash = c === "/" || (special() && c === "\\");
            if (DOUBLE_DOT(buffer)) {
              // A URL that is not special and had no segment to go up from keeps an empty
              // path ("sc://h/.." is "sc://h"), as Node.js's parser has it.
              const had = url.path.length;
              shorten(url);
              if (!slash && (special() || had > 0)) put(url.path, "");
            } else if (SINGLE_DOT(buffer) && !slash) put(url.path, "");
            else if (!SINGLE_DOT(buffer)) {
              if (url.scheme === "file" && url.path.length === 0 && isDriveLetter(buffer, false)) buffer = buffer[0] + ":";
              put(url.path, buffer);
            }
            buffer = "";
            if (c === "?") { url.query = ""; state = S.query; }
            if (c === "#") { url.fragment = ""; state = S.fragment; }
          } else buffer += encodeCodePoint(c, sets.path);
          break;
        case S.opaquePath:
          if (c === "?") { url.query = ""; state = S.query; }
          else if (c === "#") { url.fragment = ""; state = S.fragment; }
          else if (!EOF) url.path += encodeCodePoint(c, sets.c0);
          break;
        case S.query:
          if ((!override && c === "#") || EOF) {
            url.query += encodeString(buffer, special() ? sets.specialQuery : sets.query);
            buffer = "";
            if (c === "#") { url.fragment = ""; state = S.fragment; }
          } else if (!EOF) buffer += c;
          break;
        case S.fragment:
          if (!EOF) url.fragment += encodeCodePoint(c, sets.fragment);
          break;
      }
      if (p >= cps.length) break;
    }
    return url;
  }

  function serializePath(url) {
    if (opaquePath(url)) return url.path;
    let out = "";
    for (let i = 0; i < url.path.length; i++) out += "/" + url.path[i];
    return out;
  }
  function serialize(url, excludeFragment) {
    let out = url.scheme + ":";
    if (url.host !== null) {
      out += "//";
      if (credentials(url)) {
        out += url.username;
        if (url.password !== "") out += ":" + url.password;
        out += "@";
      }
      out += url.host;
      if (url.port !== null) out += ":" + url.port;
    } else if (!opaquePath(url) && url.path.length > 1 && url.path[0] === "") out += "/.";
    out += serializePath(url);
    if (url.query !== null) out += "?" + url.query;
    if (!excludeFragment && url.fragment !== null) out += "#" + url.fragment;
    return out;
  }

  // ---- the URL class ------------------------------------------------------------------------
  const records = new NativeWeakMap(); // URL -> { url: record, searchParams }
  function state(self, what) {
    const s = apply(weakGet, records, [self]);
    if (s === undefined) throw new NativeTypeError('Value of "this" must be of type URL (reading ' + what + ")");
    return s;
  }
  // What a URL that does not parse lacks: a scheme, or (one with a scheme, which "needs a
  // scheme" misled) a host and port it can hold; or what its base lacks.
  const SCHEMED = /^[\x00-\x20]*[A-Za-z][A-Za-z0-9+.-]*:/;
  function invalid(input, base) {
    const e = new NativeTypeError(
      "Invalid URL: " + stringify(input) + (base === undefined ? "" : " (against the base " + stringify(base) + ")") +
      (matches(SCHEMED, input)
        ? "; its host or port is not one a URL can hold (a space or a character a host cannot " +
          "have, a bracket left open, a port past 65535): encode such text (encodeURIComponent)"
        : base === undefined
          ? "; a URL needs a scheme (https://...) unless a base URL is given: new URL(path, base)"
          : matches(SCHEMED, base)
            ? "; the base is no URL to resolve against (its host or port is not valid, or it " +
              "takes no path, as a mailto: URL does)"
            : "; the base needs a scheme (https://...)"));
    defineProperty(e, "code", { __proto__: null, value: "ERR_INVALID_URL", writable: true, configurable: true });
    defineProperty(e, "input", { __proto__: null, value: input, writable: true, configurable: true });
    return e;
  }
  function parseWithBase(input, base) {
    let parsedBase;
    if (base !== undefined) {
      parsedBase = parse(usv(base));
      if (parsedBase === FAILURE) return FAILURE;
    }
    return parse(usv(input), parsedBase);
  }
  // The query changed through searchParams: the URL's query follows.
  function paramsChanged(s, serialized) {
    s.url.query = serialized === "" ? null : serialized;
    if (serialized === "" && opaquePath(s.url)) stripTrailingSpaces(s.url);
  }
  function stripTrailingSpaces(url) {
    if (url.fragment !== null || url.query !== null) return;
    url.path = trimmed(url.path, (c) => c === 0x20, true);
  }
  class URL {
    constructor(url, base) {
      if (arguments.length === 0) throw new NativeTypeError('The "url" argument must be specified');
      const parsed = parseWithBase(url, base);
      if (parsed === FAILURE) throw invalid(usv(url), base === undefined ? undefined : usv(base));
      const s = { url: parsed, searchParams: undefined };
      s.searchParams = web.makeParams(parsed.query ?? "", (serialized) => paramsChanged(s, serialized));
      apply(weakSet, records, [this, s]);
    }
    static canParse(url, base) { return parseWithBase(url, base) !== FAILURE; }
    static parse(url, base) {
      try { return new URL(url, base); } catch (_) { return null; }
    }
    get href() { return serialize(state(this, "href").url); }
    set href(value) {
      const s = state(this, "href");
      const parsed = parse(usv(value));
      if (parsed === FAILURE) throw invalid(usv(value));
      s.url = parsed;
      web.replaceParams(s.searchParams, parsed.query ?? "");
    }
    get origin() {
      const { url } = state(this, "origin");
      if (url.scheme === "blob") {
        const inner = parse(serializePath(url));
        return inner !== FAILURE && (inner.scheme === "http" || inner.scheme === "https") ? originOf(inner) : "null";
      }
      return originOf(url);
    }
    get protocol() { return state(this, "protocol").url.scheme + ":"; }
    set protocol(value) { const s = state(this, "protocol"); parse(usv(value) + ":", undefined, s.url, S.schemeStart); }
    get username() { return state(this, "username").url.username; }
    set username(value) {
      const { url } = state(this, "username");
      if (url.host === null || url.host === "" || url.scheme === "file") return;
      url.username = encodeString(usv(value), sets.userinfo);
    }
    get password() { return state(this, "password").url.password; }
    set password(value) {
      const { url } = state(this, "password");
      if (url.host === null || url.host === "" || url.scheme === "file") return;
      url.password = encodeString(usv(value), sets.userinfo);
    }
    get host() {
      const { url } = state(this, "host");
      if (url.host === null) return "";
      return url.port === null ? url.host : url.host + ":" + url.port;
    }
    set host(value) {
      const s = state(this, "host");
      if (opaquePath(s.url)) return;
      parse(usv(value), undefined, s.url, S.host);
    }
    get hostname() { const { url } = state(this, "hostname"); return url.host ?? ""; }
    set hostname(value) {
      const s = state(this, "hostname");
      if (opaquePath(s.url)) return;
      parse(usv(value), undefined, s.url, S.hostname);
    }
    get port() { const { url } = state(this, "port"); return url.port === null ? "" : "" + url.port; }
    set port(value) {
      const s = state(this, "port");
      const url = s.url;
      if (url.host === null || url.host === "" || url.scheme === "file") return;
      value = usv(value);
      if (value === "") url.port = null;
      else parse(value, undefined, url, S.port);
    }
    get pathname() { return serializePath(state(this, "pathname").url); }
    set pathname(value) {
      const s = state(this, "pathname");
      if (opaquePath(s.url)) return;
      s.url.path = listOf();
      parse(usv(value), undefined, s.url, S.pathStart);
    }
    get search() { const { url } = state(this, "search"); return url.query === null || url.query === "" ? "" : "?" + url.query; }
    set search(value) {
      const s = state(this, "search");
      value = usv(value);
      if (value === "") {
        s.url.query = null;
        web.replaceParams(s.searchParams, "");
        if (opaquePath(s.url)) stripTrailingSpaces(s.url);
        return;
      }
      const input = value[0] === "?" ? sliced(value, 1) : value;
      s.url.query = "";
      parse(input, undefined, s.url, S.query);
      web.replaceParams(s.searchParams, input);
    }
    get searchParams() { return state(this, "searchParams").searchParams; }
    get hash() { const { url } = state(this, "hash"); return url.fragment === null || url.fragment === "" ? "" : "#" + url.fragment; }
    set hash(value) {
      const s = state(this, "hash");
      value = usv(value);
      if (value === "") {
        s.url.fragment = null;
        if (opaquePath(s.url)) stripTrailingSpaces(s.url);
        return;
      }
      s.url.fragment = "";
      parse(value[0] === "#" ? sliced(value, 1) : value, undefined, s.url, S.fragment);
    }
    toString() { return serialize(state(this, "toString").url); }
    toJSON() { return serialize(state(this, "toJSON").url); }
    get [Symbol.toStringTag]() { return "URL"; }
  }
  function originOf(url) {
    const scheme = url.scheme;
    if (scheme !== "http" && scheme !== "https" && scheme !== "ws" && scheme !== "wss" && scheme !== "ftp") return "null";
    return url.scheme + "://" + url.host + (url.port === null ? "" : ":" + url.port);
  }
  for (const name of ["href", "origin", "protocol", "username", "password", "host", "hostname", "port", "pathname", "search", "searchParams", "hash"]) {
    const { get, set } = Object.getOwnPropertyDescriptor(URL.prototype, name);
    defineProperty(URL.prototype, name, { __proto__: null, get, set, enumerable: true, configurable: true });
  }
  // What Node.js has as well, for a file's path: a script has no file system to name.
  for (const name of ["createObjectURL", "revokeObjectURL"]) {
    defineProperty(URL, name, { __proto__: null,
      writable: true, configurable: true,
      value: { [name]() { throw new NativeTypeError("URL." + name + " is not available in a script: it has no Blob"); } }[name],
    });
  }
  return URL;
})
