/* Internal to src/moe: reading the JSON files the planner and the policy
 * benchmark take (profiles, traces). */
#ifndef OG_MOE_JSON_H
#define OG_MOE_JSON_H

#include "og_base.h"

#include <jansson.h>

/* Parses the file at path (at most max_bytes) into *out (json_decref it).
 * Errors: og_read_file's, OG_ERR_FORMAT "PATH: not JSON (line N: why)". */
og_status og_moe_json_load(const char *path, size_t max_bytes, json_t **out, char *err, size_t errlen);

#endif
