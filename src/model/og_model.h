/* onegpu model: architecture knowledge. For now: the table of tensor roles that
 * the planner and `onegpu gguf` read without knowing the model's internals
 * (DESIGN.md "Target models"); the forward pass arrives with the model issue. */
#ifndef OG_MODEL_H
#define OG_MODEL_H

#include "og_gguf.h"

typedef enum og_tensor_role {
    OG_ROLE_EMBEDDINGS = 0, /* token_embd */
    OG_ROLE_ATTENTION,      /* attn_* incl. its norms and MLA factors */
    OG_ROLE_NORM,           /* ffn_norm and other per-layer norms outside attention */
    OG_ROLE_ROUTER,         /* ffn_gate_inp, exp_probs_b */
    OG_ROLE_DENSE_FFN,      /* ffn_gate/up/down of dense (non-MoE) layers */
    OG_ROLE_ROUTED_EXPERTS, /* ffn_*_exps: stacked routed experts [.., .., n_expert] */
    OG_ROLE_SHARED_EXPERTS, /* ffn_*_shexp */
    OG_ROLE_OUTPUT,         /* output, output_norm */
    OG_ROLE_OTHER,          /* anything the table does not know */
    OG_ROLE_COUNT
} og_tensor_role;

/* Role of a tensor by its GGUF name, for architecture `arch` (e.g. "deepseek2").
 * Unknown names give OG_ROLE_OTHER; never fails. */
og_tensor_role og_model_tensor_role(const char *arch, const char *tensor_name);

/* Short name of a role ("routed_experts"). Never NULL. */
const char *og_model_role_name(og_tensor_role role);

/* Layer index from "blk.N.*", or -1 for tensors outside the layers. */
int og_model_tensor_layer(const char *tensor_name);

#endif
