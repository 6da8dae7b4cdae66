// usage: node compare_ids.mjs OURS.jsonl THEIRS.jsonl
// Both files: one {"file", "tokens"} per line, same order. Prints a summary and,
// for the first mismatches, the position and a window of ids; exits 1 on any.
import fs from "node:fs";
const read = (f) => fs.readFileSync(f, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
const [a, b] = [read(process.argv[2]), read(process.argv[3])];
if (a.length === 0) { console.error("no cases to compare: zero lines in " + process.argv[2]); process.exit(1); }
if (a.length !== b.length) { console.error(`different counts: ${a.length} vs ${b.length}`); process.exit(1); }
let bad = 0, tokens = 0;
for (let i = 0; i < a.length; i++) {
    const x = a[i].tokens, y = b[i].tokens;
    tokens += y.length;
    let at = -1;
    for (let k = 0; k < Math.max(x.length, y.length); k++) if (x[k] !== y[k]) { at = k; break; }
    if (at >= 0 && bad++ < 5)
        console.error(`${a[i].file}: first difference at token ${at}: ours ${JSON.stringify(x.slice(at, at + 6))} vs llama.cpp ${JSON.stringify(y.slice(at, at + 6))}`);
}
console.log(JSON.stringify({ files: a.length, tokens, mismatched_files: bad }));
process.exit(bad ? 1 : 0);
