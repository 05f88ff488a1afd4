/* module.c — the module chain, and the one table that lists the modules. */
#include "module.h"

#include <stdio.h>

/* The modules, in the order the chain calls them. A new module is one line here. */
extern const struct module mod_static;

static const struct module *const module_table[] = {
    &mod_static,
};

int module_chain_init(struct module_chain *c, const struct config *cfg, char *err,
                      size_t err_len)
{
    c->n = 0;
    for (size_t i = 0; i < sizeof(module_table) / sizeof(module_table[0]); i++) {
        const struct module *m = module_table[i];
        void *state = NULL;
        if (m->init && m->init(cfg, &state, err, err_len) < 0) {
            module_chain_fini(c);
            return -1;
        }
        c->mods[c->n] = m;
        c->state[c->n] = state;
        c->n++;
    }
    return 0;
}

void module_chain_fini(struct module_chain *c)
{
    while (c->n > 0) {
        c->n--;
        if (c->mods[c->n]->fini)
            c->mods[c->n]->fini(c->state[c->n]);
    }
}

void module_chain_handle(const struct module_chain *c, const struct request *req,
                         struct response *resp)
{
    for (unsigned i = 0; i < c->n; i++) {
        if (!c->mods[i]->handle)
            continue;
        enum mod_result r = c->mods[i]->handle(c->state[i], req, resp);
        if (r == MOD_HANDLED)
            return;
        if (r == MOD_ERROR) {
            resp_error(resp, 500);
            return;
        }
    }
    resp_error(resp, 404);
}
