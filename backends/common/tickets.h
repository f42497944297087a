/* The host side of download_async's tickets (backend.h), shared by the
 * OpenCL and CUDA backends: the event of every copy not yet seen to arrive,
 * in issue order. Tickets are 1, 2, 3, ...; an event is an opaque handle
 * (a cl_event, a cudaEvent_t). */
#ifndef BT_TICKETS_H
#define BT_TICKETS_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    void **ev;     /* ev[t % cap]: ticket t's event, for arrived < t <= issued */
    long cap;
    long issued;   /* the last ticket given */
    long arrived;  /* every ticket up to it has arrived */
} bt_tickets;

/* Give the next ticket to the copy whose event is ev; on out of host memory,
 * one line naming `backend` and exit. */
long bt_tickets_issue(bt_tickets *t, void *ev, const char *backend);

/* The event of the oldest ticket not seen to arrive, or NULL when all have. */
void *bt_tickets_oldest(const bt_tickets *t);

/* The oldest ticket has arrived: returns its event, for the caller to
 * release or keep. */
void *bt_tickets_pop(bt_tickets *t);

void bt_tickets_free(bt_tickets *t);

#ifdef __cplusplus
}
#endif

#endif
