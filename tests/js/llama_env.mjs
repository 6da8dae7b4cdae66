// Shared setup for the node-llama-cpp reference scripts.
//
//   import { loadLlama, loadVocab, tokenizePrompt, cpuBackend, fail } from "./llama_env.mjs";
//   const llama = await loadLlama();            // CPU only, prebuilt, never builds
//   const model = await loadVocab(llama, "x.gguf");   // or llama.loadModel({...})
//
// Environment:
//   ONEGPU_LLAMA_CPU  unset: every prebuilt CPU variant except sapphirerapids
//                     (ggml picks the best one this CPU supports);
//                     NAME (e.g. zen4, haswell, x64): only that variant, for
//                     results that do not depend on the host CPU;
//                     "all": the package's folder untouched.
//   ONEGPU_LLAMA_LOG  llama.cpp log level shown on stderr (default warn;
//                     disabled|fatal|error|warn|info|log|debug).
//
// Why the variant filter: the prebuilt libggml-cpu-sapphirerapids.so crashed on
// Q8_0/F16 models on an AMX machine; ggml picks it whenever CPUID reports
// AMX_INT8 (a CPU without AMX scores it 0 and gets e.g. zen4 anyway). ggml has
// no switch to skip a variant (it dlopens every libggml-cpu-*.so in the folder
// and keeps the best score), so instead of deleting the file from node_modules
// we hand node-llama-cpp a folder of symlinks without it (see
// llama_bins_hook.mjs). The folder is made once per install under $TMPDIR.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import crypto from "node:crypto";
import { register } from "node:module";
import { pathToFileURL } from "node:url";

// stdout is reserved for our JSON: route every console printer that would write
// there (node-llama-cpp uses console.info/log for some notices) to stderr.
for (const name of ["log", "info", "debug"])
    console[name] = (...args) => console.error(...args);

const BAD_VARIANT = "libggml-cpu-sapphirerapids.so";

export function fail(message) {
    process.stderr.write(`${path.basename(process.argv[1] ?? "node")}: ${message}\n`);
    process.exit(1);
}

// Build (or reuse) the symlink folder and return its root, or null for "all".
async function prepareBins() {
    const choice = (process.env.ONEGPU_LLAMA_CPU ?? "").trim();
    if (choice === "all")
        return null;
    const real = await import("@node-llama-cpp/linux-x64");
    const { binsDir, packageVersion } = real.getBinsDir();
    const subdirs = fs.readdirSync(binsDir).filter((d) => fs.existsSync(path.join(binsDir, d, "llama-addon.node")));
    if (subdirs.length === 0)
        throw new Error(`no llama-addon.node under ${binsDir}`);

    const files = {};
    for (const sub of subdirs) {
        const names = fs.readdirSync(path.join(binsDir, sub));
        const variants = names.filter((n) => n.startsWith("libggml-cpu-"));
        if (choice !== "" && !variants.includes(`libggml-cpu-${choice}.so`))
            throw new Error(`ONEGPU_LLAMA_CPU=${choice}: no such CPU variant; have ` +
                variants.map((n) => n.slice(12, -3)).join(", "));
        files[sub] = names.filter((n) => !n.startsWith("libggml-cpu-") ||
            (choice === "" ? n !== BAD_VARIANT : n === `libggml-cpu-${choice}.so`));
    }

    // Key the folder by what it points at, so a reinstall gets a fresh one.
    const stamp = JSON.stringify({ binsDir, packageVersion, choice, files,
        mtimes: subdirs.map((s) => fs.statSync(path.join(binsDir, s, "llama-addon.node")).mtimeMs) });
    const key = crypto.createHash("sha256").update(stamp).digest("hex").slice(0, 16);
    const parent = path.join(os.tmpdir(), `onegpu-llama-bins-${process.getuid?.() ?? "user"}`);
    const root = path.join(parent, key);
    const shim = path.join(root, "shim.mjs");
    const complete = () => fs.existsSync(shim) &&
        subdirs.every((s) => files[s].every((n) => fs.existsSync(path.join(root, s, n))));
    if (!complete()) {
        // Build beside it and rename into place, never touching a complete
        // folder: concurrent test processes either win the rename or find a
        // finished folder that another process may already be loading from.
        fs.mkdirSync(parent, { recursive: true });
        const tmp = fs.mkdtempSync(path.join(parent, "tmp-"));
        for (const sub of subdirs) {
            fs.mkdirSync(path.join(tmp, sub));
            for (const n of files[sub])
                fs.symlinkSync(path.join(binsDir, sub, n), path.join(tmp, sub, n));
        }
        fs.writeFileSync(path.join(tmp, "shim.mjs"),
            `export function getBinsDir() { return ${JSON.stringify({ binsDir: root, packageVersion })}; }\n`);
        for (let attempt = 0; ; attempt++) {
            try {
                fs.renameSync(tmp, root);
                break;
            } catch (err) {
                if (complete() || attempt > 0 || !fs.existsSync(root)) {
                    fs.rmSync(tmp, { recursive: true, force: true });
                    if (complete())
                        break;
                    throw err;
                }
                // A broken leftover (say, half-emptied by a tmp cleaner): move it aside.
                const aside = `${root}.stale-${process.pid}`;
                try {
                    fs.renameSync(root, aside);
                    fs.rmSync(aside, { recursive: true, force: true });
                } catch { /* someone else moved it first */ }
            }
        }
    }
    return root;
}

let hooked = false;

// Returns a Llama instance that runs on the CPU with prebuilt binaries.
// `options` are passed through to getLlama (e.g. {maxThreads: 2}).
export async function loadLlama(options = {}) {
    if (!hooked) {
        const root = await prepareBins();
        if (root != null)
            register(new URL("./llama_bins_hook.mjs", import.meta.url),
                { data: { shimUrl: pathToFileURL(path.join(root, "shim.mjs")).href } });
        hooked = true;
    }
    const { getLlama, LlamaLogLevel } = await import("node-llama-cpp");
    const level = process.env.ONEGPU_LLAMA_LOG ?? LlamaLogLevel.warn;
    let llama;
    try {
        llama = await getLlama({
            gpu: false,
            build: "never",
            skipDownload: true,
            progressLogs: false,
            logLevel: level,
            logger: (lvl, message) => {
                if (vocabLoads > 0 && SIMULATION_NOISE.test(message))
                    return;
                process.stderr.write(`[llama ${lvl}] ${message.replace(/\n$/, "")}\n`);
            },
            ...options
        });
    } catch (err) {
        if (err?.constructor?.name === "NoBinaryFoundError" && process.env.ONEGPU_LLAMA_CPU)
            throw new Error(`ONEGPU_LLAMA_CPU=${process.env.ONEGPU_LLAMA_CPU}: this CPU cannot run that ` +
                "variant (ggml scored it 0, so no CPU backend loaded)");
        throw err;
    }
    // Safety net in case the hook did not take (e.g. getLlama ran earlier).
    if (cpuBackend()?.includes("sapphirerapids") && process.env.ONEGPU_LLAMA_CPU == null)
        throw new Error("llama.cpp loaded the sapphirerapids CPU variant, which crashes on Q8_0/F16 models");
    return llama;
}

// Token ids for `text` as llama.cpp's completion tool makes them:
// common_tokenize(text, add_special = true, parse_special). node-llama-cpp's
// tokenize() always passes add_special = false, so the specials that
// llama_vocab::tokenize would add are added here, per vocabulary type:
// SPM/UGM/BPE: BOS if the vocab says add_bos, EOS if it says add_eos;
// WPM (BERT): always CLS(=BOS) ... SEP; RWKV/PLaMo-2: none.
// parseSpecial = true turns text such as "<s>" into its special token; note that
// the completion tool itself parses special text by default.
export function tokenizePrompt(model, text, { parseSpecial = false, addSpecial = true } = {}) {
    const body = Array.from(model.tokenize(text, parseSpecial));
    if (!addSpecial)
        return body;
    const t = model.tokens;
    const type = model.vocabularyType;
    if (type === "wpm") {
        if (t.bos == null || t.sep == null)
            throw new Error("WPM vocabulary without CLS/SEP tokens");
        return [t.bos, ...body, t.sep];
    }
    if (type !== "spm" && type !== "ugm" && type !== "bpe")
        return body;
    // model.tokens.shouldAppendEosToken also demands a BOS token; ask the
    // addon for the plain llama_vocab_get_add_eos when it is reachable.
    const addEos = typeof model._model?.shouldAppendEosToken === "function"
        ? model._model.shouldAppendEosToken() : t.shouldAppendEosToken;
    return [...(t.shouldPrependBosToken ? [t.bos] : []), ...body, ...(addEos ? [t.eos] : [])];
}

// node-llama-cpp first "simulates" a full load of every model to size memory;
// on a weightless vocab file that fails loudly (and harmlessly) before the real
// vocab-only load succeeds. Those lines are dropped while loadVocab runs.
const SIMULATION_NOISE = /^Failed simulating model resource usage|^llama_model_load(_from_file_impl)?: (error loading model|failed to load model)/;
let vocabLoads = 0;

export async function loadVocab(llama, modelPath) {
    vocabLoads++;
    try {
        return await llama.loadModel({ modelPath, vocabOnly: true });
    } finally {
        vocabLoads--;
    }
}

// Which libggml-cpu-*.so the process actually kept (ggml unloads the losers).
export function cpuBackend() {
    try {
        const maps = fs.readFileSync("/proc/self/maps", "utf8");
        const hits = new Set(maps.match(/libggml-cpu-[A-Za-z0-9_]+\.so/g) ?? []);
        return [...hits].map((n) => n.slice(12, -3)).join(",") || null;
    } catch {
        return null;
    }
}
