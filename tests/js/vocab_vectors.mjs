// usage: node vocab_vectors.mjs DIR
// Self-check of the reference tokenizer: runs llama.cpp's own tokenizer test
// vectors (DIR/ggml-vocab-*.gguf with .inp/.out, see extract_vocab.sh) through
// tokenizePrompt, the code llama_tokenize.mjs and llama_generate.mjs use, in
// one process. Like llama.cpp's test-tokenizer-0: no BOS/EOS, special text not
// parsed. Prints one JSON line per vocab, exits 1 on any mismatch.
import fs from "node:fs";
import path from "node:path";
import { loadLlama, loadVocab, tokenizePrompt, fail } from "./llama_env.mjs";

const dir = process.argv[2] ?? fail("usage: node vocab_vectors.mjs DIR");
const ggufs = fs.readdirSync(dir).filter((f) => /^ggml-vocab-.*\.gguf$/.test(f) &&
    fs.existsSync(path.join(dir, f + ".inp")) && fs.existsSync(path.join(dir, f + ".out"))).sort();
if (ggufs.length === 0)
    fail(`no ggml-vocab-*.gguf with .inp/.out in ${dir}`);

const llama = await loadLlama();
let failed = 0;
for (const f of ggufs) {
    const file = path.join(dir, f);
    const inputs = fs.readFileSync(file + ".inp", "utf8").split("\n__ggml_vocab_test__\n");
    const expected = fs.readFileSync(file + ".out", "utf8").split("\n").slice(0, inputs.length)
        .map((l) => l.trim().split(/\s+/).filter(Boolean).map(Number));
    const model = await loadVocab(llama, file);
    const bad = [];
    inputs.forEach((text, i) => {
        const got = tokenizePrompt(model, text, { addSpecial: false });
        if (JSON.stringify(got) !== JSON.stringify(expected[i]))
            bad.push({ text, got, expected: expected[i] });
    });
    await model.dispose();
    failed += bad.length;
    process.stdout.write(JSON.stringify({ file: f, cases: inputs.length, failed: bad.length, first_failure: bad[0] }) + "\n");
}
await llama.dispose();
process.exit(failed === 0 ? 0 : 1);
