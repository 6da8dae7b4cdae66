// response_format (constrained decoding) through the official openai client:
// every output of a random-weights model must be valid JSON that an outside
// validator (ajv, JSON Schema 2020-12) accepts against the schema asked for.
// usage: node response_format.mjs BASE_URL
import OpenAI from 'openai';
import Ajv2020 from 'ajv/dist/2020.js';
import assert from 'node:assert/strict';

const [base] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base, apiKey: 'none', maxRetries: 0, timeout: 300000 });
const ajv = new Ajv2020({ strict: true, allowUnionTypes: true, allErrors: true });
let checks = 0;
const ok = (name) => { checks++; console.log(`ok ${checks} - ${name}`); };

const obj = (properties, required = Object.keys(properties), extra = {}) =>
  ({ type: 'object', properties, required, additionalProperties: false, ...extra });
const str = (maxLength, minLength) => ({ type: 'string', maxLength, ...(minLength ? { minLength } : {}) });

const schemas = {
  person: obj({ name: str(12), age: { type: 'integer' } }),
  color: obj({ color: { enum: ['red', 'green', 'blue'] } }),
  version: obj({ v: { const: 3 }, tag: { const: 'stable' } }),
  int_list: obj({ xs: { type: 'array', items: { type: 'integer' }, minItems: 2, maxItems: 4 } }),
  address: obj({ person: obj({ first: str(8), last: str(8) }), address: obj({ city: str(10), zip: str(5, 5) }) }),
  any_of: obj({ id: { anyOf: [{ type: 'string', maxLength: 6 }, { type: 'integer' }, { type: 'null' }] } }),
  type_list: obj({ score: { type: ['number', 'null'] }, ok: { type: ['boolean', 'string'], maxLength: 4 } }),
  flags: obj({ a: { type: 'boolean' }, b: { type: 'boolean' }, c: { type: 'null' }, note: str(40) }),
  tree: {
    $defs: { node: obj({ v: { type: 'integer' }, kids: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 1 } }, ['v']) },
    $ref: '#/$defs/node',
  },
  tags: obj({ tags: { type: 'array', items: { enum: ['x', 'y', 'z'] }, maxItems: 3 } }),
  code: obj({ code: str(5, 3) }),
  optional: obj({ a: { type: 'integer' }, b: str(4), c: { type: 'boolean' } }, ['b']),
  matrix: obj({ m: { type: 'array', maxItems: 2, items: { type: 'array', items: { type: 'number' }, minItems: 1, maxItems: 2 } } }),
  mixed_enum: obj({ pick: { enum: [1, 2.5, 'x', null, true] } }),
  definitions_ref: { definitions: { pt: obj({ x: { type: 'number' }, y: { type: 'number' } }) }, ...obj({ p: { $ref: '#/definitions/pt' }, q: { $ref: '#/definitions/pt' } }) },
  tagged_union: obj({
    shape: {
      anyOf: [obj({ kind: { const: 'circle' }, r: { type: 'number' } }), obj({ kind: { const: 'rect' }, w: { type: 'integer' }, h: { type: 'integer' } })],
    },
  }),
  unicode_const: obj({ greeting: { const: 'héllo ✓ 世界' } }),
  escapes_const: obj({ s: { const: 'a"b\\c\n\t/' } }),
  empty_object: { type: 'object', additionalProperties: false },
  empty_array: obj({ none: { type: 'array', maxItems: 0 } }),
  nullable_ref: { $defs: { p: obj({ n: { type: 'integer' } }) }, ...obj({ x: { anyOf: [{ $ref: '#/$defs/p' }, { type: 'null' }] } }) },
  top_array: { type: 'array', items: obj({ k: str(3) }), minItems: 1, maxItems: 2 },
  root_recursive: { type: 'array', maxItems: 2, items: { anyOf: [{ type: 'integer' }, { $ref: '#' }] } },
  numbers: obj({ n: { type: 'number' }, i: { type: 'integer' }, neg: { type: 'integer' } }),
};

const ask = (name, schema, extra = {}) => client.chat.completions.create({
  model: 'any',
  messages: [{ role: 'user', content: `Give me a ${name} as JSON.` }],
  max_tokens: 700,
  response_format: { type: 'json_schema', json_schema: { name, schema, strict: true } },
  ...extra,
});

const names = Object.keys(schemas);
assert.ok(names.length >= 20);
// two seeds per schema, four requests in flight at once (the server batches them)
const jobs = names.flatMap((name) => [1, 2].map((seed) => ({ name, seed })));
for (let i = 0; i < jobs.length; i += 4) {
  await Promise.all(jobs.slice(i, i + 4).map(async ({ name, seed }) => {
    const validate = ajv.getSchema(name) || (ajv.addSchema(schemas[name], name), ajv.getSchema(name));
    const r = await ask(name, schemas[name], { seed, temperature: 1 });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop', `${name} seed ${seed}: finish ${c.finish_reason}: ${c.message.content}`);
    let doc;
    try { doc = JSON.parse(c.message.content); } catch (err) { assert.fail(`${name} seed ${seed}: not JSON: ${c.message.content}`); }
    assert.ok(validate(doc), `${name} seed ${seed}: ${c.message.content}: ${ajv.errorsText(validate.errors)}`);
    ok(`${name} (seed ${seed}): ${c.message.content.slice(0, 80)}`);
  }));
}

// streamed: the reassembled stream is the non-streamed text (same seed)
{
  const name = 'tagged_union';
  const once = await ask(name, schemas[name], { seed: 7 });
  const stream = await ask(name, schemas[name], { seed: 7, stream: true });
  let text = '', finish = null;
  for await (const ch of stream) {
    text += ch.choices[0]?.delta?.content || '';
    finish = ch.choices[0]?.finish_reason || finish;
  }
  assert.equal(text, once.choices[0].message.content);
  assert.equal(finish, 'stop');
  assert.ok(ajv.getSchema(name)(JSON.parse(text)));
  ok('streamed = not streamed');
}

// cut by max_tokens mid-document: finish_reason "length", the text a prefix that does not parse
{
  const r = await ask('person', schemas.person, { seed: 3, max_tokens: 3 });
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.throws(() => JSON.parse(r.choices[0].message.content));
  assert.ok(r.choices[0].message.content.startsWith('{'));
  ok(`max_tokens mid-JSON: finish_reason length (${JSON.stringify(r.choices[0].message.content)})`);
}

// json_object: a JSON object whenever it ends before max_tokens
{
  let complete = 0;
  for (const seed of [1, 2, 3, 4]) {
    const r = await client.chat.completions.create({
      model: 'any', messages: [{ role: 'user', content: 'JSON please' }], max_tokens: 300, seed,
      response_format: { type: 'json_object' },
    });
    const c = r.choices[0];
    assert.ok(c.message.content.startsWith('{'), c.message.content);
    if (c.finish_reason === 'stop') {
      const doc = JSON.parse(c.message.content);
      assert.equal(typeof doc, 'object');
      assert.ok(doc !== null && !Array.isArray(doc));
      complete++;
    } else {
      assert.equal(c.finish_reason, 'length');
    }
  }
  ok(`json_object: ${complete} of 4 complete objects, the others cut by max_tokens`);
}

// a keyword outside the subset: 400 naming it, param response_format
{
  await assert.rejects(
    ask('bad', { type: 'object', properties: { d: { type: 'string', format: 'date' } } }),
    (err) => err instanceof OpenAI.BadRequestError && err.status === 400 && err.param === 'response_format' &&
      /'format'/.test(err.message) && /#\/properties\/d/.test(err.message));
  await assert.rejects(
    ask('bad', { type: 'number', minimum: 0 }),
    (err) => err instanceof OpenAI.BadRequestError && /'minimum'/.test(err.message));
  ok('unsupported keywords: 400 naming the keyword');
}
console.log(`response_format: ${checks} checks passed`);
