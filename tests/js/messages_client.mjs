// Drives POST /v1/messages (+ count_tokens) with the official @anthropic-ai/sdk
// and POST /v1/responses with the official openai client, as agent tools call them.
// usage: node messages_client.mjs BASE API_KEY [BASE_THINKING]
//   BASE like http://127.0.0.1:PORT (a V3 model); BASE_THINKING: a server whose
//   model has a thinking mode (V3.1 encoding), for the thinking blocks.
// References: the same request non-streamed (temperature 0: the stream
// reassembled by the SDK must equal it), ajv (an outside JSON Schema validator)
// for tool inputs, count_tokens against usage, the SDKs' own error classes.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import Ajv from 'ajv';
import assert from 'node:assert/strict';

const [base, key, baseThinking] = process.argv.slice(2);
// OG_WRITE_SEEDS=DIR: every request body the clients send is also written as a
// fuzz_requests seed (tests/fuzz/gen_request_seeds.sh): a selector byte, the body
const seedDir = process.env.OG_WRITE_SEEDS;
const selector = { '/v1/chat/completions': 0, '/v1/completions': 1, '/v1/messages': 2, '/v1/messages/count_tokens': 3,
  '/v1/responses': 4 };
const recording = async (url, init) => {
  const sel = selector[new URL(url).pathname];
  if (seedDir && sel !== undefined && typeof init?.body === 'string') {
    const { createHash } = await import('node:crypto');
    const { writeFileSync } = await import('node:fs');
    const bytes = Buffer.concat([Buffer.from([sel]), Buffer.from(init.body)]);
    writeFileSync(`${seedDir}/js_${createHash('sha1').update(bytes).digest('hex').slice(0, 16)}`, bytes);
  }
  return fetch(url, init);
};
const client = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 120000, fetch: recording });
const oa = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 120000, fetch: recording });
const ajv = new Ajv({ strict: false });
let checks = 0;
const ok = (name) => { checks++; console.log(`ok ${checks} - ${name}`); };
const user = (content) => [{ role: 'user', content }];
// the prompt's tokens in Anthropic's usage: those not read from the cache plus those read from it
const promptOf = (u) => u.input_tokens + (u.cache_read_input_tokens ?? 0);
const noIds = (blocks) => blocks.map((b) => (b.type === 'tool_use' ? { ...b, id: 'x' } : b));

// ---- text messages: shape, usage = count_tokens, stream = non-stream
const greedy = { model: 'any-model', max_tokens: 12, temperature: 0 };
const a = await client.messages.create({ ...greedy, messages: user('Tell me about the sea.') });
assert.equal(a.type, 'message');
assert.equal(a.role, 'assistant');
assert.match(a.id, /^msg_[A-Za-z0-9]{24}$/);
assert.equal(a.content.length, 1);
assert.equal(a.content[0].type, 'text');
assert.ok(a.content[0].text.length > 0);
assert.equal(a.stop_reason, 'max_tokens');
assert.equal(a.stop_sequence, null);
assert.equal(a.usage.output_tokens, 12);
assert.equal(a.usage.cache_read_input_tokens, 0);
const count = await client.messages.countTokens({ model: 'any-model', messages: user('Tell me about the sea.') });
assert.equal(count.input_tokens, a.usage.input_tokens);
ok('messages.create: a text block, stop_reason max_tokens, usage; count_tokens = usage.input_tokens');

const events = [];
const stream = client.messages.stream({ ...greedy, messages: user('Tell me about the sea.') });
stream.on('streamEvent', (ev) => events.push(ev.type));
let textEvents = '';
stream.on('text', (t) => { textEvents += t; });
const s = await stream.finalMessage();
assert.deepEqual(s.content, a.content);
assert.equal(textEvents, a.content[0].text);
assert.equal(s.stop_reason, a.stop_reason);
assert.deepEqual(s.usage, a.usage);
assert.deepEqual(events.slice(0, 2), ['message_start', 'content_block_start']); // the SDK drops ping
assert.deepEqual(events.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
assert.ok(events.slice(2, -3).every((t) => t === 'content_block_delta'));
ok('messages.stream: the SDK reassembles the non-streamed message; events in order');

// raw events: ping after message_start, indexes, text_delta pieces
const raw = await client.messages.create({ ...greedy, messages: user('Tell me about the sea.'), stream: true });
const rawTypes = [];
let rawText = '';
for await (const ev of raw) {
  rawTypes.push(ev.type);
  if (ev.type === 'content_block_delta') {
    assert.equal(ev.index, 0);
    assert.equal(ev.delta.type, 'text_delta');
    rawText += ev.delta.text;
  }
  if (ev.type === 'message_start') assert.deepEqual(ev.message.content, []);
}
assert.equal(rawText, a.content[0].text);
assert.equal(rawTypes[0], 'message_start');
ok('stream: true: raw events iterate, text_delta pieces add up');

// a prompt read from the prefix cache: message_start already says how much (it goes out at admission,
// after the prefix lookup), the same number as message_delta and the non-streamed usage
const long = user('The sea, the sea. '.repeat(40));
const warm = await client.messages.create({ ...greedy, messages: long }); // its full blocks stay cached
const cachedStream = client.messages.stream({ ...greedy, messages: long });
let startUsage = null;
// a copy: the SDK's snapshot shares this object and message_delta updates it later
cachedStream.on('streamEvent', (ev) => { if (ev.type === 'message_start') startUsage = structuredClone(ev.message.usage); });
const cachedMsg = await cachedStream.finalMessage();
assert.ok(cachedMsg.usage.cache_read_input_tokens >= 64, JSON.stringify(cachedMsg.usage));
assert.equal(startUsage.cache_read_input_tokens, cachedMsg.usage.cache_read_input_tokens);
// input_tokens are the prompt's tokens not read from the cache (Anthropic's usage; llama-server's too):
// with cache_read_input_tokens, the prompt, as count_tokens counts it
const countLong = await client.messages.countTokens({ model: 'any-model', messages: long });
assert.equal(promptOf(startUsage), countLong.input_tokens);
assert.equal(promptOf(cachedMsg.usage), countLong.input_tokens);
assert.equal(promptOf(warm.usage), countLong.input_tokens);
assert.equal(startUsage.output_tokens, 0);
assert.deepEqual(cachedMsg.content, warm.content);
ok(`messages.stream of a cached prompt: message_start says cache_read_input_tokens ${startUsage.cache_read_input_tokens}, as the end does`);

// stop_sequences: cut right before the first match, named in stop_sequence
const text = a.content[0].text;
const stop = text.slice(Math.floor(text.length / 2), Math.floor(text.length / 2) + 3);
const cut = await client.messages.create({ ...greedy, messages: user('Tell me about the sea.'),
  stop_sequences: ['\u0001never', stop] });
assert.equal(cut.stop_reason, 'stop_sequence');
assert.equal(cut.stop_sequence, stop);
assert.equal(cut.content.length ? cut.content[0].text : '', text.slice(0, text.indexOf(stop)));
ok('stop_sequences: stop_reason stop_sequence, the matched string, the text before it');

// system (string and blocks) counts in the prompt, and the same either way
const c1 = await client.messages.countTokens({ model: 'm', system: 'You are terse.', messages: user('Hi') });
const c2 = await client.messages.countTokens({ model: 'm', messages: user('Hi'),
  system: [{ type: 'text', text: 'You are ' }, { type: 'text', text: 'terse.' }] });
const c0 = await client.messages.countTokens({ model: 'm', messages: user('Hi') });
assert.equal(c1.input_tokens, c2.input_tokens);
assert.ok(c1.input_tokens > c0.input_tokens);
ok('system as a string or text blocks: the same prompt, longer than without');

// x-api-key and Authorization: Bearer both accepted
const bearer = new Anthropic({ baseURL: base, apiKey: null, authToken: key, maxRetries: 0 });
assert.equal((await bearer.messages.countTokens({ model: 'm', messages: user('Hi') })).input_tokens, c0.input_tokens);
ok('authToken (Authorization: Bearer) works as x-api-key does');

// ---- tools: forced calls (random weights still call), inputs valid, round trip
const weather = { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer' } },
  required: ['city', 'days'], additionalProperties: false };
const clock = { type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['zone'] };
const tools = [{ name: 'get_weather', description: 'The weather forecast', input_schema: weather },
  { name: 'get_time', description: 'The time', input_schema: clock }];
const ask = user('What is the weather in Paris?');
const tcall = { model: 'm', max_tokens: 80, temperature: 0, tools, messages: ask };
const t = await client.messages.create({ ...tcall, tool_choice: { type: 'any' } });
assert.equal(t.stop_reason, 'tool_use');
const uses = t.content.filter((b) => b.type === 'tool_use');
assert.ok(uses.length >= 1);
for (const u of uses) {
  assert.match(u.id, /^toolu_[A-Za-z0-9]+$/);
  const schema = tools.find((x) => x.name === u.name)?.input_schema;
  assert.ok(schema, `a tool_use names a tool: ${u.name}`);
  assert.equal(typeof u.input, 'object');
  assert.ok(ajv.validate(schema, u.input), `input ${JSON.stringify(u.input)} against ${u.name}: ${ajv.errorsText()}`);
}
ok(`tool_choice any: stop_reason tool_use, ${uses.length} tool_use block(s), inputs valid (ajv)`);
const tsEvents = [];
const ts = client.messages.stream({ ...tcall, tool_choice: { type: 'any' } });
ts.on('streamEvent', (ev) => { if (ev.type === 'content_block_delta') tsEvents.push(ev.delta.type); });
const tsm = await ts.finalMessage();
assert.deepEqual(noIds(tsm.content), noIds(t.content));
assert.equal(tsm.stop_reason, 'tool_use');
assert.ok(tsEvents.includes('input_json_delta'));
ok('tool calls streamed: input_json_delta pieces; the SDK rebuilds the same inputs');

const named = await client.messages.create({ ...tcall, tool_choice: { type: 'tool', name: 'get_time' } });
const nu = named.content.filter((b) => b.type === 'tool_use');
assert.ok(nu.length >= 1 && nu.every((b) => b.name === 'get_time' && ajv.validate(clock, b.input)));
const single = await client.messages.create({ ...tcall,
  tool_choice: { type: 'any', disable_parallel_tool_use: true } });
assert.equal(single.content.filter((b) => b.type === 'tool_use').length, 1);
const none = await client.messages.create({ ...tcall, max_tokens: 16, tool_choice: { type: 'none' } });
assert.equal(none.content.filter((b) => b.type === 'tool_use').length, 0);
assert.notEqual(none.stop_reason, 'tool_use');
ok('tool_choice tool (only that tool), disable_parallel_tool_use (one call), none (no call)');

const round = [...ask, { role: 'assistant', content: t.content },
  { role: 'user', content: uses.map((u, i) => ({ type: 'tool_result', tool_use_id: u.id,
    content: i ? [{ type: 'text', text: '12:00' }] : 'Sunny, 21 C', is_error: false })) }];
const back = await client.messages.create({ ...tcall, messages: round, max_tokens: 8 });
assert.equal(back.type, 'message');
const cRound = await client.messages.countTokens({ model: 'm', tools, messages: round });
const cAsk = await client.messages.countTokens({ model: 'm', tools, messages: ask });
const cBare = await client.messages.countTokens({ model: 'm', messages: ask });
assert.equal(promptOf(back.usage), cRound.input_tokens);
assert.ok(cRound.input_tokens > cAsk.input_tokens && cAsk.input_tokens > cBare.input_tokens);
ok('tool_use / tool_result round trip: answered; the calls, results and tools are in the prompt (count_tokens)');

// ---- thinking blocks (a model with a thinking mode)
if (baseThinking) {
  const tc = new Anthropic({ baseURL: baseThinking, apiKey: key, maxRetries: 0, timeout: 120000, fetch: recording });
  const th = { model: 'm', max_tokens: 10, temperature: 0, messages: user('Think about the sea.'),
    thinking: { type: 'enabled', budget_tokens: 1024 } };
  const on = await tc.messages.create(th);
  assert.equal(on.content[0].type, 'thinking');
  assert.equal(typeof on.content[0].thinking, 'string');
  assert.ok(on.content[0].thinking.length > 0);
  assert.equal(on.content[0].signature, '');
  const deltas = [];
  const ths = tc.messages.stream(th);
  ths.on('streamEvent', (ev) => { if (ev.type === 'content_block_delta') deltas.push(ev.delta.type); });
  const onS = await ths.finalMessage();
  assert.deepEqual(onS.content, on.content);
  assert.ok(deltas.includes('thinking_delta') && deltas.includes('signature_delta'));
  const off = await tc.messages.create({ ...th, thinking: { type: 'disabled' } });
  assert.ok(off.content.every((b) => b.type !== 'thinking'));
  const cOn = await tc.messages.countTokens({ model: 'm', messages: th.messages, thinking: th.thinking });
  assert.equal(cOn.input_tokens, promptOf(on.usage));
  // earlier thinking blocks in an assistant turn are accepted and answered
  const again = await tc.messages.create({ ...th, messages: [...th.messages,
    { role: 'assistant', content: [...on.content, { type: 'text', text: 'The sea is wide.' }] }, ...user('More?')] });
  assert.equal(again.type, 'message');
  ok('thinking enabled: a thinking block first (thinking_delta, signature_delta streamed, = non-stream); disabled: none');
  // the Responses API on the same server: reasoning.effort turns the thinking mode on
  const ot = new OpenAI({ baseURL: `${baseThinking}/v1`, apiKey: key, maxRetries: 0, timeout: 120000, fetch: recording });
  const rr = { model: 'm', input: 'Think about the sea.', max_output_tokens: 10, temperature: 0,
    reasoning: { effort: 'high' } };
  const rsn = await ot.responses.create(rr);
  assert.equal(rsn.output[0].type, 'reasoning');
  assert.equal(rsn.output[0].content[0].type, 'reasoning_text');
  assert.equal(rsn.output[0].content[0].text, on.content[0].thinking); // the same prompt and greedy tokens
  let rsnText = '';
  for await (const ev of await ot.responses.create({ ...rr, stream: true }))
    if (ev.type === 'response.reasoning_text.delta') rsnText += ev.delta;
  assert.equal(rsnText, rsn.output[0].content[0].text);
  ok('responses with reasoning.effort: a reasoning item (reasoning_text; = the messages thinking block), streamed alike');
} else {
  console.log('# no thinking-mode server given: thinking blocks not checked');
}

// ---- errors: the SDK's classes and the envelope
const bad = async (p, cls, type, says) => {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof cls, `${e.constructor.name} is not ${cls.name}: ${e.message}`);
    assert.equal(e.error?.type, 'error');
    assert.equal(e.error?.error?.type, type);
    if (says) assert.match(e.error.error.message, says);
    return true;
  });
};
await bad(client.messages.create({ model: 'm', messages: user('x') }), Anthropic.BadRequestError,
  'invalid_request_error', /max_tokens/);
await bad(client.messages.create({ ...greedy, messages: [] }), Anthropic.BadRequestError, 'invalid_request_error',
  /messages/);
await bad(client.messages.create({ ...greedy, messages: user([{ type: 'image', source: { type: 'base64',
  media_type: 'image/png', data: 'AA==' } }]) }), Anthropic.BadRequestError, 'invalid_request_error', /text-only/);
await bad(client.messages.create({ ...greedy, max_tokens: 100000, messages: user('x') }), Anthropic.BadRequestError,
  'invalid_request_error', /context/);
const wrong = new Anthropic({ baseURL: base, apiKey: `${key}x`, maxRetries: 0 });
await bad(wrong.messages.create({ ...greedy, messages: user('x') }), Anthropic.AuthenticationError,
  'authentication_error');
await bad(client.post('/v1/messages/no-such-path', { body: {} }), Anthropic.NotFoundError, 'not_found_error');
ok('errors: BadRequestError (missing max_tokens, empty messages, image, context), AuthenticationError, NotFoundError');

// ---- /v1/responses with the openai client
const rq = { model: 'any', instructions: 'Be brief.', input: 'Tell me about the sea.', max_output_tokens: 12,
  temperature: 0 };
const r = await oa.responses.create(rq);
assert.equal(r.object, 'response');
assert.match(r.id, /^resp_/);
assert.equal(r.status, 'incomplete');
assert.equal(r.incomplete_details.reason, 'max_output_tokens');
assert.equal(r.output[0].type, 'message');
assert.equal(typeof r.output_text, 'string');
assert.ok(r.output_text.length > 0);
assert.equal(r.output_text, r.output[0].content[0].text);
assert.equal(r.usage.output_tokens, 12);
assert.equal(r.usage.total_tokens, r.usage.input_tokens + 12);
assert.equal(r.instructions, 'Be brief.');
ok('responses.create: a message item, output_text, status incomplete at max_output_tokens, usage');
const rs = await oa.responses.create({ ...rq, stream: true });
const rTypes = [];
let rText = '', last = null, seq = -1;
for await (const ev of rs) {
  rTypes.push(ev.type);
  assert.equal(ev.sequence_number, seq + 1);
  seq = ev.sequence_number;
  if (ev.type === 'response.output_text.delta') rText += ev.delta;
  if (ev.type === 'response.output_text.done') assert.equal(ev.text, rText);
  last = ev;
}
assert.equal(rText, r.output_text);
assert.deepEqual(rTypes.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added',
  'response.content_part.added']);
assert.equal(last.type, 'response.incomplete');
assert.equal(last.response.output[0].content[0].text, r.output_text);
assert.deepEqual(last.response.usage, r.usage);
const helper = await oa.responses.stream(rq).finalResponse();
assert.equal(helper.output[0].content[0].text, r.output_text); // the helper sets output_text only when it parses
ok('responses streamed: events in order, sequence numbers, deltas = the non-streamed output_text (also .stream())');
const ok2 = await oa.responses.create({ ...rq, input: [{ role: 'user', content: [{ type: 'input_text',
  text: 'Tell me about the sea.' }] }] });
assert.equal(ok2.output_text, r.output_text);
ok('input as message items = input as a string');

const fnTools = [{ type: 'function', name: 'get_weather', description: 'The weather forecast', parameters: weather,
  strict: true }];
const fq = { model: 'any', input: 'What is the weather in Paris?', tools: fnTools, tool_choice: 'required',
  max_output_tokens: 80, temperature: 0 };
const f = await oa.responses.create(fq);
const fcalls = f.output.filter((o) => o.type === 'function_call');
assert.ok(fcalls.length >= 1);
for (const fc of fcalls) {
  assert.equal(fc.name, 'get_weather');
  assert.match(fc.call_id, /^call_/);
  assert.ok(ajv.validate(weather, JSON.parse(fc.arguments)), `${fc.arguments}: ${ajv.errorsText()}`);
}
const fs = await oa.responses.create({ ...fq, stream: true });
let args = '', fdone = null;
for await (const ev of fs) {
  if (ev.type === 'response.function_call_arguments.delta' && ev.output_index === 0) args += ev.delta;
  if (ev.type === 'response.function_call_arguments.done' && ev.output_index === 0) fdone = ev;
  if (ev.type === 'response.completed' || ev.type === 'response.incomplete') last = ev;
}
assert.equal(args, fcalls[0].arguments);
assert.equal(fdone.arguments, fcalls[0].arguments);
assert.deepEqual(last.response.output.map((o) => o.arguments), f.output.map((o) => o.arguments));
const fback = await oa.responses.create({ ...fq, tool_choice: 'auto', max_output_tokens: 6, input: [
  { role: 'user', content: 'What is the weather in Paris?' }, ...fcalls,
  ...fcalls.map((fc) => ({ type: 'function_call_output', call_id: fc.call_id, output: 'Sunny' }))] });
assert.ok(fback.usage.input_tokens > f.usage.input_tokens);
ok('responses function tools: function_call items (call_id, arguments valid), streamed arguments, round trip');

const rbad = async (p, param) => {
  await assert.rejects(p, (e) => e instanceof OpenAI.BadRequestError && e.param === param && /not supported/.test(e.message));
};
await rbad(oa.responses.create({ ...rq, previous_response_id: r.id }), 'previous_response_id');
await rbad(oa.responses.create({ ...rq, tools: [{ type: 'web_search' }] }), 'tools[0]');
ok('responses: previous_response_id and built-in tools are BadRequestError naming them');
console.log(`messages_client.mjs: ${checks} checks passed`);
