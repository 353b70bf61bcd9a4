/*
 * memory.c — memory planning: the intermediate values of a plan share one arena.
 *
 * Runs last (compile/passes.h), on the final steps.  A value is planned when a kernel step
 * writes it and nothing holds it past the run: not fetched (the caller keeps a reference), not
 * fed, not a constant, variable or iterator element (kernel steps never write those), not seen
 * through an identity whose output is fetched (identity outputs borrow their input's tensor),
 * not a variable's kept reduced-precision copy (npuE_step.copy_of: it serves later runs too),
 * and not exempted by OP_NO_REUSE_MEM (node names or op types, 002 §7.4.5).  Every other
 * kernel output keeps a buffer of its own, as without planning.  The steps' working buffers —
 * kernel scratch and the float32 copies of operands stored in float16/bfloat16 (exec.c,
 * widen_operands) — are planned too, each live during its own step only.
 *
 * Lifetimes are step indices within one iteration: from the step that writes the value to the
 * last step that reads it, directly or through identities.  Steps run in topological order, so
 * a read never precedes the write of the same iteration; an iterations_per_loop loop runs the
 * steps again from the first, rewriting each planned value before reading it, and what crosses
 * iterations lives in variables (assign copies into them) — so one iteration's lifetimes hold
 * for all.  Lifetimes are inclusive: a step's outputs and buffers never share memory with its
 * inputs or with each other, so no kernel has to be safe against overlapping operands.
 *
 * One exception, on purpose: a reshape, squeeze or expand_dims (npuP_memory_may_alias) whose
 * input and output are both planned puts its output at its input's offset — an alias group,
 * one block from the input's write to the last read of any member — so the kernel finds
 * src == dst and skips its copy (a flatten before a dense layer copied its activations every
 * run).  Only the input's step writes the block; the members' steps read and write the same
 * bytes unchanged.  The verifier accepts overlap within such a group only.
 *
 * Placement is greedy by size: largest first, each at the lowest-waste gap (best fit) among the
 * blocks already placed whose lifetimes overlap its own, offsets aligned to 64 bytes.  Each
 * planned slot then holds a view into the arena (retaining it), so the executor's
 * prepare_output finds an owned tensor of the right shape and allocates nothing; if anything
 * ever held a planned tensor past a run, prepare_output's copy-on-write would give the slot a
 * fresh buffer rather than write under the holder.  With NPU_VERIFY_PLANS the placement is
 * checked pairwise after it is made.
 *
 * static_memory_policy 2 and 4 (1 reads as 2) share memory between the plans of a session, as
 * 000 describes: "the memory required by the maximum graph is allocated".  The plan then gets
 * its views without an arena, and the session binds it to its own arena (npuP_memory_bind),
 * growing that arena — and re-pointing every plan's views — when a larger plan compiles.
 * Plans of a session never run at the same time and nothing in an arena outlives a run, so
 * one arena serves them all.  0 and 3 keep one arena per plan.
 *
 * NPU_MEMORY_PLAN=0 (an environment variable for benchmarking, not of the reference) keeps the
 * analysis, so explain still reports what planning would save, but places nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "compile/passes.h"
#include "options/options_int.h"

#define ARENA_ALIGN 64

typedef enum block_kind { BLOCK_VALUE, BLOCK_SCRATCH, BLOCK_ROUND } block_kind;

/* One block to place: a value, or a step's scratch or widening buffer. */
typedef struct block {
  block_kind kind;
  int id;          /* the value id, or the step index */
  int group;       /* a value: the value whose block it shares (itself unless an alias) */
  int first, last; /* step indices, inclusive */
  size_t bytes;    /* what it holds */
  size_t size;     /* rounded up to ARENA_ALIGN */
  size_t offset;
} block;

static size_t value_bytes(const npuE_plan *p, int v) {
  const npuG_value *d = &p->values[v];
  int64_t n = npuT_numel(d->ndim, d->shape);
  return n > 0 ? (size_t)n * npu_dtype_size(d->dtype) : 0;
}

/* Bytes of step st's widened operands: float32 copies, as exec.c's widen_operands lays them. */
static size_t round_bytes(const npuE_plan *p, const npuE_step *st) {
  size_t n = 0;
  for (int i = 0; st->widen && i < st->n_in + st->n_out; i++) {
    if (!st->widen[i]) continue;
    int v = i < st->n_in ? st->in[i] : st->out[i - st->n_in];
    const npuG_value *d = &p->values[v];
    n += (size_t)npuT_numel(d->ndim, d->shape) * sizeof(float);
  }
  return n;
}

/* Whether OP_NO_REUSE_MEM ("name,Type, name2") names node or its op (by TensorFlow type or by
   our op name). */
static bool listed(const char *list, const char *node, const npu_op_def *def) {
  for (const char *s = list; *s;) {
    while (*s == ' ' || *s == ',') s++;
    const char *e = s;
    while (*e && *e != ',') e++;
    const char *t = e;
    while (t > s && t[-1] == ' ') t--;
    size_t n = (size_t)(t - s);
    if (n && ((strlen(node) == n && !memcmp(node, s, n)) ||
              (def->tf_type && strlen(def->tf_type) == n && !memcmp(def->tf_type, s, n)) ||
              (strlen(def->name) == n && !memcmp(def->name, s, n))))
      return true;
    s = e;
  }
  return false;
}

/* Whether step st's output 0 may be an alias of its input 0: an op whose output holds the
   input's bytes unchanged under another shape, run by a device kernel on its own storage
   (no widening: a widened step would move float32 copies). */
bool npuP_memory_may_alias(const npuE_step *st) {
  static const char *const ops[] = {"reshape", "squeeze", "expand_dims"};
  if (st->def->kind != NPUX_KIND_KERNEL || st->dynamic || st->host || st->n_in < 1 ||
      st->n_out != 1)
    return false;
  for (int i = 0; st->widen && i < st->n_in + st->n_out; i++)
    if (st->widen[i]) return false;
  for (size_t i = 0; i < npu_countof(ops); i++)
    if (!strcmp(st->def->name, ops[i])) return true;
  return false;
}

static int by_size_desc(const void *a, const void *b) {
  const block *x = a, *y = b;
  if (x->size != y->size) return x->size < y->size ? 1 : -1;
  if (x->first != y->first) return x->first < y->first ? -1 : 1;
  if (x->kind != y->kind) return (int)x->kind - (int)y->kind;
  return x->id - y->id;
}

static bool live_together(const block *a, const block *b) {
  return a->first <= b->last && b->first <= a->last;
}

/* Places c[i] given c[0..i) already placed (order[] holds their indices sorted by offset);
   returns the arena size needed so far. */
static size_t place(block *c, int i, int *order, size_t arena) {
  size_t end = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
  for (int j = 0; j < i; j++) {
    const block *o = &c[order[j]];
    if (!live_together(o, &c[i])) continue;
    if (o->offset >= end) {
      size_t gap = o->offset - end;
      if (gap >= c[i].size && gap < best_gap) {
        best_gap = gap;
        best = end;
      }
    }
    if (o->offset + o->size > end) end = o->offset + o->size;
  }
  c[i].offset = best != SIZE_MAX ? best : end;
  /* keep order[] sorted by offset */
  int k = i;
  while (k > 0 && c[order[k - 1]].offset > c[i].offset) {
    order[k] = order[k - 1];
    k--;
  }
  order[k] = i;
  return c[i].offset + c[i].size > arena ? c[i].offset + c[i].size : arena;
}

/* NPU_VERIFY_PLANS: no two blocks live at one step overlap, and all fit the arena — but the
   values of one alias group, which sit at one offset: each member other than the group's
   first value is the output of a step that may alias (npuP_memory_may_alias) whose input 0
   is in the same group.  Any other overlap is an error. */
static npu_status check_placement(npuP_build *b, const block *c, int n) {
  const npuE_plan *p = b->plan;
  int *group = npuC_alloc(b->ctx, (size_t)(p->n_values ? p->n_values : 1) * sizeof *group);
  if (!group) return NPU_ERR_NOMEM;
  for (int v = 0; v < p->n_values; v++) group[v] = -1;
  for (int i = 0; i < n; i++)
    if (c[i].kind == BLOCK_VALUE) group[c[i].id] = c[i].group;
  npu_status s = NPU_OK;
  for (int i = 0; i < n && !s; i++) {
    if (c[i].offset % ARENA_ALIGN || c[i].offset + c[i].bytes > p->memory.arena_bytes) {
      s = npuC_error(b->ctx, NPU_ERR_INTERNAL, "memory planning: block %d (kind %d, id %d) is "
                     "misplaced at offset %zu", i, (int)c[i].kind, c[i].id, c[i].offset);
      break;
    }
    if (c[i].kind == BLOCK_VALUE && c[i].group != c[i].id) {
      const npuE_step *st = &p->steps[c[i].first]; /* a member's block starts at its writer */
      if (!npuP_memory_may_alias(st) || st->out[0] != c[i].id || group[st->in[0]] != c[i].group)
        s = npuC_error(b->ctx, NPU_ERR_INTERNAL, "memory planning: value %d shares the block of "
                       "value %d but is not a reshape of it", c[i].id, c[i].group);
    }
    for (int j = i + 1; j < n && !s; j++) {
      bool alias = c[i].kind == BLOCK_VALUE && c[j].kind == BLOCK_VALUE &&
                   c[i].group == c[j].group && c[i].offset == c[j].offset;
      if (!alias && live_together(&c[i], &c[j]) && c[i].offset < c[j].offset + c[j].bytes &&
          c[j].offset < c[i].offset + c[i].bytes)
        s = npuC_error(b->ctx, NPU_ERR_INTERNAL,
                       "memory planning: blocks (kind %d, id %d) and (kind %d, id %d) overlap "
                       "while both are live", (int)c[i].kind, c[i].id, (int)c[j].kind, c[j].id);
    }
  }
  npuC_free(b->ctx, group);
  return s;
}

static uintptr_t arena_base(const npu_tensor *arena) {
  return ((uintptr_t)arena->data + ARENA_ALIGN - 1) & ~(uintptr_t)(ARENA_ALIGN - 1);
}

bool npuP_memory_shared(const npu_options *o) {
  int64_t policy = o ? npuO_int(o, NPUO_static_memory_policy) : 0;
  return policy == 1 || policy == 2 || policy == 4;
}

npu_status npuP_memory_arena_new(npu_context *ctx, size_t bytes, npu_tensor **out) {
  int64_t shape[1] = {(int64_t)(bytes + ARENA_ALIGN - 1)};
  return npu_tensor_new(ctx, NPU_DTYPE_U8, 1, shape, out);
}

size_t npuP_memory_arena_size(const npu_tensor *arena) {
  return arena ? arena->nbytes - (ARENA_ALIGN - 1) : 0;
}

/* Points the steps' scratch and widening buffers into the arena at base. */
static void point_buffers(npuE_plan *p, uintptr_t base) {
  const int64_t *off = p->memory.step_offset;
  for (int k = 0; off && k < p->n_steps; k++) {
    p->steps[k].scratch_at = off[2 * k] >= 0 ? (void *)(base + (size_t)off[2 * k]) : NULL;
    p->steps[k].round_at = off[2 * k + 1] >= 0 ? (float *)(base + (size_t)off[2 * k + 1]) : NULL;
  }
}

void npuP_memory_bind(npuE_plan *p, npu_tensor *arena) {
  npuE_memory *m = &p->memory;
  if (!m->offset || arena == m->arena) return;
  uintptr_t base = arena_base(arena);
  for (int v = 0; v < p->n_values; v++) {
    npu_tensor *t = p->slots[v];
    /* a view of the current arena (copy-on-write may have replaced it: then leave it) */
    if (m->offset[v] < 0 || !t || !p->owned[v] || t->base != m->arena) continue;
    t->data = (void *)(base + (size_t)m->offset[v]);
    npu_tensor_release(t->base);
    t->base = npu_tensor_retain(arena);
  }
  point_buffers(p, base);
  npu_tensor_release(m->arena);
  m->arena = npu_tensor_retain(arena);
}

/* A tensor of value d's dtype and shape over `data`, which belongs to arena (retained; NULL
   while the plan waits for its session's arena). */
static npu_status make_view(npu_context *ctx, const npuG_value *d, npu_tensor *arena, void *data,
                            npu_tensor **out) {
  npu_tensor *t = npuC_alloc(ctx, sizeof *t);
  if (!t) return NPU_ERR_NOMEM;
  *t = (npu_tensor){.dtype = d->dtype, .ndim = d->ndim, .data = data};
  atomic_init(&t->refcount, 1);
  if (d->ndim) memcpy(t->shape, d->shape, (size_t)d->ndim * sizeof *d->shape);
  t->numel = npuT_numel(d->ndim, d->shape);
  t->nbytes = (size_t)t->numel * npu_dtype_size(d->dtype);
  t->ctx = npu_context_retain(ctx);
  t->base = npu_tensor_retain(arena); /* NULL stays NULL */
  *out = t;
  return NPU_OK;
}

/* The arena (unless shared: npuP_memory_bind gives it later), one view per planned value in
   the value's slot (owned by the plan), the steps' buffers pointed into it. */
static npu_status bind_arena(npu_context *ctx, npuE_plan *p, const block *c, int n) {
  npuE_memory *m = &p->memory;
  npu_status s = m->shared ? NPU_OK : npuP_memory_arena_new(ctx, m->arena_bytes, &m->arena);
  if (s) return s;
  uintptr_t base = m->arena ? arena_base(m->arena) : 0;
  for (int i = 0; i < n; i++) {
    if (c[i].kind != BLOCK_VALUE) {
      m->step_offset[2 * c[i].id + (c[i].kind == BLOCK_ROUND)] = (int64_t)c[i].offset;
      m->buffers = true;
      continue;
    }
    int v = c[i].id;
    void *data = m->arena ? (void *)(base + c[i].offset) : NULL;
    s = make_view(ctx, &p->values[v], m->arena, data, &p->slots[v]);
    if (s) return s;
    p->owned[v] = 1;
    m->offset[v] = (int64_t)c[i].offset;
  }
  if (m->arena) point_buffers(p, base);
  return NPU_OK;
}

npu_status npuP_plan_memory(npuP_build *b) {
  npu_context *ctx = b->ctx;
  npuE_plan *p = b->plan;
  npuE_memory *m = &p->memory;
  const npu_options *o = b->cfg ? b->cfg->options : NULL;
  int nv = p->n_values, ns = p->n_steps;
  size_t n_alloc = (size_t)(nv ? nv : 1);
  m->enabled = !(o && npuO_env_is_set(o, NPUO_ENV_NPU_MEMORY_PLAN) &&
                 npuO_env_int(o, NPUO_ENV_NPU_MEMORY_PLAN) == 0);
  m->shared = npuP_memory_shared(o);
  const char *no_reuse = o ? npuO_env_string(o, NPUO_ENV_OP_NO_REUSE_MEM) : "";

  m->offset = npuC_alloc(ctx, n_alloc * sizeof *m->offset);
  m->step_offset = npuC_alloc(ctx, (size_t)(2 * ns + 1) * sizeof *m->step_offset);
  int *root = npuC_alloc(ctx, n_alloc * sizeof *root);   /* identity chains to their source */
  int *first = npuC_alloc(ctx, n_alloc * sizeof *first); /* the kernel step writing it, or -1 */
  int *last = npuC_alloc(ctx, n_alloc * sizeof *last);   /* the last step reading it */
  uint8_t *keep = npuC_calloc(ctx, n_alloc, 1);          /* must keep a buffer of its own */
  int *group = npuC_alloc(ctx, n_alloc * sizeof *group); /* alias groups: their first value */
  block *c = NULL;
  int *order = NULL;
  int64_t *delta = NULL;
  npu_status s = NPU_ERR_NOMEM;
  if (!m->offset || !m->step_offset || !root || !first || !last || !keep || !group) goto done;
  for (int v = 0; v < nv; v++) {
    m->offset[v] = -1;
    root[v] = group[v] = v;
    first[v] = last[v] = -1;
  }
  for (int k = 0; k < 2 * ns; k++) m->step_offset[k] = -1;

  for (int k = 0; k < ns; k++) {
    const npuE_step *st = &p->steps[k];
    for (int i = 0; i < st->n_in; i++) {
      int r = root[st->in[i]];
      if (last[r] < k) last[r] = k;
    }
    if (st->def->kind == NPUX_KIND_IDENTITY && st->n_in > 0) {
      for (int i = 0; i < st->n_out; i++) root[st->out[i]] = root[st->in[0]];
      continue;
    }
    if (st->def->kind == NPUX_KIND_COND || st->def->kind == NPUX_KIND_WHILE) {
      /* a branch result or a loop's initial value from around it may become an output (the
         outputs borrow it, exec/control.c), which outlives this step: no reuse of its buffer */
      const npuG_node *node = &b->graph->nodes[st->node];
      for (int i = 0; i < node->n_inputs; i++)
        for (int j = 0; j < st->n_in; j++)
          if (st->in[j] == node->inputs[i]) keep[root[st->in[j]]] = 1;
    }
    if (st->def->kind != NPUX_KIND_KERNEL || st->dynamic) continue; /* sized when it runs */
    bool exempt = *no_reuse && listed(no_reuse, b->graph->nodes[st->node].name, st->def);
    for (int i = 0; i < st->n_out; i++) {
      int v = st->out[i];
      if (first[v] < 0) first[v] = k;
      if (last[v] < k) last[v] = k;
      if (exempt || st->copy_of) keep[v] = 1; /* a variable's copy outlives the run */
    }
  }
  /* Held past the run: fetches (and the source of a fetched identity), feeds. */
  for (int i = 0; i < p->n_fetches; i++) keep[root[p->fetches[i]]] = 1;
  for (int i = 0; i < p->n_feeds; i++) keep[p->feeds[i]] = 1;

#define PLANNED(v) (first[v] >= 0 && !keep[v] && !p->slots[v] && value_bytes(p, v) > 0)
  /* Alias groups: a reshape, squeeze or expand_dims whose input and output are both planned
     puts its output at its input's offset, so the kernel finds src == dst and copies nothing.
     The group is one block, live from its first value's write to the last read of any
     member; nothing else writes it meanwhile (the members' steps write what is there). */
  int n_alias = 0;
  for (int k = 0; k < ns; k++) {
    const npuE_step *st = &p->steps[k];
    if (!npuP_memory_may_alias(st)) continue;
    int x = st->in[0], y = st->out[0];
    if (!PLANNED(x) || !PLANNED(y) || first[y] != k || p->steps[first[x]].host ||
        value_bytes(p, x) != value_bytes(p, y))
      continue;
    group[y] = group[x];
    if (last[group[y]] < last[y]) last[group[y]] = last[y];
    n_alias++;
  }
  m->n_aliased = n_alias;

  int n = 0;
  for (int v = 0; v < nv; v++)
    if (PLANNED(v)) n++;
  c = npuC_alloc(ctx, (size_t)(n + 2 * ns + 1) * sizeof *c);
  order = npuC_alloc(ctx, (size_t)(n + 2 * ns + 1) * sizeof *order);
  delta = npuC_calloc(ctx, (size_t)ns + 1, sizeof *delta);
  if (!c || !order || !delta) goto done;
  n = 0;
  size_t planned_bytes = 0;
  for (int v = 0; v < nv; v++) {
    if (!PLANNED(v)) continue;
    planned_bytes += value_bytes(p, v);
    if (group[v] != v) continue; /* placed with its group, below */
    c[n++] = (block){.kind = BLOCK_VALUE, .id = v, .group = v, .first = first[v],
                     .last = last[v], .bytes = value_bytes(p, v)};
  }
#undef PLANNED
  /* What planning works with: the values' sizes summed, and the most live at once (values and
     the step's buffers: a lower bound for any arena). */
  m->n_planned = n + n_alias;
  m->planned_bytes = planned_bytes;
  for (int k = 0; k < ns; k++) {
    const npuE_step *st = &p->steps[k];
    size_t scratch = st->scratch_size; /* kernel steps, and assigns with a kernel (fused) */
    size_t rounds = round_bytes(p, st);
    if (scratch) c[n++] = (block){.kind = BLOCK_SCRATCH, .id = k, .first = k, .last = k, .bytes = scratch};
    if (rounds) c[n++] = (block){.kind = BLOCK_ROUND, .id = k, .first = k, .last = k, .bytes = rounds};
  }
  for (int i = 0; i < n; i++) {
    c[i].size = (c[i].bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    delta[c[i].first] += (int64_t)c[i].bytes;
    delta[c[i].last + 1] -= (int64_t)c[i].bytes;
  }
  int64_t live = 0;
  for (int k = 0; k < ns; k++) {
    live += delta[k];
    if ((size_t)live > m->live_peak_bytes) m->live_peak_bytes = (size_t)live;
  }

  s = NPU_OK;
  if (!m->enabled || n == 0) goto done;
  qsort(c, (size_t)n, sizeof *c, by_size_desc);
  size_t arena = 0;
  for (int i = 0; i < n; i++) arena = place(c, i, order, arena);
  m->arena_bytes = arena;
  /* the aliases, each at its group's offset and live over its own steps */
  for (int v = 0, i; v < nv; v++) {
    if (group[v] == v || first[v] < 0) continue;
    for (i = 0; i < n && !(c[i].kind == BLOCK_VALUE && c[i].id == group[v]); i++) {}
    c[n++] = (block){.kind = BLOCK_VALUE, .id = v, .group = group[v], .first = first[v],
                     .last = last[v], .bytes = value_bytes(p, v), .size = c[i].size,
                     .offset = c[i].offset};
  }
  if (b->cfg && b->cfg->verify) s = check_placement(b, c, n);
  if (!s) s = bind_arena(ctx, p, c, n);

done:
  npuC_free(ctx, root);
  npuC_free(ctx, first);
  npuC_free(ctx, last);
  npuC_free(ctx, keep);
  npuC_free(ctx, group);
  npuC_free(ctx, c);
  npuC_free(ctx, order);
  npuC_free(ctx, delta);
  return s;
}
