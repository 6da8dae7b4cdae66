// usage: node llama_tokenize.mjs MODEL.gguf [--special] [--no-bos] [--file F] < text
// Prints {"tokens":[...]}: the ids llama.cpp gives the text (read as UTF-8,
// byte for byte, trailing newline included) the way its completion tool
// tokenizes a prompt: BOS/EOS/CLS/SEP as the vocab says (dropped by --no-bos,
// i.e. add_special = false), special-token text parsed only with --special.
// Loads the file vocab-only, so weightless files like ggml-vocab-*.gguf work.
import fs from "node:fs";
import { loadLlama, loadVocab, tokenizePrompt, fail } from "./llama_env.mjs";

const args = process.argv.slice(2);
let modelPath = null, file = null, parseSpecial = false, addSpecial = true;
for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === "--special") parseSpecial = true;
    else if (a === "--no-bos") addSpecial = false;
    else if (a === "--file") file = args[++i] ?? fail("--file needs a path");
    else if (a.startsWith("--")) fail(`unknown option ${a}`);
    else if (modelPath == null) modelPath = a;
    else fail(`unexpected argument ${a}`);
}
if (modelPath == null)
    fail("usage: node llama_tokenize.mjs MODEL.gguf [--special] [--no-bos] [--file F] < text");

try {
    if (!fs.existsSync(modelPath))
        fail(`no such file: ${modelPath}`);
    const text = fs.readFileSync(file ?? 0, "utf8");
    const llama = await loadLlama();
    const model = await loadVocab(llama, modelPath);
    const tokens = tokenizePrompt(model, text, { parseSpecial, addSpecial });
    process.stdout.write(JSON.stringify({ tokens }) + "\n");
    await model.dispose();
    await llama.dispose();
} catch (err) {
    fail(err?.stack ?? String(err));
}
