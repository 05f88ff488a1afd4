/* directive.h — the statements of a configuration file, and the table that reads them.
 *
 * Every directive, the core's (config.c) and each module's (struct module.directives), is
 * one line of a table: its name, the kind of its value, the bounds, the blocks it may appear
 * in, whether it may repeat, and where the value goes. One reader applies the tables: every
 * value is parsed here (on|off, counts, sizes, durations), and every message has one form,
 * "FILE:LINE: [OWNER: ]NAME...", OWNER being the module or the class block the statement
 * belongs to. lighttpd's config_plugin_values_init is the model.
 */
#ifndef LFHTTPD_DIRECTIVE_H
#define LFHTTPD_DIRECTIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CONFIG_MAX_ARGS 16
#define CONFIG_PATH_MAX 4096

/* One statement of the file: `name args...;` or `name args... { children }`. */
struct conf_node {
    char *name;
    char *args[CONFIG_MAX_ARGS];
    unsigned n_args;
    bool is_block;
    struct conf_node *children; /* first statement inside the block */
    struct conf_node *next;     /* next statement at the same level */
    /* Where it stands, as a compiler's source location: the line number in the low
     * CONF_LINE_BITS, and above them which file, 0 for the file the reader was given, else
     * a file an `include` brought in (conf_line_file). Print it with conf_line_no. */
    unsigned line;
};

#define CONF_LINE_BITS 20

/* The file a statement's line is in: main for 0, else the included file's name. */
const char *conf_line_file(unsigned line, const char *main);
/* The line number alone. */
unsigned conf_line_no(unsigned line);
/* The tag of an included file's lines (its name kept for the life of the process, each
 * name once): OR it into a line number. 0 when the list is full (4095 files). */
unsigned conf_file_tag(const char *path);

/* Parse a configuration text into its statement tree (*tree; NULL for an empty text), the
 * way config_load reads a file; file names it in messages. Returns 0, or -1 with
 * "FILE:LINE: message" in err and *tree NULL. */
int conf_parse_text(const char *file, const char *text, size_t len, struct conf_node **tree,
                    char *err, size_t err_len);

/* Free a statement tree (NULL is nothing). */
void conf_tree_free(struct conf_node *tree);

enum conf_kind {
    CONF_FLAG,     /* on | off                                  -> bool */
    CONF_COUNT,    /* a decimal number, no suffix               -> an unsigned integer field */
    CONF_SIZE,     /* bytes, with k, m or g                     -> an unsigned integer field */
    CONF_DURATION, /* a time: ms, s (the default), m or h       -> unsigned milliseconds */
    CONF_ENUM,     /* one of .names                             -> its value, an integer field */
    CONF_STRING,   /* one word                                  -> char[], or the setter */
    CONF_PATH,     /* a file name                               -> char[], or the setter */
    CONF_LIST,     /* min_args to max_args words                -> the setter */
    CONF_BLOCK,    /* min_args to max_args words and a { block } -> the setter */
};

/* Where a statement stands: a bit each, so that a directive lists every block it may
 * appear in. */
enum conf_context {
    CONF_TOP = 1u << 0,      /* the top level of the file */
    CONF_CLASS = 1u << 1,    /* inside `class NAME { }` */
    CONF_SERVER = 1u << 2,   /* inside `server { }` (site.h) */
    CONF_LOCATION = 1u << 3, /* inside `location ... { }` (site.h) */
    CONF_EVENTS = 1u << 4,   /* inside `events { }` (nginx's; config.c) */
};

/* A directive that sets one value may appear once in a block: a second statement is an
 * error naming both lines, as in nginx (a silent "the last one wins" hides the line that
 * does nothing). Those that add to one another (listeners, mounts, rules) repeat. */
enum conf_repeat { CONF_ONCE = 0, CONF_REPEATS };

struct conf_name {
    const char *name;
    int value; /* what an enum directive stores for it (0 or more) */
};

struct conf_directive;

/* Reads a statement the kinds cannot: base is the owner's struct, ctx the reader's (struct
 * conf_reader). Returns 0, or -1 with a message in msg ("" if the setter reported itself). */
typedef int (*conf_set_fn)(void *base, const struct conf_node *n, void *ctx, char *msg,
                           size_t len);

struct conf_directive {
    const char *name; /* NULL ends a table */
    enum conf_kind kind;
    unsigned contexts; /* enum conf_context bits */
    enum conf_repeat repeat;
    uint64_t min, max; /* count, size, duration (in ms): the bounds; max 0: the field's own */
    bool off;          /* size: the word "off" stands for 0 */
    unsigned min_args, max_args;   /* list, block: how many words */
    const struct conf_name *names; /* enum: the words, ended by {NULL} */
    size_t offset, size;           /* where the value goes in the owner's struct: CONF_AT */
    conf_set_fn set;               /* or: the setter (string, path, list, block) */
    const char *usage;             /* what follows the name, for messages: "PREFIX DIR" */
    /* The reference (lfhttpd --directives, docs/reference/directives.md): what the
     * directive does, one or a few sentences, and its default as a user writes it ("5m",
     * "off"; NULL: none; in parentheses, a description: "(the outer block's)"). Every
     * line of every table has its .doc: make check-docs fails on one without. */
    const char *doc;
    const char *dflt;
    /* For a statement its owner reads later, from the tree (conf_set_later): which setting
     * it is, so that the owner finds it by its table line, never by its name. 0: none. */
    unsigned id;
};

/* The place of a field: .offset and .size, for a table line. */
#define CONF_AT(type, field) .offset = offsetof(type, field), .size = sizeof(((type *)0)->field)

/* Print the table's directives, one a line, for the reference generator
 * (tests/gen_docs.py): OWNER, NAME, SYNTAX (nginx's form: "proxy_read_timeout TIME;"),
 * DEFAULT ("" for none), CONTEXTS ("top,server,location"), REPEATS ("once" or "repeats")
 * and DOC, apart by tabs. */
void conf_dump_table(FILE *out, const char *owner, const struct conf_directive *table);

/* The value of `word` among names: 0, or -1 if it is none of them. */
int conf_name_value(const struct conf_name *names, const char *word, int *value);

/* The line of table that names `name`, preferring one allowed in `context`; NULL if none. */
const struct conf_directive *conf_table_find(const struct conf_directive *table,
                                             const char *name, unsigned context);

/* One pass of the reader over the statements of a block. */
struct conf_reader {
    const char *file;
    const char *owner; /* "", a module's name, "class api": the messages' OWNER */
    unsigned context;  /* where the statements stand: one enum conf_context bit */
    void *ctx;         /* handed to setters: the module_init of a module */
    char *err;         /* the messages, one a line */
    size_t err_len;
    unsigned errors;
    /* Notices: a statement accepted that does something else here than in nginx, or
     * nothing (`lfhttpd -t` prints them, the start logs them); NULL: none kept. */
    char *notes;
    size_t notes_len;
};

/* Another part's directives (the modules', for the core): the line that names `name`, as
 * conf_table_find, or NULL. */
typedef const struct conf_directive *(*config_known_fn)(const char *name, unsigned context);

/* For "unknown directive": what nginx module `name` belongs to, when it is one of nginx's
 * that lfhttpd does not have, as " (nginx's MODULE, which lfhttpd does not have...)"; else
 * "". */
const char *conf_unknown_hint(const char *name);

/* Read a block's statements, from first on: each must be a directive of table, or of known;
 * it must be allowed where it stands (r->context), and one that does not repeat must not.
 * Those of table are applied to base; those of known are left to their owner. Every error
 * is reported. Returns 0, or -1 if anything was. */
int conf_read_block(struct conf_reader *r, const struct conf_directive *table,
                    config_known_fn known, const struct conf_node *first, void *base);

/* Apply to base the statements, from first on, that are directives of table, and pass over
 * the others (conf_read_block has checked them): a module reads its own this way. Returns 0,
 * or -1 after reporting every error. */
int conf_read_owned(struct conf_reader *r, const struct conf_directive *table,
                    const struct conf_node *first, void *base);

/* Apply the statement n, a line of the table d, to base: check its form (number of values,
 * block or not), parse and store the value, or call the setter. Returns 0, or -1 after
 * adding "FILE:LINE: [OWNER: ]NAME..." to r's messages. */
int conf_apply(struct conf_reader *r, const struct conf_directive *d, const struct conf_node *n,
               void *base);

/* Add "FILE:LINE: [OWNER: ]message" (line 0: "FILE: ...") as one more line of r's
 * messages, and count it. Returns -1. */
int conf_error(struct conf_reader *r, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Add "FILE:LINE: message" to r's notices (not an error). */
void conf_notice(struct conf_reader *r, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Append one line to the messages in err (NUL-terminated, lines apart by '\n'). */
void config_error_append(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Parse a size ("8k", "1m", "512"), a duration ("10s", "250ms", "2m", "1d") or a count ("12":
 * digits only). Return 0 or -1. The reader's parsers: directives use the table instead. */
int config_parse_size(const char *s, uint64_t *out);
int config_parse_duration_ms(const char *s, unsigned *out);
int config_parse_count(const char *s, uint64_t *out);

/* A setter that accepts the statement as it stands: for a directive whose words the
 * table checks and whose meaning is read later, from the tree, by its owner. */
int conf_set_later(void *base, const struct conf_node *n, void *ctx, char *msg, size_t len);

#endif
