// usage: node llama_generate.mjs MODEL.gguf (--prompt TEXT | --prompt-file F | --tokens 1,2,3 |
//            --prompts-jsonl F)
//            [-n N] [--probs] [--teacher 5,6,7] [--special] [--threads T] [--stop-eog] [--kv-f32]
//            [--no-flash-attn]
//
// Greedy llama.cpp reference on the CPU. Prints one JSON object on stdout
// (with --prompts-jsonl F, a file of one JSON string per line: one object per
// prompt, one line each, the model loaded once):
//   {"prompt_tokens":[...], "tokens":[...], "text":"...", "logprobs":[...]|null,
//    "stop":"length"|"eog", "cpu_backend":"zen4"}
// - The prompt is tokenized like llama.cpp's completion tool (see
//   tokenizePrompt in llama_env.mjs); --tokens bypasses tokenization entirely.
// - Generation: exactly N tokens (default 16), argmax of the raw logits each
//   step (temperature 0: no penalties, no top-k/p, no bias). --stop-eog stops
//   after an end-of-generation token, as llama-completion does.
// - --probs: logprobs[i] = {"token", "logprob", "top": [[id, logprob] x5]} for
//   each generated position, from the full-vocabulary softmax.
// - --teacher ids: feed these tokens one at a time after the prompt instead of
//   the greedy picks (teacher forcing); "tokens" are then the fed ids and
//   logprobs[i] (always on) scores teacher[i] given prompt + teacher[0..i-1],
//   with "argmax" added: the token greedy decoding would have picked there.
// --kv-f32: F32 KV cache. With flash attention on (node-llama-cpp's "auto"
// picks it on the CPU) llama.cpp still casts an F32 K and V to F16 before
// ggml_flash_attn_ext (llama-graph.cpp build_attn_mha) and the CPU kernel
// rounds Q to K's F16: --no-flash-attn takes the plain softmax path, whose
// products stay F32 (deepseek4's comparisons use both flags).
// --threads defaults to 1: node-llama-cpp's own default (max(cores, 4)) on a
// 2-core machine made each token of a tiny model take ~250 ms instead of <1 ms
// (ggml's spinning workers fight over the cores). ggml splits work by output
// rows, so the thread count should not change the numbers.
// Log-probabilities are log() of node-llama-cpp's float32 softmax, so a
// probability that underflows float32 (logit gap > ~103) comes out as null
// (-inf). That softmax is not exactly normalized: over 129,280 ids its
// probabilities were seen to sum to 1.00034, which moves every log-prob of the
// position by -log(sum) (3.4e-4); each entry's "prob_sum" (the probabilities'
// sum, in double) lets a comparison take log(p / sum) instead.
import fs from "node:fs";
import { loadLlama, tokenizePrompt, cpuBackend, fail } from "./llama_env.mjs";

const USAGE = "usage: node llama_generate.mjs MODEL.gguf (--prompt TEXT | --prompt-file F | --tokens 1,2,3) " +
    "[-n N] [--probs] [--teacher 5,6,7] [--special] [--threads T] [--stop-eog]";

function ids(s, what) {
    const out = String(s ?? "").split(",").filter((x) => x.trim() !== "").map(Number);
    if (out.length === 0 || !out.every((x) => Number.isInteger(x) && x >= 0))
        fail(`${what} needs a comma-separated list of token ids, got ${JSON.stringify(s)}`);
    return out;
}

function positiveInt(s, what) {
    const n = Number(s);
    if (!Number.isInteger(n) || n < 0)
        fail(`${what} needs a non-negative integer, got ${JSON.stringify(s)}`);
    return n;
}

const opt = { n: 16, probs: false, special: false, stopEog: false, threads: 1, prompt: null, tokens: null, teacher: null, model: null };
const args = process.argv.slice(2);
for (let i = 0; i < args.length; i++) {
    const a = args[i], v = () => args[++i] ?? fail(`${a} needs a value`);
    if (a === "--prompt") opt.prompt = v();
    else if (a === "--prompt-file") opt.prompt = fs.readFileSync(v(), "utf8");
    else if (a === "--prompts-jsonl") opt.promptsJsonl = v();
    else if (a === "--tokens") opt.tokens = ids(v(), a);
    else if (a === "-n" || a === "--n-predict") opt.n = positiveInt(v(), a);
    else if (a === "--probs") opt.probs = true;
    else if (a === "--kv-f32") opt.kvF32 = true; // F32 KV cache (llama.cpp defaults to F16): for F32 comparisons
    else if (a === "--no-flash-attn") opt.noFlashAttn = true;
    else if (a === "--teacher") opt.teacher = ids(v(), a);
    else if (a === "--special") opt.special = true;
    else if (a === "--stop-eog") opt.stopEog = true;
    else if (a === "--threads" || a === "-t") opt.threads = Math.max(1, positiveInt(v(), a));
    else if (a.startsWith("-")) fail(`unknown option ${a}\n${USAGE}`);
    else if (opt.model == null) opt.model = a;
    else fail(`unexpected argument ${a}\n${USAGE}`);
}
if (opt.model == null || (opt.prompt != null) + (opt.tokens != null) + (opt.promptsJsonl != null) !== 1)
    fail(USAGE);
if (!fs.existsSync(opt.model))
    fail(`no such file: ${opt.model}`);

const lp = (p) => (p > 0 ? Math.log(p) : null);

// The map comes sorted by an unstable std::sort, so exact ties can come in any
// order; break them by id (greedy itself picks the lowest id among ties).
function top5(probabilities) {
    const head = [];
    for (const e of probabilities) {
        if (head.length >= 5 && e[1] !== head[head.length - 1][1])
            break;
        head.push(e);
    }
    return head.sort((a, b) => b[1] - a[1] || a[0] - b[0]).slice(0, 5);
}

try {
    const llama = await loadLlama({ maxThreads: opt.threads });
    const model = await llama.loadModel({ modelPath: opt.model, gpuLayers: 0 }).catch((err) => {
        throw new Error(`llama.cpp cannot load ${opt.model} (its reason is in the [llama error] lines above; ` +
            `a vocab-only file has no weights to run): ${err?.message ?? err}`);
    });
    const nVocab = model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length ?? null;

    // one prompt, or one per line of --prompts-jsonl (one JSON line out each)
    const prompts = opt.promptsJsonl
        ? fs.readFileSync(opt.promptsJsonl, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => ({ text: JSON.parse(l) }))
        : [{ text: opt.prompt, tokens: opt.tokens }];
    for (const prompt of prompts) {
        const promptTokens = prompt.tokens ?? tokenizePrompt(model, prompt.text, { parseSpecial: opt.special });
        if (promptTokens.length === 0)
            fail("the prompt has no tokens (llama.cpp cannot evaluate an empty batch)");
        const bad = [...promptTokens, ...(opt.teacher ?? [])].find((t) => nVocab != null && t >= nVocab);
        if (bad != null)
            fail(`token id ${bad} is outside the vocabulary (${nVocab})`);

        const steps = opt.teacher ? opt.teacher.length : opt.n;
        const wantProbs = opt.probs || opt.teacher != null;
        // Room for every token we feed; llama.cpp pads the KV size itself. One
        // sequence, batch 512 like llama.cpp's default micro-batch, so a long
        // prompt is split where llama-completion would split it.
        const contextSize = promptTokens.length + steps + 1;
        const context = await model.createContext({
            contextSize,
            batchSize: Math.min(512, contextSize),
            sequences: 1,
            threads: opt.threads,
            ...(opt.kvF32 ? { experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32" } : {}),
            ...(opt.noFlashAttn ? { flashAttention: false } : {})
        });
        const seq = context.getSequence();

        // Evaluate `input` (ids) and return the next-token result after its last
        // id: {token (greedy pick), probabilities: Map id -> p, sorted by p desc}.
        const next = { token: true, probabilities: wantProbs, options: { temperature: 0 } };
        async function feed(input) {
            const items = input.map((t, i) => (i === input.length - 1 ? [t, { generateNext: next }] : t));
            const out = await seq.controlledEvaluate(items);
            const res = out[input.length - 1]?.next;
            if (res == null || res.token == null)
                throw new Error("llama.cpp returned no next token (model without an output head?)");
            return res;
        }

        const tokens = [], logprobs = [];
        let stop = "length";
        const t0 = performance.now();
        let res = steps > 0 ? await feed(promptTokens) : null;
        const t1 = performance.now();
        for (let i = 0; i < steps; i++) {
            const tok = opt.teacher ? opt.teacher[i] : res.token;
            tokens.push(tok);
            if (wantProbs) {
                const top = top5(res.probabilities).map(([id, p]) => [id, lp(p)]);
                let probSum = 0;
                for (const p of res.probabilities.values())
                    probSum += p;
                const entry = { token: tok, logprob: lp(res.probabilities.get(tok) ?? 0), top, prob_sum: probSum };
                if (opt.teacher)
                    entry.argmax = res.token;
                logprobs.push(entry);
            }
            if (!opt.teacher && opt.stopEog && model.isEogToken(tok)) {
                stop = "eog";
                break;
            }
            if (i + 1 < steps)
                res = await feed([tok]);
        }

        const t2 = performance.now();
        const out = {
            // wall-clock speeds, for benchmarks (bench/RESULTS.md): prefill of the prompt,
            // then one token at a time (steps - 1 evaluations after the first pick)
            prefill_tok_per_s: promptTokens.length / ((t1 - t0) / 1000),
            decode_tok_per_s: steps > 1 ? (steps - 1) / ((t2 - t1) / 1000) : null,
            prompt_tokens: promptTokens,
            tokens,
            text: model.detokenize(tokens, false, promptTokens),
            logprobs: wantProbs ? logprobs : null,
            stop,
            cpu_backend: cpuBackend()
        };
        process.stdout.write(JSON.stringify(out) + "\n");
        await context.dispose();
    }
    await model.dispose();
    await llama.dispose();
} catch (err) {
    fail(err?.stack ?? String(err));
}
