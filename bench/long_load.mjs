// Long context on a running `onegpu serve` (bench/long.sh starts one): a prompt
// of N tokens (token ids, so the count is exact) prefills and decodes; its
// prefill alone (its time to first token with nothing else running: what a
// decoder would wait without chunked prefill) and then the same length arriving
// while 4 decoders stream, with the longest pause they see meanwhile.
// usage: node long_load.mjs BASE_URL N_TOKENS CTX   -> JSON on stdout
import { now, streamCompletion } from './sse.mjs';

const [base, nArg, ctxArg] = process.argv.slice(2);
const n = Number(nArg), ctx = Number(ctxArg);
const stream = (body, onToken, signal) => streamCompletion(base, body, onToken, signal);

// N token ids (a fixed pseudo-random walk over ordinary ids; `salt` makes each
// prompt its own, so the prefix cache never serves one from another)
const promptIds = (salt) => {
  const ids = [];
  let x = 12345 + salt * 7919;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    ids.push(1000 + (x % 100000));
  }
  return ids;
};
const decodeN = 8;
const out = { prompt_tokens_asked: n };

// 1. the long prompt alone: prefill (time to its first token), then decode
let t = [];
const t0 = now();
const u1 = await stream({ prompt: promptIds(1), max_tokens: decodeN, temperature: 0 }, (x) => t.push(x));
out.prompt_tokens = u1?.prompt_tokens;
out.completion_tokens = u1?.completion_tokens;
out.prefill_alone_s = t[0] - t0;
out.prefill_tok_s = u1.prompt_tokens / out.prefill_alone_s;
out.decode_at_long_ctx_tok_s = t.length > 1 ? (t.length - 1) / (t[t.length - 1] - t[0]) : null;
console.error(`phase 1 (alone): ${JSON.stringify(out)}`); // a long run's first figures before the second phase ends

// 2. 4 decoders stream; the long prompt arrives; the decoders' longest pause until its first token
const ac = new AbortController();
const gaps = [], before = [];
let arrived = 0, longFirst = 0;
const decoders = Array.from({ length: 4 }, (_, i) => {
  let last = 0;
  return stream({ prompt: `Decoder ${i} says:`, max_tokens: Math.min(4000, ctx - 64), temperature: 0 }, (x) => {
    if (last && (!longFirst || x <= longFirst)) (arrived && x > arrived ? gaps : before).push(x - last);
    last = x;
  }, ac.signal);
});
await new Promise((r) => setTimeout(r, 3000));
arrived = now();
const u2 = await stream({ prompt: promptIds(2), max_tokens: 2, temperature: 0 }, (x) => { if (!longFirst) longFirst = x; });
ac.abort();
await Promise.all(decoders);
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };
out.prefill_among_4_decoders_s = longFirst - arrived;
out.long_prompt_tokens_2 = u2?.prompt_tokens;
out.decoder_tokens_during_prefill = gaps.length;
out.decode_gap_median_before_s = median(before);
out.decode_gap_median_during_s = median(gaps);
out.longest_pause_s = Math.max(...gaps);
out.longest_pause_vs_unchunked = out.longest_pause_s / out.prefill_alone_s;
console.log(JSON.stringify(out, null, 1));
