// Bodies over the server's --max-body, sent over a plain socket (no client
// library that might stop early): each must get its 413 JSON answer.
// usage: node big_body.mjs PORT MAX_BODY_BYTES
//   early: headers saying 160 MiB, then 64 KiB of it, then nothing more: the
//          answer must come while the rest is still unsent;
//   whole: all 160 MiB written before reading (as Python's http.client does):
//          no reset, no broken pipe, the answer read afterwards;
//   chunked: no Content-Length, chunks past the limit, then the end.
import net from 'node:net';
import assert from 'node:assert/strict';

const [port, maxBody] = process.argv.slice(2).map(Number);
const big = 160 << 20;
const head = (extra) =>
  `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n${extra}\r\n`;

// Sends what `send` writes (half-open: the server's early end of its side
// must not end ours); resolves with everything the server answered once it
// closes. Rejects on a socket error (a reset, a broken pipe).
function exchange(send) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    const s = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () => send(s));
    s.on('data', (d) => chunks.push(d));
    s.on('error', reject);
    s.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
  });
}

function check413(name, answer) {
  const [status] = answer.split('\r\n');
  assert.match(status, /^HTTP\/1\.1 413 /, `${name}: status line ${JSON.stringify(status)}`);
  const body = answer.slice(answer.indexOf('\r\n\r\n') + 4);
  const j = JSON.parse(body);
  assert.equal(j.error.code, 'request_too_large', name);
  assert.equal(j.error.type, 'invalid_request_error', name);
  assert.ok(j.error.message.includes(String(maxBody)), `${name}: ${j.error.message}`);
  console.log(`ok - ${name}: 413 ${j.error.message}`);
}

// early: the answer arrives though most of the body was never sent
const early = await new Promise((resolve, reject) => {
  const s = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true }, () => {
    s.write(head(`Content-Length: ${big}\r\n`));
    s.write(Buffer.alloc(64 << 10, 'a'));
  });
  let got = '';
  s.on('data', (d) => {
    got += d.toString('latin1');
    if (got.includes('\r\n\r\n') && got.length > got.indexOf('\r\n\r\n') + 4 && got.trimEnd().endsWith('}')) {
      s.destroy();
      resolve(got);
    }
  });
  s.on('error', reject);
  s.on('close', () => resolve(got));
});
check413('early (64 KiB of 160 MiB sent)', early);

// whole: the client writes everything, then reads
const whole = await exchange((s) => {
  s.write(head(`Content-Length: ${big}\r\n`));
  const piece = Buffer.alloc(1 << 20, 'a');
  let left = big >> 20;
  const more = () => {
    while (left > 0) {
      left--;
      if (!s.write(piece)) return s.once('drain', more);
    }
    s.end();
  };
  more();
});
check413('whole 160 MiB body sent before reading', whole);

// chunked: found out while reading; the client sends past the limit, then ends
const chunked = await exchange((s) => {
  s.write(head('Transfer-Encoding: chunked\r\n'));
  const piece = Buffer.alloc(64 << 10, 'a');
  for (let sent = 0; sent <= 2 * maxBody; sent += piece.length) {
    s.write(piece.length.toString(16) + '\r\n');
    s.write(piece);
    s.write('\r\n');
  }
  s.end('0\r\n\r\n');
});
check413('chunked body past the limit', chunked);
