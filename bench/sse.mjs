// A streamed /v1/completions request read as the benchmarks need it (bench/*_load.mjs).
// streamCompletion(base, body, onToken, signal): onToken(seconds) for each chunk
// that carries text; resolves to the final usage chunk's usage (or null). An abort
// through signal ends it quietly; an error event or a non-200 status throws.
export const now = () => performance.now() / 1000;

export async function streamCompletion(base, body, onToken, signal) {
  const r = await fetch(`${base}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, signal,
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
  });
  if (r.status !== 200) throw new Error(`status ${r.status}: ${await r.text()}`);
  const dec = new TextDecoder();
  let buf = '', usage = null;
  try {
    for await (const chunk of r.body) {
      buf += dec.decode(chunk, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, i); buf = buf.slice(i + 2);
        if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
        const j = JSON.parse(ev.slice(6));
        if (j.error) throw new Error(JSON.stringify(j.error));
        if (j.usage) usage = j.usage;
        if (j.choices?.[0]?.text) onToken(now());
      }
    }
  } catch (e) {
    if (e.name !== 'AbortError') throw e;
  }
  return usage;
}
