/*
 * gen_ops_doc.c — prints docs/ops.md from the op table (csrc/ops/ops.def and each op file's
 * npu_op_def), the importer's alias table (csrc/io/graphdef.c) and the list of ops with a
 * high_performance implementation (csrc/compile/implmode.c).  The op reference is generated,
 * never written by hand:
 *
 *     build/gen_ops_doc csrc/ops/ops.def > docs/ops.md
 *
 * ops.def is read as text only for its section comments ("/" "* linear algebra *" "/"), which
 * the X-macro cannot carry; the ops themselves come from the compiled table, and the two must
 * list the same names in the same order (else this program fails, so a stale argument cannot
 * produce a wrong page).  spec/docs_spec.lua fails when docs/ops.md differs from the output.
 * Output is deterministic (table order, no dates).  It links the static library and reads
 * internal headers: the op table is not public API.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/passes.h"
#include "io/graphdef.h"
#include "ops/ops.h"

enum { MAX_SECTIONS = 64, LINE_MAX_LEN = 512 };

typedef struct section {
  char title[128];
  int first, count; /* op ids [first, first + count): ops.def lists each section's ops together */
} section;

/* " text " of a one-line comment "/" "* text *" "/", trimmed; NULL when line is not one. */
static char *one_line_comment(char *line) {
  char *s = line;
  while (isspace((unsigned char)*s)) s++;
  if (strncmp(s, "/*", 2) != 0) return NULL;
  char *end = strstr(s + 2, "*/");
  if (!end) return NULL; /* the file's multi-line header */
  *end = 0;
  s += 2;
  while (isspace((unsigned char)*s)) s++;
  for (char *t = s + strlen(s); t > s && isspace((unsigned char)t[-1]);) *--t = 0;
  return s;
}

/* Reads the sections of ops.def; checks its NPU_OP lines against the compiled table. */
static int read_sections(const char *path, section *sec, int *n_sec) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "gen_ops_doc: cannot open %s\n", path);
    return 1;
  }
  char line[LINE_MAX_LEN];
  int id = 0, lineno = 0, rc = 0;
  *n_sec = 0;
  while (!rc && fgets(line, sizeof line, f)) {
    lineno++;
    char name[64];
    const char *title = one_line_comment(line);
    if (title && *n_sec < MAX_SECTIONS) {
      section *s = &sec[(*n_sec)++];
      snprintf(s->title, sizeof s->title, "%s", title);
      s->title[0] = (char)toupper((unsigned char)s->title[0]);
      s->first = id, s->count = 0;
    } else if (sscanf(line, " NPU_OP(%63[a-z0-9_])", name) == 1) {
      if (id >= NPUX_OP_COUNT || strcmp(npuX_op(id)->name, name) != 0) {
        fprintf(stderr, "gen_ops_doc: %s:%d: '%s' is not op %d of the compiled table (%s)\n",
                path, lineno, name, id, id < NPUX_OP_COUNT ? npuX_op(id)->name : "past its end");
        rc = 1;
      } else if (*n_sec == 0) {
        fprintf(stderr, "gen_ops_doc: %s:%d: op '%s' before any section comment\n", path,
                lineno, name);
        rc = 1;
      }
      if (!rc) sec[*n_sec - 1].count++, id++;
    }
  }
  fclose(f);
  if (!rc && id != NPUX_OP_COUNT) {
    fprintf(stderr, "gen_ops_doc: %s lists %d ops, the compiled table %d\n", path, id,
            NPUX_OP_COUNT);
    rc = 1;
  }
  return rc;
}

/* "a,b" -> "`a`, `b`"; "" for NULL or empty. */
static void code_list(const char *list) {
  char item[64];
  for (int i = 0; list && npuI_list_item(list, i, item, sizeof item); i++)
    printf("%s`%s`", i ? ", " : "", item);
}

static void inputs_cell(const npu_op_def *d) {
  if (d->max_inputs < 0) printf("%d+ (a list)", d->min_inputs);
  else if (d->min_inputs == d->max_inputs) printf("%d", d->min_inputs);
  else printf("%d-%d", d->min_inputs, d->max_inputs);
}

/* The TensorFlow types the importer maps to op def: its .tf_type, then the aliases. */
static void tf_cell(const npu_op_def *d) {
  const char *tf, *op;
  bool converts, own_converts = false;
  /* an alias of the op's own type is a converter for some of its nodes (ResizeBilinear of a
     non-float32 image): the type is listed once, marked */
  for (int i = 0; d->tf_type && npuI_tf_alias(i, &tf, &op, &converts); i++)
    own_converts |= converts && strcmp(tf, d->tf_type) == 0;
  int n = 0;
  if (d->tf_type) printf("`%s`%s", d->tf_type, own_converts ? "\\*" : ""), n++;
  for (int i = 0; npuI_tf_alias(i, &tf, &op, &converts); i++)
    if (strcmp(op, d->name) == 0 && !(d->tf_type && strcmp(tf, d->tf_type) == 0))
      printf("%s`%s`%s", n++ ? ", " : "", tf, converts ? "\\*" : "");
}

static const char *kind_note(npuX_kind k) {
  static const char *const notes[] = {
      [NPUX_KIND_KERNEL] = NULL,
      [NPUX_KIND_PLACEHOLDER] = "executor: the fed tensor",
      [NPUX_KIND_CONST] = "executor: attribute `value`",
      [NPUX_KIND_VARIABLE] = "executor: the session's value",
      [NPUX_KIND_ASSIGN] = "executor: copies input 2 into variable input 1",
      [NPUX_KIND_IDENTITY] = "executor: input 1, not copied",
      [NPUX_KIND_NO_OP] = "executor: groups control dependencies",
      [NPUX_KIND_LOOP] = "executor: runs its control dependencies `iterations` times",
      [NPUX_KIND_GET_NEXT] = "executor: a dataset's next element",
  };
  return (unsigned)k < sizeof notes / sizeof notes[0] ? notes[k] : NULL;
}

static void notes_cell(const npu_op_def *d) {
  const char *parts[4];
  int n = 0;
  if (kind_note(d->kind)) parts[n++] = kind_note(d->kind);
  if (d->flags & NPUX_F_SHAPE_ONLY) parts[n++] = "shape only: folded at compile time";
  if (d->flags & NPUX_F_NO_FOLD) parts[n++] = "never folded";
  for (int i = 0; i < n; i++) printf("%s%s", i ? "; " : "", parts[i]);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: gen_ops_doc csrc/ops/ops.def > docs/ops.md\n");
    return 2;
  }
  static section sec[MAX_SECTIONS];
  int n_sec;
  if (read_sections(argv[1], sec, &n_sec)) return 1;

  static const char *const prec_names[] = {[NPUX_PREC_GRAY] = "gray", [NPUX_PREC_TRUST] = "trust",
                                           [NPUX_PREC_BLOCK] = "block"};
  int n_prec[3] = {0}, n_grad = 0, n_fast = 0, n_alias = 0;
  for (int i = 0; i < NPUX_OP_COUNT; i++) {
    const npu_op_def *d = npuX_op(i);
    if (d->kind == NPUX_KIND_KERNEL) n_prec[d->prec]++;
    n_grad += d->grad != NULL;
    n_fast += npuP_impl_has_fast(d);
  }
  const char *tf, *op;
  bool converts;
  while (npuI_tf_alias(n_alias, &tf, &op, &converts)) n_alias++;

  printf("# Op reference\n\n");
  printf("<!-- Generated by tools/gen_ops_doc.c from the op table (csrc/ops/ops.def, op_<name>.c), "
         "the importer's alias table and the implementation modes. Do not edit: run `make docs`. "
         "-->\n\n");
  printf("The %d ops of the op table (kernel ops: %d trust-list, %d block-list, %d gray-list; %d "
         "differentiable; %d with a high_performance implementation; %d more TensorFlow types "
         "imported as aliases).  Every op is reachable from Lua three ways:\n\n",
         NPUX_OP_COUNT, n_prec[NPUX_PREC_TRUST], n_prec[NPUX_PREC_BLOCK], n_prec[NPUX_PREC_GRAY],
         n_grad, n_fast, n_alias);
  printf("```lua\nlocal y = npu.reshape(x, {2, 3})            -- npu.<op>(inputs..., args..., "
         "{attr = v, name = \"n\"})\nlocal z = x:reduce_sum(1, true)              -- the same as a "
         "method of its first input\nlocal w = g:op(\"matmul\", {a, b}, {transpose_b = true})  -- "
         "generic: inputs as a list, attributes by name\n```\n\n");
  printf("- **TensorFlow types**: the op type a GraphDef node has to become this op when imported "
         "(`npu.import_graph_def`, docs/import.md): the op's own type first, then the importer's "
         "aliases (other versions of the op); \\* marks a type the importer converts into more "
         "than one node (fused activations after the op, a cast before it, one output of "
         "several).\n");
  printf("- **inputs**: how many inputs the op takes; `n+ (a list)`: any number, given as one "
         "Lua list.  A trailing optional input given as Lua data is the positional argument of "
         "the same place instead (`npu.reshape(x, {2, 3})`).\n");
  printf("- **args**: the attributes that follow the inputs as positional arguments in Lua; the "
         "others go in the options table.\n");
  printf("- **list**: the op's precision list (002 §5.1) in the mixed precision modes: trust "
         "ops may run in float16/bfloat16, block ops stay float32, gray ops follow their "
         "upstream; empty for the executor's own kinds, which the precision pass leaves alone.  "
         "`modify_mixlist` moves ops between lists; docs/compiler.md has the rules.\n");
  printf("- **grad**: the op has a gradient (`npu.gradients`, optimizers).\n");
  printf("- **fast**: the op has a high_performance implementation (vectorised float32 "
         "approximations, errors stated in csrc/kernels/kfast.h; for conv2d and "
         "conv2d_backprop_input the Winograd F(2x2, 3x3) algorithm where it is measured faster, "
         "its bound in docs/numerics.md), chosen by "
         "`op_select_implmode`, `optypelist_for_implmode` or `op_precision_mode`; the others "
         "have one implementation and accept every mode.\n");
  printf("- **TF const inputs**: attributes that TensorFlow passes as constant inputs: the "
         "importer turns those inputs into attributes, the exporter does the reverse; "
         "\"(first)\": TensorFlow puts them before the data inputs.\n");
  printf("- **notes**: how the executor treats non-kernel ops; \"shape only\" ops depend on "
         "their inputs' shapes alone and are always folded at compile time; \"never folded\": "
         "random or stateful ops.\n\n");
  printf("The compiler also makes ops of its own (fused_matmul, fused_conv2d, "
         "fused_depthwise_conv2d, fused_elementwise): they are not in this table, no graph can "
         "name them, and `sess:explain` shows them; docs/compiler.md describes them.\n\n");

  printf("## Contents\n\n");
  for (int s = 0; s < n_sec; s++) printf("- %s: %d\n", sec[s].title, sec[s].count);
  printf("\n");

  for (int s = 0; s < n_sec; s++) {
    printf("## %s\n\n", sec[s].title);
    printf("| op | TensorFlow types | inputs | outputs | args | list | grad | fast | "
           "TF const inputs | notes |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int i = sec[s].first; i < sec[s].first + sec[s].count; i++) {
      const npu_op_def *d = npuX_op(i);
      printf("| `%s` | ", d->name);
      tf_cell(d);
      printf(" | ");
      inputs_cell(d);
      if (d->n_outputs < 0) printf(" | varies | ");
      else printf(" | %d | ", d->n_outputs);
      code_list(d->args);
      /* the precision pass places kernel steps only */
      printf(" | %s | %s | %s | ", d->kind == NPUX_KIND_KERNEL ? prec_names[d->prec] : "",
             d->grad ? "yes" : "",
             npuP_impl_has_fast(d) ? "yes" : "");
      code_list(d->tf_const_inputs);
      if (d->tf_const_inputs && d->tf_const_inputs_first) printf(" (first)");
      printf(" | ");
      notes_cell(d);
      printf(" |\n");
    }
    printf("\n");
  }

  printf("## Import aliases\n\n");
  printf("TensorFlow types that are not an op's own type (csrc/io/graphdef.c); \\*: converted "
         "into more than one node.\n\n");
  printf("| TensorFlow type | op |\n| --- | --- |\n");
  for (int i = 0; npuI_tf_alias(i, &tf, &op, &converts); i++)
    printf("| `%s`%s | `%s` |\n", tf, converts ? "\\*" : "", op);
  return 0;
}
