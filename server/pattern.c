/* pattern.c — the regular expressions of `location ~ RE` (see pattern.h).
 *
 * Compiling is two steps, both at load: a recursive-descent parser builds a small tree
 * (nodes in one array), and an emitter turns the tree into a Thompson program, copying a
 * subtree once per count of {m,n}. Matching simulates the program with one list of threads
 * per text position (Pike's VM, without captures: only "does it match" is asked), so a
 * thread is a program counter, each instruction is visited at most once per position and
 * nothing backtracks. Everything the matcher needs besides the program is on its stack.
 * Two things are worked out at compile time so that a byte costs little: where a thread
 * goes once past each instruction (its list of next instructions, instead of following
 * the jumps again at every byte) and which bytes can begin a match (the search skips the
 * others whenever no match is under way).
 */
#include "pattern.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum op {
    OP_BYTE,  /* the byte c */
    OP_ANY,   /* any byte but NUL */
    OP_CLASS, /* a byte of sets[x] */
    OP_SPLIT, /* go on at x and at y */
    OP_JMP,   /* go on at x */
    OP_BOL,   /* at the start of the text */
    OP_EOL,   /* at the end of the text */
    OP_MATCH,
};

/* --- the tree ------------------------------------------------------------------------- */

enum node_type { N_EMPTY, N_BYTE, N_ANY, N_SET, N_BOL, N_EOL, N_CAT, N_ALT, N_REPEAT };

#define REPEAT_INF 0xffff
#define NO_NODE (-1)
#define MAX_DEPTH 64 /* nested groups: bounds the parser's and the emitter's recursion */

struct node {
    uint8_t type;
    uint8_t c;        /* N_BYTE */
    uint16_t min, max; /* N_REPEAT; max REPEAT_INF for no bound */
    int set;          /* N_SET: index in the set table */
    int child;        /* N_CAT: first element; N_ALT: first alternative; N_REPEAT: body */
    int next;         /* the next element of a CAT or alternative of an ALT */
};

struct parser {
    const char *re;
    size_t pos;
    bool icase;
    bool posix;
    unsigned depth;
    struct node *nodes;
    int n_nodes, cap_nodes;
    struct pattern_set *sets;
    int n_sets, cap_sets;
    char *err;
    size_t err_len;
};

static int fail(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parser *ps, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (ps->err && ps->err_len)
        vsnprintf(ps->err, ps->err_len, fmt, ap);
    va_end(ap);
    return NO_NODE;
}

/* The capacities are set from the pattern's length so that these never run out. */
static int new_node(struct parser *ps, enum node_type type)
{
    if (ps->n_nodes == ps->cap_nodes)
        return fail(ps, "pattern too complex");
    struct node *n = &ps->nodes[ps->n_nodes];
    *n = (struct node){.type = (uint8_t)type, .set = -1, .child = NO_NODE, .next = NO_NODE};
    return ps->n_nodes++;
}

static int new_set(struct parser *ps)
{
    if (ps->n_sets == ps->cap_sets)
        return fail(ps, "pattern too complex");
    memset(&ps->sets[ps->n_sets], 0, sizeof(ps->sets[0]));
    return ps->n_sets++;
}

static void set_add(struct pattern_set *s, unsigned b)
{
    s->bits[b >> 6] |= (uint64_t)1 << (b & 63);
}

static bool set_has(const struct pattern_set *s, unsigned b)
{
    return (s->bits[b >> 6] >> (b & 63)) & 1;
}

static void set_add_range(struct pattern_set *s, unsigned lo, unsigned hi)
{
    for (unsigned b = lo; b <= hi; b++)
        set_add(s, b);
}

static bool is_upper(unsigned b) { return b >= 'A' && b <= 'Z'; }
static bool is_lower(unsigned b) { return b >= 'a' && b <= 'z'; }
static bool is_digit(unsigned b) { return b >= '0' && b <= '9'; }
static bool is_alpha(unsigned b) { return is_upper(b) || is_lower(b); }
static bool is_alnum(unsigned b) { return is_alpha(b) || is_digit(b); }
static bool is_space(unsigned b) { return b == ' ' || (b >= '\t' && b <= '\r'); }
static bool is_graph(unsigned b) { return b > ' ' && b < 0x7f; }
static bool is_punct(unsigned b) { return is_graph(b) && !is_alnum(b); }
static bool is_xdigit(unsigned b)
{
    return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}
static bool is_blank(unsigned b) { return b == ' ' || b == '\t'; }
static bool is_cntrl(unsigned b) { return b < ' ' || b == 0x7f; }
static bool is_print(unsigned b) { return b >= ' ' && b < 0x7f; }
static bool is_word(unsigned b) { return is_alnum(b) || b == '_'; }

/* The POSIX classes, in the C locale. */
static const struct {
    const char *name;
    bool (*has)(unsigned);
} classes[] = {
    {"alpha", is_alpha}, {"digit", is_digit}, {"alnum", is_alnum}, {"space", is_space},
    {"upper", is_upper}, {"lower", is_lower}, {"punct", is_punct}, {"xdigit", is_xdigit},
    {"blank", is_blank}, {"cntrl", is_cntrl}, {"graph", is_graph}, {"print", is_print},
};

static void set_add_class(struct pattern_set *s, bool (*has)(unsigned), bool negated)
{
    for (unsigned b = 0; b < 256; b++)
        if (has(b) != negated)
            set_add(s, b);
}

/* \d \D \w \W \s \S: adds the class to s and returns true, or false for another letter. */
static bool add_shorthand(struct pattern_set *s, char c)
{
    bool (*has)(unsigned) = NULL;
    switch (c | 0x20) {
    case 'd': has = is_digit; break;
    case 'w': has = is_word; break;
    case 's': has = is_space; break;
    default: return false;
    }
    set_add_class(s, has, is_upper((unsigned char)c));
    return true;
}

/* A letter's other case joins the set: `~*` folds ASCII letters. */
static void set_fold(struct pattern_set *s)
{
    for (unsigned b = 'A'; b <= 'Z'; b++)
        if (set_has(s, b) || set_has(s, b + 32)) {
            set_add(s, b);
            set_add(s, b + 32);
        }
}

static void set_negate(struct pattern_set *s)
{
    for (int i = 0; i < 4; i++)
        s->bits[i] = ~s->bits[i];
}

static char peek(const struct parser *ps)
{
    return ps->re[ps->pos];
}

/* `[:name:]` at ps->pos (the '['): adds it; -1 for an unknown name. */
static int bracket_class(struct parser *ps, struct pattern_set *s)
{
    size_t start = ps->pos;
    const char *name = ps->re + start + 2;
    const char *end = strstr(name, ":]");
    if (!end)
        return fail(ps, "unterminated '[:' at %zu", start);
    for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++)
        if (strlen(classes[i].name) == (size_t)(end - name) &&
            memcmp(classes[i].name, name, (size_t)(end - name)) == 0) {
            set_add_class(s, classes[i].has, false);
            ps->pos = (size_t)(end - ps->re) + 2;
            return 0;
        }
    return fail(ps, "unknown character class '[:%.*s:]' at %zu", (int)(end - name), name, start);
}

/* One character of a bracket expression, with `\` escaping punctuation (PCRE's reading);
 * -1 when the escape is not a character (\d and the like are handled by the caller). */
static int bracket_char(struct parser *ps)
{
    unsigned char c = (unsigned char)peek(ps);
    if (c != '\\') {
        ps->pos++;
        return c;
    }
    unsigned char e = (unsigned char)ps->re[ps->pos + 1];
    if (e == '\0')
        return fail(ps, "trailing backslash at %zu", ps->pos);
    if (is_alnum(e))
        return fail(ps, "unsupported escape '\\%c' in brackets at %zu", e, ps->pos);
    ps->posix = false;
    ps->pos += 2;
    return e;
}

/* One item of a bracket expression at ps->pos: a class, a shorthand, a character or a
 * range. */
static int bracket_item(struct parser *ps, struct pattern_set *s)
{
    size_t at = ps->pos;
    const char *p = ps->re + at;
    if (p[0] == '[' && p[1] == ':')
        return bracket_class(ps, s);
    if (p[0] == '[' && (p[1] == '.' || p[1] == '='))
        return fail(ps, "collating elements ('[%c') are not supported at %zu", p[1], at);
    if (p[0] == '\\' && add_shorthand(s, p[1])) {
        ps->posix = false;
        ps->pos += 2;
        return 0;
    }
    int lo = bracket_char(ps);
    if (lo < 0)
        return -1;
    if (peek(ps) != '-' || ps->re[ps->pos + 1] == ']' || ps->re[ps->pos + 1] == '\0') {
        set_add(s, (unsigned)lo);
        return 0;
    }
    ps->pos++; /* the '-' */
    if (peek(ps) == '[' || (peek(ps) == '\\' && is_alnum((unsigned char)ps->re[ps->pos + 1])))
        return fail(ps, "a range cannot end in a class at %zu", ps->pos);
    int hi = bracket_char(ps);
    if (hi < 0)
        return -1;
    if (hi < lo)
        return fail(ps, "invalid range '%c-%c' at %zu", lo, hi, at);
    set_add_range(s, (unsigned)lo, (unsigned)hi);
    return 0;
}

/* `[...]` at ps->pos. */
static int parse_bracket(struct parser *ps)
{
    size_t open = ps->pos++;
    bool negated = peek(ps) == '^';
    if (negated)
        ps->pos++;
    int node = new_node(ps, N_SET), set = new_set(ps);
    if (node < 0 || set < 0)
        return NO_NODE;
    struct pattern_set *s = &ps->sets[set];
    /* A ']' first is the character itself, and may begin a range (`[]-c]`). */
    for (bool first = true; first || peek(ps) != ']'; first = false) {
        if (peek(ps) == '\0')
            return fail(ps, "unmatched '[' at %zu", open);
        if (bracket_item(ps, s) < 0)
            return NO_NODE;
    }
    ps->pos++;
    if (ps->icase)
        set_fold(s);
    if (negated)
        set_negate(s);
    ps->nodes[node].set = set;
    return node;
}

/* A literal byte; under `~*` a letter is the set of its two cases. */
static int literal(struct parser *ps, unsigned char c)
{
    if (!ps->icase || !is_alpha(c)) {
        int node = new_node(ps, N_BYTE);
        if (node >= 0)
            ps->nodes[node].c = c;
        return node;
    }
    int node = new_node(ps, N_SET), set = new_set(ps);
    if (node < 0 || set < 0)
        return NO_NODE;
    set_add(&ps->sets[set], c);
    set_fold(&ps->sets[set]);
    ps->nodes[node].set = set;
    return node;
}

/* `\` and what follows, outside brackets, at ps->pos. */
static int parse_escape(struct parser *ps)
{
    size_t at = ps->pos;
    unsigned char e = (unsigned char)ps->re[at + 1];
    if (e == '\0')
        return fail(ps, "trailing backslash at %zu", at);
    ps->pos += 2;
    if (e >= '1' && e <= '9')
        return fail(ps, "backreferences are not supported: '\\%c' at %zu", e, at);
    if (is_alnum(e)) {
        int node = new_node(ps, N_SET), set = new_set(ps);
        if (node < 0 || set < 0)
            return NO_NODE;
        if (!add_shorthand(&ps->sets[set], (char)e))
            return fail(ps, "unsupported escape '\\%c' at %zu", e, at);
        ps->nodes[node].set = set;
        ps->posix = false;
        return node;
    }
    /* GNU regcomp reads these as anchors and word boundaries; PCRE, and so nginx, as the
     * characters. */
    if (e == '<' || e == '>' || e == '`' || e == '\'')
        ps->posix = false;
    return literal(ps, e);
}

static int parse_alt(struct parser *ps);

/* `(...)` or `(?:...)` at ps->pos. */
static int parse_group(struct parser *ps)
{
    size_t open = ps->pos++;
    if (peek(ps) == '?') {
        if (ps->re[ps->pos + 1] != ':')
            return fail(ps, "unsupported group '(?%.1s' at %zu (only (?:...) is)",
                        ps->re + ps->pos + 1, open);
        ps->posix = false;
        ps->pos += 2;
    }
    if (++ps->depth > MAX_DEPTH)
        return fail(ps, "groups nested too deeply at %zu", open);
    int inner = parse_alt(ps);
    ps->depth--;
    if (inner < 0)
        return NO_NODE;
    if (peek(ps) != ')')
        return fail(ps, "unmatched '(' at %zu", open);
    ps->pos++;
    return inner;
}

static bool is_quantifier(char c)
{
    return c == '*' || c == '+' || c == '?' || c == '{';
}

static int parse_atom(struct parser *ps)
{
    char c = peek(ps);
    if (is_quantifier(c))
        return fail(ps, "nothing to repeat at %zu", ps->pos);
    switch (c) {
    case '(': return parse_group(ps);
    case '[': return parse_bracket(ps);
    case '\\': return parse_escape(ps);
    case '.': ps->pos++; return new_node(ps, N_ANY);
    case '^': ps->pos++; return new_node(ps, N_BOL);
    case '$': ps->pos++; return new_node(ps, N_EOL);
    default: ps->pos++; return literal(ps, (unsigned char)c);
    }
}

/* A count of {m,n}: digits, at most PATTERN_MAX_REPEAT. */
static int parse_count(struct parser *ps, size_t open)
{
    if (!is_digit((unsigned char)peek(ps)))
        return fail(ps, "'{' is not a count at %zu (write \\{ for the character)", open);
    unsigned v = 0;
    while (is_digit((unsigned char)peek(ps))) {
        v = v * 10 + (unsigned)(peek(ps) - '0');
        ps->pos++;
        if (v > PATTERN_MAX_REPEAT)
            return fail(ps, "a count over %d at %zu", PATTERN_MAX_REPEAT, open);
    }
    return (int)v;
}

/* `{m}`, `{m,}` or `{m,n}` at ps->pos: sets min and max. */
static int parse_braces(struct parser *ps, uint16_t *min, uint16_t *max)
{
    size_t open = ps->pos++;
    int m = parse_count(ps, open), n = m;
    if (m < 0)
        return -1;
    if (peek(ps) == ',') {
        ps->pos++;
        n = peek(ps) == '}' ? REPEAT_INF : parse_count(ps, open);
        if (n < 0)
            return -1;
    }
    if (peek(ps) != '}')
        return fail(ps, "'{' is not a count at %zu (write \\{ for the character)", open);
    ps->pos++;
    if (n < m)
        return fail(ps, "invalid count range {%d,%d} at %zu", m, n, open);
    *min = (uint16_t)m;
    *max = (uint16_t)n;
    return 0;
}

/* An atom and its quantifier, if any. */
static int parse_piece(struct parser *ps)
{
    int atom = parse_atom(ps);
    if (atom < 0 || !is_quantifier(peek(ps)))
        return atom;
    enum node_type t = ps->nodes[atom].type;
    if (t == N_BOL || t == N_EOL)
        return fail(ps, "nothing to repeat at %zu", ps->pos);
    uint16_t min = 0, max = REPEAT_INF;
    char q = peek(ps);
    if (q == '{') {
        if (parse_braces(ps, &min, &max) < 0)
            return NO_NODE;
    } else {
        ps->pos++;
        min = q == '+';
        max = q == '?' ? 1 : REPEAT_INF;
    }
    if (peek(ps) == '?') { /* lazy: the same answer to "does it match" */
        ps->posix = false;
        ps->pos++;
    }
    if (is_quantifier(peek(ps)))
        return fail(ps, "a quantifier cannot follow a quantifier at %zu", ps->pos);
    int rep = new_node(ps, N_REPEAT);
    if (rep < 0)
        return NO_NODE;
    ps->nodes[rep].child = atom;
    ps->nodes[rep].min = min;
    ps->nodes[rep].max = max;
    return rep;
}

/* Pieces up to '|', ')' or the end. */
static int parse_cat(struct parser *ps)
{
    int cat = new_node(ps, N_CAT), last = NO_NODE;
    if (cat < 0)
        return NO_NODE;
    while (peek(ps) != '\0' && peek(ps) != '|' && peek(ps) != ')') {
        int piece = parse_piece(ps);
        if (piece < 0)
            return NO_NODE;
        if (last == NO_NODE)
            ps->nodes[cat].child = piece;
        else
            ps->nodes[last].next = piece;
        last = piece;
    }
    return cat;
}

static int parse_alt(struct parser *ps)
{
    int alt = new_node(ps, N_ALT);
    if (alt < 0)
        return NO_NODE;
    int last = parse_cat(ps);
    if (last < 0)
        return NO_NODE;
    ps->nodes[alt].child = last;
    while (peek(ps) == '|') {
        ps->pos++;
        int cat = parse_cat(ps);
        if (cat < 0)
            return NO_NODE;
        ps->nodes[last].next = cat;
        last = cat;
    }
    return alt;
}

/* --- the program ---------------------------------------------------------------------- */

#define NO_PATCH 0xffff

struct emitter {
    const struct node *nodes;
    struct pattern_insn *prog; /* PATTERN_MAX_INSNS + 1: the last is scratch once full */
    unsigned n;
    bool full;
};

static unsigned emit(struct emitter *e, enum op op, unsigned x, unsigned y)
{
    if (e->n == PATTERN_MAX_INSNS) {
        e->full = true;
        e->prog[PATTERN_MAX_INSNS] = (struct pattern_insn){0};
        return PATTERN_MAX_INSNS;
    }
    e->prog[e->n] = (struct pattern_insn){.op = (uint8_t)op, .x = (uint16_t)x, .y = (uint16_t)y};
    return e->n++;
}

/* Sets field y (SPLIT) or x (JMP) of every instruction on a chain linked through that
 * field to the current end of the program. */
static void patch(struct emitter *e, unsigned chain)
{
    while (chain != NO_PATCH && chain < PATTERN_MAX_INSNS) {
        struct pattern_insn *in = &e->prog[chain];
        uint16_t *f = in->op == OP_SPLIT ? &in->y : &in->x;
        chain = *f;
        *f = (uint16_t)e->n;
    }
}

static void emit_node(struct emitter *e, int i);

static void emit_alt(struct emitter *e, const struct node *n)
{
    unsigned jumps = NO_PATCH;
    for (int a = n->child; a != NO_NODE && !e->full; a = e->nodes[a].next) {
        if (e->nodes[a].next == NO_NODE) {
            emit_node(e, a);
            break;
        }
        unsigned split = emit(e, OP_SPLIT, e->n + 1, NO_PATCH);
        emit_node(e, a);
        jumps = emit(e, OP_JMP, jumps, 0);
        patch(e, split);
    }
    patch(e, jumps);
}

static void emit_repeat(struct emitter *e, const struct node *n)
{
    unsigned fixed = n->min;
    if (n->max == REPEAT_INF && n->min > 0)
        fixed--; /* the last copy is the loop's body: x+ is x, then "again?" */
    for (unsigned k = 0; k < fixed && !e->full; k++)
        emit_node(e, n->child);
    if (n->max == REPEAT_INF && n->min > 0) {
        unsigned body = e->n;
        emit_node(e, n->child);
        emit(e, OP_SPLIT, body, e->n + 1);
    } else if (n->max == REPEAT_INF) {
        unsigned split = emit(e, OP_SPLIT, e->n + 1, NO_PATCH);
        emit_node(e, n->child);
        emit(e, OP_JMP, split, 0);
        patch(e, split);
    } else {
        unsigned skips = NO_PATCH; /* (x(x(x)?)?)?: each "no more" goes to the end */
        for (unsigned k = n->min; k < n->max && !e->full; k++) {
            skips = emit(e, OP_SPLIT, e->n + 1, skips);
            emit_node(e, n->child);
        }
        patch(e, skips);
    }
}

static void emit_node(struct emitter *e, int i)
{
    const struct node *n = &e->nodes[i];
    if (e->full)
        return;
    switch ((enum node_type)n->type) {
    case N_EMPTY: break;
    case N_BYTE: e->prog[emit(e, OP_BYTE, 0, 0)].c = n->c; break;
    case N_ANY: emit(e, OP_ANY, 0, 0); break;
    case N_SET: emit(e, OP_CLASS, (unsigned)n->set, 0); break;
    case N_BOL: emit(e, OP_BOL, 0, 0); break;
    case N_EOL: emit(e, OP_EOL, 0, 0); break;
    case N_CAT:
        for (int c = n->child; c != NO_NODE && !e->full; c = e->nodes[c].next)
            emit_node(e, c);
        break;
    case N_ALT: emit_alt(e, n); break;
    case N_REPEAT: emit_repeat(e, n); break;
    }
}

/* Does every path through the program begin with `^`? Then a match can only start at 0. */
static bool starts_anchored(const struct pattern_insn *prog, unsigned n, unsigned pc,
                            unsigned hops)
{
    if (pc >= n || hops > 16)
        return false;
    switch (prog[pc].op) {
    case OP_BOL: return true;
    case OP_JMP: return starts_anchored(prog, n, prog[pc].x, hops + 1);
    case OP_SPLIT:
        return starts_anchored(prog, n, prog[pc].x, hops + 1) &&
               starts_anchored(prog, n, prog[pc].y, hops + 1);
    default: return false;
    }
}

/* The set of bytes the instruction takes, added to s. */
static void add_consumed(const struct pattern *p, const struct pattern_insn *in,
                         struct pattern_set *s)
{
    if (in->op == OP_BYTE)
        set_add(s, in->c);
    else if (in->op == OP_ANY)
        set_add_range(s, 1, 255);
    else
        for (int i = 0; i < 4; i++)
            s->bits[i] |= p->sets[in->x].bits[i];
}

enum { REACHED_MATCH = 1, REACHED_EOL = 2 };

/* Follows the jumps from pc at a position past the text's start (`^` blocks; `$` passes
 * when at_end), adding each consuming instruction reached to out (when given) and what it
 * takes to bytes (when given). Returns what else it reached: REACHED_MATCH, REACHED_EOL. */
static int closure(const struct pattern *p, unsigned from, bool at_end, uint16_t *out,
                   unsigned *n_out, struct pattern_set *bytes)
{
    uint16_t stack[PATTERN_MAX_INSNS];
    uint64_t seen[(PATTERN_MAX_INSNS + 63) / 64] = {0};
    unsigned top = 0;
    int reached = 0;
    stack[top++] = (uint16_t)from;
    seen[from >> 6] |= (uint64_t)1 << (from & 63);
    while (top > 0) {
        unsigned pc = stack[--top], to[2], n_to = 0;
        const struct pattern_insn *in = &p->prog[pc];
        switch ((enum op)in->op) {
        case OP_MATCH: reached |= REACHED_MATCH; break;
        case OP_BOL: break;
        case OP_EOL:
            reached |= REACHED_EOL;
            if (at_end)
                to[n_to++] = pc + 1;
            break;
        case OP_JMP: to[n_to++] = in->x; break;
        case OP_SPLIT: to[n_to++] = in->x, to[n_to++] = in->y; break;
        default:
            if (bytes)
                add_consumed(p, in, bytes);
            if (out)
                out[(*n_out)++] = (uint16_t)pc;
            break;
        }
        for (unsigned k = 0; k < n_to; k++)
            if (!(seen[to[k] >> 6] >> (to[k] & 63) & 1)) {
                seen[to[k] >> 6] |= (uint64_t)1 << (to[k] & 63);
                stack[top++] = (uint16_t)to[k];
            }
    }
    return reached;
}

/* Fills p->first and p->skip. Skipping needs a pattern that cannot match the empty
 * string, even at the text's end. */
static void compile_first(struct pattern *p)
{
    memset(&p->first, 0, sizeof(p->first));
    bool empty = closure(p, 0, true, NULL, NULL, &p->first) & REACHED_MATCH;
    unsigned count = 0;
    p->first_byte = -1;
    for (unsigned b = 0; b < 256; b++)
        if (set_has(&p->first, b)) {
            count++;
            p->first_byte = (int)b;
        }
    if (count != 1)
        p->first_byte = -1;
    p->skip = !empty && count < 256;
}

/* Fills p->next and p->follow: for each consuming instruction, the consuming
 * instructions a thread reaches once past it, when that does not depend on the position
 * (no `$` on the way; `^` never passes there) and no MATCH is on the way. The start's
 * list inside the text is the same at every position: no `^` nor `$` passes. The lists
 * share a budget of FOLLOW_PER_INSN entries an instruction; past it, the matcher follows
 * the jumps itself (PATTERN_NEXT_DYNAMIC). */
#define FOLLOW_PER_INSN 8
static int compile_follow(struct pattern *p)
{
    unsigned n = p->n_insns, budget = FOLLOW_PER_INSN * n, used = 0;
    p->next = calloc(n, sizeof(*p->next));
    p->follow = malloc(budget * sizeof(*p->follow));
    uint16_t *list = malloc(n * sizeof(*list));
    if (!p->next || !p->follow || !list) {
        free(list);
        return -1;
    }
    unsigned k = 0;
    closure(p, 0, false, list, &k, NULL); /* at most n: each instruction once */
    p->start = list;
    p->n_start = k;
    uint16_t tmp[PATTERN_MAX_INSNS];
    for (unsigned pc = 0; pc < n; pc++) {
        uint8_t op = p->prog[pc].op;
        p->next[pc].dynamic = 1;
        if (op != OP_BYTE && op != OP_ANY && op != OP_CLASS)
            continue;
        unsigned m = 0;
        if (closure(p, pc + 1, false, tmp, &m, NULL) != 0 || used + m > budget)
            continue;
        memcpy(p->follow + used, tmp, m * sizeof(tmp[0]));
        p->next[pc] = (struct pattern_next){.at = used, .n = (uint16_t)m, .dynamic = 0};
        used += m;
    }
    return 0;
}

static int build(struct parser *ps, struct pattern *p)
{
    int root = parse_alt(ps);
    if (root < 0)
        return -1;
    if (peek(ps) == ')')
        return fail(ps, "unmatched ')' at %zu", ps->pos);
    struct emitter e = {.nodes = ps->nodes,
                        .prog = malloc((PATTERN_MAX_INSNS + 1) * sizeof(struct pattern_insn))};
    if (!e.prog)
        return fail(ps, "out of memory");
    emit_node(&e, root);
    emit(&e, OP_MATCH, 0, 0);
    if (e.full) {
        free(e.prog);
        return fail(ps, "pattern too complex (over %d instructions)", PATTERN_MAX_INSNS);
    }
    struct pattern_insn *fit = realloc(e.prog, e.n * sizeof(*fit));
    p->prog = fit ? fit : e.prog;
    p->n_insns = e.n;
    p->anchored = starts_anchored(p->prog, p->n_insns, 0, 0);
    p->posix = ps->posix;
    return 0;
}

int pattern_compile(struct pattern *p, const char *re, bool icase, char *err, size_t len)
{
    memset(p, 0, sizeof(*p));
    size_t re_len = strlen(re);
    if (re_len > 8 * PATTERN_MAX_INSNS) {
        snprintf(err, len, "pattern too complex (longer than %d bytes)", 8 * PATTERN_MAX_INSNS);
        return -1;
    }
    struct parser ps = {.re = re, .icase = icase, .posix = true, .err = err, .err_len = len};
    ps.cap_nodes = (int)(3 * re_len + 4);
    ps.cap_sets = (int)(re_len + 1);
    ps.nodes = malloc((size_t)ps.cap_nodes * sizeof(*ps.nodes));
    ps.sets = malloc((size_t)ps.cap_sets * sizeof(*ps.sets));
    int rc = -1;
    if (!ps.nodes || !ps.sets)
        fail(&ps, "out of memory");
    else
        rc = build(&ps, p);
    free(ps.nodes);
    if (rc == 0 && ps.n_sets > 0) {
        p->sets = realloc(ps.sets, (size_t)ps.n_sets * sizeof(*ps.sets));
        p->n_sets = (unsigned)ps.n_sets;
        if (!p->sets)
            p->sets = ps.sets;
    } else {
        free(ps.sets);
    }
    if (rc == 0)
        compile_first(p);
    if (rc == 0 && compile_follow(p) < 0) {
        pattern_free(p);
        snprintf(err, len, "out of memory");
        rc = -1;
    }
    return rc;
}

void pattern_free(struct pattern *p)
{
    free(p->prog);
    free(p->sets);
    free(p->start);
    free(p->next);
    free(p->follow);
    memset(p, 0, sizeof(*p));
}

/* --- matching ------------------------------------------------------------------------- */

/* One text position's threads: the consuming instructions reached, each once. */
struct thread_list {
    uint16_t *pc;
    unsigned n;
};

struct vm {
    const struct pattern *p;
    size_t len;
    uint64_t *seen;  /* instructions already reached at this position */
    uint16_t *stack; /* the instructions still to follow, each pushed once */
};

/* Follows pc's jumps and splits at text position i, adding the consuming instructions
 * reached to l. Returns true when MATCH is reached: the pattern matches. */
static bool add_thread(const struct vm *vm, struct thread_list *l, unsigned pc, size_t i)
{
    unsigned top = 0;
    const struct pattern_insn *prog = vm->p->prog;
#define PUSH(t)                                                                                \
    do {                                                                                       \
        unsigned t_ = (t);                                                                     \
        if (!(vm->seen[t_ >> 6] >> (t_ & 63) & 1)) {                                           \
            vm->seen[t_ >> 6] |= (uint64_t)1 << (t_ & 63);                                     \
            vm->stack[top++] = (uint16_t)t_;                                                   \
        }                                                                                      \
    } while (0)
    PUSH(pc);
    while (top > 0) {
        pc = vm->stack[--top];
        switch ((enum op)prog[pc].op) {
        case OP_MATCH: return true;
        case OP_JMP: PUSH(prog[pc].x); break;
        case OP_SPLIT: PUSH(prog[pc].y); PUSH(prog[pc].x); break;
        case OP_BOL: if (i == 0) PUSH(pc + 1); break;
        case OP_EOL: if (i == vm->len) PUSH(pc + 1); break;
        default: l->pc[l->n++] = (uint16_t)pc; break;
        }
    }
#undef PUSH
    return false;
}

/* Adds a precomputed list of threads (pattern.start, pattern.follow), each once. */
static void add_list(const struct vm *vm, struct thread_list *l, const uint16_t *pcs,
                     unsigned n)
{
    for (unsigned k = 0; k < n; k++) {
        unsigned t = pcs[k];
        if (!(vm->seen[t >> 6] >> (t & 63) & 1)) {
            vm->seen[t >> 6] |= (uint64_t)1 << (t & 63);
            l->pc[l->n++] = (uint16_t)t;
        }
    }
}

/* Advances the thread at pc past the byte it took, to position i. True on a match. */
static bool advance(const struct vm *vm, struct thread_list *l, unsigned pc, size_t i)
{
    const struct pattern_next *f = &vm->p->next[pc];
    if (f->dynamic)
        return add_thread(vm, l, pc + 1, i);
    add_list(vm, l, vm->p->follow + f->at, f->n);
    return false;
}

static bool consumes(const struct pattern *p, const struct pattern_insn *in, unsigned char c)
{
    switch ((enum op)in->op) {
    case OP_BYTE: return in->c == c;
    case OP_ANY: return c != '\0';
    case OP_CLASS: return set_has(&p->sets[in->x], c);
    default: return false;
    }
}

/* The first position from i on whose byte can begin a match; len when there is none. */
static size_t next_start(const struct pattern *p, const char *s, size_t i, size_t len)
{
    if (p->first_byte >= 0) {
        const char *at = memchr(s + i, p->first_byte, len - i);
        return at ? (size_t)(at - s) : len;
    }
    while (i < len && !set_has(&p->first, (unsigned char)s[i]))
        i++;
    return i;
}

bool pattern_search(const struct pattern *p, const char *s, size_t len)
{
    unsigned n = p->n_insns;
    if (n == 0)
        return false;
    unsigned words = (n + 63) / 64;
    uint16_t a[n], b[n], stack[n]; /* at most 3 x 2 x PATTERN_MAX_INSNS bytes */
    uint64_t seen[words];
    struct vm vm = {.p = p, .len = len, .seen = seen, .stack = stack};
    struct thread_list cur = {a, 0}, next = {b, 0};
    memset(seen, 0, sizeof(seen));
    if (add_thread(&vm, &cur, 0, 0))
        return true;
    for (size_t i = 0; i < len; i++) {
        if (cur.n == 0 && p->anchored)
            return false;
        unsigned char c = (unsigned char)s[i];
        memset(seen, 0, sizeof(seen));
        next.n = 0;
        for (unsigned k = 0; k < cur.n; k++)
            if (consumes(p, &p->prog[cur.pc[k]], c) && advance(&vm, &next, cur.pc[k], i + 1))
                return true;
        size_t at = i + 1;
        if (!p->anchored && next.n == 0 && p->skip) { /* nothing under way: skip ahead */
            at = next_start(p, s, at, len);
            if (at == len)
                return false; /* and the empty string does not match */
            i = at - 1;
        }
        if (!p->anchored && at < len)
            add_list(&vm, &next, p->start, p->n_start);
        else if (!p->anchored && add_thread(&vm, &next, 0, at))
            return true;
        struct thread_list t = cur;
        cur = next;
        next = t;
    }
    return false;
}
