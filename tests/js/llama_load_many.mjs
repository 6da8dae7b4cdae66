// usage: node llama_load_many.mjs [-n N] [--prompt TEXT] MODEL.gguf...
//
// Loads each model in turn with llama.cpp (node-llama-cpp, CPU) in ONE process
// (the addon and the vocabulary load once per model instead of once per node
// start) and generates N greedy tokens (default 16) after the prompt, with the
// full-vocabulary log-probability of each pick. Prints one JSON line per model:
//   {"model": PATH, "tokens": [...], "logprobs": [...], "finite": true|false}
// and exits 1 if a model does not load or a log-prob is not finite.
import fs from "node:fs";
import { loadLlama, tokenizePrompt, fail } from "./llama_env.mjs";

const opt = { n: 16, prompt: "The quick brown fox jumps over the lazy dog.", models: [] };
const args = process.argv.slice(2);
for (let i = 0; i < args.length; i++) {
    const a = args[i], v = () => args[++i] ?? fail(`${a} needs a value`);
    if (a === "-n") opt.n = Number(v());
    else if (a === "--prompt") opt.prompt = v();
    else if (a.startsWith("-")) fail(`unknown option ${a}`);
    else opt.models.push(a);
}
if (opt.models.length === 0 || !Number.isInteger(opt.n) || opt.n < 1)
    fail("usage: node llama_load_many.mjs [-n N] [--prompt TEXT] MODEL.gguf...");

let bad = false;
try {
    const llama = await loadLlama({ maxThreads: 1 });
    for (const path of opt.models) {
        if (!fs.existsSync(path))
            fail(`no such file: ${path}`);
        const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 }).catch((err) => {
            throw new Error(`llama.cpp cannot load ${path}: ${err?.message ?? err}`);
        });
        const prompt = tokenizePrompt(model, opt.prompt, { parseSpecial: false });
        const context = await model.createContext({ contextSize: prompt.length + opt.n + 1, sequences: 1, threads: 1 });
        const seq = context.getSequence();
        const next = { token: true, probabilities: true, options: { temperature: 0 } };
        const feed = async (input) => {
            const items = input.map((t, i) => (i === input.length - 1 ? [t, { generateNext: next }] : t));
            const out = await seq.controlledEvaluate(items);
            return out[input.length - 1].next;
        };
        const tokens = [], logprobs = [];
        let res = await feed(prompt);
        for (let i = 0; i < opt.n; i++) {
            tokens.push(res.token);
            const p = res.probabilities.get(res.token) ?? 0;
            logprobs.push(p > 0 ? Math.log(p) : null);
            if (i + 1 < opt.n)
                res = await feed([res.token]);
        }
        const finite = logprobs.every((x) => x != null && Number.isFinite(x));
        bad ||= !finite;
        process.stdout.write(JSON.stringify({ model: path, tokens, logprobs, finite }) + "\n");
        await context.dispose();
        await model.dispose();
    }
    await llama.dispose();
} catch (err) {
    fail(err?.stack ?? String(err));
}
process.exit(bad ? 1 : 0);
