// ESM resolve hook registered by llama_env.mjs (module.register runs it on the
// loader thread). node-llama-cpp finds its prebuilt binaries by importing
// "@node-llama-cpp/linux-x64" and calling its getBinsDir(); we answer that
// import with a one-line shim that points at our filtered copy of the bins
// folder, so nothing inside node_modules has to be changed or deleted.
let shimUrl = null;

export function initialize(data) {
    shimUrl = data.shimUrl;
}

export async function resolve(specifier, context, nextResolve) {
    if (shimUrl != null && specifier === "@node-llama-cpp/linux-x64")
        return { url: shimUrl, shortCircuit: true };
    return nextResolve(specifier, context);
}
