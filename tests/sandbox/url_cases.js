// Generates tests/sandbox/url_cases.json: random URLs (absolute, relative to a base, and changed
// through each setter) with what Node.js's URL gives for them, which tests/sandbox/test_url.py
// holds sandbox/url.js to. Run from the repository:
//   node tests/sandbox/url_cases.js > tests/sandbox/url_cases.json
// The seed is fixed, so a run on the same Node.js writes the same file.
"use strict";
let seed = 20261203;
const rnd = () => { seed |= 0; seed = (seed + 0x6d2b79f5) | 0; let t = Math.imul(seed ^ (seed >>> 15), 1 | seed); t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t; return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
const pick = (a) => a[Math.floor(rnd() * a.length)];
const maybe = (p, a) => (rnd() < p ? pick(a) : "");
const COUNT = 1500;

const SCHEMES = ["http", "https", "HTTP", "ftp", "file", "ws", "wss", "mailto", "data", "javascript", "foo", "sc", "blob"];
const SEPARATORS = ["://", "://", "://", ":", ":/", ":///", ":\\\\", "://\\", ":\\/"];
const USERINFO = ["user@", "user:pass@", ":@", "us er:p@ss@", "a:b:c@", "%41@", "@", "ü:ö@"];
const HOSTS = ["example.com", "EXAMPLE.com", "127.0.0.1", "0x7f.1", "1.2.3", "4294967295", "4294967296", "[::1]", "[1:0::]",
  "[::ffff:1.2.3.4]", "[1:2:3:4:5:6:7:8]", "[0:0:1:0:0:1:0:0]", "[::1", "ex ample", "münchen.de", "xn--mnchen-3ya.de",
  "a.b.c.", "%41.com", "exa%2Fmple", "", "localhost", "1.2.3.4.5", "0..0x300", "09.1", "EXAMPLE。com", "a<b", "x_y", "[1::2::3]"];
const PORTS = [":80", ":443", ":8080", ":0", ":65535", ":65536", ":", ":a", ":00080", ":21"];
const PATHS = ["/", "/a/b", "/a/./b/../c", "/%2e%2E/x", "/a b", "/ä", "/../..", "/C:/x", "/c|/y", "\\a\\b", "/a/..", "/%zz",
  "/{}^`", "/a//b", "/.", "/a/%2e", "/x y ", "/\u00a0", "/a\tb\nc"];
const QUERIES = ["?", "?a=1&b=2", "?a b", "?'q'", "?ä", "?a=%zz", "??x", "?`{}"];
const FRAGMENTS = ["#", "#x y", "#ä", "#`", "#a#b", "#<>"];
function absolute() {
  return pick(SCHEMES) + pick(SEPARATORS) + maybe(0.2, USERINFO) + pick(HOSTS) + maybe(0.3, PORTS) +
    maybe(0.8, PATHS) + maybe(0.3, QUERIES) + maybe(0.2, FRAGMENTS) + (rnd() < 0.05 ? "  " : "");
}
const RELATIVE = ["", "/x", "x", "./x", "../x", "../../../../x", "?q", "#f", "//host/p", "\\\\host\\p", "x:y", "C:/a", "C|",
  "file:x", "http:x", "https:/x", ".", "..", "%2e/x", "//", "///x", "  /y  ", "a/b/../../..", "//[::1]:99/", "//user@h"];
const BASES = ["http://h/a/b?c#d", "file:///C:/a/b", "file://host/a", "sc://h/a/b", "mailto:x", "about:blank", "http://h",
  "https://u:p@h:99/a/", "file:///", "sc:/a/b", "data:text/plain,x"];
const PARTS = ["href", "origin", "protocol", "username", "password", "host", "hostname", "port", "pathname", "search", "hash"];
const described = (u) => Object.fromEntries(PARTS.map((k) => [k, u[k]]));
const SETTERS = {
  protocol: ["https", "ftp:", "file", "sc", "HTTP", "a b", "mailto", "ws:"],
  username: ["me", "m e", "", "@:"], password: ["pw", "p w", "", ":@"],
  host: ["example.org", "example.org:81", "ex ample", "[::2]:3", "h:65536", "", "münchen.de", "x:"],
  hostname: ["example.org", "a:1", "", "0x7f.1", "[::1]", "EX.org"],
  port: ["81", "", "80", "65536", "12ab", " 1", "443"],
  pathname: ["/p q", "x/y", "/../z", "", "/ä", "\\a"],
  search: ["?a=1", "b=2", "", "?", "?x y"],
  hash: ["#f", "g h", "", "#"],
};
const out = { node: process.versions.node, absolute: [], relative: [], setters: [] };
for (let i = 0; i < COUNT; i++) {
  const input = absolute();
  let got; try { got = described(new URL(input)); } catch (e) { got = null; }
  out.absolute.push([input, got]);
}
for (let i = 0; i < COUNT / 2; i++) {
  const input = pick(RELATIVE) + maybe(0.3, PATHS) + maybe(0.2, QUERIES), base = pick(BASES);
  let got; try { got = described(new URL(input, base)); } catch (e) { got = null; }
  out.relative.push([input, base, got]);
}
for (let i = 0; i < COUNT / 2; i++) {
  const start = rnd() < 0.7 ? pick(["http://u:p@h:99/a/b?c=1#d", "https://h/", "file:///C:/x", "sc://h/p", "mailto:me", "ws://h:81/"]) : absolute();
  let url; try { url = new URL(start); } catch (e) { continue; }
  const setter = pick(Object.keys(SETTERS)), value = pick(SETTERS[setter]);
  url[setter] = value;
  out.setters.push([start, setter, value, url.href]);
}
console.log(JSON.stringify(out));
