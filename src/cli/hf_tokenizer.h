/* Reads a Hugging Face tokenizer (tokenizer.json + tokenizer_config.json) into
 * the arrays GGUF stores as tokenizer.ggml.* (gguf.md §7.3, tokenizer.md §1),
 * assigning token types as llama.cpp's converter does. Used by make-model. */
#ifndef OG_HF_TOKENIZER_H
#define OG_HF_TOKENIZER_H

#include "og_model_write.h"

/* llama.cpp token types (tokenizer.ggml.token_type). */
enum { OG_TOKEN_NORMAL = 1, OG_TOKEN_UNKNOWN = 2, OG_TOKEN_CONTROL = 3,
       OG_TOKEN_USER_DEFINED = 4, OG_TOKEN_UNUSED = 5, OG_TOKEN_BYTE = 6 };

typedef og_model_vocab og_hf_vocab; /* the model writers' vocabulary (og_model_write.h) */

/* dir holds tokenizer.json and tokenizer_config.json. pad_to: pad the vocabulary
 * with "[PAD<id>]" UNUSED tokens up to this many ids (0 = no padding), as the
 * llama.cpp converter does for DeepSeek-V3 (129280). Errors: OG_ERR_IO (missing
 * files), OG_ERR_FORMAT (unexpected JSON), OG_ERR_RANGE (pad_to too small). */
og_status og_hf_vocab_load(const char *dir, uint32_t pad_to, og_hf_vocab *out, char *err, size_t errlen);
void og_hf_vocab_free(og_hf_vocab *v);

#endif
