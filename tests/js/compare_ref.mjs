// usage: node compare_ref.mjs GEN.json REF.json BOUND [--exact] [--f16] [--no-argmax]
//
// REF.json: a double-precision reference (ref_deepseek4, ref_deepseek41: the
// same JSON) on prompt + generated tokens. GEN.json: what is checked against
// it, either llama_generate.mjs output (greedy tokens with --probs) or, with
// --exact, `onegpu run --json --teacher IDS` output (the same fields, and its
// log-probs are exact: no prob_sum). GEN's logprobs[i] scores tokens[i] after
// prompt + tokens[0..i-1], the reference's position n_prompt - 1 + i.
// llama's log-prob is renormalized by its prob_sum (node-llama-cpp's float32
// softmax sums to 1 +- 4e-4 over 129,280 ids; see llama_generate.mjs). Checks
// |delta logprob| <= BOUND at every position and that GEN's token (llama's
// greedy pick) is the reference's argmax unless the reference's top two are
// within 1e-3 (with --exact the teacher's tokens are not greedy picks: GEN's
// own argmax is compared instead). Prints "positions N, max |d| X, median |d|
// Y, argmax agree A/N" and exits 1 on a failure, naming the first bad position.
// --f16: the F16 files' floor (ref_ds4.sh): median |d| <= 3e-3, every position
// within 2e-2, greedy agreement >= 90% (BOUND unused).
// --no-argmax: only the log-prob bound.
import fs from "node:fs";

const args = process.argv.slice(2);
const f16 = args.includes("--f16"), noArgmax = args.includes("--no-argmax"), exact = args.includes("--exact");
const [lf, rf, boundS] = args.filter((a) => !a.startsWith("--"));
if (!lf || !rf || !boundS) {
    process.stderr.write("usage: node compare_ref.mjs GEN.json REF.json BOUND [--exact] [--f16] [--no-argmax]\n");
    process.exit(2);
}
const l = JSON.parse(fs.readFileSync(lf, "utf8")), r = JSON.parse(fs.readFileSync(rf, "utf8"));
const bound = Number(boundS);
const np = l.prompt_tokens.length;
const byPos = new Map(r.positions.map((p) => [p.pos, p]));
const ds = [];
let agree = 0, bad = null;
for (let i = 0; i < l.logprobs.length; i++) {
    const e = l.logprobs[i], rp = byPos.get(np - 1 + i);
    if (!rp) { bad ??= `position ${np - 1 + i}: the reference has no entry`; continue; }
    if (rp.next !== e.token) { bad ??= `position ${np - 1 + i}: token ${rp.next} vs ${e.token}`; continue; }
    if (e.logprob == null || (!exact && e.prob_sum == null)) { bad ??= `position ${np - 1 + i}: no log-prob to compare`; continue; }
    const d = Math.abs(rp.logprob - (exact ? e.logprob : e.logprob - Math.log(e.prob_sum)));
    ds.push(d);
    if (!f16 && !(d <= bound)) bad ??= `position ${np - 1 + i}: |delta logprob| ${d.toExponential(2)} > ${bound}`;
    const tie = rp.top.length > 1 && rp.top[0][1] - rp.top[1][1] < 1e-3;
    const pick = exact ? (e.argmax ?? e.top?.[0]?.[0]) : e.token;
    if (rp.argmax === pick) agree++;
    else if (!tie && !f16 && !noArgmax) bad ??= `position ${np - 1 + i}: the argmax is ${pick}, the reference's is ${rp.argmax}`;
}
const n = l.logprobs.length;
if (!n) bad ??= "no log-probs: nothing to compare";
const within = ds.filter((d) => d <= 2e-2).length;
ds.sort((a, b) => a - b);
const med = ds.length ? ds[Math.floor(ds.length / 2)] : NaN;
if (f16 && !bad) {
    if (!(med <= 3e-3)) bad = `median |delta logprob| ${med.toExponential(2)} > 3e-3`;
    else if (within < n) bad = `only ${within} of ${n} positions within 2e-2`;
    else if (agree < 0.9 * n) bad = `greedy agreement ${agree}/${n} < 90%`;
}
console.log(`positions ${ds.length}, max |d| ${ds.length ? ds[ds.length - 1].toExponential(2) : "-"}, ` +
    `median |d| ${med.toExponential(2)}, argmax agree ${agree}/${l.logprobs.length}`);
if (bad) {
    console.log(`FAIL: ${bad}`);
    process.exit(1);
}
