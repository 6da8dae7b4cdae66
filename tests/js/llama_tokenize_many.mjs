// usage: node llama_tokenize_many.mjs MODEL.gguf [--special] [--no-bos] FILE...
// One process, many texts: prints {"file", "tokens"} per file as JSON lines, the
// ids llama.cpp gives each file's UTF-8 text (see llama_tokenize.mjs for the rules).
import fs from "node:fs";
import { loadLlama, loadVocab, tokenizePrompt, fail } from "./llama_env.mjs";

const args = process.argv.slice(2);
let modelPath = null, parseSpecial = false, addSpecial = true;
const files = [];
for (const a of args) {
    if (a === "--special") parseSpecial = true;
    else if (a === "--no-bos") addSpecial = false;
    else if (a.startsWith("--")) fail(`unknown option ${a}`);
    else if (modelPath == null) modelPath = a;
    else files.push(a);
}
if (modelPath == null || files.length === 0) fail("usage: node llama_tokenize_many.mjs MODEL.gguf [--special] [--no-bos] FILE...");
const llama = await loadLlama();
const model = await loadVocab(llama, modelPath);
for (const file of files) {
    const tokens = tokenizePrompt(model, fs.readFileSync(file, "utf8"), { parseSpecial, addSpecial });
    process.stdout.write(JSON.stringify({ file, tokens }) + "\n");
}
await model.dispose();
await llama.dispose();
