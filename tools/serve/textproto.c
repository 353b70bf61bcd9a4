/*
 * textproto.c — a recursive-descent reader of protobuf text format into tp_node trees (see
 * textproto.h).  Nesting is limited to 64 levels so a hostile file cannot exhaust the stack.
 */
#include "textproto.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
  const char *p;
  int line;
  char *err;
  int err_size;
  int failed;
} lexer;

static void fail(lexer *lx, const char *what) {
  if (!lx->failed) snprintf(lx->err, (size_t)lx->err_size, "line %d: %s", lx->line, what);
  lx->failed = 1;
}

static void skip_space(lexer *lx) {
  for (;;) {
    while (*lx->p && isspace((unsigned char)*lx->p)) {
      if (*lx->p == '\n') lx->line++;
      lx->p++;
    }
    if (*lx->p != '#') return;
    while (*lx->p && *lx->p != '\n') lx->p++;
  }
}

static char *dup_n(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = 0;
  }
  return d;
}

static int is_ident(int c) { return isalnum(c) || c == '_' || c == '.' || c == '-' || c == '+'; }

/* A quoted string (joined with the ones right after it). */
static char *read_string(lexer *lx) {
  size_t cap = 64, n = 0;
  char *s = malloc(cap);
  if (!s) return fail(lx, "out of memory"), NULL;
  while (*lx->p == '"' || *lx->p == '\'') {
    char q = *lx->p++;
    while (*lx->p && *lx->p != q) {
      char c = *lx->p++;
      if (c == '\n') return free(s), fail(lx, "newline in a string"), NULL;
      if (c == '\\' && *lx->p) {
        char e = *lx->p++;
        c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
      }
      if (n + 2 > cap) {
        char *t = realloc(s, cap *= 2);
        if (!t) return free(s), fail(lx, "out of memory"), NULL;
        s = t;
      }
      s[n++] = c;
    }
    if (*lx->p != q) return free(s), fail(lx, "unterminated string"), NULL;
    lx->p++;
    skip_space(lx);
  }
  s[n] = 0;
  return s;
}

static char *read_scalar(lexer *lx) {
  skip_space(lx);
  if (*lx->p == '"' || *lx->p == '\'') return read_string(lx);
  const char *start = lx->p;
  while (is_ident((unsigned char)*lx->p)) lx->p++;
  if (lx->p == start) return fail(lx, "expected a value"), NULL;
  return dup_n(start, (size_t)(lx->p - start));
}

static tp_node *new_node(lexer *lx, char *name, char *value) {
  tp_node *n = calloc(1, sizeof *n);
  if (!n) {
    free(name), free(value);
    fail(lx, "out of memory");
    return NULL;
  }
  n->name = name, n->value = value;
  return n;
}

static tp_node *parse_fields(lexer *lx, char close, int depth);

/* One field (or several, for a list); appended at *tail. */
static void parse_field(lexer *lx, tp_node ***tail, int depth) {
  char *name;
  if (*lx->p == '[') { /* an extension / Any type URL */
    const char *start = ++lx->p;
    while (*lx->p && *lx->p != ']') lx->p++;
    if (*lx->p != ']') return fail(lx, "unterminated '['");
    name = dup_n(start, (size_t)(lx->p++ - start));
  } else {
    const char *start = lx->p;
    while (is_ident((unsigned char)*lx->p)) lx->p++;
    if (lx->p == start) return fail(lx, "expected a field name");
    name = dup_n(start, (size_t)(lx->p - start));
  }
  skip_space(lx);
  int colon = *lx->p == ':';
  if (colon) lx->p++, skip_space(lx);
  if (*lx->p == '{' || *lx->p == '<') {
    char close = *lx->p++ == '{' ? '}' : '>';
    tp_node *n = new_node(lx, name, NULL);
    if (!n) return;
    **tail = n, *tail = &n->next;
    n->child = parse_fields(lx, close, depth + 1);
    return;
  }
  if (!colon) return free(name), fail(lx, "expected ':' or '{'");
  if (*lx->p == '[') { /* a list of scalars */
    lx->p++;
    skip_space(lx);
    while (*lx->p != ']' && !lx->failed) {
      tp_node *n = new_node(lx, strdup(name), read_scalar(lx));
      if (!n) break;
      **tail = n, *tail = &n->next;
      skip_space(lx);
      if (*lx->p == ',') lx->p++, skip_space(lx);
      else if (*lx->p != ']') fail(lx, "expected ',' or ']'");
    }
    if (!lx->failed) lx->p++;
    free(name);
    return;
  }
  char *v = read_scalar(lx);
  if (!v) return free(name);
  tp_node *n = new_node(lx, name, v);
  if (n) **tail = n, *tail = &n->next;
}

static tp_node *parse_fields(lexer *lx, char close, int depth) {
  tp_node *head = NULL, **tail = &head;
  if (depth > 64) return fail(lx, "nested too deeply"), NULL;
  for (;;) {
    skip_space(lx);
    if (lx->failed) break;
    if (*lx->p == close && close) {
      lx->p++;
      break;
    }
    if (!*lx->p) {
      if (close) fail(lx, close == '}' ? "expected '}'" : "expected '>'");
      break;
    }
    parse_field(lx, &tail, depth);
    skip_space(lx);
    if (*lx->p == ',' || *lx->p == ';') lx->p++;
  }
  return head;
}

tp_node *tp_parse(const char *text, char *err, int err_size) {
  lexer lx = {text, 1, err, err_size, 0};
  tp_node root = {0};
  root.child = parse_fields(&lx, 0, 0);
  if (lx.failed) {
    tp_free(root.child);
    return NULL;
  }
  tp_node *r = calloc(1, sizeof *r);
  if (!r) {
    tp_free(root.child);
    snprintf(err, (size_t)err_size, "out of memory");
    return NULL;
  }
  r->child = root.child;
  return r;
}

void tp_free(tp_node *n) {
  while (n) {
    tp_node *next = n->next;
    tp_free(n->child);
    free(n->name);
    free(n->value);
    free(n);
    n = next;
  }
}

const tp_node *tp_next(const tp_node *after, const char *name) {
  for (const tp_node *c = after ? after->next : NULL; c; c = c->next)
    if (c->name && strcmp(c->name, name) == 0) return c;
  return NULL;
}

const tp_node *tp_get(const tp_node *n, const char *name) {
  if (!n) return NULL;
  for (const tp_node *c = n->child; c; c = c->next)
    if (c->name && strcmp(c->name, name) == 0) return c;
  return NULL;
}

const char *tp_str(const tp_node *n, const char *name, const char *dflt) {
  const tp_node *c = tp_get(n, name);
  return c && c->value ? c->value : dflt;
}
