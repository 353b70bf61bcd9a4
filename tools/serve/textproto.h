/*
 * textproto.h — protobuf text format, read into a schema-less tree, for npu-serve's
 * configuration files (TF Serving's model_config_list, platform_configs with the session's
 * NpuOptimizer parameter_map, batching parameters).
 *
 *   field := name [":"] ( "{" fields "}" | "<" fields ">" | "[" scalar, ... "]" | scalar ) [","|";"]
 *   name  := identifier | "[" type.url/with.dots "]"        (an Any's expansion)
 *   scalar:= "string" (adjacent strings joined; C escapes) | number | identifier
 * "#" starts a comment.  A list "[a, b]" becomes repeated fields of that name.
 */
#ifndef NPU_SERVE_TEXTPROTO_H
#define NPU_SERVE_TEXTPROTO_H

typedef struct tp_node {
  char *name;
  char *value;           /* scalar fields; NULL for messages */
  struct tp_node *child; /* message fields: the first */
  struct tp_node *next;
} tp_node;

/* Parses text; NULL on error with a message ("line 3: expected '}'") in err. */
tp_node *tp_parse(const char *text, char *err, int err_size);
void tp_free(tp_node *n);
/* The first child of n named name (NULL when none); the next one after `after`. */
const tp_node *tp_get(const tp_node *n, const char *name);
const tp_node *tp_next(const tp_node *after, const char *name);
/* The scalar value of n's first child named name, or dflt. */
const char *tp_str(const tp_node *n, const char *name, const char *dflt);

#endif
