// Drives `onegpu serve` with the official openai npm client (6.x), as users do.
// usage: node openai_client.mjs BASE_URL API_KEY   (BASE_URL like http://127.0.0.1:PORT/v1)
// Every check compares against something computed another way: the same
// request alone (non-streamed, or without company), the text the client itself
// rebuilds from log-prob bytes, or counts the test controls.
import OpenAI from 'openai';
import assert from 'node:assert/strict';

const [base, key] = process.argv.slice(2);
// Under a sanitizer (OG_SANITIZED, set by ctest there: several times slower) the
// concurrent parts run 4 clients of 8 tokens, and 3 companions: the same
// streaming, batching and cancellation code; the plain build runs 8 of 16 and 7.
const sanitized = !!process.env.OG_SANITIZED;
const nConc = sanitized ? 4 : 8, concTokens = sanitized ? 8 : 16;
const client = new OpenAI({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 120000 });
const root = base.replace(/\/v1$/, '');
let checks = 0;
const ok = (name) => { checks++; console.log(`ok ${checks} - ${name}`); };

async function metrics() {
  const r = await fetch(`${root}/metrics`, { headers: { Authorization: `Bearer ${key}` } });
  assert.equal(r.status, 200);
  const m = {};
  for (const line of (await r.text()).split('\n')) {
    const mm = /^(onegpu_[a-z_]+)(\{[^}]*\})? ([-0-9.e+]+)$/.exec(line);
    if (mm) m[mm[1] + (mm[2] || '')] = Number(mm[3]);
  }
  return m;
}

async function chat(content, extra = {}) {
  return client.chat.completions.create({ model: 'any', messages: [{ role: 'user', content }], ...extra });
}

async function streamChat(content, extra = {}, signal, onText) {
  const stream = await client.chat.completions.create(
    { model: 'any', messages: [{ role: 'user', content }], stream: true, ...extra }, { signal });
  const out = { text: '', chunks: [], finish: null, usage: null, logprobs: [] };
  for await (const c of stream) {
    out.chunks.push(c);
    if (c.usage) out.usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta?.content) {
        out.text += ch.delta.content;
        if (onText) onText();
      }
      if (ch.logprobs?.content) out.logprobs.push(...ch.logprobs.content);
      if (ch.finish_reason) out.finish = ch.finish_reason;
    }
  }
  return out;
}

// ---- models and auth
const models = await client.models.list();
assert.equal(models.data.length, 1);
const id = models.data[0].id;
assert.equal((await client.models.retrieve(id)).id, id);
await assert.rejects(client.models.retrieve('no-such-model'), (e) => e instanceof OpenAI.NotFoundError);
ok('models list, retrieve, unknown model is NotFoundError');
const wrong = new OpenAI({ baseURL: base, apiKey: key + 'x', maxRetries: 0 });
await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
ok('a wrong API key is AuthenticationError (401)');

// ---- chat, non-streamed and streamed: the same greedy text
const greedy = { temperature: 0, max_tokens: 12 };
const a = await chat('Tell me about the sea.', greedy);
assert.equal(a.object, 'chat.completion');
assert.equal(a.model, id);
assert.equal(a.choices.length, 1);
assert.equal(a.choices[0].message.role, 'assistant');
assert.equal(typeof a.choices[0].message.content, 'string');
assert.equal(a.choices[0].finish_reason, 'length');
assert.equal(a.usage.completion_tokens, 12);
assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + a.usage.completion_tokens);
assert.ok(a.usage.prompt_tokens >= 4);
ok('chat completion: shape, finish_reason length, usage adds up');
const s = await streamChat('Tell me about the sea.', { ...greedy, stream_options: { include_usage: true } });
assert.equal(s.text, a.choices[0].message.content);
assert.deepEqual(s.chunks[0].choices[0].delta, { role: 'assistant', content: '' });
assert.equal(s.chunks.filter((c) => c.choices[0]?.delta?.role).length, 1);
assert.ok(new Set(s.chunks.map((c) => c.id)).size === 1 && s.chunks[0].id.startsWith('chatcmpl-'));
const last = s.chunks[s.chunks.length - 1];
assert.deepEqual(last.choices, []);
assert.deepEqual(s.usage, a.usage);
assert.equal(s.finish, 'length');
ok('streamed chat equals the non-streamed text; role once; usage chunk with choices []');

// ---- log-probs: bytes rebuild the text; greedy picks the top alternative
const lp = await chat('Name a color.', { ...greedy, logprobs: true, top_logprobs: 3 });
const entries = lp.choices[0].logprobs.content;
assert.equal(entries.length, 12);
const bytes = Buffer.from(entries.flatMap((e) => e.bytes));
assert.equal(bytes.toString('utf8'), lp.choices[0].message.content);
for (const e of entries) {
  assert.equal(e.top_logprobs.length, 3);
  assert.ok(e.logprob <= 0);
  assert.ok(Math.abs(e.logprob - e.top_logprobs[0].logprob) < 1e-6, 'greedy = most likely');
  assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
}
const lps = await streamChat('Name a color.', { ...greedy, logprobs: true, top_logprobs: 3 });
assert.deepEqual(lps.logprobs.map((e) => [e.token, e.logprob]), entries.map((e) => [e.token, e.logprob]));
ok('logprobs: bytes rebuild the content, greedy token is top_logprobs[0], same when streamed');

// ---- stop strings across token boundaries, streamed and not
const full = a.choices[0].message.content;
const cut = Math.floor(full.length / 3);
const stop = full.slice(cut, cut + 4);
const first = full.indexOf(stop);
const st = await chat('Tell me about the sea.', { ...greedy, stop: [stop] });
assert.equal(st.choices[0].message.content, full.slice(0, first));
assert.equal(st.choices[0].finish_reason, 'stop');
const sst = await streamChat('Tell me about the sea.', { ...greedy, stop });
assert.equal(sst.text, full.slice(0, first));
assert.equal(sst.finish, 'stop');
for (const c of sst.chunks) assert.ok(!(c.choices[0]?.delta?.content ?? '').includes(stop));
ok(`stop string ${JSON.stringify(stop)}: text ends before it, finish_reason stop, stream never leaks it`);

// ---- seed: same seed, same text
const sampled = { temperature: 1, top_p: 0.9, max_tokens: 10, seed: 42 };
const r1 = await chat('Write a word.', sampled), r2 = await chat('Write a word.', sampled);
assert.equal(r1.choices[0].message.content, r2.choices[0].message.content);
assert.equal(r1.system_fingerprint, r2.system_fingerprint);
ok('same seed gives the same sampled text');

// ---- completions
const cp = await client.completions.create({ model: id, prompt: 'The cat sat on', max_tokens: 6, temperature: 0, logprobs: 2 });
assert.equal(cp.object, 'text_completion');
assert.equal(cp.choices[0].logprobs.tokens.length, 6);
assert.equal(cp.choices[0].logprobs.tokens.join(''), cp.choices[0].text);
assert.equal(cp.usage.completion_tokens, 6);
// text_offset counts characters (code points) of the text before each token
const cps = (t) => Array.from(t).length;
cp.choices[0].logprobs.text_offset.forEach((o, i) =>
  assert.equal(o, cps(cp.choices[0].logprobs.tokens.slice(0, i).join(''))));
const cel = await client.completions.create({ model: id, prompt: 'Größe', max_tokens: 4, temperature: 0, echo: true, logprobs: 0 });
assert.equal(cel.choices[0].logprobs.text_offset[0], 5); // after the 5 characters (7 bytes) of the echoed prompt
const ce = await client.completions.create({ model: id, prompt: 'The cat sat on', max_tokens: 6, temperature: 0, echo: true });
assert.equal(ce.choices[0].text, 'The cat sat on' + cp.choices[0].text);
let ctext = '';
for await (const c of await client.completions.create({ model: id, prompt: 'The cat sat on', max_tokens: 6, temperature: 0, stream: true }))
  ctext += c.choices[0]?.text ?? '';
assert.equal(ctext, cp.choices[0].text);
const two = await client.completions.create({ model: id, prompt: ['The cat sat on', 'A dog'], max_tokens: 3, temperature: 0 });
assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
assert.equal(two.usage.completion_tokens, 6); // 3 per prompt: neither text may be empty
assert.ok(two.choices[0].text.length > 0 && two.choices[1].text.length > 0);
assert.equal(two.choices[0].text, cp.choices[0].text.slice(0, two.choices[0].text.length));
ok('completions: logprobs tokens make the text, echo, streamed, two prompts');

// ---- errors the client maps to exceptions
await assert.rejects(chat('hi', { n: 9 }), // over the server's --parallel 8
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'n' && /'n' must be an integer in 1\.\.8/.test(e.message));
await assert.rejects(chat('hi', { max_tokens: 100000 }),
  (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
ok('n over --parallel and an over-long request are BadRequestError with clear messages');

// ---- nConc concurrent streams: each equals its text alone
const prompts = Array.from({ length: nConc }, (_, i) => `Story number ${i}: once upon a time`);
const alone = [];
for (const p of prompts) alone.push((await chat(p, { temperature: 0, max_tokens: concTokens })).choices[0].message.content);
const together = await Promise.all(prompts.map((p) => streamChat(p, { temperature: 0, max_tokens: concTokens })));
together.forEach((t, i) => { assert.equal(t.finish, 'length'); assert.equal(t.text, alone[i]); });
ok(`${nConc} concurrent streaming clients all finish, each with the text it gets alone`);

// ---- strata_reproducible: alone vs alongside nConc - 1 others, bit-identical log-probs. This
// server has no --vram, so every request computes the same way and this checks that
// the flag is accepted and batch invariance holds with it; what the flag itself buys
// (device numerics on the host under placement and migrations) is checked in server.sh.
const repro = { temperature: 0.8, seed: 7, max_tokens: concTokens - 4, logprobs: true, top_logprobs: 2, strata_reproducible: 'required' };
const soloR = await chat('Reproducible please.', repro);
const [withR] = await Promise.all([chat('Reproducible please.', repro),
  ...prompts.slice(0, nConc - 1).map((p, i) => streamChat(p, { temperature: 1, seed: i, max_tokens: concTokens / 2 + i }))]);
assert.deepEqual(withR.choices[0].logprobs.content, soloR.choices[0].logprobs.content);
assert.equal(withR.choices[0].message.content, soloR.choices[0].message.content);
ok(`strata_reproducible required: same tokens and log-probs alone and among ${nConc - 1} others`);

// ---- 200 cancellations at random moments leave nothing behind (60 under a sanitizer)
const waves = sanitized ? 3 : 10, nCancel = waves * 20;
const before = await metrics();
let aborted = 0;
for (let wave = 0; wave < waves; wave++) {
  await Promise.all(Array.from({ length: 20 }, async (_, i) => {
    // even i: cancelled a random moment after its first token (so surely admitted,
    // whatever the machine's load); odd i: at a random moment after sending, which
    // may be before the engine saw it
    const ac = new AbortController();
    const delay = Math.floor(Math.random() * 250);
    let armed = false;
    const arm = (ms) => { if (!armed) { armed = true; setTimeout(() => ac.abort(), ms); } };
    if (i % 2) arm(delay);
    try {
      await streamChat(`Cancel me ${wave} ${i} ` + 'long prompt '.repeat(i * 5), { max_tokens: 250 }, ac.signal,
        i % 2 ? undefined : () => arm(delay / 5));
    } catch (e) {
      if (!(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError')) throw e;
    }
    aborted++;
  }));
}
assert.equal(aborted, nCancel);
let m;
for (let k = 0; k < 100; k++) {
  m = await metrics();
  if (m.onegpu_sequences_running === 0 && m.onegpu_queue_depth === 0 && m.onegpu_kv_blocks_used === 0) break;
  await new Promise((r) => setTimeout(r, 100));
}
assert.equal(m.onegpu_sequences_running, 0);
assert.equal(m.onegpu_queue_depth, 0);
assert.equal(m.onegpu_kv_blocks_used, 0);
const cancelled = m.onegpu_sequences_cancelled_total - before.onegpu_sequences_cancelled_total;
const finished = m.onegpu_sequences_finished_total - before.onegpu_sequences_finished_total;
const admitted = m.onegpu_sequences_admitted_total - before.onegpu_sequences_admitted_total;
assert.equal(cancelled + finished, admitted); // (an abort before the body was sent never reaches the engine)
assert.ok(admitted >= nCancel / 2 && admitted <= nCancel, `admitted ${admitted}: the ${nCancel / 2} cancelled after a token at least`);
assert.ok(cancelled >= nCancel / 2, `most of them were cancelled (${cancelled})`);
ok(`${nCancel} requests cancelled at random moments: 0 running, 0 queued, 0 KV blocks (${cancelled} cancelled)`);

// ---- the server still answers
const after = await chat('Still there?', { temperature: 0, max_tokens: 4 });
assert.equal(after.usage.completion_tokens, 4);
ok('still serving');
console.log(`openai_client: ${checks} checks passed`);
