// Reasoning and tool calls split from hand-written outputs through the server:
// `onegpu serve --chat-template v3.1 --reasoning on` on a random-weights model,
// the output forced by teacher_tokens (the ids of a hand-written reply, from
// `onegpu tokenize`), read back with the official openai client, streamed and
// not. In this vocabulary </think> is spelled by several ordinary tokens while
// the tool markers are single control tokens.
// usage: node reasoning.mjs BASE_URL ONEGPU MODEL
import OpenAI from 'openai';
import Ajv2020 from 'ajv/dist/2020.js';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';

const [base, onegpu, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base, apiKey: 'none', maxRetries: 0, timeout: 120000 });
let checks = 0;
const ok = (name) => { checks++; console.log(`ok ${checks} - ${name}`); };
const ids = (text) => JSON.parse(execFileSync(onegpu, ['tokenize', '-m', model, '--no-bos', '--special', '-p', text], { encoding: 'utf8' })).tokens;

const CB = '<｜tool▁calls▁begin｜>', CE = '<｜tool▁calls▁end｜>', KB = '<｜tool▁call▁begin｜>', KE = '<｜tool▁call▁end｜>', SEP = '<｜tool▁sep｜>';
const tools = [{ type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { tz: { enum: ['UTC', 'CET'] } }, required: ['tz'] } } }];
const validate = new Ajv2020({ strict: true }).compile(tools[0].function.parameters);
const messages = [{ role: 'user', content: 'What is 2+2?' }];

async function both(output, extra) {
  const t = ids(output);
  const req = { model: 'any', messages, temperature: 0, seed: 1, teacher_tokens: t, max_tokens: t.length, ...extra };
  const r = await client.chat.completions.create(req);
  const s = await client.chat.completions.create({ ...req, stream: true });
  const got = { content: '', reasoning: '', calls: [] };
  let sawReasoningDelta = false;
  for await (const ch of s) {
    const d = ch.choices[0]?.delta ?? {};
    if (d.content) got.content += d.content;
    if (d.reasoning_content !== undefined) { sawReasoningDelta = true; got.reasoning += d.reasoning_content; }
    for (const tc of d.tool_calls ?? []) {
      if (tc.id) got.calls[tc.index] = { id: tc.id, type: tc.type, function: { name: tc.function.name, arguments: '' } };
      else got.calls[tc.index].function.arguments += tc.function.arguments;
    }
  }
  const m = r.choices[0].message;
  assert.equal(got.content, m.content ?? '', 'stream content = non-stream');
  assert.equal(got.reasoning, m.reasoning_content ?? '', 'stream reasoning = non-stream');
  if (m.reasoning_content === undefined) assert.ok(!sawReasoningDelta, 'no reasoning deltas when not thinking');
  assert.deepEqual(got.calls, m.tool_calls ?? [], 'stream calls = non-stream');
  return r;
}

// the server default (--reasoning on): thinking, the reply split at </think>
{
  const r = await both('Let me think about 2+2.\nIt is 4 (caf\u00e9 \u{1F680}).</think>The answer is **4**.', {});
  assert.equal(r.choices[0].message.reasoning_content, 'Let me think about 2+2.\nIt is 4 (caf\u00e9 \u{1F680}).');
  assert.equal(r.choices[0].message.content, 'The answer is **4**.');
  // the tokens up to the one that completes </think> are reasoning tokens
  const think = ids('Let me think about 2+2.\nIt is 4 (caf\u00e9 \u{1F680}).</think>').length;
  const all = r.usage.completion_tokens;
  assert.ok(Math.abs(r.usage.completion_tokens_details.reasoning_tokens - think) <= 1, `reasoning_tokens ${r.usage.completion_tokens_details.reasoning_tokens}, about ${think} of ${all}`);
  assert.ok(r.usage.completion_tokens_details.reasoning_tokens < all);
  ok(`reasoning split at </think> (server default on), streamed = not; ${r.usage.completion_tokens_details.reasoning_tokens} of ${all} tokens reasoning`);
}
// reasoning_effort turns it on, "none" and chat_template_kwargs off
for (const [extra, thinking] of [[{ reasoning_effort: 'low' }, true], [{ reasoning_effort: 'none' }, false],
  [{ chat_template_kwargs: { thinking: false } }, false], [{ chat_template_kwargs: { enable_thinking: false } }, false],
  [{ reasoning_effort: 'high', chat_template_kwargs: { thinking: false } }, false]]) {
  const text = 'A thought</think>An answer';
  const r = await both(text, extra);
  const m = r.choices[0].message;
  if (thinking) {
    assert.equal(m.reasoning_content, 'A thought');
    assert.equal(m.content, 'An answer');
  } else {
    assert.equal(m.reasoning_content, undefined, 'a non-thinking request has no reasoning_content');
    assert.equal(r.usage.completion_tokens_details, undefined);
    assert.equal(m.content, text, 'a non-thinking request is all content');
  }
  ok(`${JSON.stringify(extra)}: ${thinking ? 'split' : 'all content'}`);
}
// a V3.1 call after the reasoning
{
  const r = await both(`checking the clock</think>${CB}${KB}get_time${SEP}{"tz": "UTC"}${KE}${CE}`, { tools });
  const m = r.choices[0].message;
  assert.equal(m.reasoning_content, 'checking the clock');
  assert.equal(m.content, null, 'content null when only calls');
  assert.equal(m.tool_calls.length, 1);
  assert.match(m.tool_calls[0].id, /^call_[A-Za-z0-9]{24}$/);
  assert.equal(m.tool_calls[0].function.name, 'get_time');
  assert.equal(m.tool_calls[0].function.arguments, '{"tz": "UTC"}');
  assert.ok(validate(JSON.parse(m.tool_calls[0].function.arguments)));
  ok('reasoning, then a V3.1 call (name<sep>{json}), streamed = not');
}
// two calls, and text before them
{
  const r = await both(`hm</think>Two calls.${CB}${KB}get_time${SEP}{"tz":"CET"}${KE}${KB}get_time${SEP}{"tz":"UTC"}${KE}${CE}`, { tools });
  const m = r.choices[0].message;
  assert.equal(m.content, 'Two calls.');
  assert.deepEqual(m.tool_calls.map((c) => c.function.arguments), ['{"tz":"CET"}', '{"tz":"UTC"}']);
  assert.notEqual(m.tool_calls[0].id, m.tool_calls[1].id);
  ok('content, then two calls');
}
// parallel_tool_calls false: the first call only
{
  const r = await both(`${CB}${KB}get_time${SEP}{"tz":"CET"}${KE}${KB}get_time${SEP}{"tz":"UTC"}${KE}${CE}`, { tools, parallel_tool_calls: false, reasoning_effort: 'none' });
  assert.deepEqual(r.choices[0].message.tool_calls.map((c) => c.function.arguments), ['{"tz":"CET"}']);
  ok('parallel_tool_calls false with auto: one call reported');
}
// a malformed call is text, never a crash
{
  const r = await both(`x</think>${CB}${KB}get_time${SEP}{"tz": UTC}${KE}${CE}after`, { tools });
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.equal(r.choices[0].message.content, 'get_time{"tz": UTC}after');
  ok('a malformed call comes back as content');
}
// without tools in the request the markers are not calls (and the control tokens have no text)
{
  const r = await both(`y</think>${CB}${KB}get_time${SEP}{}${KE}${CE}`, {});
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.equal(r.choices[0].message.content, 'get_time{}');
  ok('no tools: call markers are not parsed');
}
console.log(`reasoning.mjs: ${checks} checks passed`);
