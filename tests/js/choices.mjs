// `n` > 1 and `best_of` through `onegpu serve`, driven by the official openai
// npm client (6.x). Each check compares against requests computed another way:
// the same prompt with n: 1 (and seed + i for choice i, the documented rule),
// the streamed pieces the client assembles against the non-streamed answer, and
// best_of against the log-prob sums the client adds up itself.
// usage: node choices.mjs BASE_URL PARALLEL
import OpenAI from 'openai';
import assert from 'node:assert/strict';

const [base, parallelArg] = process.argv.slice(2);
const parallel = Number(parallelArg);
const client = new OpenAI({ baseURL: base, apiKey: 'none', maxRetries: 0, timeout: 120000 });
const root = base.replace(/\/v1$/, '');
let checks = 0;
const ok = (name) => { checks++; console.log(`ok ${checks} - ${name}`); };
const msgs = (content) => [{ role: 'user', content }];
const lpOf = (c) => c.logprobs.content.map((e) => [e.token, e.logprob]);

async function metrics() {
  const m = {};
  for (const line of (await (await fetch(`${root}/metrics`)).text()).split('\n')) {
    const mm = /^(onegpu_[a-z_]+) ([-0-9.e+]+)$/.exec(line);
    if (mm) m[mm[1]] = Number(mm[2]);
  }
  return m;
}

// ---- n: 4 at temperature 0: four identical choices, each the n: 1 answer
const greedy = { model: 'any', temperature: 0, max_tokens: 10, logprobs: true, top_logprobs: 2 };
const long = 'Describe the harbour at dawn, the boats, the gulls and the fish market. '.repeat(6);
const four = await client.chat.completions.create({ ...greedy, messages: msgs(long), n: 4 });
const one2 = await client.chat.completions.create({ ...greedy, messages: msgs(long) });
assert.ok(one2.usage.prompt_tokens > 64, 'the prompt spans whole KV blocks and a part');
assert.deepEqual(four.choices.map((c) => c.index), [0, 1, 2, 3]);
for (const c of four.choices) {
  assert.equal(c.message.content, one2.choices[0].message.content);
  assert.deepEqual(lpOf(c), lpOf(one2.choices[0]));
  assert.equal(c.finish_reason, one2.choices[0].finish_reason);
}
assert.equal(four.usage.prompt_tokens, one2.usage.prompt_tokens); // the prompt counted once
assert.equal(four.usage.completion_tokens, 4 * one2.usage.completion_tokens);
assert.equal(four.usage.total_tokens, four.usage.prompt_tokens + four.usage.completion_tokens);
assert.equal(one2.choices.length, 1);
ok('n: 4 at temperature 0: 4 choices equal to n: 1 (text, tokens, log-probs); prompt tokens counted once');

// ---- n: 3 sampled with a seed: reproducible, and choice i is seed + i alone
const sampled = { model: 'any', temperature: 1, max_tokens: 8, seed: 1000, logprobs: true };
const q = 'Write three words about rain.';
const s1 = await client.chat.completions.create({ ...sampled, messages: msgs(q), n: 3 });
const s2 = await client.chat.completions.create({ ...sampled, messages: msgs(q), n: 3 });
assert.deepEqual(s1.choices, s2.choices);
for (let i = 0; i < 3; i++) {
  const alone = await client.chat.completions.create({ ...sampled, messages: msgs(q), seed: 1000 + i });
  assert.equal(s1.choices[i].message.content, alone.choices[0].message.content);
  assert.deepEqual(lpOf(s1.choices[i]), lpOf(alone.choices[0]));
}
assert.ok(new Set(s1.choices.map((c) => c.message.content)).size > 1, 'three seeds, not one text');
ok('n: 3 with seed: the same twice; choice i is the n: 1 answer with seed + i');

// ---- streamed n: 2: the client assembles both choices by index
const stream = await client.chat.completions.create({
  ...sampled, messages: msgs(q), n: 2, stream: true, stream_options: { include_usage: true } });
const got = [{ text: '', lp: [], finish: null, role: 0 }, { text: '', lp: [], finish: null, role: 0 }];
let usage = null, chunks = 0;
for await (const c of stream) {
  chunks++;
  if (c.usage) usage = c.usage;
  for (const ch of c.choices) {
    const g = got[ch.index];
    assert.ok(g, `chunk for index ${ch.index}`);
    if (ch.delta?.role) g.role++;
    if (ch.delta?.content) g.text += ch.delta.content;
    if (ch.logprobs?.content) g.lp.push(...ch.logprobs.content.map((e) => [e.token, e.logprob]));
    if (ch.finish_reason) g.finish = ch.finish_reason;
  }
}
assert.ok(chunks > 4);
for (let i = 0; i < 2; i++) {
  assert.equal(got[i].role, 1);
  assert.equal(got[i].text, s1.choices[i].message.content);
  assert.deepEqual(got[i].lp, lpOf(s1.choices[i]));
  assert.equal(got[i].finish, s1.choices[i].finish_reason);
}
assert.equal(usage.prompt_tokens, s1.usage.prompt_tokens);
assert.equal(usage.completion_tokens, got.reduce((a, g) => a + g.lp.length, 0));
ok('streamed n: 2: both choices assembled by index equal the non-streamed ones; usage once');

// ---- completions: 2 prompts x n: 2, index = prompt * n + choice
const prompts = ['The cat sat on', 'A dog ran to'];
const pn = await client.completions.create({ model: 'any', prompt: prompts, n: 2, max_tokens: 5, temperature: 0 });
assert.deepEqual(pn.choices.map((c) => c.index), [0, 1, 2, 3]);
let promptTokens = 0;
for (let p = 0; p < 2; p++) {
  const alone = await client.completions.create({ model: 'any', prompt: prompts[p], max_tokens: 5, temperature: 0 });
  promptTokens += alone.usage.prompt_tokens;
  for (let j = 0; j < 2; j++) assert.equal(pn.choices[p * 2 + j].text, alone.choices[0].text);
}
assert.equal(pn.usage.prompt_tokens, promptTokens);
ok('completions with 2 prompts and n: 2: 4 choices in prompt-major order, each the n: 1 text');

// ---- best_of: the n candidates whose log-probs sum highest, best first
const bo = { model: 'any', prompt: 'Once upon a time', max_tokens: 6, temperature: 1, seed: 77, logprobs: 0 };
const all = await client.completions.create({ ...bo, n: 4 });
const sum = (c) => c.logprobs.token_logprobs.reduce((a, x) => a + x, 0);
const ranked = all.choices.map((c) => [sum(c), c.text]).sort((a, b) => b[0] - a[0]);
const best = await client.completions.create({ ...bo, n: 2, best_of: 4 });
assert.deepEqual(best.choices.map((c) => c.index), [0, 1]);
assert.deepEqual(best.choices.map((c) => c.text), [ranked[0][1], ranked[1][1]]);
assert.ok(Math.abs(sum(best.choices[0]) - ranked[0][0]) < 1e-9);
assert.equal(best.usage.completion_tokens, all.usage.completion_tokens); // every candidate is generated
const bestNoLp = await client.completions.create({ ...bo, logprobs: undefined, best_of: 4 });
assert.equal(bestNoLp.choices.length, 1);
assert.equal(bestNoLp.choices[0].text, ranked[0][1]);
assert.equal(bestNoLp.choices[0].logprobs, null);
ok('best_of 4: the n best by summed log-prob (checked against n: 4 with the same seed), best first');

// ---- refusals: each a 400 naming its parameter
const bad = async (body, param, path = 'chat/completions') => {
  const r = await fetch(`${base}/${path}`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'any', ...(path === 'completions' ? { prompt: 'x' } : { messages: msgs('x') }), ...body }) });
  assert.equal(r.status, 400, JSON.stringify(body));
  const j = await r.json();
  assert.equal(j.error.param, param);
  assert.ok(j.error.message.length > 10);
  return j.error.message;
};
await bad({ n: 0 }, 'n');
assert.match(await bad({ n: parallel + 1 }, 'n'), new RegExp(`1\\.\\.${parallel}`));
await bad({ n: '2' }, 'n');
await bad({ n: 1.5 }, 'n');
await bad({ n: 3, best_of: 2 }, 'best_of', 'completions');
await bad({ best_of: 2, stream: true }, 'best_of', 'completions');
await bad({ best_of: parallel + 1 }, 'best_of', 'completions');
ok('n 0, n over --parallel, n not an integer, best_of < n, streamed best_of > n, best_of over --parallel: 400');

// ---- a client that leaves mid-stream: all n choices are freed
const ac = new AbortController();
const gone = await client.chat.completions.create(
  { model: 'any', messages: msgs(long), n: 4, max_tokens: 400, temperature: 1, stream: true }, { signal: ac.signal });
let seen = 0;
try {
  for await (const c of gone) if (c.choices.length && ++seen === 12) ac.abort();
} catch (e) {
  assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError', String(e));
}
let m;
for (let k = 0; k < 100; k++) {
  m = await metrics();
  if (m.onegpu_sequences_running === 0 && m.onegpu_kv_blocks_used === 0) break;
  await new Promise((r) => setTimeout(r, 100));
}
assert.equal(m.onegpu_sequences_running, 0);
assert.equal(m.onegpu_kv_blocks_used, 0);
assert.ok(m.onegpu_sequences_cancelled_total >= 4);
ok('a streamed n: 4 abandoned mid-way: all 4 cancelled, no KV block held');
console.log(`choices.mjs: ${checks} checks passed`);
