// usage: node nlc_counts.mjs FILE.gguf...
// Prints one JSON line per file:
//   {"file", "n_kv", "n_tensors", "header_n_kv", "header_n_tensors"}
// n_kv / n_tensors come from node-llama-cpp's own GGUF parser (an outside
// reference for our reader); header_* are the two u64 counts from the file's
// header, read here directly, as a cross-check of the counting below.
//
// node-llama-cpp does not return the KV count. It stores each KV under its key
// in a flat record and then splits keys at "." into a nested object tree
// ("general.name" -> metadata.general.name; "general.license" and
// "tokenizer.chat_template" stay unsplit; on a clash such as "a.b" next to
// "a.b.c" it re-flattens the clashing part under dotted names). Every stored
// KV therefore ends up as exactly one leaf: a primitive, a bigint or an array
// (GGUF array values are one KV however long). Counting leaves gives the number
// of KVs in the file; only a key stored twice (which llama.cpp rejects) would
// collapse into one.
import fs from "node:fs";
import { readGgufFileInfo } from "node-llama-cpp";

function countLeaves(node) {
    if (node === null || typeof node !== "object" || Array.isArray(node))
        return 1;
    let n = 0;
    for (const value of Object.values(node))
        n += countLeaves(value);
    return n;
}

// GGUF v2/v3 header: magic[4] version:u32 n_tensors:u64 n_kv:u64
function readHeader(file) {
    const fd = fs.openSync(file, "r");
    try {
        const b = Buffer.alloc(24);
        if (fs.readSync(fd, b, 0, 24, 0) !== 24 || b.toString("latin1", 0, 4) !== "GGUF")
            throw new Error("not a GGUF file");
        return { n_tensors: Number(b.readBigUInt64LE(8)), n_kv: Number(b.readBigUInt64LE(16)) };
    } finally {
        fs.closeSync(fd);
    }
}

const files = process.argv.slice(2);
if (files.length === 0) {
    process.stderr.write("usage: node nlc_counts.mjs FILE.gguf...\n");
    process.exit(2);
}
let status = 0;
for (const file of files) {
    try {
        // spliceSplitFiles off: count exactly what this one file stores.
        const info = await readGgufFileInfo(file, { sourceType: "filesystem", spliceSplitFiles: false, logWarnings: false });
        const header = readHeader(file);
        const out = {
            file,
            n_kv: countLeaves(info.metadata),
            n_tensors: info.tensorInfo?.length ?? Number(info.tensorCount),
            header_n_kv: header.n_kv,
            header_n_tensors: header.n_tensors
        };
        if (out.n_kv !== out.header_n_kv || out.n_tensors !== out.header_n_tensors)
            process.stderr.write(`nlc_counts: ${file}: node-llama-cpp counts differ from the header\n`);
        process.stdout.write(JSON.stringify(out) + "\n");
    } catch (err) {
        process.stderr.write(`nlc_counts: ${file}: ${err?.message ?? err}\n`);
        status = 1;
    }
}
process.exit(status);
