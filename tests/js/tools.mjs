// Tool calls through the official openai client against `onegpu serve` on a
// random-weights model with the DeepSeek-V3 chat encoding. Every call's
// arguments are validated by an outside validator (ajv) against the tool's
// schema; a streamed answer, reassembled, must equal the non-streamed one for
// the same request at temperature 0 (same seed: same call ids).
// usage: node tools.mjs BASE_URL CALLS_BEGIN_ID
import OpenAI from 'openai';
import Ajv2020 from 'ajv/dist/2020.js';
import assert from 'node:assert/strict';

const [base, callsBeginArg] = process.argv.slice(2);
const callsBegin = Number(callsBeginArg);
assert.ok(Number.isInteger(callsBegin) && callsBegin > 0, 'usage: node tools.mjs BASE_URL CALLS_BEGIN_ID');
const client = new OpenAI({ baseURL: base, apiKey: 'none', maxRetries: 0, timeout: 300000 });
const ajv = new Ajv2020({ strict: true, allowUnionTypes: true, allErrors: true });
let checks = 0;
const ok = (name) => { checks++; console.log(`ok ${checks} - ${name}`); };

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', maxLength: 10 },
          unit: { enum: ['c', 'f'] },
          days: { type: 'integer' },
        },
        required: ['city', 'unit'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'get_time',
      parameters: { type: 'object', properties: { tz: { enum: ['UTC', 'CET', 'JST'] } }, required: ['tz'], additionalProperties: false },
    },
  },
  {
    type: 'function',
    function: {
      name: 'add_items',
      description: 'Adds items to a list',
      parameters: {
        $defs: { item: { type: 'object', properties: { n: { type: 'string', maxLength: 6 }, q: { type: 'integer' } }, required: ['n'] } },
        type: 'object',
        properties: { items: { type: 'array', items: { $ref: '#/$defs/item' }, minItems: 1, maxItems: 2 }, note: { anyOf: [{ type: 'null' }, { type: 'string', maxLength: 5 }] } },
        required: ['items'],
      },
    },
  },
];
const validators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
const messages = [{ role: 'user', content: 'What is the weather in Paris, and the time?' }];

function checkCall(c, names, what) {
  assert.match(c.id, /^call_[A-Za-z0-9]{24}$/, `${what}: call id`);
  assert.equal(c.type, 'function', `${what}: type`);
  assert.ok(names.includes(c.function.name), `${what}: name ${c.function.name} not in ${names}`);
  assert.equal(typeof c.function.arguments, 'string', `${what}: arguments must be a JSON string`);
  const args = JSON.parse(c.function.arguments);
  const v = validators[c.function.name];
  assert.ok(v(args), `${what}: ${c.function.arguments} fails ${c.function.name}'s schema: ${ajv.errorsText(v.errors)}`);
}

async function stream(req) {
  const s = await client.chat.completions.create({ ...req, stream: true });
  const out = { content: '', tool_calls: [], finish_reason: null, reasoning: '' };
  for await (const ch of s) {
    const c = ch.choices[0];
    if (!c) continue;
    const d = c.delta ?? {};
    if (d.content) out.content += d.content;
    if (d.reasoning_content) out.reasoning += d.reasoning_content;
    for (const tc of d.tool_calls ?? []) {
      if (!out.tool_calls[tc.index]) { // the first delta of a call: index, id, type and name
        assert.equal(tc.index, out.tool_calls.length, 'stream: calls come in index order');
        assert.ok(tc.id && tc.type === 'function' && tc.function?.name, `stream: first delta of call ${tc.index} lacks id/type/name`);
        assert.equal(tc.function.arguments, '', 'stream: the first delta carries arguments ""');
        out.tool_calls[tc.index] = { id: tc.id, type: tc.type, function: { name: tc.function.name, arguments: '' } };
      } else {
        assert.equal(tc.id, undefined, 'stream: later deltas carry only arguments');
        out.tool_calls[tc.index].function.arguments += tc.function.arguments;
      }
    }
    if (c.finish_reason) out.finish_reason = c.finish_reason;
  }
  return out;
}

// the same request, streamed and not: same content, calls and finish_reason
async function both(req, names, what) {
  const r = await client.chat.completions.create(req);
  const m = r.choices[0].message;
  const s = await stream(req);
  const calls = m.tool_calls ?? [];
  for (const [k, c] of calls.entries()) checkCall(c, names, `${what} call ${k}`);
  assert.deepEqual(s.tool_calls, calls.map((c) => ({ id: c.id, type: c.type, function: { name: c.function.name, arguments: c.function.arguments } })), `${what}: reassembled stream calls = non-stream`);
  assert.equal(s.content, m.content ?? '', `${what}: reassembled stream content = non-stream`);
  assert.equal(s.finish_reason, r.choices[0].finish_reason, `${what}: finish_reason`);
  if (calls.length && !m.content) assert.equal(m.content, null, `${what}: content null when only calls`);
  if (r.choices[0].finish_reason === 'tool_calls') assert.ok(calls.length > 0, `${what}: tool_calls finish without calls`);
  if (calls.length && r.choices[0].finish_reason !== 'length') assert.equal(r.choices[0].finish_reason, 'tool_calls', `${what}: finish_reason`);
  return r;
}

const base_req = { model: 'any', messages, tools, temperature: 0, seed: 7, max_tokens: 300 };

// required, one call: exactly one call, arguments valid, finish_reason tool_calls
for (const seed of [1]) {
  const r = await both({ ...base_req, seed, tool_choice: 'required', parallel_tool_calls: false }, tools.map((t) => t.function.name), `required seed ${seed}`);
  assert.equal(r.choices[0].message.tool_calls.length, 1, 'parallel_tool_calls false: one call');
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(r.choices[0].message.content, null);
  ok(`tool_choice required, parallel_tool_calls false (seed ${seed}): ${r.choices[0].message.tool_calls[0].function.name}(${r.choices[0].message.tool_calls[0].function.arguments})`);
}

// named: only that function
for (const name of ['add_items', 'get_weather']) {
  const r = await both({ ...base_req, tool_choice: { type: 'function', function: { name } }, parallel_tool_calls: false }, [name], `named ${name}`);
  assert.equal(r.choices[0].message.tool_calls.length, 1);
  assert.equal(r.choices[0].message.tool_calls[0].function.name, name);
  ok(`tool_choice {function: ${name}}: ${r.choices[0].message.tool_calls[0].function.arguments}`);
}

// required with parallel calls: every call valid (a cut by max_tokens ends with "length")
{
  const r = await both({ ...base_req, seed: 11, tool_choice: 'required', max_tokens: 100 }, tools.map((t) => t.function.name), 'required parallel');
  assert.ok(r.choices[0].message.tool_calls.length >= 1);
  ok(`tool_choice required, parallel: ${r.choices[0].message.tool_calls.length} call(s), finish ${r.choices[0].finish_reason}`);
}

// auto: the model may call or not; the answer is consistent either way
const auto = await both({ ...base_req, tool_choice: 'auto', max_tokens: 16 }, tools.map((t) => t.function.name), 'auto');
ok(`tool_choice auto: ${(auto.choices[0].message.tool_calls ?? []).length} call(s), finish ${auto.choices[0].finish_reason}`);

// the call marker: auto with a +100 bias on it starts a call block at once; "none" masks it
{
  const bias = { logit_bias: { [callsBegin]: 100 }, logprobs: true, max_tokens: 8 };
  const a = await client.chat.completions.create({ ...base_req, ...bias, tool_choice: 'auto' });
  assert.equal(a.choices[0].logprobs.content[0].token, '<｜tool▁calls▁begin｜>', 'the bias makes the marker the first token');
  const n = await client.chat.completions.create({ ...base_req, ...bias, tool_choice: 'none' });
  assert.ok(n.choices[0].logprobs.content.every((t) => t.token !== '<｜tool▁calls▁begin｜>'), 'tool_choice none: the marker is masked');
  assert.equal(n.choices[0].message.tool_calls, undefined);
  assert.equal(n.usage.prompt_tokens, a.usage.prompt_tokens, 'tool_choice none keeps the tools in the prompt');
  const plain = await client.chat.completions.create({ model: 'any', messages, max_tokens: 1 });
  assert.ok(n.usage.prompt_tokens > plain.usage.prompt_tokens + 50, 'the tools are rendered into the prompt');
  ok(`tool_choice none: the marker (id ${callsBegin}) masked even at +100, tools still in the prompt (${n.usage.prompt_tokens} vs ${plain.usage.prompt_tokens} tokens)`);
}

// a round trip: the call answered by a tool message, then the model answers (or calls again)
{
  const r = await client.chat.completions.create({ ...base_req, tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false });
  const call = r.choices[0].message.tool_calls[0];
  const follow = [...messages, r.choices[0].message, { role: 'tool', tool_call_id: call.id, content: '{"temp_c": 12, "sky": "cloudy"}' }];
  const r2 = await client.chat.completions.create({ model: 'any', messages: follow, tools, max_tokens: 8, temperature: 0 });
  assert.ok(r2.usage.prompt_tokens > r.usage.prompt_tokens, 'the call and its result are rendered back');
  const r3 = await client.chat.completions.create({ model: 'any', messages: follow, tools, temperature: 0, max_tokens: 120, tool_choice: { type: 'function', function: { name: 'get_time' } }, parallel_tool_calls: false });
  checkCall(r3.choices[0].message.tool_calls[0], ['get_time'], 'round trip');
  ok(`round trip: assistant tool_calls + tool result (${r2.usage.prompt_tokens} prompt tokens), then ${r3.choices[0].message.tool_calls[0].function.arguments}`);
}

// errors name the field
async function bad(req, param, re, what) {
  await assert.rejects(client.chat.completions.create({ model: 'any', messages, max_tokens: 4, ...req }), (e) => {
    assert.equal(e.status, 400, `${what}: status`);
    assert.ok(e instanceof OpenAI.BadRequestError, `${what}: BadRequestError`);
    assert.equal(e.param, param, `${what}: param`);
    assert.match(e.message, re, `${what}: message`);
    return true;
  });
  ok(`400 ${what}`);
}
await bad({ tools, tool_choice: { type: 'function', function: { name: 'get_wether' } } }, 'tool_choice', /get_wether/, 'unknown function in tool_choice');
await bad({ tool_choice: 'required' }, 'tool_choice', /needs 'tools'/, 'tool_choice without tools');
await bad({ tools: [{ type: 'function', function: { name: 'bad name!' } }] }, 'tools[0].function.name', /1-64 characters/, 'a bad function name');
{
  // a keyword outside the grammar's subset: refused only where a forced call must follow the schema
  const tp = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { s: { type: 'string', pattern: 'a+' } } } } }];
  await bad({ tools: tp, tool_choice: 'required' }, 'tools[0].function.parameters', /'pattern'/, 'an unsupported schema keyword in a forced call');
  const r = await client.chat.completions.create({ model: 'any', messages, max_tokens: 4, temperature: 0, tools: tp });
  assert.ok(r.choices[0].finish_reason, 'the same tool with tool_choice auto is served');
  ok('the unsupported keyword with tool_choice auto: served');
}
await bad({ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'string' } } }] }, 'tools[0].function.parameters', /object/, 'parameters that are not an object schema');
await bad({ tools: [{ type: 'custom', custom: { name: 'f' } }] }, 'tools[0]', /only "function"/, 'a custom tool');
await bad({ messages: [...messages, { role: 'tool', content: 'x' }] }, 'messages[1].tool_call_id', /required/, 'a tool message without tool_call_id');
await bad({ reasoning_effort: 'extreme' }, 'reasoning_effort', /low, medium, high/, 'a bad reasoning_effort');
await bad({ chat_template_kwargs: { thinking: 'yes' } }, 'chat_template_kwargs.thinking', /true or false/, 'a bad chat_template_kwargs.thinking');

// V3 has no thinking mode: reasoning controls are accepted, the output is all content
{
  const r = await client.chat.completions.create({ model: 'any', messages, max_tokens: 6, temperature: 0, reasoning_effort: 'high', chat_template_kwargs: { thinking: true } });
  const p = await client.chat.completions.create({ model: 'any', messages, max_tokens: 6, temperature: 0 });
  assert.equal(r.choices[0].message.reasoning_content, undefined);
  assert.equal(r.choices[0].message.content, p.choices[0].message.content);
  ok('reasoning controls on a V3 model: all content, as without them');
}
if (checks < 17) throw new Error(`only ${checks} checks ran`);
console.log(`tools.mjs: ${checks} checks passed`);
