/* download_async's tickets: a ring of events that grows (tickets.h). */
#include "tickets.h"

#include <stdio.h>
#include <stdlib.h>

long bt_tickets_issue(bt_tickets *t, void *ev, const char *backend) {
    if (t->issued - t->arrived == t->cap) { /* full: a ring twice the size, tickets in place */
        const long cap = t->cap ? 2 * t->cap : 16;
        void **ev2 = (void **)calloc((size_t)cap, sizeof *ev2);
        if (!ev2) {
            fprintf(stderr, "bertrain: %s: out of host memory for asynchronous copies\n", backend);
            exit(1);
        }
        for (long k = t->arrived + 1; k <= t->issued; k++) ev2[k % cap] = t->ev[k % t->cap];
        free(t->ev);
        t->ev = ev2;
        t->cap = cap;
    }
    t->issued++;
    t->ev[t->issued % t->cap] = ev;
    return t->issued;
}

void *bt_tickets_oldest(const bt_tickets *t) {
    return t->arrived < t->issued ? t->ev[(t->arrived + 1) % t->cap] : NULL;
}

void *bt_tickets_pop(bt_tickets *t) {
    if (t->arrived == t->issued) return NULL;
    t->arrived++;
    void *ev = t->ev[t->arrived % t->cap];
    t->ev[t->arrived % t->cap] = NULL;
    return ev;
}

void bt_tickets_free(bt_tickets *t) {
    free(t->ev);
    *t = (bt_tickets){0};
}
