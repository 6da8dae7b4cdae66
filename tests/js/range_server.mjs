// A small HTTP file server for run.sh's download tests: serves DIR on
// 127.0.0.1 (port printed on stdout), answers HEAD with Content-Length and
// Range: bytes=N- with 206, logs each request to LOG, and with CUT > 0 cuts the
// connection after CUT bytes of the first GET of each file (a dropped transfer).
// usage: node range_server.mjs DIR LOG [CUT]
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';

const [dir, log, cutArg] = process.argv.slice(2);
const cut = Number(cutArg || 0);
const cutDone = new Set();
const server = http.createServer((req, res) => {
  const file = path.join(dir, path.basename(decodeURIComponent(req.url.split('?')[0])));
  fs.appendFileSync(log, `${req.method} ${req.url} ${req.headers.range || '-'}\n`);
  if (!fs.existsSync(file) || !fs.statSync(file).isFile()) { res.writeHead(404); res.end('not found'); return; }
  const size = fs.statSync(file).size;
  let start = 0;
  const m = /^bytes=(\d+)-$/.exec(req.headers.range || '');
  if (m) start = Number(m[1]);
  if (m && start >= size) { res.writeHead(416, { 'Content-Range': `bytes */${size}` }); res.end(); return; } // as nginx/S3
  const headers = { 'Content-Length': size - start, 'Accept-Ranges': 'bytes', 'Content-Type': 'application/octet-stream',
    'Last-Modified': fs.statSync(file).mtime.toUTCString() };
  if (m) headers['Content-Range'] = `bytes ${start}-${size - 1}/${size}`;
  res.writeHead(m ? 206 : 200, headers);
  if (req.method === 'HEAD') { res.end(); return; }
  const data = fs.readFileSync(file).subarray(start);
  if (cut > 0 && !cutDone.has(file) && data.length > cut) {
    cutDone.add(file);
    res.write(data.subarray(0, cut), () => setTimeout(() => res.socket.destroy(), 50));
    return;
  }
  res.end(data);
});
server.listen(0, '127.0.0.1', () => console.log(server.address().port));
