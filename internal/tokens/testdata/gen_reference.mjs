// gen_reference.mjs writes reference.json: token counts from the official
// tiktoken (npm package, OpenAI's Rust core compiled to wasm) for a fixed set
// of strings, a few generated chat bodies and, by name and sha256 only, the
// bodies of /work/shared/corpus when it is present (its content is not
// committed). reference_test.go checks our counter against these figures.
//
// Produced with (tiktoken is resolved from the current directory, so the
// package never lands in the repository):
//
//   mkdir -p /tmp/tkref && cd /tmp/tkref && npm init -y >/dev/null &&
//   npm install tiktoken@1.0.22 &&
//   node /work/main/tokens/testdata/gen_reference.mjs /work/shared/corpus \
//     > /work/main/tokens/testdata/reference.json

import { createRequire } from "node:module";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { join, relative } from "node:path";

const require = createRequire(join(process.cwd(), "noop.js"));
const { get_encoding } = require("tiktoken");
const version = JSON.parse(readFileSync(join(process.cwd(), "node_modules/tiktoken/package.json"), "utf8")).version;

const encNames = ["o200k_base", "cl100k_base"];
const encs = Object.fromEntries(encNames.map((n) => [n, get_encoding(n)]));
// encode_ordinary: special-token text counts as ordinary text, like
// tiktoken-go's Encode(text, nil, nil).
const count = (s) =>
  Object.fromEntries(encNames.map((n) => [n, encs[n].encode_ordinary(s).length]));

const strings = [
  "",
  "hello",
  "Hello, world! This is plain ASCII text.",
  "don't can't won't I'm you're we've they'll she'd IT'S DON'T",
  "rock'n'roll o'clock 'quoted' ''double'' x'",
  "日本語のテキストです。東京は晴れ。",
  "中文测试：你好，世界！这是一个句子。",
  "한국어 문장입니다.",
  "emoji 😀🎉👍🏽 family 👨‍👩‍👧‍👦 flags 🇯🇵🇺🇸",
  "Ünïcödé façade naïve résumé Straße ǅemal",
  "   leading spaces",
  "trailing spaces   ",
  "a  b   c    d\t\te\n\nf\r\ng \n h",
  "\n\n\n\n",
  "    \n    \n        indented\n",
  "tabs\t\t\tand\u00a0nbsp\u2003em space\u3000ideographic",
  "func main() {\n\tfmt.Println(\"hi\")\n\tx := 1234567 + 89\n}\n",
  "def f(x):\n    return x ** 2  # square\n\nprint(f(12))\n",
  "if (a && b || !c) { return a->b[0]; } // comment /* block */",
  "https://example.com/path/to/file.json?query=1&b=2#frag",
  "/usr/local/bin:/usr/bin:/bin ../../etc/passwd C:\\Windows\\System32",
  '{"role":"user","content":"hi"}',
  '{"role":"tool","tool_call_id":"call_1","content":"line1\\nline2\\n\\ttabbed \\"quoted\\" \\u00e9"}',
  '[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]',
  '{"a":[1,2,3],"b":{"c":null,"d":true,"e":-1.5e10}}',
  "3.14159265358979 1234567890 12,345,678 0x1F 1e-9",
  "a".repeat(3000),
  " ".repeat(2000),
  "=".repeat(1000) + "\n" + "-".repeat(1000),
  "ab".repeat(1500),
  "😀".repeat(300),
  "\\n".repeat(500),
  "word ".repeat(400),
  "mixed日本English한국어123abc!!!",
  "<|endoftext|> special text counted as ordinary",
  "\u0301\u0300 combining marks alone e\u0301",
];

// Deterministic generator of chat bodies: large tool messages of code, prose,
// JSON and unicode, serialized the way SDKs do (JSON.stringify).
let seed = 42;
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const pick = (a) => a[Math.floor(rnd() * a.length)];
const words = ["the", "function", "return", "value", "error", "file", "don't", "it's",
  "日本", "😀", "x", "y2", "config", "README.md", "self.assertEqual", "\t", "  ", "\n",
  "{", "}", "()", "=>", "'", "\"", "\\", "/", "12345", "3.5", "naïve", "Straße", "--", "..."];
const text = (n) => Array.from({ length: n }, () => pick(words)).join(pick([" ", "", "\n", "  "]));
const body = (msgs) => {
  const messages = [{ role: "system", content: "You are a helpful coding agent." }];
  for (let i = 0; i < msgs; i++) {
    messages.push({ role: "user", content: text(20) });
    messages.push({ role: "assistant", content: "", tool_calls: [{ id: `call_${i}`, type: "function",
      function: { name: "bash", arguments: JSON.stringify({ command: text(5) }) } }] });
    messages.push({ role: "tool", tool_call_id: `call_${i}`, content: text(300 + Math.floor(rnd() * 600)) });
  }
  return JSON.stringify({ model: "gpt-4o", messages, temperature: 0 });
};
const bodies = [body(2), body(5), body(8)];

const corpus = [];
const dir = process.argv[2];
if (dir && existsSync(dir)) {
  const walk = (d) => readdirSync(d).sort().flatMap((f) => {
    const p = join(d, f);
    return statSync(p).isDirectory() ? walk(p) : [p];
  });
  for (const p of walk(dir).filter((p) => p.endsWith(".last.json"))) {
    const buf = readFileSync(p);
    corpus.push({
      file: relative(dir, p),
      sha256: createHash("sha256").update(buf).digest("hex"),
      counts: count(buf.toString("utf8")),
    });
  }
}

process.stdout.write(JSON.stringify({
  generator: `gen_reference.mjs with npm tiktoken@${version} (encode_ordinary)`,
  strings: strings.map((s) => ({ text: s, counts: count(s) })),
  bodies: bodies.map((s) => ({ text: s, counts: count(s) })),
  corpus,
}, null, 1) + "\n");
