// Load figures of a running `onegpu serve` (bench/serve.sh starts one):
// decode tok/s for 1, 4 and 8 concurrent users, the longest pause the
// decoders see when a long prompt arrives, compared with that prompt's prefill
// time alone (what the pause would be without chunked prefill), and the time to
// first token of a short request sent 0.3 s after a long prompt, same run.
// usage: node serve_load.mjs BASE_URL LONG_PROMPT_WORDS   -> JSON on stdout
import { now, streamCompletion } from './sse.mjs';

const [base, wordsArg] = process.argv.slice(2);
const words = Number(wordsArg || 1500);
const stream = (body, onToken) => streamCompletion(base, body, onToken);

async function users(n, tokens) {
  const times = Array.from({ length: n }, () => []);
  const t0 = now();
  await Promise.all(times.map((t, i) => stream({ prompt: `User ${i} says:`, max_tokens: tokens, temperature: 0,
    logit_bias: {} }, (x) => t.push(x))));
  const per = times.map((t) => (t.length - 1) / (t[t.length - 1] - t[0]));
  const total = times.reduce((a, t) => a + t.length, 0) / (now() - t0);
  return { users: n, total_tok_s: total, slowest_tok_s: Math.min(...per) };
}

const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };
const out = { runs: [] };
await users(1, 8); // warm-up
for (const n of [1, 4, 8]) out.runs.push(await users(n, 48));

// the long prompt alone: time to its first token = its prefill time without company
const long = { prompt: 'word '.repeat(words), max_tokens: 1, temperature: 0 };
let first = 0;
const ta = now();
const lu = await stream(long, (x) => { if (!first) first = x; });
const prefillAlone = first - ta;

// 4 decoders, then the long prompt arrives
const gaps = [], before = [];
let arrived = 0;
const decoders = Array.from({ length: 4 }, (_, i) => {
  let last = 0;
  return stream({ prompt: `Decoder ${i}:`, max_tokens: 400, temperature: 0 }, (x) => {
    if (last) (arrived && x > arrived ? gaps : before).push(x - last);
    last = x;
  });
});
await new Promise((r) => setTimeout(r, 1500));
arrived = now();
let longFirst = 0;
await stream(long, (x) => { if (!longFirst) longFirst = x; });
const prefillShared = longFirst - arrived;
await Promise.all(decoders);

// a short request sent 0.3 s after the long prompt (no other load): its time to
// first token, with the prefill budget shared among the prompts (issue 12 item 5)
let longT = 0, shortT = 0;
const tl = now();
const longDone = stream(long, (x) => { if (!longT) longT = x; });
await new Promise((r) => setTimeout(r, 300));
const ts = now();
await stream({ prompt: 'A short question:', max_tokens: 16, temperature: 0 }, (x) => { if (!shortT) shortT = x; });
await longDone;
out.short_after_long_ttft_s = shortT - ts;
out.long_ttft_with_short_s = longT - tl;
out.long_prompt_tokens = lu?.prompt_tokens;
out.prefill_alone_s = prefillAlone;
out.prefill_among_4_decoders_s = prefillShared;
out.decode_gap_median_before_s = median(before);
out.longest_pause_s = Math.max(...gaps);
out.longest_pause_vs_unchunked = out.longest_pause_s / prefillAlone;
console.log(JSON.stringify(out, null, 1));
