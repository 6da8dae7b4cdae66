// The invariants of the deepseek41 reference's output (tests/cli/ref_ds41.sh).
// usage:
//   node check_ref41.mjs norm RUN.json
//     RUN: ref_deepseek41, --full on some positions (those with "logprobs").
//     Every position's log-probs are finite, "top" descending with
//     probabilities summing to <= 1, "argmax" its first; where all V are
//     given they are normalized (log sum exp within 1e-9 of 0), "logprob" is
//     their entry of "next", and "argmax" and "top" their 5 largest.
//   node check_ref41.mjs halves WHOLE.json FIRST.json SECOND.json
//     FIRST: --save-state on the first tokens, SECOND: --load-state on the
//     rest. Each position of FIRST (but its last, whose next token it does not
//     know) and SECOND equals WHOLE's to the printed digit.
//   node check_ref41.mjs mask DESCRIBE.json MASKED.json UNMASKED.json
//     --describe, then --selections with and without --no-candidate-mask.
//     While the candidate source has <= candidate_topk_blocks x
//     candidate_block_size rows (decision 6) the two runs select alike and no
//     blocks are listed; past that the masked run lists exactly
//     candidate_topk_blocks blocks including the newest one, every candidate-
//     masked layer's rows lie inside them, and at least one position's
//     selection differs from the unmasked run (the mask is exercised).
//   node check_ref41.mjs roles DESCRIBE.json
//     the file holds every CSA2 role and Engram (what the checks above rely on).
// Prints one summary line; exits 1 naming the first failure.
import fs from "node:fs";

const [mode, ...files] = process.argv.slice(2);
const read = (f) => JSON.parse(fs.readFileSync(f, "utf8"));
const fail = (m) => { console.log(`FAIL: ${m}`); process.exit(1); };

if (mode === "norm") {
    const r = read(files[0]);
    if (!r.positions.length) fail("no positions");
    let worst = 0, full = 0;
    for (const p of r.positions) {
        const top = p.top.map((t) => t[1]);
        if (!top.every(Number.isFinite) || (p.next != null && !Number.isFinite(p.logprob)))
            fail(`position ${p.pos}: a log-prob is not finite`);
        if (top.some((v, i) => v > 0 || (i && v > top[i - 1]))) fail(`position ${p.pos}: top is not descending log-probs`);
        if (!(top.reduce((s, v) => s + Math.exp(v), 0) <= 1 + 1e-9)) fail(`position ${p.pos}: the top-5 probabilities sum past 1`);
        if (p.next != null && p.logprob > top[0] + 1e-12) fail(`position ${p.pos}: logprob above the top one`);
        if (p.argmax !== p.top[0][0]) fail(`position ${p.pos}: argmax is not top[0]`);
        const lp = p.logprobs;
        if (!lp) continue;
        full++;
        if (!lp.every(Number.isFinite)) fail(`position ${p.pos}: a log-prob is not finite`);
        const mx = lp.reduce((a, v) => Math.max(a, v), -Infinity);
        const lse = mx + Math.log(lp.reduce((s, v) => s + Math.exp(v - mx), 0));
        worst = Math.max(worst, Math.abs(lse));
        if (!(Math.abs(lse) <= 1e-9)) fail(`position ${p.pos}: log sum exp of the log-probs is ${lse}`);
        if (p.next != null && !(Math.abs(p.logprob - lp[p.next]) <= 1e-9)) fail(`position ${p.pos}: logprob != logprobs[next]`);
        const order = lp.map((v, i) => [i, v]).sort((a, b) => b[1] - a[1] || a[0] - b[0]).slice(0, 5);
        if (p.argmax !== order[0][0]) fail(`position ${p.pos}: argmax ${p.argmax}, the largest log-prob is ${order[0][0]}'s`);
        for (let t = 0; t < order.length; t++)
            if (!(Math.abs(p.top[t][1] - order[t][1]) <= 1e-9)) fail(`position ${p.pos}: top[${t}] is not the ${t + 1}th largest`);
    }
    if (!full) fail("no position with all the log-probs (--full)");
    console.log(`positions ${r.positions.length}: finite, top-5 consistent; ${full} with all V normalized (max |log sum exp| ${worst.toExponential(1)})`);
} else if (mode === "halves") {
    const [w, a, b] = files.map(read);
    const byPos = new Map(w.positions.map((p) => [p.pos, JSON.stringify(p)]));
    const got = [...a.positions.slice(0, -1), ...b.positions];
    if (b.positions[0]?.pos !== a.positions.length) fail(`the second half starts at ${b.positions[0]?.pos}, not ${a.positions.length}`);
    if (got.length !== w.positions.length - 1) fail(`${got.length} positions in the halves, ${w.positions.length - 1} expected`);
    for (const p of got) if (byPos.get(p.pos) !== JSON.stringify(p)) fail(`position ${p.pos} differs from the one run`);
    const lastA = a.positions[a.positions.length - 1], wA = JSON.parse(byPos.get(lastA.pos));
    if (JSON.stringify(lastA.top) !== JSON.stringify(wA.top)) fail(`position ${lastA.pos} (the first half's last) differs`);
    console.log(`halves ${a.positions.length} + ${b.positions.length}: every position equals the one run`);
} else if (mode === "mask") {
    const [d, m, u] = files.map(read);
    const src = d.candidate_source, B = d.candidate_block_size, T = d.candidate_topk_blocks;
    if (src < 0) fail("the file has no candidate source");
    const masked = d.layers.map((l, i) => (l.candidate_masked ? i : -1)).filter((i) => i >= 0);
    if (!masked.length) fail("the file has no candidate-masked layer");
    const ratio = d.layers[src].ratio;
    let differ = 0, active = 0;
    for (let i = 0; i < m.positions.length; i++) {
        const pm = m.positions[i], pu = u.positions[i], nc = Math.floor((pm.pos + 1) / ratio);
        const sm = new Map(pm.sel), su = new Map(pu.sel);
        if (nc <= T * B) {
            if (pm.cand) fail(`position ${pm.pos}: ${nc} rows fit in the blocks, yet blocks are listed`);
            if (JSON.stringify(pm.sel) !== JSON.stringify(pu.sel)) fail(`position ${pm.pos}: the mask changed a selection with ${nc} <= ${T * B} rows`);
            continue;
        }
        active++;
        const cand = pm.cand;
        if (!cand || cand.length !== T) fail(`position ${pm.pos}: ${cand?.length} blocks, ${T} expected`);
        if (!cand.includes(Math.floor((nc - 1) / B))) fail(`position ${pm.pos}: the newest block is not kept`);
        for (const il of masked) {
            const rows = sm.get(il);
            if (!rows) fail(`position ${pm.pos}: no selection for layer ${il}`);
            for (const c of rows) if (!cand.includes(Math.floor(c / B))) fail(`position ${pm.pos}: layer ${il} selected row ${c} outside the blocks`);
            if (JSON.stringify(rows) !== JSON.stringify(su.get(il))) differ++;
        }
    }
    if (!active) fail(`no position has more than ${T * B} candidate rows: the mask is never on`);
    if (!differ) fail(`the mask changed no selection in ${active} positions`);
    console.log(`mask on at ${active} positions (blocks of ${B}, ${T} kept): ${differ} masked selections differ from the unmasked run`);
} else if (mode === "roles") {
    const d = read(files[0]), L = d.layers;
    const has = {
        "window only": L.some((l) => l.ratio === 0),
        "ratio-2 source": L.some((l) => l.ratio === 2 && l.kv_source && l.key_owner && l.index_source),
        "ratio-2 reuser": L.some((l) => l.ratio === 2 && !l.kv_source && !l.index_source && l.selection_of >= 0),
        "ratio-1 candidate source": d.candidate_source >= 0 && L[d.candidate_source].ratio === 1 && L[d.candidate_source].kv_source,
        "ratio-1 reuser": L.some((l) => l.ratio === 1 && !l.kv_source && !l.index_source),
        "reindex (candidate-masked)": L.some((l) => l.candidate_masked && !l.kv_source && l.index_source),
        "reuser of a reindex layer": L.some((l, i) => !l.index_source && l.selection_of >= 0 && l.selection_of !== l.rows_of && i > l.selection_of),
        "Engram": d.engram_layers.length > 0,
    };
    const missing = Object.keys(has).filter((k) => !has[k]);
    if (missing.length) fail(`the file lacks: ${missing.join(", ")}`);
    console.log(`every role: ${Object.keys(has).join(", ")}`);
} else {
    fail(`unknown mode ${mode} (norm, halves, mask, roles)`);
}
